// EtcdJobCoordinator, the commit: completions recorded and reported to the job's coordinator,
// counted per step under the timeline they were made in, and committed by one compare-and-swap.

#include "reft/coord/etcd_job_coordinator.h"

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "etcd_results.h"
#include "keys.h"
#include "generation_file.h"
#include "report_forwarder.h"
#include "report_tree.h"
#include "reft/store/job_commit.h"
#include "reft/test_point.h"

namespace reft::coord {

Status EtcdJobCoordinator::Complete(const store::RankKey& rank, int64_t step, int64_t epoch) {
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[rank.job];
    if (epoch != st.decision_rev) return local::StaleEpoch(rank, step, epoch, st.decision_rev);
    std::optional<int64_t> layout_rev;
    if (auto j = joined_layout_rev_.find(rank); j != joined_layout_rev_.end()) {
      if (j->second != st.layout_rev) return LayoutMoved(rank, step, j->second, st.layout_rev);
      layout_rev = j->second;
    } else if (st.layout_rev != 0) {
      layout_rev = st.layout_rev;
    }
    if (st.committed && step <= *st.committed) return Status::OK();
    PendingStep& p = st.pending[step];
    if (p.ranks.empty()) p.since = Clock::now();
    p.ranks.insert(rank);
    if (!p.layout_rev) p.layout_rev = layout_rev;
    work_ = true;
  }
  cv_.notify_all();
  return Status::OK();
}

void EtcdJobCoordinator::FlushCompletions(const std::string& job) {
  struct Write {
    int64_t step;
    CompletionRecord rec;
    size_t n;
  };
  std::vector<Write> writes;
  int64_t gen_rev, epoch, term;
  std::string coordinator;
  bool direct;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    gen_rev = st.gen_rev;
    epoch = st.decision_rev;
    term = st.coordinator_rev;
    coordinator = st.coordinator;
    // The coordinator's own completions go through etcd: they must outlive its node, whose
    // reports are lost with it while the other nodes' are sent again to its successor. A node
    // that cannot reach etcd reports nothing (its completions wait, as in etcd, until it can):
    // it could not learn the commits they would make, and its lease is running out.
    const auto now = Clock::now();
    const bool reporting = peers_ != nullptr && options_.report_to_coordinator &&
                           !coordinator.empty() && coordinator != nodes_->node_id() &&
                           etcd_->reachable();
    if (reporting && st.late_since && now < st.report_retry_at) {
      // Waiting out a late coordinator: nothing goes anywhere until the pause ends.
      WakeAtLocked(st.report_retry_at);
      return;
    }
    direct = reporting && now >= st.report_retry_at;
    // One write per step and node: a step is written once every rank of the job connected here
    // completed it (they complete within moments of each other), or when the linger runs out.
    const std::vector<store::RankKey> connected = joined_.Ranks(job);
    for (const auto& entry : st.pending) {
      const int64_t step = entry.first;
      const PendingStep& p = entry.second;  // a lambda may not capture a structured binding
      if (st.committed && step <= *st.committed) continue;
      if (p.written >= p.ranks.size()) continue;
      const bool all = std::all_of(connected.begin(), connected.end(),
                                   [&](const store::RankKey& r) { return p.ranks.count(r) > 0; });
      if (!all && now < p.since + options_.completion_linger) {
        WakeAtLocked(p.since + options_.completion_linger);
        continue;
      }
      // Stamped with the layout record its ranks joined under; pending steps of an older one
      // were dropped when this node read the newer (ApplyLayoutLocked).
      writes.push_back({step,
                        {st.gen.generation, epoch, {p.ranks.begin(), p.ranks.end()},
                         p.layout_rev.value_or(st.layout_rev)},
                        p.ranks.size()});
    }
  }
  if (!writes.empty()) test_point::Reach(kReportBuilt, job, this);
  if (direct) {
    std::string address;
    {
      reft::MutexLock lock(mu_);
      address = jobs_[job].coordinator_address;
    }
    if (address.empty()) ConnectToCoordinator(job, coordinator, term);
  }
  for (auto& w : writes) {
    if (direct) {
      StepCompletionReport report{job,         w.step,      nodes_->node_id(),    w.rec.generation,
                                  w.rec.epoch, w.rec.ranks, w.rec.layout_revision};
      const ReportOutcome outcome = ReportToCoordinator(job, coordinator, term, report);
      if (outcome == ReportOutcome::kTaken) {
        reft::MutexLock lock(mu_);
        JobState& st = jobs_[job];
        // Counts only while that coordinator's term lasts; a new term re-sends everything.
        auto p = st.pending.find(w.step);
        if (st.coordinator_rev == term && p != st.pending.end()) {
          p->second.written = std::max(p->second.written, w.n);
        }
        continue;
      }
      if (outcome == ReportOutcome::kLate) {
        reft::MutexLock lock(mu_);
        WakeAtLocked(jobs_[job].report_retry_at);  // this and the remaining steps go then
        return;
      }
      direct = false;  // this and the remaining steps go through etcd
    }
    Txn t;
    t.IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
        .IfModRevision(keys::Restore(job), Compare::kEqual, epoch)
        .IfModRevision(keys::Layout(job), Compare::kEqual, w.rec.layout_revision)
        .ThenPut(keys::Completion(job, w.step, nodes_->node_id()), Encode(w.rec));
    auto r = etcd_->Commit(t);
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (!r.ok()) {
      RetryLaterLocked();
      return;
    }
    if (!r->succeeded) {
      // The generation, the epoch or the layout moved: re-read the job (which drops what belongs
      // to the old timeline), then write again.
      st.stale = true;
      work_ = true;
      return;
    }
    ++traffic_.written;
    auto p = st.pending.find(w.step);
    if (p != st.pending.end()) p->second.written = std::max(p->second.written, w.n);
  }
}

