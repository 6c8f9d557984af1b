/// \file job_commit.cc
/// \brief CommitJobStep: the local side of a job-wide commit.

#include "reft/store/job_commit.h"

#include <set>

#include "reft/log.h"

namespace reft::store {

void CommitJobStep(SnapshotStore* store, const std::string& job, int64_t step,
                   const JobLayout* layout) {
  for (const auto& r : store->Ranks(job)) {
    auto c = store->NewestCommitted(r);
    if (c && *c >= step) continue;
    if (!store->Get(r, step).ok()) continue;  // this rank's slot of the step lives elsewhere
    if (Status s = store->Commit(r, step); !s.ok()) {
      LogError("committing step " + std::to_string(step) + " of " + r.ToString() +
                 " in the local store failed: " + s.ToString());
    }
  }
  if (layout == nullptr) return;
  std::set<int64_t> gone;
  for (const auto& info : store->List(job)) {
    if (info.state != SlotState::kFree && info.step < step &&
        !layout->Contains(info.rank.coord())) {
      gone.insert(info.step);
    }
  }
  for (int64_t old_step : gone) {
    if (Status s = store->Drop(job, old_step); !s.ok()) {
      LogWarning("job '" + job + "': dropping step " + std::to_string(old_step) +
                 " of ranks outside layout " + layout->ToString() + ": " + s.ToString());
    }
  }
}

}  // namespace reft::store
