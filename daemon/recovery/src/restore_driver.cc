/// \file restore_driver.cc
/// \brief The job-wide restore decision (docs/recovery.md "One decision per job"): every rank
/// of a job restores the same step from the same source, or fails alike. Each attempt takes
/// one snapshot of the job's agreement state, asks the rule (restore_decider.h) what to do,
/// gathers what the rule asks for, proposes, and follows the decision that stands; when the
/// job moves under it, the next attempt takes a new snapshot.

#include "reft/coord/restore_source.h"
#include "reft/peer/peer_node.h"
#include "reft/recovery/reft_load.h"
#include "restore_call.h"

namespace reft::recovery {

namespace {

constexpr int kMaxAttempts = 6;  // the generation, the commit or the decision moved under us
// Per attempt: the memory check, the tier scan, a proposal or fall-back, a loss while
// following memory, the tier scan and fall-back it leads to.
constexpr int kMaxVerdicts = 8;

local::RestoredState Nothing(const std::string& detail, int64_t epoch) {
  local::RestoredState none;
  none.step = -1;
  none.source = coord::RestoreSourceName(coord::RestoreSource::kMemory);
  none.detail = detail;
  none.epoch = epoch;
  return none;
}

}  // namespace

Result<local::RestoredState> ReftLoad::RestoreConsistent(const protect::SlotMeta& meta,
                                                         RestoreStats* stats,
                                                         const ProgressCallback& progress,
                                                         const local::RestoreRequest& request) {
  REFT_RETURN_NOT_OK(meta.Plan().status().WithContext("the restoring trainer's declaration"));
  RestoreCall call{meta,
                   stats,
                   progress,
                   request,
                   agreement_,
                   peer_->membership().node_id(),
                   std::chrono::steady_clock::now()};
  Status retry_reason;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    REFT_ASSIGN_OR_RETURN(AgreementSnapshot snapshot, ReadAgreement(call));
    REFT_ASSIGN_OR_RETURN(Attempt done, RunAttempt(call, std::move(snapshot)));
    if (done.state) return std::move(*done.state);
    if (!done.retry.ok()) retry_reason = done.retry;
  }
  return Status::Unavailable("the commit state of " + JobName(meta.job) +
                             " kept changing during " + std::to_string(kMaxAttempts) +
                             " restore attempts; try again" +
                             (retry_reason.ok() ? "" : " (last: " + retry_reason.ToString() + ")"));
}

Result<AgreementSnapshot> ReftLoad::ReadAgreement(RestoreCall& call) {
  Status sync = call.agreement.timeline->SyncNow(call.job(), options_.sync_timeout);
  if (!sync.ok()) {
    if (call.agreement.restores->HasConsensus()) {
      // Without the control plane no rank can know what the others restore.
      return Status::Unavailable("cannot reach the control plane to agree on the restore of " +
                                 JobName(call.job()) + ": " + sync.message());
    }
    call.stats->warnings.push_back(sync.message());
  }
  AgreementSnapshot s;
  s.job = call.job();
  s.self = call.self;
  s.layout = call.meta.layout.ToString();
  s.gen = call.agreement.timeline->Generation(call.job());
  REFT_ASSIGN_OR_RETURN(s.recorded, call.agreement.restores->Decision(call.job()));
  return s;
}

Result<ReftLoad::Attempt> ReftLoad::RunAttempt(RestoreCall& call, AgreementSnapshot snapshot) {
  using Kind = RestoreVerdict::Kind;
  for (int i = 0; i < kMaxVerdicts; ++i) {
    RestoreVerdict verdict = DecideRestore(snapshot);
    std::optional<LocatedStep> located;
    switch (verdict.kind) {
      case Kind::kCheckMemory: {
        REFT_ASSIGN_OR_RETURN(snapshot.memory, CheckMemory(call, snapshot));
        continue;
      }
      case Kind::kScanTier:
        snapshot.tier = ScanTier(call, snapshot);
        continue;
      case Kind::kRetry:
        return Attempt{std::nullopt, verdict.error};
      case Kind::kFail:
        return verdict.error;
      case Kind::kStartFresh:
        return Attempt{StartFresh(call, verdict), Status::OK()};
      case Kind::kFollow:
        if (verdict.decision.decided_by != call.self) {
          call.Agreed("followed " + DescribeDecision(verdict.decision));
        }
        located = LocatedStep{verdict.decision, verdict.decision.version, false, "",
                              call.KnownFor(verdict.decision)};
        break;
      case Kind::kPropose: {
        const int64_t expected = snapshot.recorded ? snapshot.recorded->version : 0;
        REFT_ASSIGN_OR_RETURN(located, Propose(call, verdict.decision, expected));
        break;
      }
      case Kind::kFallBack:
        located = StartFallBack(call, verdict.fall_back);
        break;
    }
    if (!located) return Attempt{};  // another rank decided first, or the job moved
    REFT_ASSIGN_OR_RETURN(Followed followed, Follow(call, std::move(*located)));
    if (!followed.lost) return Attempt{std::move(followed.state), Status::OK()};
    // Bytes lost since the decision (a second failure during the restore): the job falls back,
    // which moves it to a new generation; ranks that restored the step already are fenced by it
    // (their next snapshot belongs to an abandoned generation and is dropped).
    snapshot.memory = MemoryVerdict{MemoryVerdict::Kind::kLost, *followed.lost};
  }
  return Attempt{std::nullopt, Status::Unavailable("no decision after " +
                                                   std::to_string(kMaxVerdicts) + " verdicts")};
}

local::RestoredState ReftLoad::StartFresh(RestoreCall& call, const RestoreVerdict& verdict) {
  call.stats->warnings.push_back(verdict.warning);
  call.stats->detail = verdict.detail;
  return Nothing(verdict.detail, call.agreement.ledger->RestoreEpoch(call.job()));
}

Result<ReftLoad::Followed> ReftLoad::Follow(RestoreCall& call, LocatedStep step) {
  switch (step.decision.source) {
    case coord::RestoreSource::kNone: {
      call.stats->detail = step.decision.detail.empty()
                               ? "nothing committed for " + JobName(call.job())
                               : step.decision.detail;
      return Followed{Nothing(call.stats->detail, step.epoch), std::nullopt};
    }
    case coord::RestoreSource::kTier:
      return FollowTier(call, std::move(step));
    case coord::RestoreSource::kMemory:
      return FollowMemory(call, std::move(step));
  }
  return Status::Internal("unknown restore source");
}

}  // namespace reft::recovery
