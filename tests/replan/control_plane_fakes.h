#pragma once
/// \file control_plane_fakes.h
/// \brief In-memory fakes of the two seams the planner loop calls (peer::NodeDirectory and
/// coord::JobCoordinator), so its decisions can be tested without etcd or a second daemon.
/// The coordinator keeps one published plan per job behind the same compare-and-swap contract
/// as etcd's (a version token; void outside the job's generation) and lets a test wait for a
/// publication or for the planner's next pass over the jobs, never for a time.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reft/mutex.h"
#include "reft/coord/job_coordinator.h"
#include "reft/peer/node_directory.h"

namespace reft::replan::testing {

/// How long a test waits for an event before it fails (the event normally comes at once).
inline constexpr std::chrono::seconds kEventBound{30};

/// \brief Nodes and their states; this node is `self` (always alive).
class FakeNodeDirectory final : public peer::NodeDirectory {
 public:
  explicit FakeNodeDirectory(std::string self) : self_(std::move(self)) {}

  /// Adds or changes another node.
  void Set(const std::string& node, peer::MemberState state) {
    MutexLock lock(mu_);
    states_[node] = state;
  }

  void SetAdvertiseAddress(const std::string&) override {}
  Status Start() override { return Status::OK(); }
  void Stop() override {}
  v1::Caller SelfCaller() const override {
    v1::Caller c;
    c.set_node_id(self_);
    return c;
  }
  uint64_t epoch() const override { return 1; }
  const std::string& node_id() const override { return self_; }
  std::vector<peer::MemberInfo> Members() const override {
    std::vector<peer::MemberInfo> out{Info(self_, peer::MemberState::kAlive)};
    MutexLock lock(mu_);
    for (const auto& [node, state] : states_) out.push_back(Info(node, state));
    return out;
  }
  std::vector<peer::MemberInfo> LiveMembers() const override {
    std::vector<peer::MemberInfo> out;
    MutexLock lock(mu_);
    for (const auto& [node, state] : states_)
      if (state != peer::MemberState::kDead) out.push_back(Info(node, state));
    return out;
  }
  std::optional<peer::MemberInfo> Find(const std::string& node) const override {
    if (node == self_) return Info(self_, peer::MemberState::kAlive);
    MutexLock lock(mu_);
    auto it = states_.find(node);
    if (it == states_.end()) return std::nullopt;
    return Info(node, it->second);
  }
  bool IsFenced() const override { return false; }
  void ClearFence() override {}
  void AddListener(Listener) override {}
  /// `node`'s departure was declared before the planner listened: a departure listener added
  /// later hears it at once (the planner notes when it heard it: the loss's phases).
  void Departed(const std::string& node) {
    MutexLock lock(mu_);
    departed_.push_back(node);
  }

  // The planner asks to be woken on departures and arrivals; the tests drive its passes
  // themselves (JobPlanner::Replan), so the listeners are not kept: a departure listener hears
  // the Departed() nodes once, when it is added.
  void AddDepartureListener(DepartureListener listener) override {
    std::vector<std::string> departed;
    {
      MutexLock lock(mu_);
      departed = departed_;
    }
    for (const auto& node : departed) listener(node);
  }
  void AddArrivalListener(ArrivalListener) override {}
  Status AdmitCaller(const v1::Caller&) override { return Status::OK(); }

 private:
  peer::MemberInfo Info(const std::string& node, peer::MemberState state) const {
    peer::MemberInfo m;
    m.node_id = node;
    m.address = node + ":1";
    m.state = state;
    m.self = node == self_;
    return m;
  }

  const std::string self_;
  mutable Mutex mu_;
  std::map<std::string, peer::MemberState> states_ REFT_GUARDED_BY(mu_);
  std::vector<std::string> departed_ REFT_GUARDED_BY(mu_);
};

/// \brief One job's agreement as the planner reads it: whether this node leads it, its other
/// nodes, its generation, the recorded restore decision and the published plan.
class FakeJobCoordinator final : public coord::JobCoordinator {
 public:
  struct Job {
    bool leads = true;
    std::vector<std::string> nodes;  ///< JobNodes(): the job's nodes other than this one
    uint64_t generation = 0;
    std::optional<coord::RestoreDecision> decision;
    std::optional<coord::PublishedPlan> published;
    std::map<std::string, int64_t> last_heard_ms;  ///< LastHeardFrom(): node -> unix ms
  };

  void SetJob(const std::string& name, Job job) {
    MutexLock lock(mu_);
    jobs_[name] = std::move(job);
  }
  void SetPublished(const std::string& name, coord::PublishedPlan plan) {
    MutexLock lock(mu_);
    plan.version = ++next_version_;
    jobs_[name].published = plan;
  }

