// EtcdJobCoordinator, agreement on the timeline: the restore decision, the fall-back to a new
// generation, and the planner's published plan, each a compare-and-swap fenced by what it was
// decided on.

#include "reft/coord/etcd_job_coordinator.h"

#include <algorithm>
#include <set>
#include <thread>
#include <tuple>

#include <spdlog/spdlog.h>

#include "etcd_results.h"
#include "keys.h"
#include "generation_file.h"
#include "reft/store/job_commit.h"

namespace reft::coord {

JobGeneration EtcdJobCoordinator::StartGeneration(const std::string& job,
                                                  const GenerationStart& start) {
  (void)Refresh(job, false);
  int64_t gen_rev, committed_rev;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    // A step committed after the fall-back was decided (the killed trainers' last snapshots
    // sealed while the tier was scanned) voids it: memory holds a newer step than it saw.
    if (st.gen.generation != start.from || st.committed != start.seen_committed) return InfoLocked(st);
    gen_rev = st.gen_rev;
    committed_rev = st.committed_rev;
  }
  const uint64_t next_generation = start.from + 1;
  GenerationRecord next{next_generation, start.base_step, start.persist_floor, start.reason};
  RestoreDecision decision{next_generation,   start.base_step, RestoreSource::kTier,
                           nodes_->node_id(), start.reason,    0};
  // Both keys compared: a commit between the read above and this transaction fails it too, so
  // the new timeline never overwrites a commit, nor computes its persist floor from an older one.
  Txn t;
  t.IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
      .IfModRevision(keys::Committed(job), Compare::kEqual, committed_rev)
      .ThenPut(keys::Generation(job), Encode(next))
      .ThenPut(keys::Committed(job), Encode(CommittedRecord{start.base_step, next_generation}))
      .ThenDeleteRange(keys::CompletionsPrefix(job), PrefixEnd(keys::CompletionsPrefix(job)))
      .ThenPut(keys::Restore(job), Encode(decision));
  auto r = etcd_->Commit(t);
  if (!r.ok()) spdlog::warn("job {}: starting generation {} failed: {}", job, next_generation, r.status().ToString());
  (void)Refresh(job, false);  // applies whichever generation won (and rolls this node back)
  reft::MutexLock lock(mu_);
  return InfoLocked(jobs_[job]);
}

Result<std::optional<RestoreDecision>> EtcdJobCoordinator::Decision(const std::string& job) {
  REFT_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd_->Get(keys::Restore(job)));
  if (!kv) return std::optional<RestoreDecision>();
  REFT_ASSIGN_OR_RETURN(RestoreDecision d, DecodeDecision(kv->key, kv->value));
  d.version = kv->mod_revision;
  {
    // The restore that follows it hands this epoch to its session: this node must be in it.
    reft::MutexLock lock(mu_);
    ApplyDecisionLocked(job, jobs_[job], kv);
  }
  return std::optional<RestoreDecision>(d);
}

