#pragma once
/// \file job_records.h
/// \brief What the cluster keeps about each job, shown to operators and forgotten once the job
/// is gone (docs/security.md "Jobs belong to their owner", docs/operations.md "Job records").
///
/// The problem: every job name a trainer ever used leaves records — its owner, its layout, the
/// coordinator's state and watches on every node. Scheduler job ids are predictable and claims
/// are free, so records kept forever grow without bound and let one uid squat the names other
/// users will need. So a job is *gone* when nothing of it is in use — no trainer joined, no slot
/// on a live node, no coordinator, no plan still waiting, no step in the persistent tier — and
/// after `jobs.forget_after_s` gone its records are deleted and every node drops its state for
/// it; the name may then be claimed again. Operators list the records and may release one.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "reft/local/job_ownership.h"
#include "reft/mutex.h"
#include "reft/result.h"
#include "reft/thread.h"

namespace reft::peer {

struct JobRecord {
  std::string job;
  std::optional<local::JobOwner> owner;
  /// "running" (a trainer joined), "idle" (slots on live nodes, or coordinated), "persisted"
  /// (only the persistent tier holds it), "gone" (forgotten after forget_in_ms).
  std::string state;
  std::vector<std::string> nodes;  ///< nodes with a trainer of it joined, or holding its slots
  int trainers = 0;                ///< ranks joined now
  std::optional<int64_t> committed_step;
  std::optional<int64_t> persisted_step;
  int64_t last_activity_ms = 0;  ///< unix ms of the newest claim, commit, plan or persist
  int64_t forget_in_ms = -1;     ///< gone: time left before the records are deleted
};

/// \brief The records of one control plane (etcd's, or a node's own). Owns the sweeper thread
/// ("reft-sweeper"), which calls SweepOnce every `sweep_interval`; an implementation calls
/// Stop() in its destructor (the thread calls back into it).
class JobRecords {
 public:
  virtual ~JobRecords();
  /// Starts the sweeper thread. Idempotent.
  Status Start() REFT_EXCLUDES(mu_);
  /// Stops and joins it. Idempotent.
  void Stop() REFT_EXCLUDES(mu_);
  /// \brief One sweep now: forgets the jobs gone for long enough; returns them.
  virtual Result<std::vector<std::string>> SweepOnce() = 0;
  /// \brief The persistent tier now holds `step` of `job`: its records stay (owner included)
  /// until an operator releases them, so nobody else can claim the name and read the tier.
  virtual Status NotePersisted(const std::string& job, int64_t step) = 0;
  /// \brief Every job with records, sorted by name.
  virtual Result<std::vector<JobRecord>> List() = 0;
  /// \brief Deletes `job`'s records now. FailedPrecondition-like refusals (InvalidArgument)
  /// while a trainer of it is joined or the tier holds a step of it, unless `force`; NotFound
  /// when it has none.
  virtual Status Release(const std::string& job, bool force) = 0;

 protected:
  explicit JobRecords(std::chrono::milliseconds sweep_interval) : interval_(sweep_interval) {}

 private:
  void Run() REFT_EXCLUDES(mu_);

  const std::chrono::milliseconds interval_;
  Mutex mu_;
  std::condition_variable cv_;
  bool running_ REFT_GUARDED_BY(mu_) = false;
  reft::Thread thread_;
};

/// \brief Why `record`'s job may not be released without --force (InvalidArgument naming the
/// reason and what to do), or OK: a trainer of it is connected, the persistent tier holds a step
/// of it, or live nodes hold its snapshots (the next owner of the name could restore either).
Status CheckReleasable(const JobRecord& record, bool force);

/// \brief How often the sweeper of records forgotten after `forget_after` looks: a quarter of
/// it, between 100 ms and 30 s.
std::chrono::milliseconds SweepInterval(std::chrono::milliseconds forget_after);

}  // namespace reft::peer
