#include "reft/replan/restore_phases.h"

#include <utility>

#include <spdlog/spdlog.h>

#include "reft/unix_time.h"

namespace reft::replan {

void RankHellos::Note(const store::RankKey& rank, int64_t at_ms) {
  MutexLock lock(mu_);
  hellos_[rank] = at_ms;
}

int64_t RankHellos::Get(const store::RankKey& rank) const {
  MutexLock lock(mu_);
  auto it = hellos_.find(rank);
  return it == hellos_.end() ? 0 : it->second;
}

void RankHellos::Forget(const std::string& job) {
  MutexLock lock(mu_);
  for (auto it = hellos_.begin(); it != hellos_.end();) it = it->first.job == job ? hellos_.erase(it) : std::next(it);
}

std::vector<local::RestorePhaseTime> PhaseList(const RecoveryPhases& phases) {
  std::vector<local::RestorePhaseTime> list;
  const std::pair<const char*, const std::optional<PhaseMark>*> ordered[] = {
      {"lost_at", &phases.lost_at},
      {"declared_at", &phases.declared_at},
      {"decided_at", &phases.decided_at},
      {"staged_at", &phases.staged_at},
      {"reconnected_at", &phases.reconnected_at},
      {"restore_started_at", &phases.restore_started_at},
      {"restore_ended_at", &phases.restore_ended_at}};
  for (const auto& [name, mark] : ordered)
    if (*mark) list.push_back({name, (*mark)->at_ms, (*mark)->node});
  return list;
}

PhasedRestore::PhasedRestore(local::RestoreProvider* inner, std::string node_id, coord::PlanBoard* plans,
                             coord::JobTimeline* timeline, const RankHellos* hellos, Observer observer)
    : inner_(inner),
      node_id_(std::move(node_id)),
      plans_(plans),
      timeline_(timeline),
      hellos_(hellos),
      observer_(std::move(observer)) {}

Result<local::RestoredState> PhasedRestore::Restore(const protect::SlotMeta& meta,
                                                    const local::RestoreRequest& request) {
  const int64_t started = UnixMs();
  REFT_ASSIGN_OR_RETURN(local::RestoredState restored, inner_->Restore(meta, request));
  const int64_t ended = UnixMs();
  // A probe or a read delivers no state: the restore that follows it reports the phases.
  if (restored.step < 0 || request.probe || !request.reads.empty()) return restored;
  RecoveryPhases phases;
  // The loss this restore recovers from: the published decision of the generation and step it
  // restored (a fall-back to the tier restores another step: no job-wide phases).
  if (plans_ != nullptr && timeline_ != nullptr) {
    auto published = plans_->PublishedPlanOf(meta.job);
    if (published.ok() && published->has_value()) {
      const coord::PublishedPlan& record = **published;
      if (record.step == restored.step && record.generation == timeline_->Generation(meta.job).generation) {
        if (auto job_phases = JobPhasesOf(record)) phases = *job_phases;
      }
    } else if (!published.ok() && published.status().code() != StatusCode::kUnsupported) {
      spdlog::debug("restore phases: job {}: the published decision cannot be read: {}", meta.job,
                    published.status().ToString());
    }
  }
  if (hellos_ != nullptr) {
    if (const int64_t hello = hellos_->Get(store::RankKey(meta.job, meta.coord)); hello > 0) {
      phases.reconnected_at = PhaseMark{hello, node_id_};
    }
  }
  phases.restore_started_at = PhaseMark{started, node_id_};
  phases.restore_ended_at = PhaseMark{ended, node_id_};
  restored.phases = PhaseList(phases);
  if (observer_) observer_(phases);
  return restored;
}

}  // namespace reft::replan