void EtcdJobCoordinator::ConnectToCoordinator(const std::string& job, const std::string& node,
                                              int64_t term) {
  auto member = nodes_->Find(node);
  if (!member || member->state == peer::MemberState::kDead) return;
  // Every node of the job connects when a coordinator takes over (at job start, spread over
  // the nodes' joins), not all at once at the first step under a report's deadline.
  peers_->Connect(member->address);
  reft::MutexLock lock(mu_);
  JobState& st = jobs_[job];
  if (st.coordinator_rev == term) st.coordinator_address = member->address;
}

EtcdJobCoordinator::ReportOutcome EtcdJobCoordinator::ReportToCoordinator(
    const std::string& job, const std::string& node, int64_t term,
    const StepCompletionReport& report) {
  // The address was looked up once for the term (ConnectToCoordinator), not per report: N
  // nodes reporting every step must not turn into N etcd reads per step. A failure forgets
  // it, so the next round looks it up again.
  std::string address;
  std::optional<ReportRoute> route;
  {
    reft::MutexLock lock(mu_);
    const JobState& st = jobs_[job];
    if (st.coordinator_rev == term) {
      address = st.coordinator_address;
      if (st.route_term == term) route = st.route;
    }
  }
  // Through the aggregator the coordinator named (docs/coordination.md "Reports aggregate on
  // the way"): its answer is the coordinator's. A late answer is waited out on the same route
  // (the aggregator waits for a busy coordinator); any other failure drops the assignment and
  // the report goes straight to the coordinator, whose answer names a fresh one.
  Status s;
  bool via_aggregator = false;
  if (route) {
    // The aggregator waits for the coordinator's answer to the batch carrying this report.
    s = peers_->ReportStepCompletion(route->address, report, 2 * options_.report_timeout);
    via_aggregator = s.ok();
    if (!s.ok()) {
      const bool late_at_live = LateAtLiveNode(route->node, s);
      const auto patience = late_at_live ? ReportPatience() : std::chrono::milliseconds(0);
      reft::MutexLock lock(mu_);
      JobState& st = jobs_[job];
      if (st.coordinator_rev != term) {  // a new term starts afresh
        ++traffic_.report_failures;
        return ReportOutcome::kThroughEtcd;
      }
      if (late_at_live && WithinPatienceLocked(st, patience)) {
        ++traffic_.report_failures;
        PauseAfterLateLocked(st, job, route->node, s, patience);
        return ReportOutcome::kLate;
      }
      spdlog::info("job {}: aggregator {} did not carry a completion report ({}); reporting to "
                   "the coordinator directly",
                   job, route->node, s.ToString());
      if (st.route_term == term) st.route.reset();
    }
  }
  ReportRoute fresh;
  bool answered_directly = false;
  if (!via_aggregator) {
    s = address.empty() ? Status::Unavailable("node '" + node + "' is not registered")
                        : peers_->ReportStepCompletion(address, report, options_.report_timeout, &fresh);
    answered_directly = s.ok();
  }
  const bool late_at_live = !s.ok() && LateAtLiveNode(node, s);
  const auto patience = late_at_live ? ReportPatience() : std::chrono::milliseconds(0);
  reft::MutexLock lock(mu_);
  if (s.ok()) {
    ++traffic_.reported;
    if (via_aggregator) ++traffic_.via_aggregator;
  } else {
    ++traffic_.report_failures;
  }
  JobState& st = jobs_[job];
  if (st.coordinator_rev != term) {  // a new term starts afresh
    return s.ok() ? ReportOutcome::kTaken : ReportOutcome::kThroughEtcd;
  }
  if (answered_directly) {
    st.route_term = term;
    st.route = fresh.node.empty() || fresh.node == nodes_->node_id()
                   ? std::nullopt
                   : std::optional<ReportRoute>(fresh);
  }
  if (s.ok()) {
    if (!via_aggregator) st.coordinator_address = address;
    st.report_backoff = std::chrono::milliseconds(0);
    st.late_since.reset();
    return ReportOutcome::kTaken;
  }
  if (late_at_live && WithinPatienceLocked(st, patience)) {  // the address stays: it is busy
    PauseAfterLateLocked(st, job, node, s, patience);
    return ReportOutcome::kLate;
  }
  st.coordinator_address.clear();
  st.late_since.reset();
  // A coordinator that just started takes every node's first connection at once, and one that
  // is cut off from its peers may stay so: back off exponentially, from report_retry up to
  // report_retry_max, while this term lasts.
  DoubleBackoffLocked(st);
  if (st.report_backoff == options_.report_retry ||
      st.report_backoff == options_.report_retry_max) {
    spdlog::warn("job {}: coordinator {} did not take a completion report ({}); completions go "
                 "through etcd for {} ms",
                 job, node, s.ToString(), st.report_backoff.count());
  }
  st.report_retry_at = Clock::now() + st.report_backoff;
  return ReportOutcome::kThroughEtcd;
}

