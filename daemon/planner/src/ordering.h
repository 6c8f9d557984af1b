#pragma once
/// \file ordering.h
/// \brief How the planner compares times, so that every choice is deterministic and does not
/// flip on rounding. Times are doubles; two times count as equal when they differ by less than
/// kTimeTieTolerance relative (the same layer times summed in another order differ by a few ulps).
///
/// Tie rules used throughout the planner:
///  * slowest stage k*: the LATEST stage whose F+B ties the maximum. With tied stages and faster
///    ones between them, T1 + (N − S + k* − 1)·slow + T3 is larger (closer to the 1F1B makespan,
///    never above it) for the later stage; Oobleck's own planner breaks ties the same way.
///  * candidate plans (stage splits, pipeline-length multisets, instantiation vectors): a
///    candidate replaces the incumbent only when its estimate is shorter beyond the tolerance, so
///    the first one met in the search's documented order wins a tie.

#include <algorithm>
#include <cmath>

namespace reft::planner {

inline constexpr double kTimeTieTolerance = 1e-9;

/// \brief `a` is longer than `b` beyond the tie tolerance.
inline bool Longer(double a, double b) {
  return a - b > kTimeTieTolerance * std::max(std::fabs(a), std::fabs(b));
}
/// \brief `a` is shorter than `b` beyond the tie tolerance (`b` may be +inf).
inline bool Shorter(double a, double b) { return std::isinf(b) ? !std::isinf(a) : Longer(b, a); }

}  // namespace reft::planner
