#pragma once
/// \file scheme.h
/// \brief A protection configuration: which schemes run together in a sharding group.

#include <string>

#include "reft/result.h"

namespace reft::protect {

/// \brief Schemes enabled together, e.g. "arc1+aec" or "rs2+aor". Plain value type.
///
/// Tolerances of a combination are computed by the recovery analysis, never summed
/// (ARC(+1) + AEC does not survive two adjacent failures: docs/protection.md).
struct Scheme {
  int arc = 0;       ///< ARC(r): member d also stores shards d+1..d+r of its SG
  bool aec = false;  ///< rotated sub-chunk XOR parity (docs/protection.md "Schemes")
  int rs = 0;        ///< RS(r): rotated Cauchy Reed–Solomon stripes, any r failures
  bool aor =
      false;  ///< ZeRO-1 optimizer shards replicated by optimizer replay (protect/aor)

  /// \brief Parses "none", "arc<r>", "aec", "rs<r>", "aor" joined with '+' ("arc" = "arc1"),
  /// ignoring case and spaces; r in 1..16, each component once, "none" only alone, at most 64
  /// bytes. InvalidArgument naming the offending term otherwise (also for an empty string).
  static Result<Scheme> Parse(const std::string& text);
  /// \brief Canonical text, components in the order arc, aec, rs, aor ("none" when empty).
  std::string ToString() const;
  /// \brief OK when a sharding group of `dp` members can hold the scheme (arcR and rsR need
  /// dp >= R+1, aec dp >= 2); else InvalidArgument naming each component that does not fit
  /// and the fix: the strongest scheme this dp allows, or the dp the scheme needs. Checked at
  /// hello (CheckHello) and again when a slot's geometry is built.
  Status CheckFits(int dp) const;
  bool empty() const { return arc == 0 && !aec && rs == 0 && !aor; }
  bool operator==(const Scheme& o) const {
    return arc == o.arc && aec == o.aec && rs == o.rs && aor == o.aor;
  }
};

}  // namespace reft::protect