Result<RestoreDecision> EtcdJobCoordinator::ProposeDecision(const std::string& job,
                                                            const RestoreDecision& decision,
                                                            int64_t expected_version) {
  int64_t gen_rev, committed_rev;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    const int64_t committed = st.committed.value_or(-1);
    if (st.gen.generation != decision.generation ||
        (decision.source == RestoreSource::kNone ? committed >= 0 : committed != decision.step)) {
      return Status::Busy("job '" + job + "' moved to generation " +
                          std::to_string(st.gen.generation) + ", committed step " +
                          std::to_string(committed) + " while deciding");
    }
    gen_rev = st.gen_rev;
    committed_rev = st.committed_rev;
  }
  // The decision stands only for the generation and commit point it was made on (a decision of
  // an older generation must never replace a fallback's), and it starts a new restore epoch:
  // every completion recorded so far is of the old one and is deleted with it.
  Txn t;
  t.IfModRevision(keys::Restore(job), Compare::kEqual, expected_version)
      .IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
      .IfModRevision(keys::Committed(job), Compare::kEqual, committed_rev)
      .ThenPut(keys::Restore(job), Encode(decision))
      .ThenDeleteRange(keys::CompletionsPrefix(job), PrefixEnd(keys::CompletionsPrefix(job)))
      .ElseGet(keys::Restore(job));
  REFT_ASSIGN_OR_RETURN(TxnResult r, etcd_->Commit(t));
  if (r.succeeded) {
    RestoreDecision d = decision;
    d.version = r.revision;
    KeyValue kv;
    kv.key = keys::Restore(job);
    kv.value = Encode(decision);
    kv.mod_revision = r.revision;
    reft::MutexLock lock(mu_);
    ApplyDecisionLocked(job, jobs_[job], kv);
    return d;
  }
  if (KeyUnchanged(r, expected_version)) {
    reft::MutexLock lock(mu_);
    jobs_[job].stale = true;
    return Status::Busy("the generation or commit point of job '" + job +
                        "' moved while deciding its restore");
  }
  const KeyValue& kv = r.gets[0].kvs[0];
  REFT_ASSIGN_OR_RETURN(RestoreDecision d, DecodeDecision(kv.key, kv.value));
  d.version = kv.mod_revision;
  // The caller may follow the winner: its epoch must be this node's before a session gets it
  // (applied later by the watch, it would void the session's first completions).
  reft::MutexLock lock(mu_);
  ApplyDecisionLocked(job, jobs_[job], kv);
  return d;
}

Result<std::optional<PublishedPlan>> EtcdJobCoordinator::PublishedPlanOf(const std::string& job) {
  REFT_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd_->Get(keys::Plan(job)));
  if (!kv) return std::optional<PublishedPlan>();
  REFT_ASSIGN_OR_RETURN(PublishedPlan p, DecodePlan(kv->key, kv->value));
  p.version = kv->mod_revision;
  return std::optional<PublishedPlan>(std::move(p));
}

Result<PublishedPlan> EtcdJobCoordinator::PublishPlan(const std::string& job,
                                                      const PublishedPlan& plan,
                                                      int64_t expected_version,
                                                      PlanPublisher publisher) {
  const bool as_coordinator = publisher == PlanPublisher::kCoordinator;
  int64_t gen_rev;
  int64_t term = 0;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (st.gen.generation != plan.generation) {
      return Status::Busy("job '" + job + "' is in generation " + std::to_string(st.gen.generation) +
                          ", not " + std::to_string(plan.generation) + " the plan was decided in");
    }
    if (as_coordinator && (!st.leader || st.coordinator_rev == 0)) {
      return Status::Busy("node " + nodes_->node_id() + " does not coordinate job '" + job +
                          "' (any more): its plan is not published");
    }
    gen_rev = st.gen_rev;
    term = st.coordinator_rev;
  }
  // A plan stands only in the generation it was decided in: a planner that missed a fallback
  // (partitioned, or its watch behind) cannot publish over the newer generation. And only the
  // coordinator's term it was decided in: a deposed planner (its lease lapsed while it
  // planned) cannot publish over, or beside, the next coordinator's decision.
  Txn t;
  t.IfModRevision(keys::Plan(job), Compare::kEqual, expected_version)
      .IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev);
  if (as_coordinator) t.IfCreateRevision(keys::Coordinator(job), Compare::kEqual, term);
  t.ThenPut(keys::Plan(job), Encode(plan)).ElseGet(keys::Plan(job));
  REFT_ASSIGN_OR_RETURN(TxnResult r, etcd_->Commit(t));
  if (r.succeeded) {
    PublishedPlan p = plan;
    p.version = r.revision;
    return p;
  }
  if (KeyUnchanged(r, expected_version)) {
    reft::MutexLock lock(mu_);
    jobs_[job].stale = true;
    return Status::Busy("the generation or the coordinator of job '" + job + "' moved (or its "
                        "published decision was removed) while planning");
  }
  const KeyValue& kv = r.gets[0].kvs[0];
  REFT_ASSIGN_OR_RETURN(PublishedPlan p, DecodePlan(kv.key, kv.value));
  p.version = kv.mod_revision;
  return p;
}

}  // namespace reft::coord
