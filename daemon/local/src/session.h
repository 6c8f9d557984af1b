#pragma once
/// \file session.h
/// \brief One connected client process: the protocol side of the local channel. A Session
/// queues its frames, runs them in order on the server's worker pool (a strand), decodes each
/// request and hands it to the part that does the work: SessionBuffers (registrations and
/// device imports), SnapshotWriter (the save path) and RestoreDeliverer (restores). Requests
/// run strictly in order, so the strand's state needs no lock; `mu_` guards only the queue.

#include <sys/socket.h>

#include <atomic>
#include <deque>
#include <memory>
#include <vector>

#include "reft/local/commit_coordinator.h"
#include "reft/local/local_server.h"
#include "reft/local/recovery_hooks.h"
#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"
#include "reft/mutex.h"
#include "reft/peer_credentials.h"
#include "reft/store/snapshot_store.h"
#include "held_ranks.h"
#include "restore_deliverer.h"
#include "session_buffers.h"
#include "session_info.h"
#include "snapshot_writer.h"
#include "stream_rings.h"

namespace reft::local {

/// Counters shared by the loop thread and the workers.
struct ServerCounters {
  std::atomic<uint64_t> accepted{0}, rejected_peers{0}, rejected_frames{0}, closed_sessions{0},
      failed_replies{0};
};

/// What every session of one server shares (all outlive the sessions).
struct SessionContext {
  const LocalServerOptions* options = nullptr;
  store::SnapshotStore* store = nullptr;
  CommitCoordinator* coordinator = nullptr;
  PeerCopier* copier = nullptr;
  RestoreProvider* restorer = nullptr;
  ServerCounters* counters = nullptr;
  JobOwnership* owners = nullptr;
  StreamRings* rings = nullptr;
  HeldRanks* held = nullptr;
  PlanSource* plans = nullptr;  ///< null: plan queries are Unavailable
  FailureReports* failures = nullptr;  ///< null: failure reports are Unavailable
};

class Session {
 public:
  Session(uint64_t id, UniqueFd sock, PeerCredentials cred, const SessionContext& ctx);
  ~Session();

  int fd() const { return fd_; }
  uint64_t id() const { return id_; }

  /// Loop thread: queues a frame; true when the caller must schedule Drain() on a worker.
  bool Enqueue(local_proto::Frame frame) REFT_EXCLUDES(mu_);
  /// Loop thread: the peer hung up (the fd is already out of epoll); queues the cleanup.
  bool EnqueueHangup() REFT_EXCLUDES(mu_);
  /// Loop thread: a frame failed to decode at the header level; replies with the error and
  /// returns false when the session exceeded its error budget and must be hung up.
  bool RejectFrame(const Status& error);
  /// Worker: handles queued frames in order until the queue is empty. Returns true when the
  /// hang-up was processed (the session is finished and may be forgotten).
  bool Drain() REFT_EXCLUDES(mu_);

  SessionInfo Info() const { return info_.Get(); }

 private:
  void Handle(local_proto::Frame& frame);
  Status HandleHello(const local_proto::Frame& f);
  /// A failure report (session_failure_report.cc).
  Status HandleFailureReport(const local_proto::Frame& f);
  Status HandleRegister(local_proto::Frame& f);
  Status HandleSnapshotBegin(local_proto::Frame& f);
  Status HandleSnapshotStaged(const local_proto::Frame& f);
  Status HandleSnapshotAbort(const local_proto::Frame& f);
  Status HandleQueryCommitted(const local_proto::Frame& f);
  Status HandleRestore(const local_proto::Frame& f);
  Status HandleRestoreDone(const local_proto::Frame& f);
  Status HandleHasAttach(local_proto::Frame& f);
  /// A plan query: needs no hello (a launcher asks before it knows its rank), answers only the
  /// job's owner.
  Status HandlePlanQuery(const local_proto::Frame& f);
  /// Loop thread (from Enqueue): kAorStatus, answered at once from SessionInfo.
  void AnswerAorStatus(const local_proto::Frame& f);
  Status Reply(local_proto::MessageType type, uint32_t request_id,
               const std::vector<uint8_t>& payload, const std::vector<int>& fds = {})
      REFT_EXCLUDES(send_mu_);
  /// Replies with an error frame; a client that cannot be told is hung up by the loop anyway.
  void ReplyError(uint32_t request_id, const Status& error);
  void Cleanup() REFT_EXCLUDES(send_mu_);

  const uint64_t id_;
  const int fd_;  // sock_'s number, for epoll and shutdown(); the socket is closed by Cleanup()
  UniqueFd sock_ REFT_GUARDED_BY(send_mu_);
  const SessionContext ctx_;
  const LocalServerOptions& options_;
  const PeerCredentials cred_;  // as of connect(): checked against the job's owner at hello
  Mutex send_mu_;  // the loop thread and a worker may both reply

  Mutex mu_;
  std::deque<local_proto::Frame> queue_ REFT_GUARDED_BY(mu_);
  bool hangup_queued_ REFT_GUARDED_BY(mu_) = false;
  bool scheduled_ REFT_GUARDED_BY(mu_) = false;
  bool finished_ REFT_GUARDED_BY(mu_) = false;
  SessionInfoCell info_;
  std::atomic<uint32_t> protocol_errors_{0};
  std::atomic<bool> hung_up_{false};  // set by the loop thread: cancels a waiting peer copy

  // Strand state (touched only by the worker running Drain()).
  bool joined_ = false;
  size_t declared_buffers_ = 0;  // buffers_.size() at the last DeclareReplicated (0: never)
  store::RankKey rank_;
  JobLayout layout_;  ///< as the hello declared it
  protect::Scheme scheme_;
  SessionBuffers buffers_;
  SnapshotWriter writer_;
  RestoreDeliverer deliverer_;
};

}  // namespace reft::local
