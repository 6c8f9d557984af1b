/// \file reft_load_fallback.cc
/// \brief Restore with the job-wide choice between memory and the persistent tier, and the
/// generation change that rolls every node back to the persisted step (docs/recovery.md,
/// "Fallback to the persistent tier").

#include <algorithm>

#include "reft/peer/peer_node.h"
#include "reft/recovery/reft_load.h"
#include "reft/recovery/tier_restore.h"

namespace reft::recovery {

namespace {

constexpr int kMaxAttempts = 4;  // the generation or the commit moved under a restore

std::string JobStr(const std::string& job) { return "job '" + job + "'"; }

}  // namespace

Result<local::RestoredState> ReftLoad::RestoreConsistent(const protect::SlotMeta& meta,
                                                         RestoreStats* stats,
                                                         const ProgressCallback& progress) {
  REFT_RETURN_NOT_OK(meta.Plan().status().WithContext("the restoring trainer's declaration"));
  auto* coordinator = peer_->coordinator();
  const std::string& job = meta.job;
  const JobLayout& layout = meta.layout;

  // Restores `step` from the tier with `detail` (the generation must be `gen` at the end, or
  // the job moved on under us and the caller tries again: nullopt).
  auto from_tier = [&](int64_t step, uint64_t gen,
                       const std::string& detail) -> Result<std::optional<local::RestoredState>> {
    auto tier = tier_->Get(true);
    if (!tier.ok()) {
      return Status::Lost(detail +
                          "; but the persistent tier cannot be used: " + tier.status().ToString());
    }
    auto r = RestoreFromTier(tier->get(), meta, step, options_.piece_bytes, stats, progress);
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

  Status retry_reason;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Status sync = coordinator->SyncNow(job, options_.sync_timeout);
    if (!sync.ok()) stats->warnings.push_back(sync.message());
    const peer::JobGeneration gen = coordinator->Generation(job);
    // A concurrent restore elsewhere may start a generation (and drop the slots this one is
    // reading) at any moment: a failure is then a reason to choose again, not an answer.
    auto moved = [&] { return coordinator->Generation(job).generation != gen.generation; };
    std::optional<int64_t> memory_step = gen.newest_committed;
    std::string reason;

    if (gen.base_step && memory_step && *memory_step == *gen.base_step) {
      // The job already fell back to persisted step `base` and committed nothing newer: every
      // rank restores exactly that step, from memory if some node still holds it, else the tier.
      auto r = RestoreImpl(meta, stats, progress);
      if (r.ok() && r->step == *gen.base_step &&
          coordinator->Generation(job).generation == gen.generation) {
        return r;
      }
      if (r.ok() || moved()) continue;  // a newer commit or generation appeared: choose again
      if (r.status().code() != StatusCode::kLost) return r.status();
      const std::string detail = "step " + std::to_string(*gen.base_step) + " of " + JobStr(job) +
                                 " restored from the persistent tier " + tier_->options().dir +
                                 " (generation " + std::to_string(gen.generation) +
                                 ": the job fell back to it because " + gen.reason + ")";
      REFT_ASSIGN_OR_RETURN(auto out, from_tier(*gen.base_step, gen.generation, detail));
      if (out) return std::move(*out);
      continue;
    }

    if (!memory_step) {
      // Nothing committed in memory anywhere reachable (every node lost the job's snapshots,
      // e.g. a whole-cluster reboot): the tier's newest complete step, if any.
      reason = "nothing of " + JobStr(job) + " is committed in memory on any live node";
    } else {
      // Job-wide: can every sharding group rebuild S? Only then does any rank restore S.
      auto check = CheckRestore(job);
      if (!check.ok()) {
        // NotFound: slots listed a moment ago are gone (a peer that already rolled back to a
        // generation this node has not heard of yet): sync and choose again.
        if (moved() || check.status().code() == StatusCode::kNotFound) {
          retry_reason = check.status();
          continue;
        }
        return check.status();
      }
      if (check->step != *memory_step || moved()) continue;  // a commit or generation moved
      if (check->recoverable) {
        auto r = RestoreImpl(meta, stats, progress);
        // A fallback started by another node meanwhile wins: this state must not be used.
        if (moved()) continue;
        if (r.ok()) return r;
        if (r.status().code() != StatusCode::kLost) return r.status();
        reason = r.status().message();
      } else {
        reason = check->Summary();
      }
    }

    // The fallback: the newest complete persisted step P <= S.
    // A tier that cannot be read while memory holds nothing of the job: the job starts fresh
    // (a missing or unmounted directory must not stop new jobs, docs/failure-model.md); the warning is
    // logged and the detail says so. With a committed step it is Lost: never a silent restart.
    auto unreadable = [&](const Status& why) -> Result<local::RestoredState> {
      const std::string what =
          "the persistent tier " + tier_->options().dir + " cannot be read: " + why.ToString();
      if (memory_step) return Status::Lost(reason + "; " + what);
      stats->warnings.push_back(reason + ", and " + what + ": starting without a restore");
      local::RestoredState none;
      none.step = -1;
      none.source = "memory";
      none.detail = reason + "; " + what;
      stats->detail = none.detail;
      return none;
    };
    auto tier = tier_->Get(true);
    if (!tier.ok()) return unreadable(tier.status());
    auto complete = (*tier)->CompleteSteps(job, layout);
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
      if (!memory_step) {
        local::RestoredState none;
        none.step = -1;
        none.source = "memory";
        none.detail = "nothing committed for " + JobStr(job) +
                      " in memory, and nothing persisted in " + tier_->options().dir;
        stats->detail = none.detail;
        return none;
      }
      return Status::Lost(reason + "; and the persistent tier " + tier_->options().dir +
                          " has no complete step of " + JobStr(job) + " for layout " +
                          layout.ToString() + " at or before step " + std::to_string(*memory_step));
    }
    // Steps up to the floor may have (partial) directories written by the abandoned timeline:
    // the new generation never persists them, so no step can mix files of the two.
    int64_t floor = std::max<int64_t>(gen.persist_floor, memory_step.value_or(-1));
    if (!dirs->empty()) floor = std::max(floor, dirs->back());
    const std::string why =
        memory_step ? "memory cannot rebuild step " + std::to_string(*memory_step) + ": " + reason
                    : reason;
    const peer::JobGeneration next =
        coordinator->StartGeneration(job, gen.generation, *p, floor, why);
    if (next.generation != gen.generation + 1 || next.base_step != p) continue;
    // Tell every member now (they roll back and drop their slots newer than P) before any
    // byte of P is handed to a trainer.
    Status pushed = coordinator->SyncNow(job, options_.sync_timeout);
    if (!pushed.ok()) stats->warnings.push_back(pushed.message());
    const std::string detail = why + "; restored step " + std::to_string(*p) +
                               " from the persistent tier " + tier_->options().dir +
                               " (generation " + std::to_string(next.generation) + ")";
    REFT_ASSIGN_OR_RETURN(auto out, from_tier(*p, next.generation, detail));
    if (out) return std::move(*out);
  }
  return Status::Unavailable("the commit state of " + JobStr(job) + " kept changing during " +
                             std::to_string(kMaxAttempts) + " restore attempts; try again" +
                             (retry_reason.ok() ? "" : " (last: " + retry_reason.ToString() + ")"));
}

}  // namespace reft::recovery
