// When a published decision may still be taken back (plan_finality.h): a loss decision nobody
// acted on is withdrawn when its node comes back; a confirmed one, one whose transfer moved a
// layer, one a trainer restored under, a growth, or one of an older generation or step stays.
#include <catch2/catch.hpp>

#include "plan_finality.h"

using reft::replan::FinalBecause;
using reft::replan::DecidesLossOf;
using reft::coord::PublishedPlan;

namespace {

// The planner's rule: a loss decision of the job as it is now that is not final is withdrawn.
bool LossMayBeWithdrawn(const PublishedPlan& p, uint64_t generation, int64_t step, bool restored) {
  return DecidesLossOf(p, generation, step) && FinalBecause(p, restored).empty();
}

PublishedPlan Waiting() {
  PublishedPlan p;
  p.generation = 2;
  p.step = 29;
  p.basis = "n1";
  p.state = "waiting_for_spare";
  p.version = 7;
  return p;
}

}  // namespace

TEST_CASE("a loss decision nobody acted on is withdrawn in every open state") {
  for (const char* state : {"waiting_for_spare", "awaiting_confirmation", "undecided", "decided"}) {
    PublishedPlan p = Waiting();
    p.state = state;
    INFO(state);
    CHECK(FinalBecause(p, false).empty());
    CHECK(LossMayBeWithdrawn(p, 2, 29, false));
  }
}

TEST_CASE("a decision someone acted on stands") {
  PublishedPlan confirmed = Waiting();
  confirmed.state = "confirmed";
  CHECK(FinalBecause(confirmed, false) == "an operator confirmed it");
  CHECK_FALSE(LossMayBeWithdrawn(confirmed, 2, 29, false));

  PublishedPlan restored = Waiting();
  restored.state = "decided";
  CHECK(FinalBecause(restored, true) == "a trainer restored under it");
  CHECK_FALSE(LossMayBeWithdrawn(restored, 2, 29, true));

  PublishedPlan moved = Waiting();
  moved.state = "decided";
  moved.transfer_json = R"({"state":"running","bytes_staged":0,"hosts":[{"node":"n2","layers":[1],"state":"done"},
                           {"node":"n3","layers":[2],"state":"pending"}],"moves":[]})";
  CHECK(FinalBecause(moved, false) == "its transfer plan moved layers");
  CHECK_FALSE(LossMayBeWithdrawn(moved, 2, 29, false));

  // A transfer that started but staged nothing yet has moved no layer.
  PublishedPlan started = moved;
  started.transfer_json = R"({"state":"running","bytes_staged":0,"hosts":[{"node":"n2","layers":[1],"state":"pending"}],"moves":[]})";
  CHECK(FinalBecause(started, false).empty());
  CHECK(LossMayBeWithdrawn(started, 2, 29, false));
}

TEST_CASE("only a loss decision of the job's current generation and step is withdrawn") {
  const PublishedPlan p = Waiting();
  CHECK_FALSE(LossMayBeWithdrawn(p, 3, 29, false));  // the job fell back since: void anyway
  CHECK_FALSE(LossMayBeWithdrawn(p, 2, 30, false));  // the job went on past it
  PublishedPlan growth = p;
  growth.basis = "+n4";
  growth.state = "decided";
  CHECK_FALSE(LossMayBeWithdrawn(growth, 2, 29, false));
  PublishedPlan withdrawn = p;
  withdrawn.basis = "n1";
  withdrawn.state = "no_loss";
  CHECK_FALSE(LossMayBeWithdrawn(withdrawn, 2, 29, false));
}
