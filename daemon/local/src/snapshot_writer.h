#pragma once
/// \file snapshot_writer.h
/// \brief The save path of one session, step by step (docs/data-paths.md "Save"):
///
/// 1. plan: the rank's slot plan (protect::PlanSlot of the hello and the registrations, the
///    function libreft calls too), with what only reftd needs (the store layout, the RS codec,
///    the AOR gradient staging);
/// 2. begin: a writing slot laid out by the plan, its "meta" written, its regions described to
///    the client, which fills what comes from host memory;
/// 3. pull: the device side (copies, AEC/RS parity of device buffers, AOR gradient slices),
///    under HAS's release gate when the trainer sends bubble hints; then the fence;
/// 4. complete: after the fence reply, off the trainer's path: publish the rank's unique
///    buffers, copy the ring neighbour's ("peer/<name>") or replay its optimizer update
///    ("aor/<name>"), seal (checksums), report the step complete to the commit coordinator.
///
/// Used by the session's strand only (no lock of its own); the counters it keeps for
/// `reftctl status` go to the session's SessionInfoCell.

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reft/aor/replica.h"
#include "reft/kernels/device.h"
#include "reft/kernels/rs.h"
#include "reft/local/commit_coordinator.h"
#include "reft/local/local_server.h"
#include "reft/local/recovery_hooks.h"
#include "reft/local_proto/socket.h"
#include "reft/local_proto/messages.h"
#include "reft/mapped_memfd.h"
#include "reft/protect/slot_plan.h"
#include "reft/store/snapshot_store.h"
#include "session_buffers.h"
#include "session_info.h"

namespace reft::local {

class SnapshotWriter {
 public:
  /// What the writer shares with the rest of the server; everything outlives the session.
  struct Context {
    const LocalServerOptions* options = nullptr;
    store::SnapshotStore* store = nullptr;
    CommitCoordinator* coordinator = nullptr;
    PeerCopier* copier = nullptr;
    SessionInfoCell* info = nullptr;
    const std::atomic<bool>* hung_up = nullptr;  ///< the client went away: cancel peer copies
  };
  SnapshotWriter(const Context& ctx, SessionBuffers* buffers);
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  /// \brief The session joined: its hello (the input of the slot plan) and its rank.
  void Join(const local_proto::Hello& hello, const protect::Scheme& scheme);
  /// \brief The restore epoch the session's snapshots belong to: the job's at join, then the
  /// one its restore followed. Begin refuses, and the coordinator does not count, a snapshot
  /// once the job moved to a newer epoch (the trainer must restart and restore).
  void SetEpoch(int64_t epoch) { epoch_ = epoch; }
  /// \brief Buffer `added` was registered: the plan (and the AOR replicas) start over. An
  /// optimizer shard in device memory has AOR off from here on (unless
  /// LocalServerOptions::aor_device_optimizers).
  void BuffersChanged(const local_proto::Register& added);

  bool writing() const { return writing_.has_value(); }
  int64_t writing_step() const { return writing_ ? writing_->step : -1; }

  /// \brief snapshot_begin: takes a writing slot of `m.step` laid out by the plan, writes its
  /// "meta" and describes its regions in `reply`. `fds` gets the slot file (owned by `slot_fd`)
  /// and, when the client copies host gradients for AOR, the staging memfd.
  Status Begin(const local_proto::SnapshotBegin& m, local_proto::SlotReply* reply,
               std::vector<int>* fds, UniqueFd* slot_fd);
  /// \brief snapshot_staged: pulls the device side of the slot of `step` once each stream
  /// waited for its device's ready event (`ready[i]` for memory kind/device `ready_keys[i]`).
  /// On an error the partial snapshot is discarded.
  Status Pull(int64_t step, const std::vector<kernels::EventExport>& ready,
              const std::vector<std::pair<int, int>>& ready_keys);
  /// \brief After the fence reply: publish, peer copies and AOR, seal, report complete. A
  /// failure discards the slot and is kept for Failure(step).
  void Complete(int64_t step);
  /// \brief Discards the slot being written, if any (the committed one is untouched).
  void AbortWriting(const char* why);
  /// \brief Why `step` failed on this rank after its fence (seal, peer copy, commit), if it did.
  std::optional<Status> Failure(int64_t step) const;

