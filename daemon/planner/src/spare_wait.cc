// The spare wait as a decision (spare_wait.h): wait for a spare only when restarting on one
// after the wait trains more steps before the expected next failure than going on now.
#include "reft/planner/spare_wait.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ordering.h"

namespace reft::planner::spare_wait {

namespace {

std::string Steps(double steps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", std::floor(steps));
  return buf;
}

// "(step 200 ms after a 65 s transition)"
std::string Timing(const Option& o) {
  return "(step " + DurationText(o.step_ms) + " after a " + DurationText(o.transition_ms) + " transition)";
}

}  // namespace

std::string DurationText(double ms) {
  char buf[48];
  const double a = std::fabs(ms);
  if (a < 1000) {
    std::snprintf(buf, sizeof buf, "%.3g ms", ms);
  } else if (a < 120e3) {
    std::snprintf(buf, sizeof buf, "%.3g s", ms / 1e3);
  } else if (a < 2 * 3.6e6) {
    std::snprintf(buf, sizeof buf, "%.3g min", ms / 6e4);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g h", ms / 3.6e6);
  }
  return buf;
}

double StepsBeforeNextFailure(const Option& option, double expected_interval_ms, double wait_ms) {
  if (!(option.step_ms > 0)) return 0;
  return std::max(0.0, expected_interval_ms - option.transition_ms - wait_ms) / option.step_ms;
}

Choice Choose(const Situation& s) {
  Choice c;
  if (s.spare_nodes >= s.lost_nodes) {
    c.reason = "a spare is registered for every lost node (" + std::to_string(s.spare_nodes) + " for " +
               std::to_string(s.lost_nodes) + "): deciding without waiting";
    return c;
  }
  const std::string wait = DurationText(s.wait_ms);
  if (!(s.wait_ms > 0)) {
    c.reason = "no spare; planner.spare_wait_ms is 0: deciding without waiting for one";
    return c;
  }
  if (!s.on_spare) {
    c.wait = true;
    c.reason = "no spare; waiting up to " + wait +
               ": the decision does not say what a restart on a spare would do, so the wait is not weighed";
    return c;
  }
  const double horizon = s.expected_interval_ms;
  c.steps_waiting = StepsBeforeNextFailure(*s.on_spare, horizon, s.wait_ms);
  c.steps_now = s.best_now ? StepsBeforeNextFailure(*s.best_now, horizon, 0) : 0;
  const std::string over = "over the expected " + DurationText(horizon) + " to the next failure";
  const std::string spare_side = Steps(c.steps_waiting) + " steps " + Timing(*s.on_spare);
  const std::string now_policy = s.best_now ? s.best_now_policy : "exit";
  const std::string now_side =
      s.best_now ? Steps(c.steps_now) + " steps " + Timing(*s.best_now) : "nothing (the job exits without a spare)";
  // Steps are times divided by times: the planner's tie tolerance applies (a tie decides now).
  c.wait = Longer(c.steps_waiting, c.steps_now);
  if (c.wait) {
    c.reason = "no spare; waiting up to " + wait + ": restart on a spare would train " + spare_side + " " + over +
               " even after the wait, " + (s.best_now ? now_policy + " now " + now_side : "and without one the job exits");
  } else {
    c.reason = "no spare; " + now_policy + " now loses less than waiting " + wait + " for one: " + over +
               " it trains " + now_side + ", waiting and restarting on a spare " + spare_side;
  }
  return c;
}

}  // namespace reft::planner::spare_wait
