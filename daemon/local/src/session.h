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
/// from device memory (copies, and AEC/RS parity when the replicated buffers are on a device),
/// then answers (the fence). Off the trainer's critical path reftd publishes the rank's unique
/// buffers, copies its ring neighbour's into "peer/<name>", seals the slot and reports it
/// complete to the commit coordinator.

#include <sys/socket.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "reft/kernels/device.h"
#include "reft/kernels/rs.h"
#include "reft/local/commit_coordinator.h"
#include "reft/local/local_server.h"
#include "reft/local/recovery_hooks.h"
#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"
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
  Session(uint64_t id, local_proto::UniqueFd sock, const ucred& cred, const SessionContext& ctx);
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
  };

  void Handle(local_proto::Frame& frame);
  Status HandleHello(const local_proto::Frame& f);
  Status HandleRegister(local_proto::Frame& f);
  Status HandleSnapshotBegin(const local_proto::Frame& f);
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
  local_proto::UniqueFd sock_;
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
  struct HasState;                  // the client's hint page + release gate (session_has.cc)
  std::unique_ptr<HasState> has_;   // null until the client sends has_attach
};

}  // namespace reft::local
