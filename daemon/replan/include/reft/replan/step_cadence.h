#pragma once
/// \file step_cadence.h
/// \brief The measured step time of each job from its snapshot cadence: when this node first
/// saw each step completed, the time per training step between two snapshots (Δt / Δstep), and
/// the median of the recent intervals — robust to a slow snapshot, a pause or a restart
/// (docs/planner.md "The online path"). Thread-safe.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "reft/mutex.h"

namespace reft::replan {

class StepCadence {
 public:
  using Clock = std::chrono::steady_clock;
  /// Intervals kept per job (the median is over these).
  static constexpr size_t kWindow = 16;

  struct Estimate {
    double step_ms = 0;  ///< median time per training step
    int samples = 0;     ///< intervals it rests on
  };

  /// \brief Step `step` of `job` was completed on this node at `at`. Only a step newer than the
  /// last one noted makes an interval; an older or repeated step (a restore, a second rank of
  /// the same step) is ignored.
  void Note(const std::string& job, int64_t step, Clock::time_point at);
  /// \brief The estimate, or nullopt before two steps were noted.
  std::optional<Estimate> Get(const std::string& job) const;
  /// \brief Step `step` of `job` was seen committed job-wide on this node at unix ms `at_ms`
  /// (the commit path calls this on every observation; only a newer step is kept).
  void NoteCommitted(const std::string& job, int64_t step, int64_t at_ms);
  struct Commit {
    int64_t step = -1;
    int64_t at_ms = 0;  ///< when this node first saw it committed
  };
  /// \brief The first step after `step` this node saw committed, among the last kCommits
  /// (none: none yet, or that long ago).
  std::optional<Commit> FirstCommitAfter(const std::string& job, int64_t step) const;
  static constexpr size_t kCommits = 1024;
  /// \brief Forgets `job` (its generation restarted: the old cadence says nothing of the new).
  void Forget(const std::string& job);

 private:
  struct Job {
    int64_t last_step = -1;
    Clock::time_point last_at{};
    std::deque<double> intervals_ms;  ///< per training step
    std::deque<Commit> commits;       ///< ascending steps, the last kCommits
  };
  mutable Mutex mu_;
  std::map<std::string, Job> jobs_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::replan
