/// \file published_copier.cc
/// \brief Peer copies of a ring neighbour's published regions, wherever the neighbour lives.

#include "reft/recovery/published_copier.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "reft/peer/peer_node.h"
#include "reft/peer/sealed_checksums.h"

namespace reft::recovery {

namespace {

using Clock = std::chrono::steady_clock;

bool IsNodeFailure(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout ||
         s.code() == StatusCode::kProtocol || s.code() == StatusCode::kCancelled;
}

std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

}  // namespace

PublishedCopier::PublishedCopier(store::SnapshotStore* store, peer::PeerNode* peer,
                                 coord::SlotDirectory* slots, RecoveryOptions options)
    : store_(store),
      peer_(peer),
      slots_(slots),
      options_(std::move(options)),
      locator_(store, peer, slots) {}

Status PublishedCopier::CopyLocal(const store::RankKey& from, int64_t step,
                                  const std::string& region, uint8_t* dst, uint64_t size) {
  REFT_ASSIGN_OR_RETURN(std::shared_ptr<store::SlotRef> ref,
                        store_->GetPublished(from, step, region));
  REFT_ASSIGN_OR_RETURN(size_t idx, ref->FindRegion(region));
  if (ref->region_size(idx) != size) {
    return Status::InvalidArgument("region '" + region + "' of " + from.ToString() + " step " +
                                   std::to_string(step) + " has " +
                                   std::to_string(ref->region_size(idx)) +
                                   " bytes, the copy expects " + std::to_string(size));
  }
  REFT_RETURN_NOT_OK(peer::VerifySealedRange(*ref, idx, 0, size, "this node"));
  std::memcpy(dst, ref->region_data(idx), size);
  return Status::OK();
}

std::vector<std::string> PublishedCopier::Locate(const store::RankKey& from, int64_t step,
                                                 std::chrono::milliseconds timeout) {
  std::vector<std::string> out;
  auto add = [&](const std::string& node) {
    if (node.empty() || node == peer_->membership().node_id()) return;
    if (std::find(out.begin(), out.end(), node) == out.end()) out.push_back(node);
  };
  // Where its trainer is connected now (etcd records it), then every node of the job.
  if (auto joined = slots_->JoinedNode(from)) add(*joined);
  auto view = locator_.Collect(from.job, std::min(options_.locate_timeout, timeout));
  if (!view.ok()) return out;
  auto j = view->joined.find(from);
  if (j != view->joined.end()) {
    for (const auto& n : j->second) add(n);
  }
  for (const SlotEntry* s : view->Find(from, step)) add(s->node);  // a re-done, sealed step
  for (const auto& s : view->slots) {
    if (s.rank == from) add(s.node);  // where its older snapshots are
  }
  return out;
}

Status PublishedCopier::CopyPublished(const store::RankKey& from, int64_t step,
                                      const std::string& region, uint8_t* dst, uint64_t size,
                                      std::chrono::milliseconds timeout,
                                      const std::function<Status()>& abandon) {
  if (size == 0) return Status::OK();
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  const std::string what =
      "region '" + region + "' of " + from.ToString() + " step " + std::to_string(step);
  Status last = Status::NotFound("rank " + from.ToString() + " not located yet");
  std::vector<std::string> nodes;
  auto next_relocate = start;
  {
    MutexLock lock(mu_);
    auto it = cache_.find(from);
    if (it != cache_.end()) {
      nodes.push_back(it->second);
      next_relocate = start + options_.relocate_interval;
    }
  }
  auto backoff = options_.copy_backoff_min;
  while (true) {
    // This node: the neighbour's trainer is connected here, or its slot is here.
    Status ls = CopyLocal(from, step, region, dst, size);
    // InvalidArgument: a caller's mistake; Lost: the step was superseded and never will be.
    if (ls.ok() || ls.code() == StatusCode::kInvalidArgument || ls.code() == StatusCode::kLost) {
      if (ls.ok()) copied_local_.fetch_add(size, std::memory_order_relaxed);
      return ls;
    }
    if (ls.code() != StatusCode::kNotFound || slots_->IsJoined(from)) last = ls;
    if (!slots_->IsJoined(from)) {
      if (Clock::now() >= next_relocate) {
        nodes = Locate(from, step, Remaining(deadline));
        next_relocate = Clock::now() + options_.relocate_interval;
      }
      for (const auto& node : nodes) {
        if (Clock::now() >= deadline) break;
        auto address = peer_->AddressOf(node);
        if (!address.ok()) {
          last = address.status();
          continue;
        }
        peer::FetchOptions fo;
        fo.published_only = true;
        fo.expect_region_size = size;
        fo.timeout = std::min(Remaining(deadline), options_.piece_timeout);
        Status st = peer_->client().FetchRegion(*address, from, step, region, dst, size, 0, fo);
        if (st.ok()) {
          copied_remote_.fetch_add(size, std::memory_order_relaxed);
          MutexLock lock(mu_);
          cache_[from] = node;
          return st;
        }
        if (st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kLost) return st;
        last = st;
        if (IsNodeFailure(st)) {
          MutexLock lock(mu_);
          auto it = cache_.find(from);
          if (it != cache_.end() && it->second == node) cache_.erase(it);
          next_relocate = Clock::now();  // the neighbour may have moved: look again
        }
      }
    }
    if (abandon) REFT_RETURN_NOT_OK(abandon().WithContext(what));
    const auto now = Clock::now();
    if (now >= deadline) {
      return Status::Timeout(what + " was not copied within " + std::to_string(timeout.count()) +
                             " ms (last: " + last.ToString() + ")");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, options_.copy_backoff_max);
  }
}

PublishedCopier::CopiedBytes PublishedCopier::copied() const {
  return {copied_local_.load(std::memory_order_relaxed),
          copied_remote_.load(std::memory_order_relaxed)};
}

}  // namespace reft::recovery
