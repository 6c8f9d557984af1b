/// \file staged_layers.cc
/// \brief StagedLayers: layers moved to this node by a transfer plan, served to reshaped
/// restores of the commit they were staged for, and dropped with it or after a grace time.

#include "reft/recovery/staged_layers.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include <spdlog/spdlog.h>

namespace reft::recovery {

StagedLayers::StagedLayers(StagedLayersOptions options) : options_(std::move(options)) {
  if (options_.expire_in_background) expiry_ = Thread("reft-staged", [this] { ExpireLoop(); });
}

StagedLayers::~StagedLayers() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (expiry_.joinable()) expiry_.join();
}

StagedLayers::Key StagedLayers::Begin(const std::string& job) {
  return Key{job, INT64_MIN, Stamp{0, INT64_MIN, INT64_MIN, INT64_MIN}, INT_MIN};
}

StagedLayers::Job& StagedLayers::TouchLocked(const std::string& job) {
  Job& j = jobs_[job];
  j.last_used = options_.now();
  touched_ = true;
  return j;
}

template <typename Pred>
void StagedLayers::DropIfLocked(const std::string& job, Pred drop) {
  for (auto it = layers_.lower_bound(Begin(job));
       it != layers_.end() && std::get<0>(it->first) == job;) {
    if (!drop(it->first)) {
      ++it;
      continue;
    }
    bytes_ -= it->second->memory.size();
    it = layers_.erase(it);
  }
}

std::optional<uint64_t> StagedLayers::Staged(const std::string& job, const Stamp& stamp,
                                             int64_t step, int layer) const {
  MutexLock lock(mu_);
  auto it = layers_.find(Key{job, step, stamp, layer});
  if (it == layers_.end()) return std::nullopt;
  uint64_t bytes = 0;
  for (const StagedBuffer& b : it->second->buffers) bytes += b.end - b.begin;
  return bytes;
}

bool StagedLayers::Put(const std::string& job, const Stamp& stamp, int64_t step, int layer,
                       MappedMemfd memory, std::vector<StagedBuffer> buffers) {
  auto entry = std::make_shared<Layer>();
  const uint64_t size = memory.size();
  entry->memory = std::move(memory);
  entry->buffers = std::move(buffers);
  {
    MutexLock lock(mu_);
    Job& j = TouchLocked(job);
    // Fetched while the job moved on (a fall-back while the bytes were on the way): they are
    // of a timeline this node already dropped, and would stay until the grace time.
    if (j.current && stamp < *j.current) return false;
    j.current = stamp;
    DropIfLocked(job, [&](const Key& k) {
      return std::get<1>(k) < step || std::get<2>(k) != stamp;
    });
    auto [it, inserted] = layers_.emplace(Key{job, step, stamp, layer}, entry);
    if (inserted) {
      bytes_ += size;
    } else {  // staged again (a retried move): the newer copy replaces the older
      bytes_ += size - it->second->memory.size();
      it->second = entry;
    }
  }
  cv_.notify_all();
  return true;
}