void EtcdJobCoordinator::DoubleBackoffLocked(JobState& st) const {
  st.report_backoff = st.report_backoff.count() == 0
                          ? options_.report_retry
                          : std::min(2 * st.report_backoff, options_.report_retry_max);
}

bool EtcdJobCoordinator::LateAtLiveNode(const std::string& node, const Status& s) const {
  if (s.code() != StatusCode::kTimeout) return false;
  // What this node knows, not an etcd read: every node of the job times out at once when its
  // coordinator is busy, and a read each (thousands) would load etcd exactly then. A node that
  // died unheard of is waited for no longer than the patience (a coordinator's term ends
  // sooner, with its lease).
  return !nodes_->HeardDead(node);
}

std::chrono::milliseconds EtcdJobCoordinator::ReportPatience() const {
  // Leases grow with the cluster (LeaseSizing): a coordinator that died is found dead within
  // its TTL, and until then its reports are late, not a reason to load etcd.
  return std::max(options_.report_patience,
                  std::chrono::duration_cast<std::chrono::milliseconds>(2 * nodes_->lease_ttl()));
}

bool EtcdJobCoordinator::WithinPatienceLocked(const JobState& st,
                                              std::chrono::milliseconds patience) const {
  return !st.late_since || Clock::now() - *st.late_since < patience;
}

