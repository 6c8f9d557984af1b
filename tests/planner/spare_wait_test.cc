// The spare wait as a decision (reft/planner/spare_wait.h): a table of situations, the choice
// and the words of its reason.
#include <catch2/catch.hpp>

#include <optional>
#include <string>

#include "reft/planner/spare_wait.h"

using namespace reft::planner::spare_wait;

namespace {

constexpr double kHour = 3.6e6;
// D̂ of 10 h per node over 3 live nodes, the planner's default MTBF.
constexpr double kInterval = 10 * kHour / 3;

Situation NoSpare(double wait_ms, std::optional<Option> now, std::optional<Option> on_spare = Option{200, 65000},
                  double interval = kInterval) {
  Situation s;
  s.spare_nodes = 0;
  s.lost_nodes = 1;
  s.wait_ms = wait_ms;
  s.expected_interval_ms = interval;
  s.on_spare = on_spare;
  s.best_now = now;
  s.best_now_policy = now ? "reconfigure" : "";
  return s;
}

struct Row {
  const char* name;
  Situation situation;
  bool wait;
  const char* reason;  // a fragment of the reason
};

}  // namespace

TEST_CASE("spare wait: waits only when restarting on a spare after the wait trains more", "[spare_wait]") {
  Situation spare = NoSpare(30000, Option{260, 60000});
  spare.spare_nodes = 1;
  const Row rows[] = {
      {"a spare for every lost node: no wait, however much better it is", spare, false,
       "a spare is registered for every lost node (1 for 1)"},
      {"spare_wait_ms 0: no wait", NoSpare(0, Option{260, 60000}), false, "planner.spare_wait_ms is 0"},
      // 0.1 % slower than the running layout: the 30 s wait and the 5 s snapshot load cost more.
      {"reconfiguring nearly as good decides now", NoSpare(30000, Option{200.2, 60000}), false,
       "no spare; reconfigure now loses less than waiting 30 s for one"},
      {"reconfiguring 30 % slower waits", NoSpare(30000, Option{260, 60000}), true,
       "no spare; waiting up to 30 s: restart on a spare would train"},
      // The same 30 % with a failure expected every 100 s: waiting 30 s and a 65 s transition
      // leave 5 s of training, reconfiguring 40 s.
      {"a short expected interval decides now even when reconfiguring is slower",
       NoSpare(30000, Option{260, 60000}, Option{200, 65000}, 100000), false, "loses less than waiting"},
      {"nothing goes on without a spare (exit): waits", NoSpare(30000, std::nullopt), true,
       "even after the wait, and without one the job exits"},
      {"restart on a spare unknown: waits as before the rule", NoSpare(30000, Option{200, 60000}, std::nullopt), true,
       "not weighed"},
      // Exit, and not even a spare would train before the expected next failure: no wait.
      {"exit with a horizon shorter than the wait: decides now", NoSpare(30000, std::nullopt, Option{200, 65000}, 90000),
       false, "exit now loses less than waiting 30 s for one: over the expected 90 s to the next failure it trains "
              "nothing (the job exits without a spare)"},
      // 100 steps either way: a tie decides now.
      {"a tie decides now", NoSpare(1000, Option{100, 1000}, Option{100, 0}, 11000), false, "loses less"},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    const Choice c = Choose(row.situation);
    INFO(c.reason);
    CHECK(c.wait == row.wait);
    CHECK_THAT(c.reason, Catch::Contains(row.reason));
  }
}

TEST_CASE("spare wait: the steps compared are the formula's", "[spare_wait]") {
  // waiting: (D̂ − 65 s − 30 s) / 200 ms; now: (D̂ − 60 s) / 260 ms.
  const Choice c = Choose(NoSpare(30000, Option{260, 60000}));
  CHECK(c.steps_waiting == Approx((kInterval - 95000) / 200));
  CHECK(c.steps_now == Approx((kInterval - 60000) / 260));
  // Both sides in words: the horizon, each side's steps and timing.
  CHECK_THAT(c.reason, Catch::Contains("over the expected 3.33 h to the next failure"));
  CHECK_THAT(c.reason, Catch::Contains("59525 steps (step 200 ms after a 65 s transition)"));
  CHECK_THAT(c.reason, Catch::Contains("reconfigure now 45923 steps (step 260 ms after a 60 s transition)"));
  // Nothing trains past the next failure: a horizon shorter than the transition counts 0.
  CHECK(StepsBeforeNextFailure(Option{200, 65000}, 60000, 0) == 0);
  CHECK(StepsBeforeNextFailure(Option{0, 0}, 60000, 0) == 0);
  CHECK(StepsBeforeNextFailure(Option{100, 1000}, 11000, 5000) == Approx(50));
}

TEST_CASE("spare wait: durations in words", "[spare_wait]") {
  CHECK(DurationText(850) == "850 ms");
  CHECK(DurationText(30000) == "30 s");
  CHECK(DurationText(65000) == "65 s");
  CHECK(DurationText(750000) == "12.5 min");
  CHECK(DurationText(kInterval) == "3.33 h");
}
