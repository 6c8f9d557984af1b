#pragma once
/// \file session.h
/// \brief One connected client process: its rank, registered buffers, device imports, its slot
/// plan, the slot it is writing, and the handlers of its requests. Requests run strictly in
/// order (a strand on the server's worker pool), so handler state needs no lock of its own;
/// `mu_` guards only the queue and the info snapshot read by Sessions().
///
/// Lifecycle of one snapshot (DESIGN.md §3): snapshot_begin takes a writing slot laid out by
/// the rank's plan ("meta" + protect::RankPlan regions) and tells the client where each region
/// is; the client fills what comes from host memory; snapshot_staged makes reftd pull what comes
/// from device memory (copies, and AEC/RS parity when the replicated buffers are on a device,
/// and the AOR gradient slices), then answers (the fence). Off the trainer's critical path
/// reftd publishes the rank's unique buffers, copies its ring neighbour's into "peer/<name>",
/// advances "aor/<name>" by replaying the optimizer update on the host (session_aor.cc), seals
/// the slot and reports it complete to the commit coordinator.

#include <sys/socket.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "node_local_hooks.h"
#include "reft/aor/replica.h"
#include "reft/kernels/device.h"
#include "reft/kernels/rs.h"
#include "reft/local/commit_coordinator.h"
#include "reft/local/local_server.h"
#include "reft/local/recovery_hooks.h"
#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"
#include "reft/protect/aor_plan.h"
#include "reft/protect/slot_meta.h"
#include "reft/store/snapshot_store.h"

namespace reft::local {

/// Counters shared by the loop thread and the workers.
struct ServerCounters {
  std::atomic<uint64_t> accepted{0}, rejected_peers{0}, rejected_frames{0}, closed_sessions{0};
};

/// What every session of one server shares (all outlive the sessions).
struct SessionContext {
  const LocalServerOptions* options = nullptr;
  store::SnapshotStore* store = nullptr;
  CommitCoordinator* coordinator = nullptr;
  PeerCopier* copier = nullptr;
  RestoreProvider* restorer = nullptr;
  ServerCounters* counters = nullptr;
};

class Session {
 public:
  Session(uint64_t id, UniqueFd sock, const ucred& cred, const SessionContext& ctx);
  ~Session();

  int fd() const { return sock_.get(); }
  uint64_t id() const { return id_; }

  /// Loop thread: queues a frame; true when the caller must schedule Drain() on a worker.
  bool Enqueue(local_proto::Frame frame);
  /// Loop thread: the peer hung up (the fd is already out of epoll); queues the cleanup.
  bool EnqueueHangup();
  /// Loop thread: a frame failed to decode at the header level; replies with the error and
  /// returns false when the session exceeded its error budget and must be hung up.
  bool RejectFrame(const Status& error);
  /// Worker: handles queued frames in order until the queue is empty. Returns true when the
  /// hang-up was processed (the session is finished and may be forgotten).
  bool Drain();

  SessionInfo Info() const;

 private:
  struct Buffer {
    local_proto::Register reg;
    kernels::DeviceBackend* backend = nullptr;        // null for staged (host) buffers
    std::shared_ptr<kernels::ImportedMemory> memory;  // the whole allocation (cached import)
  };
  /// Where a snapshot's AOR gradient slices wait between the fence and the replay: a memfd
  /// (the client maps it when it copies host-memory gradients), page-locked for device copies.
  struct GradientStaging {
    explicit GradientStaging(MappedMemfd m) : mem(std::move(m)) {}
    MappedMemfd mem;
    std::vector<kernels::DeviceBackend*> pinned;  ///< backends that page-locked it
    ~GradientStaging();
  };
  /// The rank's slot plan for the registered buffers (recomputed after a registration).
  struct Plan {
    protect::SlotMeta meta;
    std::vector<uint8_t> meta_bytes;  ///< contents of the "meta" region
    protect::RankPlan rank;
    protect::SgGeometry geometry;
    std::vector<const Buffer*> replicated;  ///< geometry.buffers[i] -> its registered buffer
    /// AEC/RS parity is reftd's work (on the device's side) when the replicated buffers are
    /// device memory; the client computes it when they are host memory.
    bool parity_on_device = false;
    std::shared_ptr<const kernels::RsCodec> rs;
    std::vector<store::RegionSpec> layout;  ///< "meta" + rank.regions
    bool configured = false;                ///< layout handed to the store (first snapshot)
    /// AOR: one binding per "aor/<name>" region (protect/aor_plan.h), the gradient buffer and
    /// the optimizer buffer's registration index of each, and the staging of the slices.
    protect::AorPlan aor;
    std::vector<const Buffer*> aor_gradient;
    std::vector<uint32_t> aor_buffer_index;
    std::shared_ptr<GradientStaging> staging;  ///< null without bindings
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
    std::vector<aor::StepHyper> hypers;  ///< per plan_->aor binding
  };
  /// The host replica behind one "aor/<name>" region, kept across the session's snapshots: its
  /// views point into the region of the newest slot this rank completed (held by `slot`, so
  /// the store never reuses it while the next step is written from it).
  struct AorState {
    std::optional<aor::AorReplica> replica;
    std::shared_ptr<store::SlotRef> slot;
    uint64_t since_copy = 0;  ///< replays since the last copy from the owner
    std::string reason;       ///< why there is no replica ("" = the session just started)
  };