void EtcdJobCoordinator::PauseAfterLateLocked(JobState& st, const std::string& job,
                                              const std::string& node, const Status& s,
                                              std::chrono::milliseconds patience) {
  ++traffic_.reports_late;
  const auto now = Clock::now();
  if (!st.late_since) {
    st.late_since = now;
    st.report_backoff = std::chrono::milliseconds(0);
    spdlog::warn("job {}: {} did not answer a completion report in time ({}); it is sent again "
                 "after a pause, not through etcd, for up to {} ms",
                 job, node, s.ToString(), patience.count());
  }
  DoubleBackoffLocked(st);
  // Jittered: the nodes whose reports timed out together must not all come back together.
  thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  st.report_retry_at =
      now + std::chrono::duration_cast<Clock::duration>(st.report_backoff * jitter(rng));
}

Result<std::vector<Status>> EtcdJobCoordinator::SendBatch(
    const std::string& address, const std::vector<StepCompletionReport>& batch) {
  test_point::Reach(kForwardBatch, batch.empty() ? std::string() : batch.front().job, this);
  auto answers = peers_->ForwardStepCompletions(address, batch, options_.report_timeout);
  if (answers.ok()) {
    reft::MutexLock lock(mu_);
    traffic_.forwarded += batch.size();
  }
  return answers;
}

// A node reports only its own ranks: ones joined there, or whose slot is recorded there. The
// coordinator's view (the joined keys it watches, the locations it commits) answers at once; a
// rank the view does not tie to the reporting node yet (its joined key's event still on the
// way) is read from etcd before the report is refused.
Status EtcdJobCoordinator::NotTied(const StepCompletionReport& report, const store::RankKey& rank) {
  return Status::PermissionDenied("completion report of job '" + report.job + "' step " +
                                  std::to_string(report.step) + " from node '" + report.node +
                                  "' names rank " + rank.ToString() +
                                  ", which is neither joined on that node nor recorded there");
}

Result<std::set<store::RankKey>> EtcdJobCoordinator::ConfirmTied(
    const StepCompletionReport& report) {
  std::vector<store::RankKey> unknown;
  {
    reft::MutexLock lock(mu_);
    auto it = jobs_.find(report.job);
    if (it == jobs_.end()) return std::set<store::RankKey>();  // refused below
    const JobState& st = it->second;
    for (const auto& r : report.ranks) {
      auto j = st.joined_at.find(r);
      auto l = st.locations.find(r);
      if ((j == st.joined_at.end() || j->second != report.node) &&
          (l == st.locations.end() || l->second != report.node)) {
        unknown.push_back(r);
      }
    }
  }
  std::set<store::RankKey> confirmed;
  for (const auto& r : unknown) {
    if (r.job != report.job) continue;  // refused below
    REFT_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd_->Get(keys::Joined(r)));
    if (!kv) continue;
    auto ref = DecodeNodeRef(kv->key, kv->value);
    if (ref.ok() && ref->node == report.node) confirmed.insert(r);
  }
  return confirmed;
}

// A node that follows the job without coordinating it carries the report on (an aggregator);
// the coordinator takes it. A batch is never forwarded again (ReceiveForwarded).
Status EtcdJobCoordinator::ReceiveCompletion(const StepCompletionReport& report) {
  std::string coordinator_address;
  std::shared_ptr<ReportForwarder> forwarder;
  {
    reft::MutexLock lock(mu_);
    auto it = jobs_.find(report.job);
    if (it != jobs_.end() && !it->second.leader && peers_ != nullptr) {
      const JobState& st = it->second;
      if (!st.coordinator.empty() && st.coordinator != nodes_->node_id() &&
          st.coordinator != report.node) {
        coordinator_address = st.coordinator_address;  // known while this node reports to it
      }
    }
    if (!coordinator_address.empty()) {
      if (!forwarder_) {
        forwarder_ = std::make_shared<ReportForwarder>(
            [this](const std::string& address, const std::vector<StepCompletionReport>& batch) {
              return SendBatch(address, batch);
            });
      }
      forwarder = forwarder_;
    }
  }
  if (forwarder) return forwarder->Forward(coordinator_address, report);
  return TakeCompletion(report, /*direct=*/true);
}

