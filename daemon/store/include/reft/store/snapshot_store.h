#pragma once
/// \file snapshot_store.h
/// \brief The daemon's snapshot memory: per-rank slots in tmpfs-backed shared-memory segments.
///
/// A slot is one segment file in `shm_dir` holding a versioned header, a region table, a
/// per-chunk checksum table and the payload (regions laid out back to back, page aligned).
/// The store does not know what a region means (own shard, replica, parity, unique buffer):
/// the layout comes from the protection layer. Segments outlive the daemon (tmpfs), so a
/// restarted daemon adopts them after checking headers and checksums.
///
/// Slot states: free -> writing(step) -> complete(step) -> committed(step). Writing step s+1
/// never touches the newest committed snapshot; older committed slots are released only when a
/// newer step commits. Thread-safe: every method may be called from any thread.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reft/job_layout.h"
#include "reft/result.h"

namespace reft::store {

/// \brief A rank of a job: the job and the rank's coordinates at save time (never its node or
/// local rank). It is a RankCoord, so it passes wherever coordinates are expected.
struct RankKey : RankCoord {
  std::string job;

  RankKey() = default;
  RankKey(std::string job_id, int32_t pp_, int32_t tp_, int32_t dp_)
      : RankCoord{pp_, tp_, dp_}, job(std::move(job_id)) {}
  RankKey(std::string job_id, const RankCoord& c) : RankCoord(c), job(std::move(job_id)) {}

