// Event-driven policy simulator: one failure trace, three policies, one estimator.
#include "policy_sim.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "reft/planner/odyssey.h"
#include "oobleck.h"

namespace reft::planner {

const char* PolicyKindName(PolicyKind k) {
  switch (k) {
    case PolicyKind::kOdyssey: return "odyssey";
    case PolicyKind::kOobleck: return "oobleck";
    case PolicyKind::kRecycle: return "recycle";
  }
  return "?";
}

namespace {

constexpr double kMsPerHour = 3.6e6;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Samples over time: B / step while running, nothing while a transition runs. Remembers the
// samples at the last persistent checkpoint (multiples of the checkpoint period) for rollbacks.
class Timeline {
 public:
  Timeline(int batch, double checkpoint_interval) : batch_(batch), interval_(checkpoint_interval) {}
  void RunUntil(double until) {
    const double rate = std::isfinite(step_) && step_ > 0 ? batch_ / step_ : 0;
    const double from = std::max(t_, resume_);
    if (interval_ > 0)
      for (double b = (std::floor(t_ / interval_) + 1) * interval_; b <= until; b += interval_)
        at_checkpoint_ = samples_ + rate * std::max(0.0, b - from);
    if (until > from) samples_ += rate * (until - from);
    t_ = std::max(t_, until);
  }
  void SetStep(double step) { step_ = step; }
  double step() const { return step_; }
  // A transition of `ms` starting now (a failure during a transition restarts it).
  double Pause(double ms) {
    const double before = std::max(0.0, resume_ - t_);
    resume_ = t_ + ms;
    return ms - std::min(ms, before);  // downtime added beyond what was already pending
  }
  void RollBackToCheckpoint() { samples_ = at_checkpoint_; }
  double samples() const { return samples_; }

