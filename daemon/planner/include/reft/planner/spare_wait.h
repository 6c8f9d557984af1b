#pragma once
/// \file spare_wait.h
/// \brief Whether the job's coordinator waits for a spare node after a loss, or decides now
/// without one (docs/planner.md "The spare wait"). A pure function of the decision's numbers.
///
/// With a spare registered for every lost node the job restarts on them at once. Without, it can
/// wait up to `planner.spare_wait_ms` for one — no training meanwhile, then the running layout
/// again (restart_on_spare) — or go on now with the best candidate that needs no spare. Both are
/// weighed over the horizon Odyssey's score already uses, the expected time to the next failure
/// D̂, in training steps (every candidate runs the same global batch per step, so a step of one
/// layout is as much work as a step of another):
///
///   waiting:     max(0, D̂ − t_spare − W) / s_spare
///   now:         max(0, D̂ − t_best) / s_best        (0 when nothing goes on: exit)
///
/// with W the wait, s and t a candidate's step and transition times. It waits only when waiting
/// trains more steps (beyond the planner's tie tolerance). The waiting side assumes a spare comes
/// by the end of the wait — the longest wait that still ends on a spare — and no probability of
/// one coming is modelled: a wait that ends without one costs W on top of deciding now.

#include <optional>
#include <string>

namespace reft::planner::spare_wait {

/// \brief A way for the job to go on: its step time and transition time (ms).
struct Option {
  double step_ms = 0;
  double transition_ms = 0;
};

/// \brief What the rule weighs, read from a decision (online::Decide's document).
struct Situation {
  int spare_nodes = 0;  ///< live nodes outside the job
  int lost_nodes = 0;
  double wait_ms = 0;               ///< planner.spare_wait_ms
  double expected_interval_ms = 0;  ///< D̂, the expected time to the next failure
  /// restart_on_spare as if a spare were registered for every lost node (the running layout's
  /// step, a restart and a snapshot load); none: the decision does not say.
  std::optional<Option> on_spare;
  /// The best candidate that goes on without a spare and its policy; none: the job exits.
  std::optional<Option> best_now;
  std::string best_now_policy;
};

/// \brief The rule's answer: wait or not, why in words, and the steps it compared.
struct Choice {
  bool wait = false;
  std::string reason;
  double steps_waiting = 0;  ///< steps trained before the next failure when waiting
  double steps_now = 0;      ///< ... when deciding now
};

/// \brief Steps a candidate trains before the expected next failure after a wait:
/// max(0, D̂ − transition − wait) / step (0 for a step time that is not positive).
double StepsBeforeNextFailure(const Option& option, double expected_interval_ms, double wait_ms);

/// \brief The spare wait as a decision:
///  * a spare for every lost node: no wait (deciding now);
///  * `wait_ms` ≤ 0: no wait (waiting is switched off);
///  * restart_on_spare's numbers unknown: wait (the rule cannot weigh it; a spare keeps the job
///    in its layout);
///  * otherwise wait only when the steps of waiting exceed the steps of deciding now.
Choice Choose(const Situation& situation);

/// \brief A duration in words: "850 ms", "30 s", "12.5 min", "3.3 h".
std::string DurationText(double ms);

}  // namespace reft::planner::spare_wait