std::vector<RangeRequest> StagedLayers::Serve(const std::string& job, const Stamp& stamp,
                                              int64_t step,
                                              const std::vector<RangeRequest>& requests,
                                              uint64_t* served) {
  std::vector<std::shared_ptr<const Layer>> staged;
  {
    MutexLock lock(mu_);
    for (auto it = layers_.lower_bound(Key{job, step, stamp, INT_MIN});
         it != layers_.end() && std::get<0>(it->first) == job && std::get<1>(it->first) == step &&
         std::get<2>(it->first) == stamp;
         ++it) {
      staged.push_back(it->second);
    }
    if (!staged.empty()) TouchLocked(job);
  }
  if (staged.empty()) return requests;
  std::vector<RangeRequest> rest;
  for (const RangeRequest& r : requests) {
    if (r.pp >= 0) {
      rest.push_back(r);
      continue;
    }
    // The staged pieces of this buffer inside the request, in order: each is copied, and the
    // gaps between them (bytes this node holds in its own slots, or nobody staged) go on to
    // be assembled.
    std::vector<std::pair<const Layer*, const StagedBuffer*>> pieces;
    for (const auto& layer : staged) {
      for (const StagedBuffer& b : layer->buffers) {
        if (b.name == r.name && b.tp == r.tp && b.begin < r.end && b.end > r.begin) {
          pieces.emplace_back(layer.get(), &b);
        }
      }
    }
    std::sort(pieces.begin(), pieces.end(),
              [](const auto& x, const auto& y) { return x.second->begin < y.second->begin; });
    uint64_t at = r.begin;
    auto gap = [&](uint64_t until) {
      if (until <= at) return;
      RangeRequest g = r;
      g.begin = at;
      g.end = until;
      g.dst = r.dst + (at - r.begin);
      rest.push_back(std::move(g));
    };
    for (const auto& [layer, b] : pieces) {
      const uint64_t a = std::max(at, b->begin), e = std::min(r.end, b->end);
      if (a >= e) continue;  // overlaps what an earlier piece served
      gap(a);
      std::memcpy(r.dst + (a - r.begin), layer->memory.data() + b->offset + (a - b->begin), e - a);
      *served += e - a;
      at = e;
    }
    gap(r.end);
  }
  return rest;
}

void StagedLayers::DropBefore(const std::string& job, int64_t step) {
  MutexLock lock(mu_);
  DropIfLocked(job, [&](const Key& k) { return std::get<1>(k) < step; });
}

void StagedLayers::DropOtherTimelines(const std::string& job, const Stamp& stamp) {
  {
    MutexLock lock(mu_);
    // Remembered from now on (a staging calls this first): a fall-back before its bytes arrive
    // leaves nothing behind.
    TouchLocked(job).current = stamp;
    DropIfLocked(job, [&](const Key& k) { return std::get<2>(k) != stamp; });
  }
  cv_.notify_all();
}

void StagedLayers::DropOtherGenerations(const std::string& job, uint64_t generation) {
  MutexLock lock(mu_);
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return;  // nothing staged here: nothing to remember either
  std::optional<Stamp>& current = j->second.current;
  if (!current || current->generation < generation) current = Stamp{generation, 0, 0, 0};
  DropIfLocked(job, [&](const Key& k) { return std::get<2>(k).generation != generation; });
}

void StagedLayers::DropIdleLocked(Clock::time_point now, uint64_t* dropped) {
  for (auto j = jobs_.begin(); j != jobs_.end();) {
    if (now - j->second.last_used < options_.grace) {
      ++j;
      continue;
    }
    const uint64_t before = bytes_;
    DropIfLocked(j->first, [](const Key&) { return true; });
    if (before > bytes_) {
      spdlog::info("job {}: layers staged for a reshape were not used for {} s; {} bytes dropped",
                   j->first,
                   std::chrono::duration_cast<std::chrono::seconds>(options_.grace).count(),
                   before - bytes_);
    }
    *dropped += before - bytes_;
    j = jobs_.erase(j);
  }
}

uint64_t StagedLayers::DropIdle(Clock::time_point now) {
  MutexLock lock(mu_);
  uint64_t dropped = 0;
  DropIdleLocked(now, &dropped);
  return dropped;
}

std::optional<StagedLayers::Clock::time_point> StagedLayers::NextExpiryLocked() const {
  std::optional<Clock::time_point> next;
  for (const auto& [job, j] : jobs_) {
    const Clock::time_point at = j.last_used + options_.grace;
    if (!next || at < *next) next = at;
  }
  return next;
}

void StagedLayers::ExpireLoop() {
  MutexLock lock(mu_);
  while (!stop_) {
    // Idle until a job's grace time ends (a later use moves it: looked at again then) or a job
    // is used, which may be the first one to wait for.
    const auto woken = [&]() REFT_REQUIRES(mu_) { return stop_ || touched_; };
    if (auto next = NextExpiryLocked()) {
      lock.WaitUntil(cv_, *next, woken);
    } else {
      lock.Wait(cv_, woken);
    }
    touched_ = false;
    if (stop_) return;
    uint64_t dropped = 0;
    DropIdleLocked(options_.now(), &dropped);
  }
}

uint64_t StagedLayers::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}

}  // namespace reft::recovery
