#include "reft/security/operator_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <grpcpp/server_posix.h>
#include <spdlog/spdlog.h>

#include "reft/peer_credentials.h"

namespace reft::security {

std::string LocalPeer::Describe() const {
  return "uid " + std::to_string(uid) + " gid " + std::to_string(gid) + " (pid " +
         std::to_string(pid) + ")";
}

bool IsOperator(const OperatorPolicy& p, uint32_t uid, uint32_t gid,
                const std::vector<uint32_t>& groups) {
  if (uid == 0 || uid == p.daemon_uid) return true;
  if (!p.operator_gid) return false;
  return gid == *p.operator_gid ||
         std::find(groups.begin(), groups.end(), *p.operator_gid) != groups.end();
}

Result<LocalPeer> IdentifyPeer(int fd, const OperatorPolicy& policy) {
  REFT_ASSIGN_OR_RETURN(PeerCredentials cred, ReadPeerCredentials(fd));
  LocalPeer peer;
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  peer.operator_ = IsOperator(policy, cred.uid, cred.gid, cred.groups);
  return peer;
}

Result<std::unique_ptr<OperatorSocket>> OperatorSocket::Listen(const std::string& path,
                                                               OperatorPolicy policy) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("admin socket path too long: " + path);
  }
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  // Linux creates the file with the socket inode's mode (less the umask): 0600 before bind
  // means no window in which another user could connect; the operator group is let in after.
  // (umask itself is process-wide and other threads create files, so it is left alone.)
  if (fchmod(fd, 0600) != 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status st = Status::FromErrno(errno, "cannot bind admin socket " + path);
    close(fd);
    return st;
  }
  if (policy.operator_gid) {
    if (chown(path.c_str(), static_cast<uid_t>(-1), *policy.operator_gid) != 0 ||
        chmod(path.c_str(), 0660) != 0) {
      Status st = Status::FromErrno(errno, "cannot give admin socket " + path + " to group '" +
                                               policy.operator_group + "'");
      close(fd);
      unlink(path.c_str());
      return st;
    }
  }
  if (listen(fd, 64) != 0) {
    Status st = Status::FromErrno(errno, "listen " + path);
    close(fd);
    unlink(path.c_str());
    return st;
  }
  int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    Status st = Status::FromErrno(errno, "eventfd");
    close(fd);
    unlink(path.c_str());
    return st;
  }
  return std::unique_ptr<OperatorSocket>(new OperatorSocket(path, std::move(policy), fd, wake));
}

OperatorSocket::OperatorSocket(std::string path, OperatorPolicy policy, int listen_fd,
                               int wake_fd)
    : path_(std::move(path)),
      policy_(std::move(policy)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd) {}

OperatorSocket::~OperatorSocket() {
  Stop();
  close(listen_fd_);
  close(wake_fd_);
}

void OperatorSocket::Serve(grpc::Server* server) {
  thread_ = reft::Thread("reft-operator", [this, server] { AcceptLoop(server); });
}

void OperatorSocket::Stop() {
  if (stopped_.exchange(true)) return;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  unlink(path_.c_str());
}

void OperatorSocket::AcceptLoop(grpc::Server* server) {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("admin socket {}: poll: {}", path_, std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      spdlog::error("admin socket {}: accept: {}", path_, std::strerror(errno));
      if (errno == EMFILE || errno == ENFILE) {
        poll(nullptr, 0, 100);  // out of descriptors: retry instead of spinning
      }
      continue;
    }
    auto peer = IdentifyPeer(fd, policy_);
    if (!peer.ok()) {
      spdlog::warn("admin socket {}: {}; connection closed", path_, peer.status().ToString());
      close(fd);
      continue;
    }
    if (!peer->operator_) {
      spdlog::warn("admin socket {}: {} is not an operator; its calls will be refused", path_,
                   peer->Describe());
    }
    {
      MutexLock lock(mu_);
      peers_[fd] = *peer;
    }
    grpc::AddInsecureChannelFromFd(server, fd);  // gRPC owns (and closes) the fd from here
  }
}

std::optional<LocalPeer> OperatorSocket::Find(const std::string& grpc_peer) const {
  constexpr char kPrefix[] = "fd:";
  if (grpc_peer.rfind(kPrefix, 0) != 0) return std::nullopt;
  int fd = 0;
  for (size_t i = sizeof(kPrefix) - 1; i < grpc_peer.size(); ++i) {
    char c = grpc_peer[i];
    if (c < '0' || c > '9' || fd > 100000000) return std::nullopt;
    fd = fd * 10 + (c - '0');
  }
  MutexLock lock(mu_);
  auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

}  // namespace reft::security
