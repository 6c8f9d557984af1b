#include "reft/local_proto/socket.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <string>

namespace reft::local_proto {
namespace {
constexpr size_t kMaxFdsAnyFrame = 253;  // SCM_MAX_FD
}

Status SendFrame(int sock, MessageType type, uint32_t request_id,
                 const std::vector<uint8_t>& payload, const std::vector<int>& fds) {
  if (fds.size() > kMaxFdsAnyFrame) return Status::InvalidArgument("too many fds for one frame");
  uint8_t header[kFrameHeaderSize];
  FrameHeader h;
  h.type = type;
  h.request_id = request_id;
  h.payload_length = static_cast<uint32_t>(payload.size());
  EncodeHeader(h, header);
  iovec iov[2];
  iov[0].iov_base = header;
  iov[0].iov_len = kFrameHeaderSize;
  iov[1].iov_base = const_cast<uint8_t*>(payload.data());
  iov[1].iov_len = payload.size();
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = payload.empty() ? 1 : 2;
  std::vector<char> control;
  if (!fds.empty()) {
    control.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return Status::OK();
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
      return Status::Unavailable(std::string("local channel closed by peer (") +
                                 std::strerror(errno) + ")");
    }
    return Status::FromErrno(errno, std::string("sending ") + MessageTypeName(type) + " frame");
  }
}

Result<Frame> RecvFrame(int sock, const Limits& limits, int timeout_ms) {
  if (timeout_ms >= 0) {
    pollfd p{sock, POLLIN, 0};
    int r;
    do {
      r = ::poll(&p, 1, timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return Status::FromErrno(errno, "poll on local channel");
    if (r == 0) return Status::Timeout("no reply on the local channel within " +
                                       std::to_string(timeout_ms) + " ms");
  }
  // One extra byte detects an oversized datagram even without MSG_TRUNC support.
  std::vector<uint8_t> buf(kFrameHeaderSize + limits.max_payload_bytes + 1);
  const size_t max_fds = limits.max_fds_per_frame;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * (max_fds == 0 ? 1 : max_fds)));
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == ECONNRESET) return Status::Unavailable("local channel reset by peer");
    return Status::FromErrno(errno, "receiving a local frame");
  }
  Frame frame;
  // Take ownership of every fd first so that a rejected frame leaks none.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        frame.fds.emplace_back(fd);
      }
    }
  }
  if (n == 0 && frame.fds.empty()) return Status::Unavailable("local channel closed by peer");
  if (msg.msg_flags & MSG_CTRUNC) {
    return Status::Protocol("frame carried more than " + std::to_string(max_fds) +
                            " fds (ancillary data truncated)");
  }
  if ((msg.msg_flags & MSG_TRUNC) || static_cast<size_t>(n) == buf.size()) {
    return Status::Protocol("oversized frame: payload exceeds the limit of " +
                            std::to_string(limits.max_payload_bytes) + " bytes");
  }
  if (frame.fds.size() > max_fds) {
    return Status::Protocol("frame carried " + std::to_string(frame.fds.size()) +
                            " fds, limit " + std::to_string(max_fds));
  }
  size_t size = static_cast<size_t>(n);
  size_t payload = size >= kFrameHeaderSize ? size - kFrameHeaderSize : 0;
  REFT_ASSIGN_OR_RETURN(frame.header, DecodeHeader(buf.data(), size, payload, limits));
  frame.payload.assign(buf.begin() + kFrameHeaderSize, buf.begin() + size);
  return frame;
}

Result<UniqueFd> ConnectSeqpacket(const std::string& path, int* connect_errno) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("socket path '" + path + "' is longer than " +
                                   std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  int r;
  do {
    r = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    const int err = errno;
    if (connect_errno != nullptr) *connect_errno = err;
    return Status::Unavailable("cannot connect to reftd at '" + path + "': " +
                               std::strerror(err) + " (is reftd running with --socket " + path +
                               "?)");
  }
  return fd;
}

}  // namespace reft::local_proto
