#include "reft/replan/step_cadence.h"

#include <algorithm>
#include <vector>

namespace reft::replan {

void StepCadence::Note(const std::string& job, int64_t step, Clock::time_point at) {
  MutexLock lock(mu_);
  Job& j = jobs_[job];
  if (step <= j.last_step) return;
  if (j.last_step >= 0 && at > j.last_at) {
    const double ms = std::chrono::duration<double, std::milli>(at - j.last_at).count();
    j.intervals_ms.push_back(ms / static_cast<double>(step - j.last_step));
    if (j.intervals_ms.size() > kWindow) j.intervals_ms.pop_front();
  }
  j.last_step = step;
  j.last_at = at;
}

std::optional<StepCadence::Estimate> StepCadence::Get(const std::string& job) const {
  MutexLock lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.intervals_ms.empty()) return std::nullopt;
  std::vector<double> v(it->second.intervals_ms.begin(), it->second.intervals_ms.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return Estimate{median, static_cast<int>(n)};
}

void StepCadence::NoteCommitted(const std::string& job, int64_t step, int64_t at_ms) {
  MutexLock lock(mu_);
  std::deque<Commit>& commits = jobs_[job].commits;
  if (!commits.empty() && step <= commits.back().step) return;
  commits.push_back({step, at_ms});
  if (commits.size() > kCommits) commits.pop_front();
}

std::optional<StepCadence::Commit> StepCadence::FirstCommitAfter(const std::string& job, int64_t step) const {
  MutexLock lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return std::nullopt;
  const std::deque<Commit>& commits = it->second.commits;
  // The oldest kept commit may not be the first after `step` once older ones were dropped.
  if (commits.size() == kCommits && commits.front().step > step + 1) return std::nullopt;
  for (const Commit& c : commits)
    if (c.step > step) return c;
  return std::nullopt;
}

void StepCadence::Forget(const std::string& job) {
  MutexLock lock(mu_);
  jobs_.erase(job);
}

}  // namespace reft::replan
