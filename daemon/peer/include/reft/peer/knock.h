#pragma once
/// \file knock.h
/// \brief Whether a node's reftd process still holds its port: one TCP connect to the address
/// it registered, nothing sent.
///
/// A suspicion (a trainer's collective failed, a peer call found the node unreachable) is not a
/// death. What tells a dead process from a slow or stopped one without waiting for its lease is
/// the kernel: a port nobody listens on refuses the connection at once (the process is gone); a
/// stopped or overloaded process still has its listening socket, whose backlog accepts the
/// connection; a host that is cut off answers nothing. Only the first is evidence of a death;
/// the other two are left to the lease. Used by the suspicion path (coord::SuspectedNodes).

#include <chrono>
#include <string>

namespace reft::peer {

enum class KnockAnswer {
  kRefused,   ///< nothing listens on the port: the process that registered it is gone
  kAccepted,  ///< the port accepted a connection: some process holds it
  kNoAnswer,  ///< neither within the timeout, or the address could not be used
};
const char* KnockAnswerName(KnockAnswer answer);  ///< "refused", "accepted", "no answer"

/// \brief Knocks at `address` (a gRPC target, "host:port" or "[v6]:port").
KnockAnswer Knock(const std::string& address, std::chrono::milliseconds timeout);

}  // namespace reft::peer
