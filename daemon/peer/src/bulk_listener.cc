#include "reft/peer/bulk_listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "bulk_wire.h"

namespace reft::peer {

namespace {

// The textual IP of a socket address; IPv4-mapped IPv6 reads as IPv4.
std::string IpOf(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&in6)) {
      ::inet_ntop(AF_INET, &in6.s6_addr[12], buf, sizeof buf);
    } else {
      ::inet_ntop(AF_INET6, &in6, buf, sizeof buf);
    }
  }
  return buf;
}

}  // namespace

std::string PeerIpOf(const std::string& grpc_peer) {
  const bool v4 = grpc_peer.rfind("ipv4:", 0) == 0;
  if (!v4 && grpc_peer.rfind("ipv6:", 0) != 0) return "";
  // gRPC writes "[::1]:port"; newer releases URL-escape it ("%5B::1%5D:port", a zone as
  // "%25eth0"): decode every %XX first.
  std::string a;
  const std::string in = grpc_peer.substr(5);
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
      a.push_back(static_cast<char>(std::stoi(in.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      a.push_back(in[i]);
    }
  }
  std::string host = HostOfTarget(a);
  if (v4) return host;
  // The accepted socket's address carries no zone ("fe80::1%eth0" arrives as "fe80::1").
  if (auto zone = host.find('%'); zone != std::string::npos) host.resize(zone);
  in6_addr in6{};
  if (::inet_pton(AF_INET6, host.c_str(), &in6) != 1) return host;
  sockaddr_storage ss{};
  auto& s6 = reinterpret_cast<sockaddr_in6&>(ss);
  s6.sin6_family = AF_INET6;
  s6.sin6_addr = in6;
  return IpOf(ss);
}

namespace {

// A listening socket on `host`:`port`: the first address of `host` that can be bound. "::"
// takes IPv4 callers too, whatever net.ipv6.bindv6only says (gRPC binds it the same way).
Result<UniqueFd> ListenOn(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Status::Unavailable(host + ": " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
  Status last = Status::Unavailable(host + ": no address");
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         ai->ai_protocol));
    if (!fd.valid()) {
      last = Status::FromErrno(errno, "bulk listen socket");
      continue;
    }
    int one = 1, zero = 0;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::listen(fd.get(), SOMAXCONN) == 0) {
      return fd;
    }
    last = Status::Unavailable(std::strerror(errno));
  }
  return last;
}

}  // namespace

Result<std::unique_ptr<BulkListener>> BulkListener::Listen(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("bulk listen address '" + address + "' has no port");
  }
  const std::string host = HostOfTarget(address);
  const std::string port = address.substr(colon + 1);
  // No host (":7070"): every address, of both families where the node has IPv6.
  auto fd = host.empty() ? ListenOn("::", port) : ListenOn(host, port);
  if (!fd.ok() && host.empty()) fd = ListenOn("0.0.0.0", port);
  if (!fd.ok()) {
    return Status::Unavailable("cannot listen for bulk transfers on " + address + ": " +
                               fd.status().message());
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd->get(), reinterpret_cast<sockaddr*>(&bound), &len);
  const uint16_t bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                        : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Status::FromErrno(errno, "eventfd");
  return std::unique_ptr<BulkListener>(
      new BulkListener(std::move(*fd), std::move(wake), bound_port));
}

BulkListener::BulkListener(UniqueFd listener, UniqueFd wake, uint16_t port)
    : listener_(std::move(listener)), wake_(std::move(wake)), port_(port) {
  thread_ = reft::Thread("reft-bulk", [this] { AcceptLoop(); });
}