  const RankCoord& coord() const { return *this; }
  std::string ToString() const;  ///< "job/pp0-tp0-dp3"
  bool operator==(const RankKey& o) const;
  bool operator!=(const RankKey& o) const { return !(*this == o); }
  /// \brief Ordered by job, then coordinates.
  bool operator<(const RankKey& o) const;
};

enum class SlotState : uint32_t { kFree = 0, kWriting = 1, kComplete = 2, kCommitted = 3 };
const char* SlotStateName(SlotState state);  ///< "free", "writing", "complete", "committed"

/// \brief One named region of a slot (e.g. "params/shard", "params/arc+1", "rng").
struct RegionSpec {
  std::string name;  ///< unique within the slot, at most 127 bytes
  uint64_t size = 0;
  bool operator==(const RegionSpec& o) const { return name == o.name && size == o.size; }
};

struct StoreOptions {
  std::string shm_dir = "/dev/shm/reft";
  uint64_t memory_limit = 0;          ///< bytes of all segments together; 0 = unlimited
  uint64_t chunk_size = 4ull << 20;   ///< checksum granularity (power of two, >= 4 KiB)
  uint32_t slots_per_rank = 3;        ///< >= 2: newest committed + one complete + one writing
  mode_t file_mode = 0600;            ///< 0600 or 0640 (service user / group)
  gid_t file_group = static_cast<gid_t>(-1);  ///< chown group for 0640; -1 = leave
  bool prefault = true;               ///< MAP_POPULATE / MADV_POPULATE_WRITE new segments
  int checksum_threads = 1;           ///< threads used by Seal/Verify on large slots
};

/// \brief Who gives a new segment its pages (BeginWrite).
enum class NewPages {
  /// The store, before BeginWrite returns: populated (StoreOptions::prefault) or reserved, so
  /// that writers copy at memory speed and tmpfs exhaustion is an error there, never a SIGBUS.
  kByStore,
  /// The writer, range by range as it writes (SlotRef::Populate). For a writer that fills the
  /// slot from a stream: the kernel's work of allocating and zeroing the pages is spread over
  /// the stream instead of standing before its first byte. A segment begun so is populated
  /// whole the next time a write re-uses it.
  kByWriter,
};

/// \brief Metadata of one slot, as listed by `snapshots list`.
struct SlotInfo {
  RankKey rank;
  uint32_t index = 0;
  SlotState state = SlotState::kFree;
  int64_t step = -1;
  uint64_t payload_bytes = 0;   ///< sum of region sizes
  uint64_t segment_bytes = 0;   ///< bytes charged against the memory limit
  std::vector<RegionSpec> regions;
  std::string path;             ///< segment file
};

/// \brief A mapped slot handed to a writer or reader. Keeps the mapping alive while held
/// (a dropped or re-used slot is unmapped only after the last SlotRef goes).
class SlotRef {
 public:
  virtual ~SlotRef() = default;
  virtual const SlotInfo& info() const = 0;
  /// Region `i` of the layout (writable only while the slot is writing).
  virtual uint8_t* region_data(size_t i) const = 0;
  virtual uint64_t region_size(size_t i) const = 0;
  /// Index of the region named `name`, or NotFound.
  virtual Result<size_t> FindRegion(const std::string& name) const = 0;
  /// A dup()ed fd of the segment plus the payload offset of region `i`, so a trainer can map
  /// it (staged writes / restore reads). The caller closes the fd.
  virtual Result<int> DupFd() const = 0;
  virtual uint64_t region_file_offset(size_t i) const = 0;
  /// \brief OK while the segment file is whole; Corrupted when a process holding its fd (a
  /// trainer) shrank it: the mapping then reads zeros (reft/fault_guard.h) and the slot must
  /// not be sealed or served.
  virtual Status CheckIntact() const = 0;
  /// \brief Runs `pin` the first time (`owner`, `addr`) is asked for on this mapping and
  /// `unpin` right before the mapping goes (the segment's last holder). For page-locking slot
  /// memory (cudaHostRegister): a registration that outlived the mapping would keep the old
  /// pages, and a later mapping at the same address would count as "already registered" while
  /// the device wrote into pages nobody reads. A failed `pin` is returned and retried next time.
  virtual Status PinOnce(const void* owner, uint8_t* addr, const std::function<Status()>& pin,
                         std::function<void()> unpin) const = 0;
  /// \brief Allocates and maps writable the pages of [at, at+size), which must lie in this
  /// slot's mapping: OutOfMemory when tmpfs is full (the write would have been a SIGBUS).
  /// Needed before writing a slot begun with NewPages::kByWriter; cheap on populated pages.
  virtual Status Populate(uint8_t* at, uint64_t size) const = 0;
};

/// \brief What a verification found: the first bad chunks by region.
struct VerifyReport {
  uint64_t chunks_checked = 0;
  struct BadChunk {
    std::string region;
    uint64_t chunk = 0;        ///< chunk index within the region
    uint64_t offset = 0;       ///< byte offset within the region
  };
  std::vector<BadChunk> bad;   ///< empty when everything matched
};

/// \brief What Open() found in shm_dir.
struct AdoptionReport {
  std::vector<SlotInfo> adopted;               ///< complete/committed slots that checked out
  std::vector<std::string> discarded_partial;  ///< writing slots (partial snapshots) freed
  std::vector<std::string> quarantined;        ///< bad header/checksum: moved to shm_dir/quarantine
};

struct MemoryUsage {
  uint64_t used = 0;
  uint64_t limit = 0;  ///< 0 = unlimited
  uint64_t slots = 0;
};

class SnapshotStore {
 public:
  /// \brief Opens (creating if needed) shm_dir and adopts the segments found there: complete and
  /// committed slots whose header and every chunk checksum verify are kept; writing slots are
  /// discarded (partial); anything else is quarantined with a log-worthy reason in the report.
  static Result<std::unique_ptr<SnapshotStore>> Open(const StoreOptions& options,
                                                     AdoptionReport* report = nullptr);
  virtual ~SnapshotStore() = default;

  /// \brief Declares (or re-declares) a rank's slot layout. Segments are created lazily by
  /// BeginWrite. If the layout changes, free and uncommitted slots are re-created; committed
  /// ones are kept until a newer step commits. Idempotent for the same layout.
  virtual Status ConfigureRank(const RankKey& rank, const std::vector<RegionSpec>& layout) = 0;

