#pragma once
/// \file memory_store.h
/// \brief The data plane of the control-plane scale bench, stubbed: a SnapshotStore that keeps
/// only slot states (no segments, no bytes), implementing what the job coordinators call —
/// Ranks, List, Get, NewestCommitted, Commit, Drop — plus Seal to mark a step complete.
/// Everything else answers Unsupported. A commit hook reports when this node commits a step
/// (the moment the commit is visible on the node).

#include <functional>
#include <map>
#include <mutex>

#include "reft/store/snapshot_store.h"

namespace reft::bench {

class MemoryStore final : public store::SnapshotStore {
 public:
  using CommitHook = std::function<void(const store::RankKey& rank, int64_t step)>;
  explicit MemoryStore(CommitHook on_commit) : on_commit_(std::move(on_commit)) {}

  Status Seal(const store::RankKey& rank, int64_t step) override;
  Status Commit(const store::RankKey& rank, int64_t step) override;
  Result<std::shared_ptr<store::SlotRef>> Get(const store::RankKey& rank, int64_t step) override;
  std::optional<int64_t> NewestCommitted(const store::RankKey& rank) override;
  Status Drop(const std::string& job, int64_t step) override;
  std::vector<store::SlotInfo> List(const std::optional<std::string>& job) override;
  std::vector<store::RankKey> Ranks(const std::optional<std::string>& job) override;

  // Not part of the control plane.
  Status ConfigureRank(const store::RankKey&, const std::vector<store::RegionSpec>&) override;
  using store::SnapshotStore::BeginWrite;
  Result<std::shared_ptr<store::SlotRef>> BeginWrite(const store::RankKey&, int64_t,
                                                     store::NewPages) override;
  Status Abort(const store::RankKey&, int64_t) override;
  Status Publish(const store::RankKey&, int64_t, const std::vector<std::string>&) override;
  void Unpublish(const store::RankKey&) override {}
  Result<std::shared_ptr<store::SlotRef>> GetPublished(const store::RankKey&, int64_t,
                                                       const std::string&) override;
  Result<store::VerifyReport> Verify(const store::RankKey&, int64_t) override;
  Status RemoveJob(const std::string&) override;
  store::MemoryUsage Usage() override { return {}; }

 private:
  CommitHook on_commit_;
  std::mutex mu_;
  // rank -> step -> state (complete or committed); at most the newest committed and newer.
  std::map<store::RankKey, std::map<int64_t, store::SlotState>> slots_;
};

}  // namespace reft::bench
