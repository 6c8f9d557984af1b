#include "reft/peer/job_records.h"

#include <algorithm>

namespace reft::peer {
namespace {

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

JobRecords::~JobRecords() { Stop(); }

Status JobRecords::Start() {
  MutexLock lock(mu_);
  if (running_) return Status::OK();
  running_ = true;
  thread_ = reft::Thread("reft-sweeper", [this] { Run(); });
  return Status::OK();
}

void JobRecords::Stop() {
  {
    MutexLock lock(mu_);
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void JobRecords::Run() {
  MutexLock lock(mu_);
  while (running_) {
    lock.Unlock();
    (void)SweepOnce();  // a failed sweep (etcd or the tier unreachable) is retried next round
    lock.Lock();
    lock.WaitFor(cv_, interval_, [this]() REFT_REQUIRES(mu_) { return !running_; });
  }
}

Status CheckReleasable(const JobRecord& r, bool force) {
  if (force) return Status::OK();
  if (r.trainers > 0) {
    return Status::InvalidArgument("job '" + r.job + "' has " + std::to_string(r.trainers) +
                                   " trainer(s) connected (on " + JoinNames(r.nodes) +
                                   "); stop them first, or --force");
  }
  if (r.persisted_step) {
    return Status::InvalidArgument(
        "the persistent tier holds step " + std::to_string(*r.persisted_step) + " of job '" +
        r.job + "': its owner record keeps anyone else from claiming the name and restoring "
        "it; release it with --force only once those steps may go to whoever claims the name "
        "next");
  }
  if (r.state == "idle" && !r.nodes.empty()) {
    return Status::InvalidArgument("live nodes hold snapshots of job '" + r.job + "' (" +
                                   JoinNames(r.nodes) + "): the next owner of the name could "
                                   "restore them; drop them first (reftctl snapshots drop), "
                                   "or --force");
  }
  return Status::OK();
}

std::chrono::milliseconds SweepInterval(std::chrono::milliseconds forget_after) {
  return std::clamp<std::chrono::milliseconds>(forget_after / 4, std::chrono::milliseconds(100),
                                               std::chrono::seconds(30));
}

}  // namespace reft::peer
