/// \file reft_load_fallback.cc
/// \brief The job-wide restore decision (docs/recovery.md "One decision per job"): every rank
/// of a job restores the same step from the same source, or fails alike. The first restore
/// that finds no decision for the job's current (generation, committed step) decides — memory
/// when every sharding group can rebuild the step, else the persistent tier (a new generation),
/// else "nothing to restore" — and records the decision with a compare-and-swap in the control
/// plane; every other rank reads and follows it.

#include <algorithm>

#include "reft/local/job_ownership.h"
#include "reft/peer/peer_node.h"
#include "reft/recovery/reft_load.h"
#include "reft/recovery/reshape_tier.h"
#include "reft/recovery/tier_restore.h"

namespace reft::recovery {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxAttempts = 6;  // the generation, the commit or the decision moved under us

std::string JobStr(const std::string& job) { return "job '" + job + "'"; }

local::RestoredState Nothing(const std::string& detail, int64_t epoch) {
  local::RestoredState none;
  none.step = -1;
  none.source = "memory";
  none.detail = detail;
  none.epoch = epoch;
  return none;
}

// The state handed to the trainer carries the restore epoch of the decision it followed.
local::RestoredState InEpoch(local::RestoredState state, int64_t epoch) {
  state.epoch = epoch;
  return state;
}

std::string DecisionStr(const peer::RestoreDecision& d) {
  const std::string what = d.source == "none" ? std::string("nothing to restore")
                                              : "step " + std::to_string(d.step) + " from " +
                                                    (d.source == "tier" ? "the persistent tier"
                                                                        : "memory");
  return what + " (generation " + std::to_string(d.generation) + ", decided by node '" +
         d.decided_by + "')";
}

}  // namespace