  void Handle(local_proto::Frame& frame);
  Status HandleHello(const local_proto::Frame& f);
  Status HandleRegister(local_proto::Frame& f);
  Status HandleSnapshotBegin(local_proto::Frame& f);
  Status HandleSnapshotStaged(const local_proto::Frame& f);
  Status HandleSnapshotAbort(const local_proto::Frame& f);
  Status HandleQueryCommitted(const local_proto::Frame& f);
  Status HandleRestore(const local_proto::Frame& f);
  Status HandleRestoreDone(const local_proto::Frame& f);
  Status HandleHasAttach(local_proto::Frame& f);
  Status Reply(local_proto::MessageType type, uint32_t request_id,
               const std::vector<uint8_t>& payload, const std::vector<int>& fds = {});

  // session_plan.cc
  Result<Plan> MakePlan() const;
  /// Seals the slot after the fence: publishes the unique buffers, copies the neighbour's,
  /// checksums everything and reports the step complete.
  Status CompleteStep(int64_t step, const std::shared_ptr<store::SlotRef>& slot);

  // session_aor.cc
  /// The validated hyper-parameters of every AOR binding for the snapshot `m` (InvalidArgument
  /// naming the buffer when one is missing, duplicated, malformed or of another iteration).
  Result<std::vector<aor::StepHyper>> OptimizerHypers(const local_proto::SnapshotBegin& m) const;
  /// BeginWrite, keeping the slots the replicas read from; if the store needs one of them
  /// (Busy: every slot taken), they are let go (the replicas resynchronise) and it is retried.
  Result<std::shared_ptr<store::SlotRef>> BeginWriteKeepingReplicas(int64_t step);
  /// Fills binding `i`'s "aor/<name>" region of `slot` (step `step`): replay from the previous
  /// slot, or a copy of the ring `neighbour`'s published shard when there is no valid
  /// replica (first snapshot, missed step, restore) or a periodic resync is due.
  Status AdvanceAor(size_t i, int64_t step, const std::shared_ptr<store::SlotRef>& slot,
                    const store::RankKey& neighbour);
  /// Drops every replica (the views may point into a slot that is being discarded).
  void ResetAor(const std::string& reason);

  // session_device.cc
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
  /// Restore: copies each device buffer's bytes from `base` (offsets by buffer name) H2D.
  Status PushDevice(const uint8_t* base, const std::map<std::string, uint64_t>& offsets);
  Result<kernels::CopyStream*> StreamFor(kernels::DeviceBackend* backend, int device);

  // session_has.cc
  /// HAS (daemon/has): the device work split into chunks that the release gate lets out into
  /// the trainer's bubbles first, alongside compute when the bubbles cannot hold the rest
  /// before the deadline, and at once when the trainer waits in fence().
  Status PullDeviceGated(const store::SlotRef& slot,
                         const std::vector<kernels::EventExport>& ready,
                         const std::vector<std::pair<int, int>>& ready_keys);
  void DetachHas();  ///< drops the hint page (the client hung up)

  void AbortWriting(const char* why);
  void Cleanup();

  const uint64_t id_;
  UniqueFd sock_;
  const ucred cred_;
  const SessionContext ctx_;
  const LocalServerOptions& options_;
  std::mutex send_mu_;  // the loop thread and a worker may both reply

  mutable std::mutex mu_;
  std::deque<local_proto::Frame> queue_;
  bool hangup_queued_ = false;
  bool scheduled_ = false;
  SessionInfo info_;
  std::atomic<uint32_t> protocol_errors_{0};
  std::atomic<bool> hung_up_{false};  // set by the loop thread: cancels a waiting peer copy

  // Strand state (touched only by the worker running Drain()).
  bool joined_ = false;
  bool finished_ = false;
  store::RankKey rank_;
  protect::Scheme scheme_;
  std::vector<Buffer> buffers_;
  std::optional<Plan> plan_;  // reset by a registration
  std::map<uint64_t, std::shared_ptr<kernels::ImportedMemory>> imports_;  // by allocation_id
  std::map<std::pair<int, int>, std::unique_ptr<kernels::CopyStream>> streams_;  // (kind, device)
  std::optional<Writing> writing_;
  std::map<int64_t, Status> failed_steps_;  // seal/commit failures reported to wait_committed
  std::vector<AorState> aor_;               // per plan_->aor binding; cleared with the plan
  struct HasState;                  // the client's hint page + release gate (session_has.cc)
  std::unique_ptr<HasState> has_;   // null until the client sends has_attach
};

}  // namespace reft::local