  /// \brief The rank's slot meta, for a restore (the plan is computed if needed).
  Result<const protect::SlotMeta*> Meta();
  /// \brief Drops every AOR replica (e.g. the trainer restored an older step).
  void ResetAor(const std::string& reason);

  /// \brief has_attach: maps the trainer's HAS hint page (the frame's fd) and seeds the
  /// release gate from the pipeline hint in the payload, if any.
  Status AttachHas(const local_proto::Frame& f);

  /// \brief The client hung up: abort the writing slot, unpublish, drop HAS, replicas, plan.
  void Close();

 private:
  using Buffer = SessionBuffers::Buffer;
  /// Where a snapshot's AOR gradient slices wait between the fence and the replay: a memfd
  /// (the client maps it when it copies host-memory gradients), page-locked for device copies.
  struct GradientStaging {
    explicit GradientStaging(MappedMemfd m) : mem(std::move(m)) {}
    ~GradientStaging();
    MappedMemfd mem;
    std::vector<kernels::DeviceBackend*> pinned;  ///< backends that page-locked it
  };
  /// The rank's slot plan and what reftd needs besides it.
  struct Plan {
    protect::SlotPlan slot;
    std::vector<const Buffer*> replicated;  ///< slot.geometry.buffers[i] -> its buffer
    std::shared_ptr<const kernels::RsCodec> rs;  ///< RS parity computed here (device buffers)
    std::vector<store::RegionSpec> layout;  ///< "meta" + slot.rank.regions
    bool configured = false;                ///< layout handed to the store (first snapshot)
    std::vector<const Buffer*> aor_gradient;   ///< per AOR binding: its gradient buffer
    std::shared_ptr<GradientStaging> staging;  ///< null without AOR bindings
    bool staging_for_client = false;           ///< a gradient is host memory: the client copies
  };
  /// One piece of the device side of a snapshot: device bytes into a slot region.
  struct DeviceOp {
    enum class Kind { kCopy, kXor, kRs };
    Kind kind = Kind::kCopy;
    uint8_t* dst = nullptr;  ///< in the slot
    uint64_t size = 0;
    /// (buffer, byte offset in it); a null buffer is zero padding (XOR skips it, RS reads 0s).
    std::vector<std::pair<const Buffer*, uint64_t>> sources;
    int rs_row = 0;
    kernels::CopyStream* stream = nullptr;
  };
  struct Writing {
    int64_t step = -1;
    std::shared_ptr<store::SlotRef> slot;
    std::vector<aor::StepHyper> hypers;  ///< per plan AOR binding
  };
  /// The host replica behind one "aor/<name>" region, kept across the session's snapshots: its
  /// views point into the region of the newest slot this rank completed (held by `slot`, so
  /// the store never reuses it while the next step is written from it).
  struct AorState {
    std::optional<aor::AorReplica> replica;
    std::shared_ptr<store::SlotRef> slot;
    uint64_t since_copy = 0;      ///< replays since the owner's state was last copied or compared
    uint32_t probation_left = 0;  ///< replays still compared with the owner's copy
    std::string reason;       ///< why there is no replica ("" = the session just started)
  };
  struct HasState;  ///< the client's hint page and HAS's release gate (snapshot_has.cc)

  // snapshot_plan.cc
  Result<std::unique_ptr<Plan>> MakePlan() const;
  Status EnsurePlan();  ///< computes the plan after a registration
  /// Publishes the unique buffers, fills the ring neighbour's copies, seals.
  Status CompleteSlot(int64_t step, const std::shared_ptr<store::SlotRef>& slot);
  /// OK while a snapshot of `step` by this session can count: Cancelled (StaleEpoch) once the
  /// job moved to a newer restore epoch.
  Status CheckEpoch(int64_t step) const;
  /// Asked between a peer copy's attempts: the trainer gone, or the job restored again without
  /// it, ends the wait at once rather than at the copy's timeout (the step can no longer count,
  /// and the trainer learns that it must restart while its neighbour waits for it).
  Status PeerCopyWanted(int64_t step) const;