std::vector<Status> EtcdJobCoordinator::ReceiveForwarded(
    const std::vector<StepCompletionReport>& reports) {
  {
    reft::MutexLock lock(mu_);
    ++traffic_.messages;
  }
  std::vector<Status> answers;
  answers.reserve(reports.size());
  for (const auto& r : reports) answers.push_back(TakeCompletion(r, /*direct=*/false));
  return answers;
}

std::optional<ReportRoute> EtcdJobCoordinator::RouteFor(const std::string& job,
                                                        const std::string& node) {
  std::string aggregator;
  {
    reft::MutexLock lock(mu_);
    auto it = jobs_.find(job);
    if (it == jobs_.end() || !it->second.leader || options_.aggregate_from_nodes == 0) {
      return std::nullopt;
    }
    JobState& st = it->second;
    // The job has at most this many nodes: below the threshold nobody aggregates.
    if (st.joined_at.size() + st.locations.size() < options_.aggregate_from_nodes) {
      return std::nullopt;
    }
    JobState::Tree& t = st.tree;
    if (!t.computed || t.committed != st.committed || t.joined != st.joined_at.size() ||
        t.located != st.locations.size()) {
      std::set<std::string> nodes, joined;
      for (const auto& [rank, n] : st.joined_at) {
        nodes.insert(n);
        joined.insert(n);
      }
      for (const auto& [rank, n] : st.locations) nodes.insert(n);
      if (nodes != t.nodes) t.address.clear();
      t.aggregator_of =
          AssignAggregators(nodes, joined, nodes_->node_id(), options_.aggregate_from_nodes);
      t.nodes = std::move(nodes);
      t.computed = true;
      t.committed = st.committed;
      t.joined = st.joined_at.size();
      t.located = st.locations.size();
    }
    auto a = t.aggregator_of.find(node);
    if (a == t.aggregator_of.end()) return std::nullopt;
    aggregator = a->second;
    if (auto known = t.address.find(aggregator); known != t.address.end()) {
      return ReportRoute{aggregator, known->second};
    }
  }
  // Looked up once per node set (the directory caches it too), off the lock.
  auto member = nodes_->Find(aggregator);
  if (!member || member->state == peer::MemberState::kDead || member->address.empty()) {
    return std::nullopt;
  }
  reft::MutexLock lock(mu_);
  if (auto it = jobs_.find(job); it != jobs_.end()) it->second.tree.address[aggregator] = member->address;
  return ReportRoute{aggregator, member->address};
}