 private:
  int batch_;
  double interval_;
  double t_ = 0, resume_ = 0, samples_ = 0, at_checkpoint_ = 0, step_ = kInf;
};

std::vector<std::pair<double, int>> FailureTrace(const PolicySimConfig& c, uint64_t seed) {
  // Independent exponential lifetimes per unit; the same seed gives every policy the same trace.
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> life(c.failure_rate_per_hour);
  std::vector<std::pair<double, int>> events;
  for (int u = 0; u < c.nodes; ++u) {
    const double t = life(rng) * kMsPerHour;
    if (t < c.hours * kMsPerHour) events.push_back({t, u});
  }
  std::sort(events.begin(), events.end());
  return events;
}

odyssey::SearchOptions Options(const PolicySimConfig& c) {
  odyssey::SearchOptions so;
  so.micro_batches = c.micro_batches;
  so.device_memory = c.device_memory;
  so.edge_latency = c.edge_latency;
  so.network = c.network;
  so.min_pp = c.min_pp;
  so.max_pp = c.max_pp ? c.max_pp : 2 * c.pp;
  return so;
}

// Best symmetric DP × PP plan on at most `nodes` units (the rest idle).
Result<odyssey::ExecutionPlan> BestSymmetricPlan(const ModelProfile& m, int nodes, const odyssey::SearchOptions& so) {
  Result<odyssey::ExecutionPlan> best = Status::InvalidArgument("cluster.nodes: no symmetric plan for " +
                                                                std::to_string(nodes) + " units");
  const int max_pp = std::min(so.max_pp ? so.max_pp : nodes, nodes);
  for (int pp = std::max(1, so.min_pp); pp <= max_pp; ++pp) {
    odyssey::SearchOptions o = so;
    o.min_pp = o.max_pp = pp;
    auto p = odyssey::BestPlan(m, (nodes / pp) * pp, o);
    if (p.ok() && (!best.ok() || p->step_time < best->step_time)) best = p;
  }
  return best;
}

std::vector<int> Units(int n) {
  std::vector<int> u(n);
  for (int i = 0; i < n; ++i) u[i] = i;
  return u;
}

// A policy reacts to one failed unit: it updates its layout and the timeline, or says stop.
using FailureHandler = std::function<Status(int unit, std::vector<bool>& alive, Timeline& tl, PolicyRun& run, bool& stop)>;

// Runs the trace: the policy starts at `initial_step` and reacts to every failure.
Result<PolicyRun> Drive(const PolicySimConfig& c, uint64_t seed, double initial_step, const FailureHandler& on_failure) {
  Timeline tl(c.micro_batches * c.micro_batch_size, c.checkpoint_interval_ms);
  tl.SetStep(initial_step);
  PolicyRun run;
  std::vector<bool> alive(c.nodes, true);
  for (const auto& [te, unit] : FailureTrace(c, seed)) {
    tl.RunUntil(te);
    ++run.failures;
    alive[unit] = false;
    bool stop = false;
    REFT_RETURN_NOT_OK(on_failure(unit, alive, tl, run, stop));
    if (stop) {
      tl.SetStep(kInf);
      run.decisions.push_back("stop");
      break;
    }
  }
  tl.RunUntil(c.hours * kMsPerHour);
  run.samples = tl.samples();
  run.throughput = run.samples / c.hours;
  return run;
}

// The fallback of every policy when a layer lost its last live copy: back to the persistent
// checkpoint, restart on the live units at `step`.
void RestartFromCheckpoint(const PolicySimConfig& c, double step, Timeline& t, PolicyRun& run) {
  t.RollBackToCheckpoint();
  t.SetStep(step);
  run.downtime_ms += t.Pause(c.restart_ms + c.checkpoint_load_ms);
  run.decisions.push_back("checkpoint-restart");
}

bool InLayout(const odyssey::Layout& l, int unit) {
  for (const auto& p : l.node)
    if (std::find(p.begin(), p.end(), unit) != p.end()) return true;
  return false;
}

int LiveCount(const std::vector<bool>& alive) { return static_cast<int>(std::count(alive.begin(), alive.end(), true)); }

Result<PolicyRun> RunOdyssey(const ModelProfile& m, const PolicySimConfig& c, uint64_t seed,
                             const odyssey::ExecutionPlan& initial) {
  const int B = c.micro_batches * c.micro_batch_size;
  const auto so = Options(c);
  odyssey::Layout cur = odyssey::Layout::Of(initial, Units(c.dp * c.pp));
  odyssey::RecoveryCosts costs;
  costs.restart_ms = c.restart_ms;
  costs.snapshot_load_ms = c.snapshot_load_ms;
  costs.transfer_bytes_per_ms = c.transfer_bytes_per_ms;
  return Drive(c, seed, cur.step, [&](int unit, std::vector<bool>& alive, Timeline& t, PolicyRun& run, bool& stop) {
    if (!InLayout(cur, unit)) return Status::OK();  // an idle unit
    costs.expected_interval_ms = kMsPerHour / c.failure_rate_per_hour / std::max(1, LiveCount(alive));
    std::vector<bool> before = alive;
    before[unit] = true;
    auto ev = odyssey::EvaluateFailure(m, cur, {unit}, before, B, so, costs);
    if (!c.restart_from_memory) ev.candidates[2].feasible = false;
    const int pick = odyssey::ChooseCandidate(ev.candidates);
    if (pick < 0) {
      // Neither rerouting nor a copy from live replicas can continue (a layer lost its last
      // holder): roll back to the persistent checkpoint, as the baselines do.
      if (!ev.new_plan.ok()) { stop = true; return Status::OK(); }
      cur = odyssey::Layout::Of(*ev.new_plan, ev.live_ids);
      RestartFromCheckpoint(c, cur.step, t, run);
      return Status::OK();
    }
    const auto& ch = ev.candidates[pick];
    run.decisions.push_back(odyssey::PolicyName(ch.policy));
    if (ch.policy == odyssey::Policy::kReroute) {
      cur.step = ch.step_time;
    } else if (ch.policy == odyssey::Policy::kReconfigure) {
      std::vector<int> order(ev.live_ids.size(), -1);  // live unit i takes position position_of_node[i]
      for (size_t i = 0; i < ev.live_ids.size(); ++i)
        if (ev.transfer.position_of_node[i] >= 0) order[ev.transfer.position_of_node[i]] = ev.live_ids[i];
      cur = odyssey::Layout::Of(*ev.new_plan, order);
    } else {
      cur = odyssey::Layout::Of(*ev.new_plan, ev.live_ids);
    }
    t.SetStep(cur.step);
    run.downtime_ms += t.Pause(ch.transition);
    return Status::OK();
  });
}

Result<PolicyRun> RunRecycle(const ModelProfile& m, const PolicySimConfig& c, uint64_t seed,
                             const odyssey::ExecutionPlan& initial) {
  const auto so = Options(c);
  odyssey::Layout cur = odyssey::Layout::Of(initial, Units(c.dp * c.pp));
  return Drive(c, seed, cur.step, [&](int unit, std::vector<bool>& alive, Timeline& t, PolicyRun& run, bool& stop) {
    if (!InLayout(cur, unit)) return Status::OK();
    auto rerouted = odyssey::ReroutedStep(m, cur, alive, so);
    if (!rerouted.ok() && rerouted.status().code() != StatusCode::kInvalidArgument) return rerouted.status();
    if (rerouted.ok()) {
      cur.step = *rerouted;
      t.SetStep(cur.step);
      run.decisions.push_back("reroute");
      return Status::OK();
    }
    // A stage lost its last replica: roll back to the persistent checkpoint, restart symmetric.
    std::vector<int> live;
    for (int u = 0; u < c.nodes; ++u)
      if (alive[u]) live.push_back(u);
    auto plan = BestSymmetricPlan(m, static_cast<int>(live.size()), so);
    if (!plan.ok()) { stop = true; return Status::OK(); }
    cur = odyssey::Layout::Of(*plan, live);
    RestartFromCheckpoint(c, cur.step, t, run);
    return Status::OK();
  });
}

// Oobleck-like: pipelines of template sizes; every node hosts one stage (one GPU per unit).
struct OobleckJob {
  oobleck::NodeSpec spec;
  oobleck::InstantiationModel im;
  std::map<int, const oobleck::PipelineTemplate*> by_size;
  std::vector<oobleck::Pipeline> pipelines;