BulkListener::~BulkListener() {
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

Result<BulkListener::Ticket> BulkListener::Expect(const std::string& peer_ip) {
  // A ticket bound to no address would be good from anywhere (docs/security.md).
  if (peer_ip.empty()) {
    return Status::InvalidArgument("a bulk ticket needs the caller's IP address");
  }
  for (;;) {
    // Drawn outside the lock: getrandom may block until the kernel's pool is ready.
    Ticket t{};
    for (size_t got = 0; got < t.size();) {
      ssize_t n = ::getrandom(t.data() + got, t.size() - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (n < 0 && errno != EINTR) {
        return Status::FromErrno(errno, "getrandom for a bulk ticket");
      }
    }
    MutexLock lock(mu_);
    if (expected_.count(t) != 0) continue;  // 2^-128: draw again
    expected_[t].peer_ip = peer_ip;
    return t;
  }
}

size_t BulkListener::tickets_outstanding() const {
  MutexLock lock(mu_);
  return expected_.size();
}

Result<UniqueFd> BulkListener::Claim(const Ticket& ticket,
                                     std::chrono::steady_clock::time_point deadline,
                                     const std::function<bool()>& cancelled) {
  MutexLock lock(mu_);
  for (;;) {
    auto it = expected_.find(ticket);
    if (it == expected_.end()) return Status::Internal("bulk ticket was never issued");
    if (it->second.connection.valid()) {
      UniqueFd fd = std::move(it->second.connection);
      expected_.erase(it);
      return fd;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline || (cancelled && cancelled())) {
      expected_.erase(it);
      return now >= deadline
                 ? Status::Timeout("the caller did not open its bulk connection in time")
                 : Status::Cancelled("the call ended before its bulk connection arrived");
    }
    // Wakes when any ticket's connection arrives; every 100 ms to ask `cancelled`.
    lock.WaitUntil(arrived_, std::min(deadline, now + std::chrono::milliseconds(100)),
                   [&]() REFT_REQUIRES(mu_) {
                     auto i = expected_.find(ticket);
                     return i == expected_.end() || i->second.connection.valid();
                   });
  }
}

// Counted always; logged at the Authorizer's rate (a flood must not flood the log).
void BulkListener::Refuse(const std::string& peer_ip, const char* why) {
  refused_.fetch_add(1);
  if (uint64_t unlogged = 0; log_limiter_.Admit(&unlogged)) {
    if (unlogged > 0) {
      spdlog::warn("bulk port: refused a connection from {}: {} ({} earlier refusals not logged)",
                   peer_ip, why, unlogged);
    } else {
      spdlog::warn("bulk port: refused a connection from {}: {}", peer_ip, why);
    }
  }
}

bool BulkListener::AcceptSome(std::map<int, Pending>* pending) {
  // At most a pending table's worth per pass, so that a flood cannot starve the tickets
  // already waiting (nor the stop flag).
  for (size_t accepted = 0; accepted < kMaxPendingConnections; ++accepted) {
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    UniqueFd fd(::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from), &len,
                          SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      // Out of descriptors (EMFILE, ENFILE, ENOBUFS): the listener stays readable, so say to
      // leave it alone for a while instead of spinning on it.
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
             errno == ECONNABORTED || errno == EPROTO;
    }
    std::string ip = IpOf(from);
    if (pending->size() >= kMaxPendingConnections) {
      Refuse(ip, "too many connections without a ticket");
      continue;
    }
    Pending p;
    p.peer_ip = std::move(ip);
    p.deadline = std::chrono::steady_clock::now() + kTicketWait;
    int key = fd.get();
    p.fd = std::move(fd);
    pending->emplace(key, std::move(p));
  }
  return true;
}

bool BulkListener::ReadTicket(Pending* p) {
  ssize_t n = ::recv(p->fd.get(), p->received.data() + p->have, p->received.size() - p->have, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) {
    Refuse(p->peer_ip, "closed before sending a whole ticket");
    return true;
  }
  p->have += static_cast<size_t>(n);
  if (p->have < p->received.size()) return false;
  {
    MutexLock lock(mu_);
    auto it = expected_.find(p->received);
    if (it != expected_.end() && !it->second.connection.valid() &&
        it->second.peer_ip == p->peer_ip) {
      it->second.connection = std::move(p->fd);
      served_.fetch_add(1);
      arrived_.notify_all();
      return true;
    }
  }
  Refuse(p->peer_ip, "unknown, spent or foreign ticket");
  return true;
}

void BulkListener::AcceptLoop() {
  std::map<int, Pending> pending;
  std::vector<pollfd> fds;
  auto listen_again = std::chrono::steady_clock::time_point();  // after an accept error
  while (!stop_) {
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    // A negative fd is left out by poll: the listener rests after an accept error.
    const bool listening = std::chrono::steady_clock::now() >= listen_again;
    fds.push_back({listening ? listener_.get() : -1, POLLIN, 0});
    for (const auto& [fd, p] : pending) fds.push_back({fd, POLLIN, 0});
    int r = ::poll(fds.data(), fds.size(), 100);
    if (r < 0 && errno != EINTR) {
      spdlog::error("bulk port: poll failed: {}", std::strerror(errno));
      return;
    }
    if (stop_) break;
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = pending.find(fds[i].fd);
      if (ReadTicket(&it->second)) pending.erase(it);
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto it = pending.begin(); it != pending.end();) {
      if (now < it->second.deadline) {
        ++it;
        continue;
      }
      Refuse(it->second.peer_ip, "no ticket in time");
      it = pending.erase(it);
    }
    if (fds[1].revents != 0 && !AcceptSome(&pending)) {
      spdlog::warn("bulk port: accepting failed: {}; resting 100 ms", std::strerror(errno));
      listen_again = now + std::chrono::milliseconds(100);
    }
  }
}

}  // namespace reft::peer
