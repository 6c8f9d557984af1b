#include "bulk_wire.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace reft::peer {

namespace {

// Poll slice: how often a blocked send asks whether its call was cancelled.
constexpr int kPollSliceMs = 100;

void Put64(uint64_t v, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Milliseconds to wait in one poll: up to the deadline, at most one slice; -1 when past.
int PollMs(Deadline deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= Deadline::duration::zero()) return -1;
  return static_cast<int>(
      std::min<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), kPollSliceMs));
}

// Waits until `fd` is ready for `events`, the deadline passes (Timeout) or `cancelled()`.
Status WaitReady(int fd, short events, Deadline deadline, const std::function<bool()>* cancelled,
                 const char* what) {
  for (;;) {
    int ms = PollMs(deadline);
    if (ms < 0) return Status::Timeout(std::string("bulk connection: ") + what + " timed out");
    if (cancelled != nullptr && *cancelled && (*cancelled)()) {
      return Status::Cancelled("bulk connection: the call was cancelled");
    }
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms);
    if (r > 0) return Status::OK();  // ready, or an error the next I/O call reports
    if (r < 0 && errno != EINTR) return Status::FromErrno(errno, "poll on a bulk connection");
  }
}

}  // namespace

void EncodeBulkChunkHeader(const BulkChunkHeader& h, uint8_t* out) {
  Put64(h.offset, out);
  Put64(h.length, out + 8);
  Put64(h.checksum, out + 16);
}

BulkChunkHeader DecodeBulkChunkHeader(const uint8_t* in) {
  return BulkChunkHeader{Get64(in), Get64(in + 8), Get64(in + 16)};
}

Status SendAll(int fd, iovec* iov, int iovcnt, Deadline deadline,
               const std::function<bool()>& cancelled) {
  while (iovcnt > 0) {
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t n = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        REFT_RETURN_NOT_OK(WaitReady(fd, POLLOUT, deadline, &cancelled, "sending"));
        continue;
      }
      return Status::Unavailable(std::string("bulk connection: the receiver went away (") +
                                 std::strerror(errno) + ")");
    }
    auto sent = static_cast<size_t>(n);
    while (iovcnt > 0 && sent >= iov->iov_len) {
      sent -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + sent;
      iov->iov_len -= sent;
    }
  }
  return Status::OK();
}

Status RecvAll(int fd, uint8_t* dst, size_t size, Deadline deadline, ChecksumStream* hash) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::recv(fd, dst + got, size - got, 0);
    if (n > 0) {
      if (hash != nullptr) hash->Update(dst + got, static_cast<size_t>(n));
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return Status::Unavailable("bulk connection closed by the holder after " +
                                 std::to_string(got) + " of " + std::to_string(size) + " bytes");
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status::Unavailable(std::string("bulk connection: ") + std::strerror(errno));
    }
    REFT_RETURN_NOT_OK(WaitReady(fd, POLLIN, deadline, nullptr, "receiving"));
  }
  return Status::OK();
}

std::string HostOfTarget(const std::string& grpc_address) {
  std::string a = grpc_address;
  if (a.rfind("unix:", 0) == 0) return "";
  if (a.rfind("dns://", 0) == 0) {
    // "dns://[authority]/host:port": the authority is the DNS server, not the target.
    auto slash = a.find('/', 6);
    a = slash == std::string::npos ? a.substr(6) : a.substr(slash + 1);
  }
  for (const char* scheme : {"dns:", "ipv4:", "ipv6:"}) {
    if (a.rfind(scheme, 0) == 0) {
      a = a.substr(std::strlen(scheme));
      break;
    }
  }
  a = a.substr(0, a.find(','));  // the first of a list of addresses
  if (!a.empty() && a[0] == '[') {
    auto close = a.find(']');
    return close == std::string::npos ? a.substr(1) : a.substr(1, close - 1);
  }
  auto colon = a.rfind(':');
  return colon == std::string::npos ? a : a.substr(0, colon);
}

Result<UniqueFd> ConnectBulk(const std::string& host, uint16_t port, Deadline deadline,
                             bool* refused) {
  if (refused != nullptr) *refused = false;
  const std::string where = "bulk port " + std::to_string(port) + " of " + host;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  // An address needs no resolver (every fetch connects anew: no DNS query per piece); a host
  // name does, and its lookup is not bounded by the deadline. The caller passes the IP its
  // FetchRegion call reached whenever it has one.
  in6_addr literal{};
  if (::inet_pton(AF_INET, host.c_str(), &literal) == 1 ||
      ::inet_pton(AF_INET6, host.c_str(), &literal) == 1) {
    hints.ai_flags = AI_NUMERICHOST;
  }
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    return Status::Unavailable(where + ": " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
  Status last = Status::Unavailable(where + ": no address");
  bool all_refused = found != nullptr;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         ai->ai_protocol));
    if (!fd.valid()) {
      all_refused = false;
      last = Status::FromErrno(errno, "socket for " + where);
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      all_refused = all_refused && errno == ECONNREFUSED;
      last = Status::Unavailable(where + ": " + std::strerror(errno));
      continue;
    }
    Status ready = WaitReady(fd.get(), POLLOUT, deadline, nullptr, "connecting");
    if (!ready.ok()) return ready.WithContext(where);
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      all_refused = all_refused && err == ECONNREFUSED;
      last = Status::Unavailable(where + ": " + std::strerror(err));
      continue;
    }
    return fd;
  }
  if (refused != nullptr) *refused = all_refused;
  return last;
}

}  // namespace reft::peer
