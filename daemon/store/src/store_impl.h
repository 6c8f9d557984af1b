#pragma once
/// \file store_impl.h
/// \brief The SnapshotStore implementation (internal). One mutex guards the index; long work
/// (segment creation and pre-faulting, checksumming) runs outside it on a slot marked busy.

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "reft/mutex.h"
#include "reft/store/snapshot_store.h"
#include "segment_file.h"
#include "segment_format.h"

namespace reft::store::internal {

/// \brief One slot of a rank. Guarded by StoreImpl::mu_.
struct Slot {
  uint32_t index = 0;
  std::string path;
  std::shared_ptr<SegmentFile> file;  ///< null: no segment yet
  std::vector<RegionSpec> layout;     ///< layout the segment currently has
  Geometry geometry;
  ActiveRecord record;                ///< state in force (mirrors the header)
  bool busy = false;                  ///< being created or sealed outside the lock
  int64_t pending_step = -1;          ///< step a busy slot is being created for
  bool removed = false;               ///< dropped while busy
  std::set<std::string> published;    ///< regions peers may copy before the seal (Publish)

  SlotState state() const { return record.state; }
  int64_t step() const { return record.step; }
  /// References beyond the store's own (SlotRefs held by writers/readers).
  bool referenced() const { return file && file.use_count() > 1; }
};

struct RankState {
  std::vector<RegionSpec> layout;  ///< empty until configured or adopted
  std::map<uint32_t, std::shared_ptr<Slot>> slots;
};

class StoreImpl final : public SnapshotStore {
 public:
  explicit StoreImpl(StoreOptions options) : options_(std::move(options)) {}
  Status Adopt(AdoptionReport* report);

  Status ConfigureRank(const RankKey& rank, const std::vector<RegionSpec>& layout) override;
  using SnapshotStore::BeginWrite;
  Result<std::shared_ptr<SlotRef>> BeginWrite(const RankKey& rank, int64_t step,
                                              NewPages pages) override;
  Status Seal(const RankKey& rank, int64_t step) override;
  Status Abort(const RankKey& rank, int64_t step) override;
  Status Commit(const RankKey& rank, int64_t step) override;
  Result<std::shared_ptr<SlotRef>> Get(const RankKey& rank, int64_t step) override;
  std::optional<int64_t> NewestCommitted(const RankKey& rank) override;
  Status Publish(const RankKey& rank, int64_t step, const std::vector<std::string>& regions) override;
  void Unpublish(const RankKey& rank) override;
  Result<std::shared_ptr<SlotRef>> GetPublished(const RankKey& rank, int64_t step,
                                                const std::string& region) override;
  Result<VerifyReport> Verify(const RankKey& rank, int64_t step) override;
  Status Drop(const std::string& job, int64_t step) override;
  Status RemoveJob(const std::string& job) override;
  std::vector<SlotInfo> List(const std::optional<std::string>& job) override;
  std::vector<RankKey> Ranks(const std::optional<std::string>& job) override;
  MemoryUsage Usage() override;

 private:
  RankState* FindRankLocked(const RankKey& rank) REFT_REQUIRES(mu_);
  std::shared_ptr<Slot> FindSlotLocked(RankState& rs, int64_t step, bool include_writing)
      REFT_REQUIRES(mu_);
  std::optional<int64_t> NewestCommittedLocked(const RankState& rs) const REFT_REQUIRES(mu_);
  SlotInfo InfoLocked(const RankKey& rank, const Slot& slot) const REFT_REQUIRES(mu_);
  void TransitionLocked(Slot& slot, SlotState state, int64_t step, uint64_t chunk_table_checksum)
      REFT_REQUIRES(mu_);
  /// Unlinks the slot's file and releases its memory charge (mapping lives on in SlotRefs).
  void DeleteSegmentLocked(Slot& slot) REFT_REQUIRES(mu_);
  /// Unlinks free, unreferenced segments of other slots until `needed` more bytes fit.
  bool MakeRoomLocked(uint64_t needed, const Slot* keep) REFT_REQUIRES(mu_);
  std::string QuarantinePath(const std::string& name) const;

  const StoreOptions options_;
  // Guards the index: every rank's slots and what each Slot holds (a busy slot's segment is
  // created or sealed outside it), and the memory charge.
  Mutex mu_;
  std::map<RankKey, RankState> ranks_ REFT_GUARDED_BY(mu_);
  uint64_t used_ REFT_GUARDED_BY(mu_) = 0;
};

}  // namespace reft::store::internal
