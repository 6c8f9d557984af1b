// DecideRestore, the rule of the job-wide restore decision: one row per case the restore
// driver meets — a decision to follow, a fact to gather, a decision to propose, a fall-back to
// start, a fresh start, a job-wide error, or a retry because the job moved.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "reft/recovery/restore_decider.h"

using namespace reft;
using namespace reft::recovery;

namespace {

using Kind = RestoreVerdict::Kind;
using coord::RestoreSource;

constexpr uint64_t kGen = 2;

// Job "j" in generation 2, committed step 5 unless a row changes it.
AgreementSnapshot Base() {
  AgreementSnapshot s;
  s.job = "j";
  s.self = "n1";
  s.layout = "dp2-tp1-pp1";
  s.gen.generation = kGen;
  s.gen.newest_committed = 5;
  s.gen.persist_floor = 1;
  return s;
}

coord::RestoreDecision Recorded(uint64_t generation, int64_t step, RestoreSource source) {
  return coord::RestoreDecision{generation, step, source, "n2", "their detail", 41};
}

MemoryVerdict Memory(MemoryVerdict::Kind kind) { return MemoryVerdict{kind, "step 5: summary"}; }

// A readable tier whose newest complete step at or before S is `p` (none: nullopt).
TierVerdict Tier(std::optional<int64_t> p, int64_t newest_dir = 6) {
  TierVerdict t;
  t.dir = "/tier";
  t.newest_complete = p;
  t.newest_dir = newest_dir;
  return t;
}

struct Row {
  std::string name;
  std::function<void(AgreementSnapshot&)> given;
  Kind kind;
  int64_t step = -1;                         ///< decision step (follow, propose) or base step
  RestoreSource source = RestoreSource::kNone;  ///< follow, propose
  StatusCode code = StatusCode::kOk;          ///< fail, retry
  std::string mentions;                      ///< a fragment of the detail, reason or error
};

std::vector<Row> Table() {
  using MK = MemoryVerdict::Kind;
  return {
      {"a decision recorded for (g, S) is followed",
       [](auto& s) { s.recorded = Recorded(kGen, 5, RestoreSource::kMemory); }, Kind::kFollow, 5,
       RestoreSource::kMemory},
      {"a recorded tier decision for (g, S) is followed",
       [](auto& s) { s.recorded = Recorded(kGen, 5, RestoreSource::kTier); }, Kind::kFollow, 5,
       RestoreSource::kTier},
      {"'nothing to restore' is followed while nothing is committed",
       [](auto& s) {
         s.gen.newest_committed.reset();
         s.recorded = Recorded(kGen, -1, RestoreSource::kNone);
       },
       Kind::kFollow, -1, RestoreSource::kNone},
      {"'nothing to restore' does not stand once a step committed",
       [](auto& s) { s.recorded = Recorded(kGen, 5, RestoreSource::kNone); }, Kind::kCheckMemory},
      {"a decision of an older generation is not followed",
       [](auto& s) { s.recorded = Recorded(kGen - 1, 5, RestoreSource::kMemory); },
       Kind::kCheckMemory},
      {"a decision for an older step is not followed",
       [](auto& s) { s.recorded = Recorded(kGen, 4, RestoreSource::kMemory); }, Kind::kCheckMemory},
      {"without a decision, memory is checked first", [](auto&) {}, Kind::kCheckMemory},
      {"memory can rebuild S: propose memory S with the check's summary",
       [](auto& s) { s.memory = Memory(MK::kRecoverable); }, Kind::kPropose, 5,
       RestoreSource::kMemory, StatusCode::kOk, "step 5: summary"},
      {"the job fell back to S and committed nothing since: propose tier S",
       [](auto& s) {
         s.gen.base_step = 5;
         s.gen.reason = "memory cannot rebuild step 9: lost";
       },
       Kind::kPropose, 5, RestoreSource::kTier, StatusCode::kOk,
       "memory cannot rebuild step 9: lost"},
      {"a holder is only silent: every rank gets Unavailable",
       [](auto& s) { s.memory = Memory(MK::kUndecided); }, Kind::kFail, -1, RestoreSource::kNone,
       StatusCode::kUnavailable, "cannot decide the restore of job 'j'"},
      {"the check saw the job move: retry", [](auto& s) { s.memory = Memory(MK::kMoved); },
       Kind::kRetry, -1, RestoreSource::kNone, StatusCode::kBusy},
      {"memory cannot rebuild S: the tier is scanned",
       [](auto& s) { s.memory = Memory(MK::kLost); }, Kind::kScanTier},
      {"memory cannot rebuild S: fall back to the newest complete P <= S",
       [](auto& s) {
         s.memory = Memory(MK::kLost);
         s.tier = Tier(3);
       },
       Kind::kFallBack, 3, RestoreSource::kNone, StatusCode::kOk,
       "memory cannot rebuild step 5: step 5: summary"},
      {"bytes lost while following memory: fall back, not follow again",
       [](auto& s) {
         s.recorded = Recorded(kGen, 5, RestoreSource::kMemory);
         s.memory = MemoryVerdict{MK::kLost, "shard 1 lost during the restore"};
         s.tier = Tier(4);
       },
       Kind::kFallBack, 4, RestoreSource::kNone, StatusCode::kOk, "shard 1 lost during the restore"},
      {"a step committed before the tier scan: retry",
       [](auto& s) {
         s.memory = Memory(MK::kLost);
         s.tier = Tier(3);
         s.tier->committed_moved = true;
       },
       Kind::kRetry, -1, RestoreSource::kNone, StatusCode::kBusy},
      {"memory cannot rebuild S and the tier cannot be read: Lost naming both",
       [](auto& s) {
         s.memory = Memory(MK::kLost);
         s.tier = TierVerdict{};
         s.tier->unreadable = "no persistent tier is configured";
       },
       Kind::kFail, -1, RestoreSource::kNone, StatusCode::kLost,
       "step 5: summary; no persistent tier is configured"},
      {"memory cannot rebuild S and the tier has no step at or before S: Lost",
       [](auto& s) {
         s.memory = Memory(MK::kLost);
         s.tier = Tier(std::nullopt);
       },
       Kind::kFail, -1, RestoreSource::kNone, StatusCode::kLost,
       "has no complete step of job 'j' for layout dp2-tp1-pp1 at or before step 5"},
      {"the persisted step belongs to another owner: PermissionDenied, no generation",
       [](auto& s) {
         s.memory = Memory(MK::kLost);
         s.tier = Tier(3);
         s.tier->owner = Status::PermissionDenied("step 3 belongs to another owner");
       },
       Kind::kFail, -1, RestoreSource::kNone, StatusCode::kPermissionDenied, "another owner"},
      {"nothing committed: the tier is scanned", [](auto& s) { s.gen.newest_committed.reset(); },
       Kind::kScanTier},
      {"nothing committed, the tier holds P: generation g+1 from P",
       [](auto& s) {
         s.gen.newest_committed.reset();
         s.tier = Tier(7, 7);
       },
       Kind::kFallBack, 7, RestoreSource::kNone, StatusCode::kOk,
       "nothing of job 'j' is committed in memory"},
      {"nothing committed and nothing persisted: propose 'nothing to restore'",
       [](auto& s) {
         s.gen.newest_committed.reset();
         s.tier = Tier(std::nullopt, -1);
       },
       Kind::kPropose, -1, RestoreSource::kNone, StatusCode::kOk,
       "nothing committed for job 'j' in memory, and nothing persisted in /tier"},
      {"nothing committed and the tier cannot be read: start fresh with a warning",
       [](auto& s) {
         s.gen.newest_committed.reset();
         s.tier = TierVerdict{};
         s.tier->unreadable = "the persistent tier /tier cannot be read: IO error";
       },
       Kind::kStartFresh, -1, RestoreSource::kNone, StatusCode::kOk,
       "nothing of job 'j' is committed in memory; the persistent tier /tier cannot be read"},
  };
}

// The text a row's `mentions` is looked for in.
std::string Said(const RestoreVerdict& v) {
  switch (v.kind) {
    case Kind::kFollow:
    case Kind::kPropose:
      return v.decision.detail;
    case Kind::kFallBack:
      return v.fall_back.reason;
    case Kind::kStartFresh:
      return v.detail + " | " + v.warning;
    default:
      return v.error.ToString();
  }
}

}  // namespace

