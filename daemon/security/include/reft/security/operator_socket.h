#pragma once
/// \file operator_socket.h
/// \brief The admin Unix socket ("<socket>.admin", reftctl --socket): reftd accepts its
/// connections itself, reads the peer's credentials (SO_PEERCRED, SO_PEERGROUPS) and only then
/// hands the connection to the gRPC server. Being on the same node grants nothing: a connection
/// is an operator's when its uid is root or the daemon's, or when the uid's primary or a
/// supplementary group is the operator group. Other connections are still served so that every
/// call gets a clear PERMISSION_DENIED naming the uid (security::Authorizer looks them up by
/// the gRPC peer string, "fd:N" for connections handed over this way).
///
/// The socket file is created 0600, or 0660 with the operator group: the file mode keeps other
/// users out and the credential check still holds when the mode is loosened by mistake.
/// Thread-safe.

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "reft/mutex.h"
#include "reft/result.h"
#include "reft/thread.h"

namespace reft::security {

/// \brief Who may use the admin socket besides root.
struct OperatorPolicy {
  uint32_t daemon_uid = 0;                ///< the daemon's effective uid
  std::optional<uint32_t> operator_gid;   ///< members of this group are operators
  std::string operator_group;             ///< its name, for messages
};

/// \brief The process at the other end of one admin socket connection.
struct LocalPeer {
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool operator_ = false;  ///< allowed to call Admin
  std::string Describe() const;  ///< "uid U gid G (pid P)"
};

/// \brief Decides whether credentials are an operator's under `policy`; `groups` are the
/// peer's supplementary groups.
bool IsOperator(const OperatorPolicy& policy, uint32_t uid, uint32_t gid,
                const std::vector<uint32_t>& groups);

/// \brief Reads a connected Unix socket's peer credentials (SO_PEERCRED, SO_PEERGROUPS where
/// the kernel has it) and applies `policy`.
Result<LocalPeer> IdentifyPeer(int fd, const OperatorPolicy& policy);

class OperatorSocket {
 public:
  /// \brief Binds and listens on `path` (which must not exist: remove a stale socket first).
  static Result<std::unique_ptr<OperatorSocket>> Listen(const std::string& path,
                                                         OperatorPolicy policy);
  ~OperatorSocket();

  /// \brief Accepts connections in a thread of its own and hands each to `server` (already
  /// started) until Stop(). Call once.
  void Serve(grpc::Server* server);
  /// \brief Stops accepting and removes the socket file; connections already handed to the
  /// server end with it.
  void Stop();

  /// \brief The peer of a gRPC call that arrived over this socket (`grpc_peer` =
  /// ServerContext::peer()), or nullopt for a call that came another way.
  std::optional<LocalPeer> Find(const std::string& grpc_peer) const;

  const std::string& path() const { return path_; }
  const OperatorPolicy& policy() const { return policy_; }

 private:
  OperatorSocket(std::string path, OperatorPolicy policy, int listen_fd, int wake_fd);
  void AcceptLoop(grpc::Server* server);

  const std::string path_;
  const OperatorPolicy policy_;
  int listen_fd_;
  int wake_fd_;  ///< eventfd that ends the accept loop
  reft::Thread thread_;
  std::atomic<bool> stopped_{false};
  mutable Mutex mu_;
  /// By fd number; a reused number is overwritten at accept.
  std::map<int, LocalPeer> peers_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::security
