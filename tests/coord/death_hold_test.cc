// Deaths held while the control plane is suspect: the rule (ControlPlaneSuspicion) by a
// table of signals, and the confirmation (HeldDeaths) with scripted registrations and probes.
// The system test with real reftd and a stopped etcd is tests/system/test_control_plane_suspect.py.
#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "control_plane_suspicion.h"
#include "held_deaths.h"
#include "reft/mutex.h"

using namespace std::chrono_literals;
using reft::coord::ControlPlaneSuspicion;
using reft::coord::HeldDeaths;
using reft::coord::ProbeAnswer;
using Clock = std::chrono::steady_clock;

namespace {
ControlPlaneSuspicion Judge(double fraction = 0.05) {
  return ControlPlaneSuspicion(reft::coord::SuspicionOptions{fraction});
}
}  // namespace

TEST_CASE("a lone lease lapse on a healthy control plane is a death at once", "[death_hold]") {
  auto s = Judge();
  s.SetWindow(5000ms);
  const auto t0 = Clock::now();
  s.Answer(t0, 20ms, true);  // fast answers are no signal
  CHECK_FALSE(s.Lapsed(t0 + 1s, 7));
  CHECK_FALSE(s.Current(t0 + 1s).has_value());
  // Another lone lapse more than a window later: still a death at once.
  CHECK_FALSE(s.Lapsed(t0 + 7s, 6));
}

TEST_CASE("lapses in bulk within one window make the control plane suspect", "[death_hold]") {
  struct Row {
    size_t registered;  // nodes still registered at the lapse
    int lapses;         // lapses 100 ms apart
    bool held_last;     // whether the last one is held
  };
  // 8 nodes: a lone lapse is a death, the second one within the window is suspect (the floor
  // of two); 1,000 nodes at 5 %: 50 lapses are still deaths, the 51st is held.
  const std::vector<Row> rows = {{7, 1, false}, {6, 2, true}, {999, 1, false},
                                 {951, 50, false}, {950, 51, true}};
  for (const Row& r : rows) {
    CAPTURE(r.registered, r.lapses);
    auto s = Judge();
    s.SetWindow(5000ms);
    const auto t0 = Clock::now();
    bool held = false;
    for (int i = 0; i < r.lapses; ++i) {
      held = s.Lapsed(t0 + i * 100ms, r.registered + static_cast<size_t>(r.lapses - 1 - i));
    }
    CHECK(held == r.held_last);
  }
}

TEST_CASE("lapses further apart than a window are not a mass expiry", "[death_hold]") {
  auto s = Judge();
  s.SetWindow(5000ms);
  const auto t0 = Clock::now();
  CHECK_FALSE(s.Lapsed(t0, 7));
  CHECK_FALSE(s.Lapsed(t0 + 6s, 6));
}

TEST_CASE("a slow or silent etcd and a leader change are signals for one window", "[death_hold]") {
  auto s = Judge();
  s.SetWindow(5000ms);
  const auto t0 = Clock::now();
  SECTION("slow: over a fifth of the window") {
    s.Answer(t0, 900ms, true);
    CHECK_FALSE(s.Current(t0).has_value());
    s.Answer(t0, 1100ms, true);
    REQUIRE(s.Current(t0).has_value());
    CHECK_THAT(s.Current(t0)->reason, Catch::Contains("slow"));
  }
  SECTION("no answer") {
    s.Answer(t0, 3000ms, false);
    REQUIRE(s.Current(t0 + 4s).has_value());
    CHECK_THAT(s.Current(t0)->reason, Catch::Contains("did not answer"));
    // Held from the stall: the first lapse after it is held too.
    CHECK(s.Lapsed(t0 + 4s, 7));
    // One window after the last signal the episode is over.
    CHECK_FALSE(s.Current(t0 + 5001ms).has_value());
  }
  SECTION("leader change") {
    s.LeaderTerm(t0, 3);
    CHECK_FALSE(s.Current(t0).has_value());  // the first term seen is no change
    s.LeaderTerm(t0 + 1s, 3);
    CHECK_FALSE(s.Current(t0 + 1s).has_value());
    s.LeaderTerm(t0 + 2s, 4);
    REQUIRE(s.Current(t0 + 2s).has_value());
    CHECK_THAT(s.Current(t0 + 2s)->reason, Catch::Contains("changed leader"));
  }
  SECTION("an episode keeps its first signal's time and reason while signals go on") {
    s.Answer(t0, 3000ms, false);
    s.Answer(t0 + 4s, 1500ms, true);
    s.Answer(t0 + 8s, 1500ms, true);
    REQUIRE(s.Current(t0 + 12s).has_value());
    CHECK(s.Current(t0 + 12s)->since == t0);
    CHECK_THAT(s.Current(t0 + 12s)->reason, Catch::Contains("did not answer"));
  }
}

namespace {
// Scripted hooks: what etcd and the probes say about each node, and who was declared.
struct Script {
  reft::Mutex mu;
  std::map<std::string, bool> registered REFT_GUARDED_BY(mu);
  std::map<std::string, ProbeAnswer> probe REFT_GUARDED_BY(mu);
  bool suspect REFT_GUARDED_BY(mu) = true;
  std::vector<std::string> declared REFT_GUARDED_BY(mu);