  /// Every plan published (accepted or not), in order.
  std::vector<coord::PublishedPlan> Publications() const {
    MutexLock lock(mu_);
    return publications_;
  }
  std::optional<coord::PublishedPlan> Published(const std::string& name) const {
    MutexLock lock(mu_);
    auto it = jobs_.find(name);
    return it == jobs_.end() ? std::nullopt : it->second.published;
  }
  /// Waits until the published plan of `name` satisfies `pred`; false after kEventBound.
  bool WaitPublished(const std::string& name,
                     const std::function<bool(const coord::PublishedPlan&)>& pred) const {
    MutexLock lock(mu_);
    return lock.WaitFor(cv_, kEventBound, [&]() REFT_REQUIRES(mu_) {
      auto it = jobs_.find(name);
      return it != jobs_.end() && it->second.published && pred(*it->second.published);
    });
  }
  /// How many passes over the jobs the planner started (each starts with Jobs()).
  int Passes() const {
    MutexLock lock(mu_);
    return passes_;
  }
  /// Waits until the planner started more than `passes` passes; false after kEventBound.
  bool WaitPasses(int passes) const {
    MutexLock lock(mu_);
    return lock.WaitFor(cv_, kEventBound, [&]() REFT_REQUIRES(mu_) { return passes_ > passes; });
  }

  // ---- what the planner calls ----
  std::vector<std::string> Jobs() override {
    MutexLock lock(mu_);
    ++passes_;
    cv_.notify_all();
    std::vector<std::string> out;
    for (const auto& [name, job] : jobs_) out.push_back(name);
    return out;
  }
  bool LeadsJob(const std::string& name) override {
    MutexLock lock(mu_);
    return jobs_[name].leads;
  }
  std::optional<int64_t> LastHeardFrom(const std::string& name, const std::string& node) override {
    MutexLock lock(mu_);
    const auto& heard = jobs_[name].last_heard_ms;
    auto it = heard.find(node);
    return it == heard.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  Result<std::vector<std::string>> JobNodes(const std::string& name) override {
    MutexLock lock(mu_);
    return jobs_[name].nodes;
  }
  coord::JobGeneration Generation(const std::string& name) override {
    MutexLock lock(mu_);
    coord::JobGeneration g;
    g.generation = jobs_[name].generation;
    return g;
  }
  Result<std::optional<coord::RestoreDecision>> Decision(const std::string& name) override {
    MutexLock lock(mu_);
    return jobs_[name].decision;
  }
  bool HasConsensus() const override { return true; }
  Result<std::optional<coord::PublishedPlan>> PublishedPlanOf(const std::string& name) override {
    MutexLock lock(mu_);
    return jobs_[name].published;
  }
  /// etcd's contract: the plan in force unless `expected_version` is the current one; Busy
  /// outside the job's generation.
  Result<coord::PublishedPlan> PublishPlan(const std::string& name, const coord::PublishedPlan& plan,
                                          int64_t expected_version, coord::PlanPublisher) override {
    MutexLock lock(mu_);
    publications_.push_back(plan);
    Job& job = jobs_[name];
    if (plan.generation != job.generation) {
      return Status::Busy("job '" + name + "' is in generation " + std::to_string(job.generation));
    }
    const int64_t current = job.published ? job.published->version : 0;
    if (expected_version != current) return *job.published;
    job.published = plan;
    job.published->version = ++next_version_;
    cv_.notify_all();
    return *job.published;
  }

  // ---- not used by the planner ----
  Status Join(const store::RankKey&, const JobLayout&, const local::Joiner&) override {
    return Status::OK();
  }
  void Leave(const store::RankKey&) override {}
  Status Complete(const store::RankKey&, int64_t, int64_t) override { return Status::OK(); }
  int64_t RestoreEpoch(const std::string&) override { return 0; }
  std::optional<int64_t> NewestCommitted(const std::string&) override { return std::nullopt; }
  bool WaitCommitted(const std::string&, int64_t, std::chrono::milliseconds) override {
    return false;
  }
  Status Start() override { return Status::OK(); }
  void Stop() override {}
  Status SyncNow(const std::string&, std::chrono::milliseconds) override { return Status::OK(); }
  std::optional<JobLayout> Layout(const std::string&) override { return std::nullopt; }
  coord::JobGeneration StartGeneration(const std::string& name,
                                      const coord::GenerationStart&) override {
    return Generation(name);
  }
  void AddGenerationListener(GenerationListener) override {}
  void SetStateDir(std::string) override {}
  std::vector<store::RankKey> JoinedRanks(const std::optional<std::string>&) override { return {}; }
  bool IsJoined(const store::RankKey&) override { return false; }
  std::optional<std::string> SlotLocation(const store::RankKey&) override { return std::nullopt; }
  std::optional<std::string> JoinedNode(const store::RankKey&) override { return std::nullopt; }
  Status RecordSlot(const store::RankKey&, int64_t) override { return Status::OK(); }
  Result<coord::RestoreDecision> ProposeDecision(const std::string&, const coord::RestoreDecision& d,
                                                int64_t) override {
    return d;
  }

 private:
  mutable Mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Job> jobs_ REFT_GUARDED_BY(mu_);
  std::vector<coord::PublishedPlan> publications_ REFT_GUARDED_BY(mu_);
  int64_t next_version_ REFT_GUARDED_BY(mu_) = 0;
  int passes_ REFT_GUARDED_BY(mu_) = 0;
};

}  // namespace reft::replan::testing