  /// \brief Takes a slot for writing `step`: the slot of a complete (uncommitted) snapshot of
  /// the same step if there is one (a restarted trainer redoing the step replaces it), else a
  /// free slot (re-using its pre-faulted segment when the size matches), else a new slot while
  /// fewer than slots_per_rank exist, else the oldest complete (uncommitted) one; never a
  /// committed one (the newest committed is never overwritten). Creates the segment if needed.
  /// OutOfMemory (nothing evicted; only free segments of any rank are reclaimed) when it does
  /// not fit the memory limit; Busy when every slot is committed, writing or being read;
  /// InvalidArgument if `step` is not newer than the newest committed step; NotFound if the
  /// rank has no layout (neither configured nor adopted). `pages` says who populates a segment
  /// created here (see NewPages).
  virtual Result<std::shared_ptr<SlotRef>> BeginWrite(const RankKey& rank, int64_t step,
                                                      NewPages pages) = 0;
  Result<std::shared_ptr<SlotRef>> BeginWrite(const RankKey& rank, int64_t step) {
    return BeginWrite(rank, step, NewPages::kByStore);
  }

  /// \brief Checksums every chunk and marks the slot complete (durably in its header).
  virtual Status Seal(const RankKey& rank, int64_t step) = 0;

  /// \brief Discards a writing slot (trainer died mid-snapshot): back to free.
  virtual Status Abort(const RankKey& rank, int64_t step) = 0;

  /// \brief Marks `step` committed for `rank` and frees this rank's older committed and
  /// complete slots (two-phase commit: called only when the step is committed job-wide).
  virtual Status Commit(const RankKey& rank, int64_t step) = 0;

  /// \brief A readable reference to the slot holding `step` (state complete or committed).
  virtual Result<std::shared_ptr<SlotRef>> Get(const RankKey& rank, int64_t step) = 0;
  /// \brief Newest committed step of `rank`, if any.
  virtual std::optional<int64_t> NewestCommitted(const RankKey& rank) = 0;

  /// \brief Makes `regions` of the slot holding `step` (in any state but free) readable by peer
  /// copies before the slot is sealed: checksums their chunks into the chunk table and marks
  /// them published. A neighbour's daemon copies them into its own slot of the same step
  /// (docs/architecture.md "Glossary": peer copy) while this slot is still being completed, so no member waits for
  /// another member's seal. Cleared by any transition to free or writing and by Unpublish().
  /// NotFound when no slot holds `step`, or a region is not in its layout.
  virtual Status Publish(const RankKey& rank, int64_t step,
                         const std::vector<std::string>& regions) = 0;
  /// \brief Withdraws every published region of `rank` (its trainer went away: a redo of the
  /// step may write other bytes, so copies must wait for the new writer's Publish()).
  virtual void Unpublish(const RankKey& rank) = 0;
  /// \brief The slot holding `step` when its `region` is published; Lost when the rank already
  /// writes or published a newer step (its slot of `step` was re-used: it will never be
  /// published); NotFound otherwise (not yet).
  virtual Result<std::shared_ptr<SlotRef>> GetPublished(const RankKey& rank, int64_t step,
                                                        const std::string& region) = 0;

  /// \brief Re-checks every chunk checksum of the slot holding `step`.
  virtual Result<VerifyReport> Verify(const RankKey& rank, int64_t step) = 0;

  /// \brief Frees every slot of `job` holding `step` (all ranks). NotFound if none.
  virtual Status Drop(const std::string& job, int64_t step) = 0;
  /// \brief Removes every segment of `job`.
  virtual Status RemoveJob(const std::string& job) = 0;

  /// \brief All slots that are not free (optionally of one job), sorted by rank, step.
  virtual std::vector<SlotInfo> List(const std::optional<std::string>& job = std::nullopt) = 0;
  virtual std::vector<RankKey> Ranks(const std::optional<std::string>& job = std::nullopt) = 0;
  virtual MemoryUsage Usage() = 0;
};

}  // namespace reft::store
