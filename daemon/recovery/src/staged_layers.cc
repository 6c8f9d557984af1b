/// \file staged_layers.cc
/// \brief StagedLayers: layers moved to this node by a transfer plan, served to reshaped
/// restores.

#include "reft/recovery/staged_layers.h"

#include <algorithm>
#include <cstring>

namespace reft::recovery {

std::optional<uint64_t> StagedLayers::Staged(const std::string& job, uint64_t generation, int64_t step,
                                             int layer) const {
  MutexLock lock(mu_);
  auto it = layers_.find(Key{job, step, generation, layer});
  if (it == layers_.end()) return std::nullopt;
  uint64_t bytes = 0;
  for (const StagedBuffer& b : it->second->buffers) bytes += b.end - b.begin;
  return bytes;
}

void StagedLayers::Put(const std::string& job, uint64_t generation, int64_t step, int layer,
                       MappedMemfd memory, std::vector<StagedBuffer> buffers) {
  DropBefore(job, step);
  DropOtherGenerations(job, generation);
  auto entry = std::make_shared<Layer>();
  const uint64_t size = memory.size();
  entry->memory = std::move(memory);
  entry->buffers = std::move(buffers);
  MutexLock lock(mu_);
  auto [it, inserted] = layers_.emplace(Key{job, step, generation, layer}, entry);
  if (inserted) {
    bytes_ += size;
  } else {  // staged again (a retried move): the newer copy replaces the older
    bytes_ += size - it->second->memory.size();
    it->second = entry;
  }
}

std::vector<RangeRequest> StagedLayers::Serve(const std::string& job, uint64_t generation, int64_t step,
                                              const std::vector<RangeRequest>& requests,
                                              uint64_t* served) const {
  std::vector<std::shared_ptr<const Layer>> staged;
  {
    MutexLock lock(mu_);
    for (auto it = layers_.lower_bound(Key{job, step, generation, INT32_MIN});
         it != layers_.end() && std::get<0>(it->first) == job && std::get<1>(it->first) == step &&
         std::get<2>(it->first) == generation;
         ++it) {
      staged.push_back(it->second);
    }
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
  for (auto it = layers_.lower_bound(Key{job, INT64_MIN, 0, INT32_MIN});
       it != layers_.end() && std::get<0>(it->first) == job && std::get<1>(it->first) < step;) {
    bytes_ -= it->second->memory.size();
    it = layers_.erase(it);
  }
}

void StagedLayers::DropOtherGenerations(const std::string& job, uint64_t generation) {
  MutexLock lock(mu_);
  for (auto it = layers_.lower_bound(Key{job, INT64_MIN, 0, INT32_MIN});
       it != layers_.end() && std::get<0>(it->first) == job;) {
    if (std::get<2>(it->first) == generation) {
      ++it;
      continue;
    }
    bytes_ -= it->second->memory.size();
    it = layers_.erase(it);
  }
}

uint64_t StagedLayers::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}

}  // namespace reft::recovery