  // snapshot_aor.cc
  /// The validated hyper-parameters of every AOR binding for the snapshot `m` (InvalidArgument
  /// naming the buffer when one is missing, duplicated, malformed or of another step).
  Result<std::vector<aor::StepHyper>> OptimizerHypers(const local_proto::SnapshotBegin& m) const;
  /// BeginWrite, keeping the slots the replicas read from; if the store needs one of them
  /// (Busy: every slot taken), they are let go (the replicas resynchronise) and it is retried.
  Result<std::shared_ptr<store::SlotRef>> BeginWriteKeepingReplicas(int64_t step);
  /// Fills binding `i`'s "aor/<name>" region of `slot` (step `step`): replay from the previous
  /// slot, or a copy of the ring `neighbour`'s published shard when there is no valid
  /// replica (first snapshot, missed step, restore) or a periodic resync is due.
  Status AdvanceAor(size_t i, int64_t step, const std::shared_ptr<store::SlotRef>& slot,
                    const store::RankKey& neighbour);
  /// Compares binding `i`'s replayed region of `step` with a copy of the neighbour's shard
  /// (probation, periodic resync); a difference turns AOR off for it (the copy wins).
  Status VerifyAor(size_t i, int64_t step, uint8_t* region, const store::RankKey& neighbour);
  /// Fills `region` (binding `i`'s size) with a copy of the neighbour's published shard of
  /// `step`.
  Status CopyAor(size_t i, int64_t step, uint8_t* region, const store::RankKey& neighbour);
  /// Binding `i` is replayed no more in this session: `why` ("off: ...") is kept per buffer.
  void TurnAorOff(size_t i, const std::string& why);
  /// The AOR states of the plan's bindings into SessionInfo::aor_state.
  void PublishAorState();
  /// A registration of an optimizer shard in device memory that AOR would replay: AOR off.
  void NoteAorRegistration(const local_proto::Register& r);

  // snapshot_device.cc
  /// Page-locks a region of `slot` receiving device bytes, once per mapping (unlocked before
  /// it is unmapped); when the kernel refuses, the copies run unpinned and one warning says so.
  void PinRegion(const store::SlotRef& slot, kernels::DeviceBackend* backend, uint8_t* base,
                 uint64_t size);
  /// The device work of a snapshot into `slot`, in issue order (copies first, then parity).
  Result<std::vector<DeviceOp>> DeviceOps(const store::SlotRef& slot);
  /// Makes each stream the ops use wait for the trainer's ready event of its device.
  Status WaitReadyEvents(const std::vector<DeviceOp>& ops,
                         const std::vector<kernels::EventExport>& ready,
                         const std::vector<std::pair<int, int>>& ready_keys);
  /// Queues `op` (RS ops run to completion: D2H of their sources, then ISA-L on the host).
  Status IssueOp(const DeviceOp& op);
  Status PullDevice(const store::SlotRef& slot, const std::vector<kernels::EventExport>& ready,
                    const std::vector<std::pair<int, int>>& ready_keys);

  // snapshot_has.cc
  /// HAS: the device work split into chunks that the release gate lets out into the trainer's
  /// bubbles first, alongside compute when the bubbles cannot hold the rest before the
  /// deadline, and at once when the trainer waits in fence().
  Status PullDeviceGated(const store::SlotRef& slot,
                         const std::vector<kernels::EventExport>& ready,
                         const std::vector<std::pair<int, int>>& ready_keys);

  const Context ctx_;
  const LocalServerOptions& options_;
  SessionBuffers* const buffers_;
  local_proto::Hello hello_;
  store::RankKey rank_;
  int64_t epoch_ = 0;
  protect::Scheme scheme_;
  std::unique_ptr<Plan> plan_;  // reset by a registration
  std::optional<Writing> writing_;
  std::map<int64_t, Status> failed_steps_;  // seal/commit failures reported to wait_committed
  std::vector<AorState> aor_;               // per plan AOR binding; cleared with the plan
  // Optimizer buffers whose AOR is off for the rest of the session, and why ("off: ..."): kept
  // across plans and restores (a mismatch, a device optimizer, the trainer's declaration).
  std::map<std::string, std::string> aor_off_;
  std::unique_ptr<HasState> has_;           // null until the client sends has_attach
  bool unpinned_warned_ = false;            // PinRegion's warning was logged
};

}  // namespace reft::local