Status EtcdJobCoordinator::TakeCompletion(const StepCompletionReport& report, bool direct) {
  test_point::Reach(kReportArrived, report.job, this);
  if (report.step < 0) {
    return Status::InvalidArgument("completion report of job '" + report.job + "' for step " +
                                   std::to_string(report.step));
  }
  REFT_ASSIGN_OR_RETURN(const std::set<store::RankKey> confirmed, ConfirmTied(report));
  {
    reft::MutexLock lock(mu_);
    // Never creates a job's state: only a job this node coordinates takes reports.
    auto it = jobs_.find(report.job);
    if (it == jobs_.end() || !it->second.leader) {
      return Status::Protocol("node '" + nodes_->node_id() +
                              "' does not coordinate the commits of job '" + report.job + "'");
    }
    JobState& st = it->second;
    if (direct) ++traffic_.messages;
    if (report.layout_revision > st.layout_rev) {
      // A layout record this node has not read yet (its watch is behind): it re-reads; the
      // sender writes the report to etcd, whose compare of the layout record decides.
      st.stale = true;
      work_ = true;
      return Status::Unavailable("node '" + nodes_->node_id() + "' has not read layout revision " +
                                 std::to_string(report.layout_revision) + " of job '" +
                                 report.job + "' yet");
    }
    if (report.layout_revision != st.layout_rev) {
      return Status::Cancelled(
          "completion report of job '" + report.job + "' step " + std::to_string(report.step) +
          " from node '" + report.node + "' was made under layout revision " +
          std::to_string(report.layout_revision) + "; the job's layout record is revision " +
          std::to_string(st.layout_rev) + " (" + st.layout.ToString() +
          ") since it was reshaped: a completion of the old layout never counts toward the new one");
    }
    if (st.has_layout && report.ranks.size() > static_cast<size_t>(st.layout.world())) {
      return Status::InvalidArgument("completion report of job '" + report.job + "' from node '" +
                                     report.node + "' names " +
                                     std::to_string(report.ranks.size()) +
                                     " ranks; the job has " + std::to_string(st.layout.world()));
    }
    for (const auto& r : report.ranks) {
      Status ok = r.job != report.job ? Status::InvalidArgument("a rank of job '" + r.job + "'")
                  : st.has_layout     ? st.layout.CheckRank(r)
                                      : Status::OK();
      if (!ok.ok()) {
        return Status::InvalidArgument("completion report of job '" + report.job +
                                       "' from node '" + report.node + "' names rank " +
                                       r.ToString() + ": " + ok.message());
      }
    }
    if (st.committed && report.step <= *st.committed) return Status::OK();  // a late copy
    for (const auto& r : report.ranks) {
      auto j = st.joined_at.find(r);
      auto l = st.locations.find(r);
      const bool tied = (j != st.joined_at.end() && j->second == report.node) ||
                        (l != st.locations.end() && l->second == report.node);
      if (!tied && confirmed.count(r) == 0) {
        return NotTied(report, r);
      }
    }
    if (!st.completions.HasRoomFor(report.step, options_.max_pending_steps)) {
      return Status::Busy("job '" + report.job + "' has " + std::to_string(st.completions.steps()) +
                          " uncommitted steps with completions; write this one to etcd");
    }
    st.completions.Add(report.step, report.node,
                       TimelineStamp{report.generation, report.epoch, report.layout_revision, 0},
                       report.ranks);
    st.last_heard_ms[report.node] = NowUnixMs();
    ++traffic_.received;
    work_ = true;
  }
  cv_.notify_all();
  return Status::OK();
}

CompletionTraffic EtcdJobCoordinator::completion_traffic() const {
  reft::MutexLock lock(mu_);
  return traffic_;
}

void EtcdJobCoordinator::OnCompletionEvent(const std::string& job, const WatchUpdate& u) {
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (!st.leader) return;
    if (u.reset) {
      // Events may have been missed: lead again (this node still holds the key) and re-read
      // the completions in etcd; the reports received meanwhile stay.
      st.leader = false;
      st.want_lead = true;
      TakeLeaderWatchesLocked(st, &cancel_watches_);
    }
    for (const auto& e : u.events) {
      if (e.type != WatchEvent::Type::kPut) continue;
      const int64_t step = keys::CompletionStep(job, e.kv.key);
      if (step < 0) continue;
      if (st.committed && step <= *st.committed) continue;
      auto rec = DecodeCompletion(job, e.kv.key, e.kv.value);
      if (!rec.ok()) {
        spdlog::error("{}", rec.status().ToString());
        continue;
      }
      const std::string node = e.kv.key.substr(e.kv.key.rfind('/') + 1);
      st.completions.Add(step, node,
                         TimelineStamp{rec->generation, rec->epoch, rec->layout_revision, 0},
                         rec->ranks);
      st.last_heard_ms[node] = NowUnixMs();
    }
    work_ = true;
  }
  cv_.notify_all();
}

TimelineStamp EtcdJobCoordinator::CountingTimeline(const JobState& st) {
  return TimelineStamp{st.gen.generation, st.decision_rev, st.layout_rev, 0};
}

Status EtcdJobCoordinator::LayoutMoved(const store::RankKey& rank, int64_t step,
                                       int64_t joined_under, int64_t current) {
  return Status::Cancelled("step " + std::to_string(step) + " of " + rank.ToString() +
                           " is not counted: the job's layout record changed (revision " +
                           std::to_string(current) + ") since this trainer joined under revision " +
                           std::to_string(joined_under) +
                           "; restart the trainer so that it joins the job's layout");
}

