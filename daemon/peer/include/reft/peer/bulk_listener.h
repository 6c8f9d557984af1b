#pragma once
/// \file bulk_listener.h
/// \brief The bulk data plane of FetchRegion: a plain TCP listener that gives each
/// authenticated FetchRegion call a connection of its own, so region bytes go from the slot's
/// shared memory into the socket and from the socket straight into the caller's destination.
/// The gRPC stream copies every byte once more on the receiver (out of gRPC's receive
/// buffers), which on a CPU-bound node is a third of the transfer's cost (docs/peer.md "Bulk
/// transport").
///
/// No one gets bytes without a FetchRegion call that passed the Authorizer: the call is
/// answered with a ticket (128 random bits, one use, bound to the caller's IP address), and a
/// connection is served only after it presented a ticket that is still expected. Everything
/// else (an unknown ticket, a ticket from another address, silence past kTicketWait, more
/// than kMaxPendingConnections half-open connections) is closed without a byte sent and
/// counted in refused(). The bytes themselves travel in clear text: reftd offers this
/// transport only where the gRPC channel is plain text too (docs/security.md).
///
/// Thread-safe. One thread accepts and reads tickets; the FetchRegion handler thread that
/// claimed a connection sends on it.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "reft/log_limiter.h"
#include "reft/mutex.h"
#include "reft/result.h"
#include "reft/thread.h"
#include "reft/unique_fd.h"

namespace reft::peer {

class BulkListener {
 public:
  using Ticket = std::array<uint8_t, 16>;
  /// How long an accepted connection has to present its ticket.
  static constexpr std::chrono::milliseconds kTicketWait{2000};
  /// Connections accepted but not yet matched to a ticket; more are closed at once.
  static constexpr size_t kMaxPendingConnections = 64;

  /// Listens on `address` ("host:port", "[v6]:port"; port 0 = any free port) and starts the
  /// accepting thread. Unavailable when the address cannot be bound.
  static Result<std::unique_ptr<BulkListener>> Listen(const std::string& address);
  ~BulkListener();
  BulkListener(const BulkListener&) = delete;
  BulkListener& operator=(const BulkListener&) = delete;

  /// The bound port (the one chosen when the address asked for port 0).
  uint16_t port() const { return port_; }

  /// \brief A fresh ticket that one connection from `peer_ip` (as PeerIpOf writes it) may
  /// present. Claim() must follow, also on every error path: it is what forgets the ticket.
  /// InvalidArgument for "" (a caller whose address is unknown must not get a ticket good from
  /// anywhere: its bytes stay on gRPC); otherwise an error only when the kernel has no random
  /// bytes to give.
  Result<Ticket> Expect(const std::string& peer_ip);

  /// \brief The connection that presented `ticket`, waiting until `deadline` or until
  /// `cancelled()` says the call went away (asked every 100 ms). Timeout / Cancelled
  /// otherwise. The ticket is spent either way. The socket is non-blocking.
  Result<UniqueFd> Claim(const Ticket& ticket, std::chrono::steady_clock::time_point deadline,
                         const std::function<bool()>& cancelled);

  /// Connections closed without being served (bad or late ticket, wrong address, overflow).
  uint64_t refused() const { return refused_.load(); }
  /// Connections that presented an expected ticket (handed to their FetchRegion call).
  uint64_t served() const { return served_.load(); }
  /// Tickets issued and not yet spent (each FetchRegion call on the bulk transport holds one
  /// until it has its connection or gives up).
  size_t tickets_outstanding() const;

 private:
  struct Expected {
    std::string peer_ip;
    UniqueFd connection;  ///< set by the accepting thread when the ticket arrives
  };
  struct Pending {
    UniqueFd fd;
    std::string peer_ip;
    std::chrono::steady_clock::time_point deadline;
    Ticket received{};
    size_t have = 0;
  };

  BulkListener(UniqueFd listener, UniqueFd wake, uint16_t port);
  void AcceptLoop();
  /// Accepts what is waiting (a bounded number); false after an error that leaves the
  /// listener readable (out of descriptors).
  bool AcceptSome(std::map<int, Pending>* pending);
  /// Reads what `p` sent; true when `p` is finished with (matched or refused).
  bool ReadTicket(Pending* p);
  void Refuse(const std::string& peer_ip, const char* why);

  UniqueFd listener_;
  UniqueFd wake_;  ///< eventfd: stops AcceptLoop
  const uint16_t port_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> served_{0};
  mutable Mutex mu_;
  std::condition_variable arrived_;
  std::map<Ticket, Expected> expected_ REFT_GUARDED_BY(mu_);
  LogLimiter log_limiter_;  ///< ten refusals logged at once, then one a second
  reft::Thread thread_;
};

/// \brief The IP address of a gRPC peer string ("ipv4:10.0.0.2:5000", "ipv6:[::1]:5000",
/// with or without URL-escaped brackets) in the form the listener compares; "" when the
/// string names no IP address (a Unix socket). IPv4-mapped IPv6 addresses read as IPv4.
std::string PeerIpOf(const std::string& grpc_peer);

}  // namespace reft::peer
