/// \file reftd_socket.cc
/// \brief ReftdSocketPath and ConnectReftd (reftd_socket.h): the first thing a new user meets,
/// so every refusal says what to do next.

#include "reftd_socket.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <algorithm>

#include "channel.h"
#include "reft/local_proto/socket.h"

namespace reft::client {
namespace {

std::string EnvSocket() {
  const char* env = std::getenv("REFT_SOCKET");
  return env != nullptr ? env : "";
}

// Where `path` came from, as the user would have set it (Python spellings: reft.Client(socket=)).
std::string SourceOf(const std::string& path) {
  if (!EnvSocket().empty() && path == EnvSocket()) return "from REFT_SOCKET";
  if (path == kDefaultSocket) return "the default: neither socket= nor REFT_SOCKET is set";
  return "given as socket=";
}

constexpr const char* kPointAt =
    "pass the path reftd serves (its --socket, or `socket` in reftd.toml; its log names it) "
    "with socket=<path> or REFT_SOCKET=<path>";

}  // namespace

std::string ReftdSocketPath(const std::string& given) {
  if (!given.empty()) return given;
  const std::string env = EnvSocket();
  return env.empty() ? kDefaultSocket : env;
}

Result<UniqueFd> ConnectReftd(const std::string& path) {
  int err = 0;
  auto sock = local_proto::ConnectSeqpacket(path, &err);
  if (sock.ok() || err == 0) return sock;
  const std::string at = "cannot connect to reftd at '" + path + "' (" + SourceOf(path) + "): ";
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status::Unavailable(
          at + "no such socket. Either reftd is not running on this node (start it: "
          "systemctl start reftd; systemctl status reftd says whether it runs) or it serves "
          "another path: " + kPointAt);
    case ECONNREFUSED:
      return Status::Unavailable(
          at + "connection refused: the socket exists but no reftd listens on it (a reftd that "
          "stopped or crashed left it behind). Start reftd (systemctl start reftd; systemctl "
          "status reftd says why it stopped), or, if a reftd serves another path, " + kPointAt);
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(
          at + std::strerror(err) + ": uid " + std::to_string(::geteuid()) +
          " may not open reftd's socket. An operator of the node lets it in with "
          "local.allowed_uids (or its group with local.allowed_gids) in reftd.toml");
    default:
      return Status::Unavailable(at + std::strerror(err) +
                                 ". Check that reftd runs (systemctl status reftd) and serves "
                                 "this path, or " + kPointAt);
  }
}

Result<local_proto::Frame> CallReftdOnce(const std::string& socket_path,
                                         std::chrono::milliseconds timeout,
                                         local_proto::MessageType type,
                                         const std::vector<uint8_t>& payload,
                                         local_proto::MessageType reply_type, const char* what) {
  const std::string path = ReftdSocketPath(socket_path);
  REFT_ASSIGN_OR_RETURN(UniqueFd sock, ConnectReftd(path));
  Channel channel(std::move(sock), static_cast<int>(std::min<int64_t>(timeout.count(), INT32_MAX)));
  auto reply = channel.Call(type, payload, reply_type);
  // A reftd older than this libreft does not know the request (the frame's type).
  if (!reply.ok() && reply.status().code() == StatusCode::kProtocol &&
      reply.status().message().find("unknown message type") != std::string::npos) {
    return reply.status().WithContext("reftd at '" + path + "' does not answer " + what +
                                      " (older than libreft?)");
  }
  return reply;
}

}  // namespace reft::client