TEST_CASE("restore decider: one row per case of the job-wide decision", "[restore_decider]") {
  for (const Row& row : Table()) {
    SECTION(row.name) {
      AgreementSnapshot s = Base();
      row.given(s);
      const RestoreVerdict v = DecideRestore(s);
      INFO(row.name << ": " << Said(v));
      REQUIRE(v.kind == row.kind);
      if (v.kind == Kind::kFollow || v.kind == Kind::kPropose) {
        CHECK(v.decision.step == row.step);
        CHECK(v.decision.source == row.source);
        CHECK(v.decision.generation == kGen);
      }
      if (v.kind == Kind::kFallBack) CHECK(v.fall_back.base_step == row.step);
      if (v.kind == Kind::kFail || v.kind == Kind::kRetry) CHECK(v.error.code() == row.code);
      if (!row.mentions.empty()) CHECK(Said(v).find(row.mentions) != std::string::npos);
    }
  }
}

TEST_CASE("restore decider: a proposal is this node's, against the snapshot's generation",
          "[restore_decider]") {
  AgreementSnapshot s = Base();
  s.memory = MemoryVerdict{MemoryVerdict::Kind::kRecoverable, "ok"};
  const RestoreVerdict v = DecideRestore(s);
  REQUIRE(v.kind == Kind::kPropose);
  CHECK(v.decision.decided_by == "n1");
  CHECK(v.decision.version == 0);
}

TEST_CASE("restore decider: the fall-back ends the snapshot's generation above every old step",
          "[restore_decider]") {
  AgreementSnapshot s = Base();
  s.memory = MemoryVerdict{MemoryVerdict::Kind::kLost, "lost"};
  SECTION("the newest step directory is the floor") {
    s.tier = Tier(3, 9);
    const RestoreVerdict v = DecideRestore(s);
    REQUIRE(v.kind == Kind::kFallBack);
    CHECK(v.fall_back.from == kGen);
    CHECK(v.fall_back.seen_committed == std::optional<int64_t>(5));
    CHECK(v.fall_back.persist_floor == 9);
  }
  SECTION("the committed step is the floor") {
    s.tier = Tier(3, 4);
    CHECK(DecideRestore(s).fall_back.persist_floor == 5);
  }
  SECTION("the previous floor is the floor") {
    s.gen.persist_floor = 12;
    s.tier = Tier(3, 4);
    CHECK(DecideRestore(s).fall_back.persist_floor == 12);
  }
}

TEST_CASE("restore source: one spelling on the wire, unknown names refused", "[restore_decider]") {
  for (RestoreSource s : {RestoreSource::kNone, RestoreSource::kMemory, RestoreSource::kTier}) {
    auto back = coord::ParseRestoreSource(coord::RestoreSourceName(s));
    REQUIRE(back.ok());
    CHECK(*back == s);
  }
  CHECK(std::string(coord::RestoreSourceName(RestoreSource::kTier)) == "tier");
  auto bad = coord::ParseRestoreSource("disk");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("'disk'") != std::string::npos);
}
