/// \file restore_decider.cc
/// \brief The rule of the job-wide restore decision (restore_decider.h).

#include "reft/recovery/restore_decider.h"

#include <algorithm>

namespace reft::recovery {

namespace {

using Kind = RestoreVerdict::Kind;
using coord::RestoreSource;

std::string JobStr(const std::string& job) { return "job '" + job + "'"; }

RestoreVerdict Verdict(Kind kind) {
  RestoreVerdict v;
  v.kind = kind;
  return v;
}

RestoreVerdict Fail(Status error) {
  RestoreVerdict v = Verdict(Kind::kFail);
  v.error = std::move(error);
  return v;
}

RestoreVerdict Propose(const AgreementSnapshot& s, int64_t step, RestoreSource source,
                       std::string detail) {
  RestoreVerdict v = Verdict(Kind::kPropose);
  v.decision = coord::RestoreDecision{s.gen.generation, step, source, s.self, std::move(detail), 0};
  return v;
}

// A decision recorded for the snapshot's (generation, committed step) stands; "nothing to
// restore" stands only while nothing is committed.
bool Current(const AgreementSnapshot& s) {
  const int64_t committed = s.gen.newest_committed.value_or(-1);
  return s.recorded && s.recorded->generation == s.gen.generation &&
         s.recorded->step == committed &&
         (s.recorded->source != RestoreSource::kNone || committed < 0);
}

// Memory cannot serve S (`reason`): generation g+1 from the newest complete persisted step
// P <= S, "nothing to restore" when neither memory nor the tier has anything, or the job-wide
// error.
RestoreVerdict FallBack(const AgreementSnapshot& s, const std::string& reason) {
  if (!s.tier) return Verdict(Kind::kScanTier);
  const TierVerdict& tier = *s.tier;
  const std::optional<int64_t> memory_step = s.gen.newest_committed;
  if (tier.committed_moved) {
    RestoreVerdict v = Verdict(Kind::kRetry);
    v.error = Status::Busy("a newer step of " + JobStr(s.job) + " committed before the fall-back");
    return v;
  }
  if (!tier.unreadable.empty()) {
    // With a committed step an unreadable tier is Lost: never a silent restart. Memory holding
    // nothing of the job: it starts fresh (a missing mount must not stop new jobs).
    if (memory_step) return Fail(Status::Lost(reason + "; " + tier.unreadable));
    RestoreVerdict v = Verdict(Kind::kStartFresh);
    v.detail = reason + "; " + tier.unreadable;
    v.warning = reason + ", and " + tier.unreadable + ": starting without a restore";
    return v;
  }
  if (!tier.newest_complete) {
    if (!memory_step) {
      return Propose(s, -1, RestoreSource::kNone,
                     "nothing committed for " + JobStr(s.job) +
                         " in memory, and nothing persisted in " + tier.dir);
    }
    return Fail(Status::Lost(reason + "; and the persistent tier " + tier.dir +
                             " has no complete step of " + JobStr(s.job) + " for layout " +
                             s.layout + " at or before step " + std::to_string(*memory_step)));
  }
  // No generation starts from a step the job's trainers may not have.
  if (!tier.owner.ok()) return Fail(tier.owner);
  // Steps up to the floor may have (partial) directories written by the abandoned timeline:
  // the new generation never persists them, so no step can mix files of the two.
  const int64_t floor = std::max({s.gen.persist_floor, memory_step.value_or(-1), tier.newest_dir});
  const std::string why =
      memory_step ? "memory cannot rebuild step " + std::to_string(*memory_step) + ": " + reason
                  : reason;
  RestoreVerdict v = Verdict(Kind::kFallBack);
  v.fall_back =
      coord::GenerationStart{s.gen.generation, memory_step, *tier.newest_complete, floor, why};
  return v;
}

}  // namespace

RestoreVerdict DecideRestore(const AgreementSnapshot& s) {
  const int64_t committed = s.gen.newest_committed.value_or(-1);
  if (s.memory) {
    switch (s.memory->kind) {
      case MemoryVerdict::Kind::kLost:  // found by the check, or while following memory
        return FallBack(s, s.memory->summary);
      case MemoryVerdict::Kind::kMoved: {
        RestoreVerdict v = Verdict(Kind::kRetry);
        v.error = Status::Busy(s.memory->summary);
        return v;
      }
      case MemoryVerdict::Kind::kUndecided:
        // Holders alive but silent past the agreement timeout: the bytes may well exist.
        return Fail(Status::Unavailable("cannot decide the restore of " + JobStr(s.job) + ": " +
                                        s.memory->summary));
      case MemoryVerdict::Kind::kRecoverable:
        break;
    }
  }
  if (Current(s)) {
    RestoreVerdict v = Verdict(Kind::kFollow);
    v.decision = *s.recorded;
    return v;
  }
  if (committed < 0) return FallBack(s, "nothing of " + JobStr(s.job) + " is committed in memory");
  if (s.gen.base_step && committed == *s.gen.base_step) {
    // The job fell back to `base` and committed nothing since.
    return Propose(s, committed, RestoreSource::kTier, s.gen.reason);
  }
  if (!s.memory) return Verdict(Kind::kCheckMemory);
  return Propose(s, committed, RestoreSource::kMemory, s.memory->summary);
}

std::string DescribeDecision(const coord::RestoreDecision& d) {
  const std::string what =
      d.source == RestoreSource::kNone
          ? std::string("nothing to restore")
          : "step " + std::to_string(d.step) + " from " +
                (d.source == RestoreSource::kTier ? "the persistent tier" : "memory");
  return what + " (generation " + std::to_string(d.generation) + ", decided by node '" +
         d.decided_by + "')";
}

}  // namespace reft::recovery