Result<local::RestoredState> ReftLoad::RestoreConsistent(const protect::SlotMeta& meta,
                                                         RestoreStats* stats,
                                                         const ProgressCallback& progress,
                                                         const local::RestoreRequest& request) {
  REFT_RETURN_NOT_OK(meta.Plan().status().WithContext("the restoring trainer's declaration"));
  auto* coordinator = peer_->coordinator();
  const std::string& job = meta.job;
  const JobLayout& layout = meta.layout;
  const auto start = Clock::now();
  const std::string self = peer_->membership().node_id();
  // Time spent agreeing (waiting for silent holders is added by Locate).
  auto agreed = [&](const std::string& how) {
    stats->agreement += Clock::now() - start;
    stats->agreement_detail += (stats->agreement_detail.empty() ? "" : "; ") + how;
    if (!coordinator->HasConsensus()) {
      stats->agreement_detail += " [no consensus store: this node's own decision]";
    }
  };

  // A persisted step goes to this job's trainers only when its manifests record the job's
  // current owner, or none (docs/security.md "Jobs belong to their owner"): a name released
  // and claimed by another user does not hand it the old owner's steps.
  auto owner_allows = [&](persist::PersistentTier* t, int64_t step) -> Status {
    if (owners_ == nullptr) return Status::OK();
    auto owner = owners_->Owner(job);
    if (!owner.ok()) {
      return owner.status().WithContext("reading the owner of " + JobStr(job) +
                                        " before restoring its persisted step " +
                                        std::to_string(step));
    }
    return CheckPersistedOwner(t, job, step, *owner);
  };

  // Restores `step` from the tier with `detail` (the generation must be `gen` at the end, or
  // the job moved on under us and the caller tries again: nullopt).
  auto from_tier = [&](int64_t step, uint64_t gen,
                       const std::string& detail) -> Result<std::optional<local::RestoredState>> {
    if (tier_ == nullptr) {
      return Status::Lost(detail + "; but this node has no persistent tier configured");
    }
    auto tier = tier_->Get(true);
    if (!tier.ok()) {
      return Status::Lost(detail +
                          "; but the persistent tier cannot be used: " + tier.status().ToString());
    }
    REFT_RETURN_NOT_OK(owner_allows(tier->get(), step));  // the probe's answer too
    // A step persisted under another layout: reshaped by name when the trainer asked for it.
    std::optional<JobLayout> saved;
    if (request.reshape || request.probe) {
      auto l = PersistedLayout(tier->get(), job, step);
      if (l.ok() && !(*l == layout)) saved = *l;
    }
    if (request.probe) {
      if (coordinator->Generation(job).generation != gen) {
        return std::optional<local::RestoredState>();
      }
      local::RestoredState probed;
      probed.step = step;
      probed.source = "tier";
      probed.reshaped = saved.has_value();
      probed.from_layout = (saved ? *saved : layout).ToString();
      probed.detail = detail + "; probe: saved under layout " + probed.from_layout;
      stats->step = step;
      stats->detail = probed.detail;
      return std::optional<local::RestoredState>(std::move(probed));
    }
    // Scattered ranges and reads: by name.
    if ((!request.remap.empty() || !request.reads.empty()) && !saved) saved = layout;
    auto r = saved ? ReshapeFromTier(tier->get(), meta, step, *saved, request, stats)
                   : RestoreFromTier(tier->get(), meta, step, options_.piece_bytes, stats,
                                     progress);
    if (!r.ok()) {
      const StatusCode code = r.status().code();
      if (code == StatusCode::kIoError || code == StatusCode::kPermissionDenied ||
          code == StatusCode::kCorrupted) {
        tier_->Report(r.status());  // the tier's health; a missing file or a bad declaration is not
      }
      if (code == StatusCode::kInvalidArgument) return r.status();
      return Status(r.status().code(),
                    detail + "; reading the persistent tier failed: " + r.status().message());
    }
    if (coordinator->Generation(job).generation != gen)
      return std::optional<local::RestoredState>();
    r->detail = detail;
    stats->step = step;
    stats->detail = detail;
    return std::optional<local::RestoredState>(std::move(*r));
  };

  // The fallback: generation g+1 restarting from the newest complete persisted step P <= S,
  // started with a compare-and-swap that records the decision {g+1, P, tier} with it.
  // Returns the state, nullopt (the job moved: choose again), or the job-wide error.
  auto fall_back = [&](const peer::JobGeneration& gen, const std::string& reason)
      -> Result<std::optional<local::RestoredState>> {
    const std::optional<int64_t> memory_step = gen.newest_committed;
    // A tier that cannot be read while memory holds nothing of the job: the job starts fresh
    // (a missing or unmounted directory must not stop new jobs, docs/failure-model.md); the
    // warning is logged and the detail says so. With a committed step it is Lost: never a silent
    // restart.
    auto unreadable = [&](const Status& why) -> Result<std::optional<local::RestoredState>> {
      const std::string what =
          tier_ == nullptr ? std::string("no persistent tier is configured")
                           : "the persistent tier " + tier_->options().dir +
                                 " cannot be read: " + why.ToString();
      if (memory_step) return Status::Lost(reason + "; " + what);
      stats->warnings.push_back(reason + ", and " + what + ": starting without a restore");
      stats->detail = reason + "; " + what;
      return std::optional<local::RestoredState>(
          Nothing(stats->detail, coordinator->RestoreEpoch(job)));
    };
    // Slots of S freed under us mean a newer step committed (reftd sealed the killed
    // trainers' last snapshots after the restart began): that is no loss, choose again.
    Status synced = coordinator->SyncNow(job, options_.sync_timeout);
    if (!synced.ok()) stats->warnings.push_back(synced.message());
    if (coordinator->Generation(job).newest_committed != memory_step) {
      return std::optional<local::RestoredState>();
    }
    if (tier_ == nullptr) return unreadable(Status::OK());
    auto tier = tier_->Get(true);
    if (!tier.ok()) return unreadable(tier.status());
    auto complete = (*tier)->CompleteSteps(job, layout);
    if (request.reshape && complete.ok() && complete->empty()) {
      // A reshape may read a step persisted under the layout the job ran with before: the
      // layout of the newest step directory's manifests.
      auto listed = (*tier)->ListSteps(job);
      if (listed.ok() && !listed->empty()) {
        auto saved = PersistedLayout(tier->get(), job, listed->back());
        if (saved.ok()) complete = (*tier)->CompleteSteps(job, *saved);
      }
    }
    auto dirs =
        complete.ok() ? (*tier)->ListSteps(job) : Result<std::vector<int64_t>>(complete.status());
    if (!dirs.ok()) {
      tier_->Report(dirs.status());
      return unreadable(dirs.status());
    }
    std::optional<int64_t> p;
    for (int64_t s : *complete) {
      if (!memory_step || s <= *memory_step) p = s;
    }
    if (!p) {
      if (!memory_step) return std::optional<local::RestoredState>();  // caller records "none"
      return Status::Lost(reason + "; and the persistent tier " + tier_->options().dir +
                          " has no complete step of " + JobStr(job) + " for layout " +
                          layout.ToString() + " at or before step " + std::to_string(*memory_step));
    }
    // No generation starts from a step the job's trainers may not have.
    REFT_RETURN_NOT_OK(owner_allows(tier->get(), *p));
    // Steps up to the floor may have (partial) directories written by the abandoned timeline:
    // the new generation never persists them, so no step can mix files of the two.
    int64_t floor = std::max<int64_t>(gen.persist_floor, memory_step.value_or(-1));
    if (!dirs->empty()) floor = std::max(floor, dirs->back());
    const std::string why =
        memory_step ? "memory cannot rebuild step " + std::to_string(*memory_step) + ": " + reason
                    : reason;
    const peer::JobGeneration next = coordinator->StartGeneration(
        job, peer::GenerationStart{gen.generation, memory_step, *p, floor, why});
    if (next.generation != gen.generation + 1 || next.base_step != p) {
      return std::optional<local::RestoredState>();  // another restore started it: follow it
    }
    // Tell every member now (gossip: they roll back and drop their slots newer than P) before
    // any byte of P is handed to a trainer.
    Status pushed = coordinator->SyncNow(job, options_.sync_timeout);
    if (!pushed.ok()) stats->warnings.push_back(pushed.message());
    agreed("decided here: step " + std::to_string(*p) + " from the persistent tier (generation " +
           std::to_string(next.generation) + ")");
    const std::string detail = why + "; restored step " + std::to_string(*p) +
                               " from the persistent tier " + tier_->options().dir +
                               " (generation " + std::to_string(next.generation) + ")";
    // The generation's decision (recorded with it) is the epoch: nobody decides again for
    // (g+1, P) while it stands, so the one this node applied is the one started here.
    const int64_t epoch = coordinator->RestoreEpoch(job);
    REFT_ASSIGN_OR_RETURN(auto out, from_tier(*p, next.generation, detail));
    if (out) out->epoch = epoch;
    return out;
  };

  // The view a check on this node located, with the (generation, step) it was taken at: a
  // decision for the same step is restored from it instead of locating every slot again.
  Known checked;
  uint64_t checked_generation = 0;
  auto known = [&](const peer::RestoreDecision& d) {
    Known k;
    if (checked.view && checked_generation == d.generation && checked.step == d.step) {
      k = std::move(checked);  // once: a retry locates afresh
    }
    checked = Known{};
    k.step = d.step;
    return k;
  };

  Status retry_reason;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Status sync = coordinator->SyncNow(job, options_.sync_timeout);
    if (!sync.ok()) {
      if (coordinator->HasConsensus()) {
        // Without the control plane no rank can know what the others restore.
        return Status::Unavailable("cannot reach the control plane to agree on the restore of " +
                                   JobStr(job) + ": " + sync.message());
      }
      stats->warnings.push_back(sync.message());
    }
    const peer::JobGeneration gen = coordinator->Generation(job);
    auto moved = [&] { return coordinator->Generation(job).generation != gen.generation; };
    const int64_t committed = gen.newest_committed.value_or(-1);
    REFT_ASSIGN_OR_RETURN(std::optional<peer::RestoreDecision> recorded, coordinator->Decision(job));
    const bool current = recorded && recorded->generation == gen.generation &&
                         recorded->step == committed &&
                         (recorded->source != "none" || committed < 0);

    peer::RestoreDecision decision;
    if (current) {
      decision = *recorded;
      if (decision.decided_by != self) agreed("followed " + DecisionStr(decision));
    } else {
      // Decide: memory when every sharding group can rebuild the committed step, the tier
      // otherwise, nothing when nothing was ever committed or persisted.
      decision = peer::RestoreDecision{gen.generation, committed, "memory", self, "", 0};
      std::string reason;
      if (committed < 0) {
        reason = "nothing of " + JobStr(job) + " is committed in memory";
      } else if (gen.base_step && committed == *gen.base_step) {
        decision.source = "tier";  // the job fell back to `base` and committed nothing since
        decision.detail = gen.reason;
      } else {
        checked = Known{};
        checked_generation = gen.generation;
        auto check = CheckRestoreOn(job, progress, committed, &checked);  // synced above
        if (!check.ok()) {
          // NotFound: slots listed a moment ago are gone (a peer rolled back to a generation
          // this node has not heard of yet): sync and choose again.
          if (moved() || check.status().code() == StatusCode::kNotFound) {
            retry_reason = check.status();
            continue;
          }
          return check.status();
        }
        if (!check->settled.empty()) {  // the report says whom the decision waited for
          stats->agreement_detail +=
              (stats->agreement_detail.empty() ? "" : "; ") + check->settled;
        }
        if (check->step != committed || moved()) continue;  // a commit or generation moved
        if (check->undecided()) {
          // Holders alive but silent past the agreement timeout: the bytes may well exist.
          // Every rank gets this error until they answer or are declared dead.
          return Status::Unavailable("cannot decide the restore of " + JobStr(job) + ": " +
                                     check->Summary());
        }
        if (check->recoverable) {
          decision.detail = check->Summary();
        } else {
          reason = check->Summary();
        }
      }
      if (!reason.empty()) {
        auto out = fall_back(gen, reason);
        if (!out.ok()) return out.status();
        if (*out) return std::move(**out);
        // Another restore started the fallback, or a newer step committed: choose again.
        if (moved() || coordinator->Generation(job).newest_committed != gen.newest_committed) {
          continue;
        }
        decision.source = "none";
        decision.step = -1;
        decision.detail = "nothing committed for " + JobStr(job) + " in memory" +
                          (tier_ ? ", and nothing persisted in " + tier_->options().dir : "");
      }
      auto won = coordinator->ProposeDecision(job, decision, recorded ? recorded->version : 0);
      if (!won.ok() && won.status().code() == StatusCode::kBusy) {
        retry_reason = won.status();  // the generation or commit point moved: choose again
        continue;
      }
      if (!won.ok()) return won.status().WithContext("recording the restore decision of " + JobStr(job));
      if (won->generation != decision.generation || won->step != decision.step ||
          won->source != decision.source) {
        continue;  // another rank decided first: follow its decision
      }
      decision = *won;
      agreed("decided here: " + DecisionStr(decision));
    }

    // Follow the decision.
    if (decision.source == "none") {
      stats->detail = decision.detail.empty() ? "nothing committed for " + JobStr(job)
                                              : decision.detail;
      return Nothing(stats->detail, decision.version);
    }
    if (decision.source == "tier") {
      // The job fell back to persisted step `base`: from memory if some node still holds it
      // (it committed there before), else from the tier.
      auto r = RestoreImpl(meta, stats, progress, request, known(decision));
      if (r.ok() && r->step == decision.step && !moved()) {
        return InEpoch(std::move(*r), decision.version);
      }
      if (r.ok() || moved()) continue;  // a newer commit or generation appeared: choose again
      if (r.status().code() != StatusCode::kLost) return r.status();
      const std::string detail = "step " + std::to_string(decision.step) + " of " + JobStr(job) +
                                 " restored from the persistent tier" +
                                 (tier_ ? " " + tier_->options().dir : std::string()) +
                                 " (generation " + std::to_string(gen.generation) +
                                 ": the job fell back to it because " + gen.reason + ")";
      REFT_ASSIGN_OR_RETURN(auto out, from_tier(decision.step, gen.generation, detail));
      if (out) return InEpoch(std::move(*out), decision.version);
      continue;
    }
    auto r = RestoreImpl(meta, stats, progress, request, known(decision));
    if (moved()) continue;  // a fallback started elsewhere wins: this state must not be used
    if (r.ok()) {
      if (r->step != decision.step) continue;  // a newer commit: decide again
      // The decision must still stand as the bytes are handed over: a fallback started by a
      // rank that could not rebuild the step replaces it (a linearizable read with etcd). A
      // fallback after this point fences this trainer instead (its epoch is then old).
      auto still = coordinator->Decision(job);
      if (!still.ok()) return still.status().WithContext("re-reading the restore decision of " + JobStr(job));
      if (!*still || (*still)->version != decision.version) continue;
      return InEpoch(std::move(*r), decision.version);
    }
    if (r.status().code() != StatusCode::kLost) return r.status();
    // Bytes lost since the decision (a second failure during the restore): the job falls back,
    // which moves it to a new generation; ranks that restored the step already are fenced by it
    // (their next snapshot belongs to an abandoned generation and is dropped).
    auto out = fall_back(gen, r.status().message());
    if (!out.ok()) return out.status();
    if (*out) return std::move(**out);
  }
  return Status::Unavailable("the commit state of " + JobStr(job) + " kept changing during " +
                             std::to_string(kMaxAttempts) + " restore attempts; try again" +
                             (retry_reason.ok() ? "" : " (last: " + retry_reason.ToString() + ")"));
}

}  // namespace reft::recovery
