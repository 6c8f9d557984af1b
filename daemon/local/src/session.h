#pragma once
/// \file session.h
/// \brief One connected client process: its rank, registered buffers, device imports, the slot
/// it is writing or restoring from, and the handlers of its requests. Requests run strictly in
/// order (a strand on the server's worker pool), so handler state needs no lock of its own;
/// `mu_` guards only the queue and the info snapshot read by Sessions().

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
#include "reft/local/commit_coordinator.h"
#include "reft/local/local_server.h"
#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"
#include "reft/store/snapshot_store.h"

namespace reft::local {

/// Counters shared by the loop thread and the workers.
struct ServerCounters {
  std::atomic<uint64_t> accepted{0}, rejected_peers{0}, rejected_frames{0}, closed_sessions{0};
};

class Session {
 public:
  Session(uint64_t id, local_proto::UniqueFd sock, const ucred& cred,
          const LocalServerOptions& options, store::SnapshotStore* store,
          CommitCoordinator* coordinator, ServerCounters* counters);
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
  /// Queues device<->host copies for every device buffer and waits for them.
  Status PullDeviceBuffers(const store::SlotRef& slot,
                           const std::vector<kernels::EventExport>& ready,
                           const std::vector<std::pair<int, int>>& ready_keys);
  Status PushDeviceBuffers(const store::SlotRef& slot);
  /// HAS (daemon/has): the same pull split into chunks that the release gate lets out into the
  /// trainer's bubbles first, alongside compute when the bubbles cannot hold the rest before
  /// the deadline, and at once when the trainer waits in fence().
  Status PullDeviceBuffersGated(const store::SlotRef& slot,
                                const std::vector<kernels::EventExport>& ready,
                                const std::vector<std::pair<int, int>>& ready_keys);
  Result<kernels::CopyStream*> StreamFor(kernels::DeviceBackend* backend, int device);
  Status CheckSlotMatchesBuffers(const store::SlotRef& slot) const;
  void AbortWriting(const char* why);
  void Cleanup();

  const uint64_t id_;
  local_proto::UniqueFd sock_;
  const ucred cred_;
  const LocalServerOptions& options_;
  store::SnapshotStore* const store_;
  CommitCoordinator* const coordinator_;
  ServerCounters* const counters_;
  std::mutex send_mu_;  // the loop thread and a worker may both reply

  mutable std::mutex mu_;
  std::deque<local_proto::Frame> queue_;
  bool hangup_queued_ = false;
  bool scheduled_ = false;
  SessionInfo info_;
  std::atomic<uint32_t> protocol_errors_{0};

  // Strand state (touched only by the worker running Drain()).
  bool joined_ = false;
  bool finished_ = false;
  store::RankKey rank_;
  std::vector<Buffer> buffers_;
  bool layout_dirty_ = true;
  std::map<uint64_t, std::shared_ptr<kernels::ImportedMemory>> imports_;  // by allocation_id
  std::map<std::pair<int, int>, std::unique_ptr<kernels::CopyStream>> streams_;  // (kind, device)
  std::optional<Writing> writing_;
  std::shared_ptr<store::SlotRef> restoring_;
  std::map<int64_t, Status> failed_steps_;  // seal/commit failures reported to wait_committed
  struct HasState;                  // the client's hint page + release gate (session.cc)
  std::unique_ptr<HasState> has_;   // null until the client sends has_attach
};

}  // namespace reft::local
