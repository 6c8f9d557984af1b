#pragma once
/// \file protection.h
/// \brief The protection string of DESIGN.md §4: "none" | "arcR" | "aec" | "rsR" joined with
/// "+" (e.g. "arc1+aec"). Parsed by the client (early, clear errors) and again by the daemon.

#include <string>

#include "reft/result.h"

namespace reft::local_proto {

struct ProtectionSpec {
  int arc = 0;       ///< ARC(r): replicas of the next r shards; 0 = off
  bool aec = false;  ///< XOR parity
  int rs = 0;        ///< RS(r) parity shards; 0 = off
  bool none() const { return arc == 0 && !aec && rs == 0; }
  std::string ToString() const;  ///< canonical form, e.g. "arc1+aec", or "none"
};

/// \brief InvalidArgument naming the bad term for anything but the grammar above (each scheme
/// at most once, R in 1..16, "none" only alone).
Result<ProtectionSpec> ParseProtection(const std::string& text);

}  // namespace reft::local_proto