void EtcdJobCoordinator::TryCommit(const std::string& job) {
  int64_t step = -1;
  uint64_t generation;
  int64_t gen_rev, committed_rev, epoch, layout_rev;
  std::vector<std::pair<store::RankKey, std::string>> moved;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (!st.leader || !st.has_layout) return;
    generation = st.gen.generation;
    epoch = st.decision_rev;
    layout_rev = st.layout_rev;
    // The newest step whose completions (of this generation, restore epoch and layout record)
    // cover every rank of the layout.
    const TimelineStamp now = CountingTimeline(st);
    const std::optional<int64_t> covered = st.completions.NewestCovered(now, &st.layout);
    if (!covered || (st.committed && *covered <= *st.committed)) return;
    step = *covered;
    for (const auto& [node, rec] : st.completions.Counting(step, now)) {
      for (const auto& r : rec->ranks) {
        auto loc = st.locations.find(r);
        if (loc == st.locations.end() || loc->second != node) moved.emplace_back(r, node);
      }
    }
    gen_rev = st.gen_rev;
    committed_rev = st.committed_rev;
  }
  // A persist holds the commit until every node pinned the held step (persist_hold.h).
  if (auto held = persist_hold_.HeldUntil(job, step); !held.ok() || *held) {
    reft::MutexLock lock(mu_);
    held.ok() ? WakeAtLocked(**held) : RetryLaterLocked();
    return;
  }
  // Slot locations that changed (a rank on another node than at the last commit): written
  // with the commit, or before it in batches when there are many (a whole job moved).
  const size_t room = options_.max_txn_ops - 2;
  size_t first = 0;
  while (moved.size() - first > room) {
    Txn batch;
    batch.IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
        .IfModRevision(keys::Layout(job), Compare::kEqual, layout_rev);
    for (size_t i = 0; i < options_.max_txn_ops && first < moved.size(); ++i, ++first) {
      batch.ThenPut(keys::Location(moved[first].first), Encode(NodeRef{moved[first].second, step}));
    }
    auto r = etcd_->Commit(batch);
    if (!r.ok() || !r->succeeded) {
      reft::MutexLock lock(mu_);
      if (r.ok()) {
        jobs_[job].stale = true;  // the generation or layout moved: re-read, then decide again
        work_ = true;
      } else {
        RetryLaterLocked();
      }
      return;
    }
  }
  Txn t;
  // The commit stands only in the timeline its completions were counted in: the generation,
  // the restore epoch and the layout record (a reshape a partitioned coordinator has not seen
  // yet fails it), and after the commit point it read.
  const CommittedRecord committed{step, generation, NowUnixMs(), epoch, layout_rev};
  t.IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
      .IfModRevision(keys::Committed(job), Compare::kEqual, committed_rev)
      .IfModRevision(keys::Restore(job), Compare::kEqual, epoch)
      .IfModRevision(keys::Layout(job), Compare::kEqual, layout_rev)
      .ThenPut(keys::Committed(job), Encode(committed));
  persist_hold_.Guard(job, &t);  // a hold written since HeldUntil read it fails the commit
  for (size_t i = first; i < moved.size(); ++i) {
    t.ThenPut(keys::Location(moved[i].first), Encode(NodeRef{moved[i].second, step}));
  }
  t.ThenDeleteRange(keys::CompletionsPrefix(job), keys::CompletionsEnd(job, step));
  auto r = etcd_->Commit(t);
  reft::MutexLock lock(mu_);
  JobState& st = jobs_[job];
  if (!r.ok()) {
    RetryLaterLocked();
    return;
  }
  if (!r->succeeded) {
    st.stale = true;  // the timeline or the commit point moved: re-read, then decide again
    work_ = true;
    return;
  }
  for (const auto& [rank, node] : moved) st.locations[rank] = node;
  // The watch delivers the commit too; applying it now saves this node a round trip.
  KeyValue kv;
  kv.key = keys::Committed(job);
  kv.value = Encode(committed);
  kv.mod_revision = r->revision;
  ApplyCommittedLocked(job, st, kv);
  cv_.notify_all();
}

}  // namespace reft::coord