  // The layers unit `id` holds in the current pipelines.
  std::map<int, std::vector<int>> Holdings() const {
    std::map<int, std::vector<int>> out;
    for (const auto& p : pipelines) {
      const auto* t = by_size.at(static_cast<int>(p.nodes.size()));
      for (size_t k = 0; k < p.nodes.size(); ++k)
        for (int l = t->stages[k].first_layer; l < t->stages[k].last_layer; ++l) out[p.nodes[k]].push_back(l);
    }
    return out;
  }
  Result<odyssey::ExecutionPlan> Plan(const ModelProfile& m, const odyssey::SearchOptions& so, int B, int b) const {
    odyssey::ExecutionPlan plan;
    std::vector<const oobleck::PipelineTemplate*> ts;
    for (const auto& p : pipelines) {
      const auto* t = by_size.at(static_cast<int>(p.nodes.size()));
      ts.push_back(t);
      std::vector<int> counts;
      for (const auto& s : t->stages) counts.push_back(s.last_layer - s.first_layer);
      plan.layers_per_stage.push_back(counts);
    }
    REFT_ASSIGN_OR_RETURN(auto batch, oobleck::DistributeBatch(ts, B, b));
    plan.micro_batches = batch.micro_batches;
    REFT_RETURN_NOT_OK(odyssey::EstimateStep(m, so, plan));
    return plan;
  }
};

Result<PolicyRun> RunOobleck(const ModelProfile& m, const PolicySimConfig& c, uint64_t seed) {
  const int B = c.micro_batches * c.micro_batch_size;
  const auto so = Options(c);
  ClusterSpec cluster;
  cluster.nodes = c.nodes;
  cluster.device_memory_bytes = c.device_memory;
  oobleck::TemplatePlanner tp(m, cluster);
  int n0 = oobleck::MinNodesForMemory(m, cluster);
  while (n0 <= c.nodes && !tp.Plan(n0).ok()) ++n0;
  OobleckJob job;
  REFT_ASSIGN_OR_RETURN(job.spec, oobleck::SpecifyNodes(c.nodes, c.oobleck_f, n0));
  if (c.pp < job.spec.n0 || c.pp > job.spec.n_max)
    return Status::InvalidArgument("policy_sim.pp: no Oobleck template of " + std::to_string(c.pp) + " nodes");
  job.im.model = &m;
  job.im.f = c.oobleck_f;
  job.im.global_batch = B;
  job.im.micro_batch = c.micro_batch_size;
  job.im.network = c.network;
  for (auto it = job.spec.sizes.rbegin(); it != job.spec.sizes.rend(); ++it) {  // largest fills the memo
    REFT_ASSIGN_OR_RETURN(auto t, tp.Plan(*it));
    job.im.templates.insert(job.im.templates.begin(), t);
  }
  for (const auto& t : job.im.templates) job.by_size[t.nodes] = &t;
  for (int p = 0; p < c.dp; ++p) {
    oobleck::Pipeline pipe;
    for (int s = 0; s < c.pp; ++s) pipe.nodes.push_back(p * c.pp + s);
    job.pipelines.push_back(pipe);
  }
  REFT_ASSIGN_OR_RETURN(auto plan, job.Plan(m, so, B, c.micro_batch_size));
  std::vector<uint64_t> bytes;
  for (size_t l = 0; l < m.layers.size(); ++l) bytes.push_back(m.StateBytes(static_cast<int>(l)));
  return Drive(c, seed, plan.step_time, [&](int unit, std::vector<bool>&, Timeline& t, PolicyRun& run, bool& stop) {
    bool in_job = false;
    for (const auto& p : job.pipelines) in_job = in_job || std::count(p.nodes.begin(), p.nodes.end(), unit);
    if (!in_job) return Status::OK();
    const auto holds = job.Holdings();
    REFT_ASSIGN_OR_RETURN(auto r, oobleck::HandleFailures(job.spec, job.im, job.pipelines, {unit}));
    // Fewer than (f+1)·n0 live nodes: Oobleck stores its progress and exits; nobody returns here.
    if (r.exit_required) { stop = true; return Status::OK(); }
    // Every node takes its stage in the new pipelines and copies the layers it lacks.
    std::vector<std::vector<int>> held, roles;
    for (const auto& p : r.pipelines) {
      const auto* tm = job.by_size.at(static_cast<int>(p.nodes.size()));
      for (size_t k = 0; k < p.nodes.size(); ++k) {
        auto it = holds.find(p.nodes[k]);
        held.push_back(it == holds.end() ? std::vector<int>{} : it->second);
        std::vector<int> need;
        for (int l = tm->stages[k].first_layer; l < tm->stages[k].last_layer; ++l) need.push_back(l);
        roles.push_back(need);
      }
    }
    auto tr = odyssey::PositionalTransfer(held, roles, bytes);
    job.pipelines = r.pipelines;
    REFT_ASSIGN_OR_RETURN(auto np, job.Plan(m, so, B, c.micro_batch_size));
    t.SetStep(np.step_time);
    if (!tr.ok()) {  // a layer lost its last live copy
      RestartFromCheckpoint(c, np.step_time, t, run);
      return Status::OK();
    }
    run.downtime_ms += t.Pause(c.restart_ms + tr->max_link_bytes() / c.transfer_bytes_per_ms);
    run.decisions.push_back(r.actions.empty() ? "reinstantiate" : r.actions.back().substr(0, r.actions.back().find(' ')));
    return Status::OK();
  });
}

}  // namespace

Result<PolicyRun> SimulatePolicy(const ModelProfile& m, const PolicySimConfig& c, PolicyKind kind, uint64_t seed) {
  if (c.dp < 1 || c.pp < 1 || c.dp * c.pp > c.nodes) return Status::InvalidArgument("policy_sim.dp*pp: exceeds nodes");
  if (c.micro_batches < c.dp) return Status::InvalidArgument("policy_sim.micro_batches: fewer than dp");
  if (!(c.failure_rate_per_hour > 0)) return Status::InvalidArgument("policy_sim.failure_rate_per_hour: must be > 0");
  if (kind == PolicyKind::kOobleck) return RunOobleck(m, c, seed);
  // Odyssey and ReCycle start from the symmetric DP × PP plan of the search.
  auto so = Options(c);
  so.min_pp = so.max_pp = c.pp;
  auto initial = odyssey::BestPlan(m, c.dp * c.pp, so);
  if (!initial.ok()) return initial.status().WithContext("policy_sim initial plan");
  if (initial->layers_per_stage.size() != static_cast<size_t>(c.dp))
    return Status::Internal("policy_sim initial plan is not " + std::to_string(c.dp) + " pipelines");
  return kind == PolicyKind::kOdyssey ? RunOdyssey(m, c, seed, *initial) : RunRecycle(m, c, seed, *initial);
}

}  // namespace reft::planner