  HeldDeaths::Hooks Hooks() {
    HeldDeaths::Hooks h;
    h.registered = [this](const std::string& n) -> std::optional<bool> {
      reft::MutexLock lock(mu);
      return registered[n];
    };
    h.probe = [this](const std::string& n) {
      reft::MutexLock lock(mu);
      auto it = probe.find(n);
      return it == probe.end() ? ProbeAnswer::kNoAnswer : it->second;
    };
    h.suspect = [this] {
      reft::MutexLock lock(mu);
      return suspect;
    };
    h.window = [] { return std::chrono::milliseconds(0); };
    h.declare = [this](const std::string& n) {
      reft::MutexLock lock(mu);
      declared.push_back(n);
    };
    return h;
  }
  std::vector<std::string> Declared() {
    reft::MutexLock lock(mu);
    return declared;
  }
};

// Probes only when the test says so (CheckOnce): the thread's period is an hour.
reft::coord::HeldDeathsOptions Manual() { return {std::chrono::hours(1), 2, 16}; }
}  // namespace

TEST_CASE("a held node that registers again is released, never declared", "[death_hold]") {
  Script script;
  HeldDeaths held(Manual(), script.Hooks());
  {
    reft::MutexLock lock(script.mu);
    script.probe["n1"] = ProbeAnswer::kAnswered;
  }
  held.Hold("n1");
  CHECK(held.IsHeld("n1"));
  held.CheckOnce();
  CHECK(held.IsHeld("n1"));  // alive, not registered yet, etcd still suspect
  {
    reft::MutexLock lock(script.mu);
    script.registered["n1"] = true;
  }
  held.CheckOnce();
  CHECK(held.IsHeld("n1"));  // etcd is not asked while it is suspect
  {
    reft::MutexLock lock(script.mu);
    script.suspect = false;
  }
  held.CheckOnce();
  CHECK_FALSE(held.IsHeld("n1"));
  CHECK(script.Declared().empty());
  CHECK(held.stats().released_total == 1);
}

TEST_CASE("a held node that does not answer its probes is declared dead", "[death_hold]") {
  Script script;
  HeldDeaths held(Manual(), script.Hooks());
  held.Hold("n2");
  held.CheckOnce();
  CHECK(held.IsHeld("n2"));  // one unanswered probe is not enough
  CHECK(script.Declared().empty());
  held.CheckOnce();
  CHECK_FALSE(held.IsHeld("n2"));
  CHECK(script.Declared() == std::vector<std::string>{"n2"});
  CHECK(held.stats().declared_total == 1);
}

TEST_CASE("an answer between two silent probes starts the count again", "[death_hold]") {
  Script script;
  HeldDeaths held(Manual(), script.Hooks());
  held.Hold("n3");
  held.CheckOnce();  // silent
  {
    reft::MutexLock lock(script.mu);
    script.probe["n3"] = ProbeAnswer::kAnswered;
  }
  held.CheckOnce();  // answered
  {
    reft::MutexLock lock(script.mu);
    script.probe.erase("n3");
  }
  held.CheckOnce();  // silent once more: still held
  CHECK(held.IsHeld("n3"));
  held.CheckOnce();
  CHECK_FALSE(held.IsHeld("n3"));
}

TEST_CASE("a live node cut off from etcd alone is declared once etcd is trusted again",
          "[death_hold]") {
  Script script;
  HeldDeaths held(Manual(), script.Hooks());  // window 0: trusted for two windows at once
  {
    reft::MutexLock lock(script.mu);
    script.probe["n4"] = ProbeAnswer::kAnswered;
  }
  held.Hold("n4");
  held.CheckOnce();
  held.CheckOnce();
  CHECK(held.IsHeld("n4"));  // suspect: held however long
  {
    reft::MutexLock lock(script.mu);
    script.suspect = false;
  }
  held.CheckOnce();  // trusted from now
  held.CheckOnce();  // and still not registered
  CHECK_FALSE(held.IsHeld("n4"));
  CHECK(script.Declared() == std::vector<std::string>{"n4"});
}

TEST_CASE("the hold thread probes by itself", "[death_hold]") {
  Script script;
  HeldDeaths held({std::chrono::milliseconds(10), 2, 16}, script.Hooks());
  held.Hold("n5");
  for (int i = 0; i < 500 && held.IsHeld("n5"); ++i) std::this_thread::sleep_for(10ms);
  CHECK(script.Declared() == std::vector<std::string>{"n5"});
}

TEST_CASE("a mass expiry is looked at a few nodes per round, the longest unchecked first",
          "[death_hold]") {
  Script script;
  HeldDeaths held({std::chrono::hours(1), 2, 2}, script.Hooks());  // two looks per round
  for (const char* n : {"a", "b", "c", "d"}) held.Hold(n);
  held.CheckOnce();  // a, b: one silent probe each
  held.CheckOnce();  // c, d
  CHECK(script.Declared().empty());
  held.CheckOnce();  // a, b again: declared
  CHECK(script.Declared() == std::vector<std::string>{"a", "b"});
  held.CheckOnce();
  CHECK(script.Declared() == std::vector<std::string>{"a", "b", "c", "d"});
}
