// The decision over a running job: its model (ranks, layers, step time, profile) in, the scored
// policies, the new layout with every rank's node and the Kuhn–Munkres transfer out.
#include "reft/planner/online.h"

#include <algorithm>
#include <map>
#include <set>

#include "oobleck.h"
#include "reft/planner/profile.h"

namespace reft::planner::online {

using nlohmann::json;

namespace {

const json& Member(const json& in, const char* key) {
  static const json kNull;
  if (!in.is_object()) return kNull;
  auto it = in.find(key);
  return it == in.end() ? kNull : *it;
}

// The layers of each pipeline stage; they must split 0..L-1 in stage order (a pipeline).
Result<std::vector<int>> StageCounts(const JobModelView& m) {
  if (m.layers.empty())
    return Status::InvalidArgument(
        "job '" + m.job +
        "': no buffer of the committed step names a layer, so the planner cannot size what to move: "
        "create reft.torch.Checkpointer without layer_of= (it infers the layers) or with a layer_of= that "
        "returns each parameter's layer, or register buffers with a layer (Python: "
        "Client.register(..., layer=N))");
  std::vector<int> counts(std::max(1, m.pp), 0);
  int last_stage = 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerBytes& l = m.layers[i];
    if (l.layer != static_cast<int>(i))
      return Status::InvalidArgument("job '" + m.job + "': layer " + std::to_string(i) +
                                     " is missing (layers must be numbered 0..L-1)");
    if (l.stage < last_stage || l.stage >= static_cast<int>(counts.size()))
      return Status::InvalidArgument("job '" + m.job + "': layer " + std::to_string(i) + " is held by stage " +
                                     std::to_string(l.stage) + ", after a layer of stage " +
                                     std::to_string(last_stage) + " (stages must hold consecutive layers in order)");
    last_stage = l.stage;
    ++counts[l.stage];
  }
  for (size_t s = 0; s < counts.size(); ++s)
    if (counts[s] == 0)
      return Status::InvalidArgument("job '" + m.job + "': stage pp" + std::to_string(s) + " holds no layer");
  return counts;
}

// The units (one per pipeline position, pipeline-major: dp replica d, stage s -> d·pp + s) and
// the node of each; a position whose tensor-parallel ranks run on several nodes is lost with
// any of them, so its node list keeps them all.
std::vector<std::set<std::string>> UnitNodes(const JobModelView& m) {
  std::vector<std::set<std::string>> nodes(static_cast<size_t>(m.dp) * m.pp);
  for (const auto& r : m.ranks) {
    if (r.dp < 0 || r.dp >= m.dp || r.pp < 0 || r.pp >= m.pp) continue;
    nodes[static_cast<size_t>(r.dp) * m.pp + r.pp].insert(r.node);
  }
  return nodes;
}

std::string NodeOf(const std::set<std::string>& nodes) { return nodes.empty() ? "" : *nodes.begin(); }

json LayersJson(const std::vector<int>& layers) {
  if (layers.empty()) return {{"first", nullptr}, {"last", nullptr}};
  return {{"first", layers.front()}, {"last", layers.back()}};
}

struct Profile {
  ModelProfile model;
  std::string source;  // "attached" | "measured_step_time"
  std::string note;
};

// Rerouting keeps every pipeline and gives a dead stage's micro-batches to its live peers; a
// reft job restarts all its ranks as one dp x tp x pp layout, which can drop whole pipelines
// but not one stage of a pipeline whose other stages go on. Such a reroute is refused (its
// pipeline's survivors are reconfigured instead).
void RefuseStageReroute(const odyssey::Layout& cur, const std::vector<bool>& alive,
                        odyssey::FailureEvaluation* ev) {
  for (size_t d = 0; d < cur.node.size(); ++d) {
    const auto& pipe = cur.node[d];
    const auto live = std::count_if(pipe.begin(), pipe.end(), [&](int u) { return alive[u]; });
    if (live == 0 || live == static_cast<long>(pipe.size())) continue;
    for (auto& c : ev->candidates) {
      if (c.policy != odyssey::Policy::kReroute || !c.feasible) continue;
      c.feasible = false;
      c.score = 0;
      c.why = "pipeline " + std::to_string(d) + " lost " + std::to_string(pipe.size() - live) + " of its " +
              std::to_string(pipe.size()) +
              " stages: rerouting them keeps its other stages, and a dp x tp x pp layout cannot";
    }
  }
}

// The pipelines of `plan` with the node at each position: row i of `transfer` (named
// `row_node[i]`) takes position transfer.position_of_node[i].
json PipelinesJson(const odyssey::ExecutionPlan& plan, const odyssey::TransferPlan& transfer,
                   const std::vector<std::string>& row_node) {
  const auto roles = odyssey::StageLayerLists(plan);
  std::vector<std::string> node_at(roles.size());
  for (size_t i = 0; i < row_node.size() && i < transfer.position_of_node.size(); ++i) {
    const int pos = transfer.position_of_node[i];
    if (pos >= 0) node_at[pos] = row_node[i];
  }
  json pipelines = json::array();
  size_t k = 0;
  for (const auto& pipe : plan.layers_per_stage) {
    json stages = json::array();
    for (size_t s = 0; s < pipe.size(); ++s, ++k)
      stages.push_back({{"node", node_at[k]}, {"layers", LayersJson(roles[k])}});
    pipelines.push_back({{"stages", stages}});
  }
  return pipelines;
}

// What a decision that restarts the job in a new layout moves, before it does: every node of the
// layout pulls what it lacks of the layers it will host (`hosts`). `moves` are the whole layers
// that change node (Kuhn–Munkres, `km`; its rows are named by `row_node`); the rest a node lacks
// are the other members' shards of layers it keeps, which only the node can tell (its own slots
// and the copies it holds): `fill` estimates them.
json TransferJson(const json& pipelines, const odyssey::TransferPlan* km, const std::vector<std::string>& row_node,
                  uint64_t fill) {
  json moves = json::array();
  if (km != nullptr)
    for (const auto& mv : km->moves)
      moves.push_back({{"layer", mv.layer}, {"from_node", row_node[mv.from]}, {"to_node", row_node[mv.to]},
                       {"bytes", mv.bytes}});
  std::map<std::string, std::set<int>> hosted;
  for (const auto& pipe : pipelines)
    for (const auto& st : pipe["stages"]) {
      if (!st["node"].is_string() || st["layers"]["first"].is_null()) continue;  // rerouted: nobody hosts it
      for (int l = st["layers"]["first"]; l <= st["layers"]["last"].get<int>(); ++l)
        hosted[st["node"].get<std::string>()].insert(l);
    }
  json hosts = json::array();
  for (const auto& [node, layers] : hosted) hosts.push_back({{"node", node}, {"layers", layers}});
  return {{"moves", moves},
          {"hosts", hosts},
          {"fill_bytes", fill},
          {"total_bytes", km ? km->total_bytes : 0},
          {"max_sender_bytes", km ? km->max_sender_bytes : 0},
          {"max_receiver_bytes", km ? km->max_receiver_bytes : 0},
          {"executed", false}};
}

// The step time of the best plan on `units` positions: Odyssey's own search (pipelines of
// different lengths, every position used) or the uniform one (`uniform_step_ms`, positions
// left idle), whichever is faster. Beside a decision's layout it shows what restricting
// decisions to dp x tp x pp layouts costs. Null when no plan fits.
json UnrestrictedStepMs(const ModelProfile& model, int units, odyssey::SearchOptions so, double uniform_step_ms) {
  so.uniform = false;
  auto plan = odyssey::BestPlan(model, units, so);
  if (!plan.ok()) return uniform_step_ms > 0 ? json(uniform_step_ms) : json(nullptr);
  return uniform_step_ms > 0 ? std::min(plan->step_time, uniform_step_ms) : plan->step_time;
}

// The recovery costs of the job's policy (its profile's `policy`) for `live_units`, with the bytes
// of each layer and what each unit (pipeline position: its tensor-parallel ranks' slots) holds.
Result<odyssey::RecoveryCosts> JobCosts(const JobModelView& m, const json& profile,
                                        const std::vector<uint64_t>& layer_bytes, int live_units) {
  REFT_ASSIGN_OR_RETURN(auto costs, ParseRecoveryCosts(Member(profile, "policy"), live_units));
  costs.layer_bytes = layer_bytes;
  if (!m.held.empty()) {
    costs.unit_held_bytes.assign(static_cast<size_t>(m.dp) * m.pp, std::vector<uint64_t>(layer_bytes.size(), 0));
    for (size_t r = 0; r < m.ranks.size() && r < m.held.size(); ++r) {
      const auto& rk = m.ranks[r];
      if (rk.dp < 0 || rk.dp >= m.dp || rk.pp < 0 || rk.pp >= m.pp) continue;
      auto& row = costs.unit_held_bytes[static_cast<size_t>(rk.dp) * m.pp + rk.pp];
      for (size_t l = 0; l < row.size() && l < m.held[r].size(); ++l) row[l] += m.held[r][l];
    }
  }
  return costs;
}

// Growing onto live nodes outside the job — a node back after a loss, or a new one — up to its
// peak size (Oobleck re-instantiates its pipelines when nodes join; Odyssey plans for failures
// only). The candidate is the best plan on the units they add, the survivors placed by
// Kuhn–Munkres on what their slots hold and the joining nodes holding nothing; it is chosen when
// its score (Odyssey's: throughput over the expected time to the next failure, less the
// transition — a restart and the busiest link's copy of what the positions lack) beats going on
// as the job runs. Returns the decision, or null with `why` when the job stays as it is.
json GrowthDecision(const ModelProfile& model, const odyssey::Layout& cur,
                    const std::vector<std::set<std::string>>& unit_nodes, int job_node_count,
                    const std::vector<std::string>& spares, int peak, const odyssey::SearchOptions& so,
                    const odyssey::RecoveryCosts& costs, std::string* why) {
  const int U = static_cast<int>(unit_nodes.size());
  const int L = static_cast<int>(costs.layer_bytes.size());
  // A node brings as many positions as the job's nodes run each.
  const int per_node = std::max(1, U / std::max(1, job_node_count));
  const size_t wanted = static_cast<size_t>((peak - U + per_node - 1) / per_node);
  const std::vector<std::string> joining(spares.begin(), spares.begin() + std::min(spares.size(), wanted));
  const int units = std::min(peak, U + static_cast<int>(joining.size()) * per_node);
  auto plan = odyssey::BestPlan(model, units, so);
  if (!plan.ok()) {
    *why = "no plan on " + std::to_string(units) + " positions: " + plan.status().message();
    return nullptr;
  }
  std::vector<int> ids;
  std::vector<std::vector<int>> held;
  odyssey::LiveHoldings(cur, std::vector<bool>(U, true), ids, held);
  std::vector<std::string> row_node;
  odyssey::HeldBytes held_bytes;
  for (int id : ids) {
    row_node.push_back(NodeOf(unit_nodes[id]));
    if (!costs.unit_held_bytes.empty()) held_bytes.push_back(costs.unit_held_bytes[id]);
  }
  for (const auto& node : joining)
    for (int k = 0; k < per_node; ++k) {
      held.emplace_back();
      row_node.push_back(node);
      if (!held_bytes.empty()) held_bytes.emplace_back(L, 0);
    }
  auto transfer = odyssey::AssignTransfer(costs, held, odyssey::StageLayerLists(*plan), costs.layer_bytes, held_bytes);
  if (!transfer.ok()) {
    *why = "no transfer onto " + std::to_string(units) + " positions: " + transfer.status().message();
    return nullptr;
  }
  const double stay = odyssey::Score(so.micro_batches, cur.plan.step_time, 0, costs.expected_interval_ms);
  const double transition = odyssey::CopyTransition(costs, *transfer);
  const double grow = odyssey::Score(so.micro_batches, plan->step_time, transition, costs.expected_interval_ms);
  json candidates = json::array(
      {{{"policy", "stay"}, {"feasible", true}, {"step_ms", cur.plan.step_time}, {"transition_ms", 0.0}, {"score", stay}},
       {{"policy", "grow"}, {"feasible", true}, {"step_ms", plan->step_time}, {"transition_ms", transition},
        {"score", grow}}});
  std::string onto;
  for (const auto& n : joining) onto += (onto.empty() ? "" : ", ") + n;
  if (grow <= stay) {
    *why = "growing onto " + onto + " (" + std::to_string(units) + " positions) would not raise the score";
    return nullptr;
  }
  const json pipelines = PipelinesJson(*plan, *transfer, row_node);
  return {{"needed", true},
          {"policy", "grow"},
          {"reason", "the job runs " + std::to_string(U) + " of the " + std::to_string(peak) +
                         " positions it had; growing onto " + onto + " has the higher score (throughput over the "
                         "expected time to the next failure, less the transition)"},
          {"joining_nodes", joining},
          {"candidates", candidates},
          {"expected_interval_ms", costs.expected_interval_ms},
          {"new_layout", {{"pipelines", pipelines},
                          {"micro_batches", plan->micro_batches},
                          {"step_ms", plan->step_time},
                          {"unrestricted_step_ms", UnrestrictedStepMs(model, units, so, plan->step_time)}}},
          // No transfer plan runs ahead: the job commits steps until the launcher restarts it
          // onto the nodes that came, so layers staged now would be of an older step by then.
          // The new positions read what they lack from the holders as they restore.
          {"restore_fetch_bytes", transfer->total_bytes + transfer->fill_bytes}};
}

// Restart on spares from memory: the same layout (step `running_step`), each lost node's ranks on
// a spare; a restart and a snapshot load. With fewer spares than lost nodes it is infeasible, and
// its step, transition and score are still set: what it would do with a spare for each, which the
// coordinator weighs against deciding now when it considers waiting for one (spare_wait.h).
odyssey::Candidate RestartOnSpare(double running_step, const odyssey::RecoveryCosts& costs, int micro_batches,
                                  size_t spares, size_t lost) {
  odyssey::Candidate spare{odyssey::Policy::kRestart};
  spare.feasible = spares >= lost;
  spare.step_time = running_step;
  spare.transition = costs.restart_ms + costs.snapshot_load_ms;
  spare.score = odyssey::Score(micro_batches, spare.step_time, spare.transition, costs.expected_interval_ms);
  if (!spare.feasible) {
    spare.why = std::to_string(spares) + " spare node(s) for " + std::to_string(lost) +
                " lost node(s) (step, transition and score: with a spare for each)";
  }
  return spare;
}

// A candidate in the decision: its step, transition and score when feasible, else why not — and
// for restart_on_spare without spares, what it would do with them (RestartOnSpare).
json CandidateJson(const odyssey::Candidate& c, const std::string& name) {
  json x = {{"policy", name}, {"feasible", c.feasible}};
  if (c.feasible || (name == "restart_on_spare" && c.step_time > 0)) {
    x["step_ms"] = c.step_time;
    x["transition_ms"] = c.transition;
    x["score"] = c.score;
  }
  if (!c.feasible) x["why"] = c.why;
  return x;
}

// A reroute keeps the live pipelines; with fewer than `min_dp` (f+1) of them the job would not
// survive f further failures in memory, so it is refused like a plan with fewer pipelines.
void RefuseThinReroute(const odyssey::Layout& cur, const std::vector<bool>& alive, int min_dp,
                       odyssey::FailureEvaluation* ev) {
  const auto whole = std::count_if(cur.node.begin(), cur.node.end(), [&](const std::vector<int>& pipe) {
    return std::all_of(pipe.begin(), pipe.end(), [&](int u) { return alive[u]; });
  });
  if (whole >= min_dp) return;
  for (auto& c : ev->candidates) {
    if (c.policy != odyssey::Policy::kReroute || !c.feasible) continue;
    c.feasible = false;
    c.score = 0;
    c.why = std::to_string(whole) + " whole pipeline(s) would go on, fewer than f+1 = " + std::to_string(min_dp);
  }
}

}  // namespace

Status CheckProfile(const json& doc, int layers) {
  if (!doc.is_object()) return Status::InvalidArgument("profile: must be an object");
  if (doc.contains("model")) {  // without one the measured step time is spread over the layers
    REFT_ASSIGN_OR_RETURN(auto model, ParseModel(doc["model"]));
    if (layers > 0 && static_cast<int>(model.layers.size()) != layers)
      return Status::InvalidArgument("model.layers: the profile has " + std::to_string(model.layers.size()) +
                                     " layers, the job registered " + std::to_string(layers));
  }
  if (doc.contains("cluster")) {
    json c = doc["cluster"];
    if (c.is_object() && !c.contains("nodes")) c["nodes"] = 1;  // the job knows its nodes
    REFT_RETURN_NOT_OK(ParseCluster(c).status());
  }
  if (doc.contains("job")) REFT_RETURN_NOT_OK(ParseJob(doc["job"]).status());
  if (doc.contains("policy")) REFT_RETURN_NOT_OK(ParseRecoveryCosts(doc["policy"], 1).status());
  for (const auto& [key, value] : doc.items()) {
    (void)value;
    if (key != "model" && key != "cluster" && key != "job" && key != "policy")
      return Status::InvalidArgument("profile." + key + ": unknown field (model, cluster, job, policy)");
  }
  return Status::OK();
}

Result<odyssey::RecoveryCosts> ParseRecoveryCosts(const json& policy, int live_units) {
  const json p = policy.is_object() ? policy : json::object();
  if (!policy.is_null() && !policy.is_object()) return Status::InvalidArgument("policy: must be an object");
  odyssey::RecoveryCosts costs;
  REFT_ASSIGN_OR_RETURN(costs.restart_ms, GetNumber(p, "policy", "restart_ms", false, 60000, 0));
  REFT_ASSIGN_OR_RETURN(costs.snapshot_load_ms, GetNumber(p, "policy", "snapshot_load_ms", false, 5000, 0));
  REFT_ASSIGN_OR_RETURN(double bw, GetNumber(p, "policy", "transfer_bytes_per_s", false, 1.25e9, 1));
  costs.transfer_bytes_per_ms = bw / 1000;
  REFT_ASSIGN_OR_RETURN(double mtbf, GetNumber(p, "policy", "mtbf_hours_per_node", false, 10, 1e-6));
  costs.expected_interval_ms = mtbf * 3.6e6 / std::max(1, live_units);
  if (auto a = p.find("assignment"); a != p.end()) {
    if (!a->is_string() || (*a != "kuhn_munkres" && *a != "positional")) {
      return Status::InvalidArgument("policy.assignment: \"kuhn_munkres\" (default) or \"positional\"");
    }
    costs.positional_transfer = *a == "positional";
  }
  return costs;
}

Result<json> Decide(const JobModelView& m, const json& profile, const Membership& membership) {
  REFT_ASSIGN_OR_RETURN(auto counts, StageCounts(m));
  const int L = static_cast<int>(m.layers.size());
  const auto unit_nodes = UnitNodes(m);
  const int U = static_cast<int>(unit_nodes.size());
  const std::set<std::string> live(membership.live.begin(), membership.live.end());
  const std::set<std::string> declared_lost(membership.lost.begin(), membership.lost.end());
  auto node_alive = [&](const std::string& n) { return !n.empty() && live.count(n) && !declared_lost.count(n); };

  // Units, their liveness, the job's nodes, the lost ones and the spares.
  std::vector<bool> alive(U, true);
  std::set<std::string> job_nodes, lost_nodes;
  for (int u = 0; u < U; ++u) {
    if (unit_nodes[u].empty()) alive[u] = false;
    for (const auto& n : unit_nodes[u]) {
      if (!n.empty()) job_nodes.insert(n);
      if (!node_alive(n)) {
        alive[u] = false;
        lost_nodes.insert(n.empty() ? "(unknown)" : n);
      }
    }
  }
  std::vector<std::string> spares;
  for (const auto& n : live)
    if (!job_nodes.count(n) && !declared_lost.count(n)) spares.push_back(n);

  json ranks = json::array();
  for (const auto& r : m.ranks)
    ranks.push_back({{"pp", r.pp}, {"tp", r.tp}, {"dp", r.dp},
                     {"node", r.node.empty() ? json(nullptr) : json(r.node)},
                     {"state", node_alive(r.node) ? "alive" : "lost"}});
  json layers = json::array();
  uint64_t total = 0;
  std::vector<uint64_t> layer_bytes;
  std::vector<odyssey::LayerState> states;
  for (const auto& l : m.layers) {
    layers.push_back({{"layer", l.layer}, {"stage", l.stage}, {"param_bytes", l.param_bytes},
                      {"optimizer_bytes", l.optimizer_bytes}, {"bytes", l.bytes()}});
    total += l.bytes();
    layer_bytes.push_back(l.bytes());
    states.push_back({l.param_bytes, l.optimizer_bytes, 0});
  }
  json out = {{"job", m.job},
              {"step", m.step},
              {"layout", {{"dp", m.dp}, {"tp", m.tp}, {"pp", m.pp}}},
              {"ranks", ranks},
              {"model", {{"layers", layers},
                         {"total_bytes", total},
                         {"step_ms", m.step_ms > 0 ? json(m.step_ms) : json(nullptr)},
                         {"step_samples", m.step_samples}}},
              {"live_nodes", std::vector<std::string>(live.begin(), live.end())},
              {"lost_nodes", std::vector<std::string>(lost_nodes.begin(), lost_nodes.end())},
              {"spare_nodes", spares}};

  // The running plan: dp pipelines of the registered stages.
  odyssey::SearchOptions so;
  // Deviation from Odyssey: its plan search mixes pipelines of different lengths, but a reft
  // job restarts as one dp x tp x pp layout (that is what a restore reshapes into), so the
  // decision only chooses among plans a job can run; nodes beyond dp·pp stay spares.
  so.uniform = true;
  const json& pjob = Member(profile, "job");
  JobSpec job;
  if (!pjob.is_null()) {
    REFT_ASSIGN_OR_RETURN(job, ParseJob(pjob));
  }
  // Oobleck's guarantee: at least f+1 pipelines, so that f further failures leave every layer a
  // live copy — for reft also the replicas its in-memory protection needs (arc1 and aec need
  // dp >= 2). Odyssey's search has no such floor and may choose a single long pipeline.
  so.min_dp = job.f + 1;
  // Micro-batches per step: the profile's global batch, else 4 per stage and pipeline (the
  // N_b = 4S of the templates), which only scales the scores, never their order.
  so.micro_batches = job.global_batch > 0 ? std::max(1, job.global_batch / std::max(1, job.micro_batch))
                                          : 4 * m.pp * m.dp;
  ClusterSpec cluster;
  cluster.nodes = std::max(1, static_cast<int>(job_nodes.size()));
  const json& pcluster = Member(profile, "cluster");
  if (pcluster.is_object()) {
    json c = pcluster;
    if (!c.contains("nodes")) c["nodes"] = cluster.nodes;
    REFT_ASSIGN_OR_RETURN(cluster, ParseCluster(c));
    REFT_ASSIGN_OR_RETURN(so.network, ParseNetwork(c));
    so.device_memory = cluster.device_memory_bytes;
    so.memory_margin = cluster.memory_margin;
  }
  odyssey::ExecutionPlan running;
  running.layers_per_stage.assign(m.dp, counts);
  running.micro_batches = odyssey::DistributeBatch(so.micro_batches, std::vector<int>(m.dp, m.pp));

  Result<Profile> prof = Status::Unavailable("");
  if (profile.is_object()) REFT_RETURN_NOT_OK(CheckProfile(profile, L));
  if (profile.is_object() && profile.contains("model")) {
    REFT_ASSIGN_OR_RETURN(auto pm, ParseModel(profile["model"]));
    prof = Profile{pm, "attached", "the attached per-layer profile times every plan"};
  } else if (m.step_ms > 0) {
    auto pm = odyssey::ProfileFromStepTime(states, running, m.step_ms, so);
    if (pm.ok()) {
      prof = Profile{*pm, "measured_step_time",
                     "no profile attached: the measured step time is spread over the layers in proportion "
                     "to their parameter bytes (backward = 2 x forward); attach one with reftctl plan attach"};
    } else {
      prof = Status::Unavailable("no profile attached and the measured step time is unusable: " +
                                        pm.status().message());
    }
  } else {
    prof = Status::Unavailable(
        "no profile attached and no step time measured yet (it needs two snapshots committed on this node)");
  }
  out["profile"] = prof.ok() ? json{{"source", prof->source}, {"note", prof->note}}
                             : json{{"source", "none"}, {"note", prof.status().message()}};

  std::vector<int> failed;
  for (int u = 0; u < U; ++u)
    if (!alive[u]) failed.push_back(u);
  json decision = {{"needed", !failed.empty()}};
  if (prof.ok()) {
    REFT_RETURN_NOT_OK(odyssey::EstimateStep(prof->model, so, running));
    decision["current_step_ms"] = running.step_time;
  }
  // The running layout on the units, pipeline-major (unit u at position u).
  std::vector<int> ids(U);
  for (int u = 0; u < U; ++u) ids[u] = u;
  const auto cur = odyssey::Layout::Of(running, ids);
  const int peak = std::max(U, m.peak_units);
  out["peak_units"] = peak;
  if (failed.empty()) {
    decision["policy"] = "none";
    decision["reason"] = "no node of the job is lost: no decision needed";
    if (peak > U && !spares.empty() && prof.ok()) {
      REFT_ASSIGN_OR_RETURN(auto costs, JobCosts(m, profile, layer_bytes, U));
      std::string why;
      json grow = GrowthDecision(prof->model, cur, unit_nodes,
                                 static_cast<int>(job_nodes.size()), spares, peak, so, costs, &why);
      if (grow.is_null()) {
        decision["reason"] = "no node of the job is lost, and " + why;
      } else {
        grow["current_step_ms"] = decision["current_step_ms"];
        decision = std::move(grow);
      }
    }
    out["decision"] = decision;
    return out;
  }
  if (!prof.ok()) {
    decision["policy"] = nullptr;
    decision["reason"] = "cannot decide: " + prof.status().message();
    out["decision"] = decision;
    return out;
  }

  // Exit below what the plan can absorb: fewer than (f+1)·n0 live units.
  int n0 = job.n0;
  if (n0 == 0) n0 = cluster.device_memory_bytes ? oobleck::MinNodesForMemory(prof->model, cluster) : 1;
  const int live_units = U - static_cast<int>(failed.size());
  decision["f"] = job.f;
  decision["n0"] = n0;
  decision["live_units"] = live_units;
  // Below (f+1)·n0 only spares can keep the job in memory: every lost node's ranks on one.
  const bool below = live_units < (job.f + 1) * n0;
  const std::string below_why = std::to_string(live_units) + " live pipeline positions are fewer than (f+1)·n0 = " +
                                std::to_string((job.f + 1) * n0);
  REFT_ASSIGN_OR_RETURN(auto costs, JobCosts(m, profile, layer_bytes, live_units));
  const odyssey::Candidate spare =
      RestartOnSpare(running.step_time, costs, so.micro_batches, spares.size(), lost_nodes.size());
  if (below && !spare.feasible) {
    decision["policy"] = "exit";
    decision["reason"] = std::to_string(live_units) + " live pipeline positions are fewer than (f+1)·n0 = " +
                         std::to_string((job.f + 1) * n0) + " (f = " + std::to_string(job.f) + ", n0 = " +
                         std::to_string(n0) + "): the job exits and restarts from the persistent tier when "
                         "enough nodes are back";
    // What a spare would do: the coordinator weighs waiting for one (spare_wait.h).
    decision["candidates"] = json::array({CandidateJson(spare, "restart_on_spare")});
    decision["expected_interval_ms"] = costs.expected_interval_ms;
    out["decision"] = decision;
    return out;
  }

  odyssey::FailureEvaluation ev;
  if (below) {
    for (auto policy : {odyssey::Policy::kReroute, odyssey::Policy::kReconfigure, odyssey::Policy::kRestart}) {
      odyssey::Candidate c{policy};
      c.why = below_why;
      ev.candidates.push_back(c);
    }
  } else {
    ev = odyssey::EvaluateFailure(prof->model, cur, failed, alive, so.micro_batches, so, costs);
    RefuseStageReroute(cur, alive, &ev);
    RefuseThinReroute(cur, alive, so.min_dp, &ev);
  }
  std::vector<std::string> row_node;  // the survivors, the rows of the transfer plan
  for (int id : ev.live_ids) row_node.push_back(NodeOf(unit_nodes[id]));

  std::vector<odyssey::Candidate> cands = {spare};
  std::vector<std::string> names = {"restart_on_spare"};
  for (const auto& c : ev.candidates) {
    cands.push_back(c);
    names.push_back(odyssey::PolicyName(c.policy));
  }
  json cj = json::array();
  for (size_t i = 0; i < cands.size(); ++i) cj.push_back(CandidateJson(cands[i], names[i]));
  decision["candidates"] = cj;
  decision["expected_interval_ms"] = costs.expected_interval_ms;
  const int pick = odyssey::ChooseCandidate(cands);
  if (pick < 0) {
    std::string why;
    for (size_t i = 0; i < cands.size(); ++i) why += (i ? "; " : "") + names[i] + ": " + cands[i].why;
    decision["policy"] = "exit";
    decision["reason"] = "no policy can continue (" + why + "): the job restarts from the persistent tier";
    out["decision"] = decision;
    return out;
  }
  const std::string policy = names[pick];
  decision["policy"] = policy;
  decision["reason"] = policy + " has the highest score (throughput over the expected time to the next failure, "
                       "less the transition)";

  // The layout afterwards, every position with its node and layers.
  json pipelines = json::array();
  if (policy == "restart_on_spare" || policy == "reroute") {
    std::map<std::string, std::string> replacement;
    size_t k = 0;
    for (const auto& n : lost_nodes) replacement[n] = policy == "reroute" ? "" : spares[k++];
    const auto stage_layers = odyssey::StageLayerLists(running);
    for (int d = 0; d < m.dp; ++d) {
      json stages = json::array();
      for (int s = 0; s < m.pp; ++s) {
        const int u = d * m.pp + s;
        std::string node = NodeOf(unit_nodes[u]);
        if (!alive[u]) node = replacement[node.empty() ? "(unknown)" : node];
        json st = {{"node", node.empty() ? json(nullptr) : json(node)}, {"layers", LayersJson(stage_layers[u])}};
        if (node.empty()) st["rerouted"] = true;  // its micro-batches run on live peers of the stage
        stages.push_back(st);
      }
      pipelines.push_back({{"stages", stages}});
    }
    decision["new_layout"] = {{"pipelines", pipelines}, {"micro_batches", running.micro_batches},
                              {"step_ms", cands[pick].step_time}};
  } else if (ev.new_plan.ok()) {
    pipelines = PipelinesJson(*ev.new_plan, ev.transfer, row_node);
    decision["new_layout"] = {{"pipelines", pipelines}, {"micro_batches", ev.new_plan->micro_batches},
                              {"step_ms", ev.new_plan->step_time}};
  }
  if (policy == "reroute" || policy == "reconfigure" || policy == "restart") {
    const bool km = policy != "reroute";  // a new plan: Kuhn–Munkres placed the survivors
    // From the slots' layout (each node computes its exact ranges when it stages).
    uint64_t fill = km ? ev.transfer.fill_bytes : 0;
    if (!km && !costs.unit_held_bytes.empty()) {
      const auto stage_layers = odyssey::StageLayerLists(running);
      for (int u = 0; u < U; ++u) {
        if (!alive[u]) continue;
        for (int l : stage_layers[u]) fill += layer_bytes[l] - std::min(layer_bytes[l], costs.unit_held_bytes[u][l]);
      }
    }
    decision["transfer"] = TransferJson(pipelines, km ? &ev.transfer : nullptr, row_node, fill);
  }
  if (decision.contains("new_layout")) {
    // Over every live position the decision could use: the survivors', and the spares' when
    // they take the lost nodes' ranks.
    const int usable = policy == "restart_on_spare" ? U : live_units;
    const double uniform = ev.new_plan.ok() && policy != "restart_on_spare" ? ev.new_plan->step_time : 0;
    decision["new_layout"]["unrestricted_step_ms"] = UnrestrictedStepMs(prof->model, usable, so, uniform);
  }
  out["decision"] = decision;
  return out;
}

}  // namespace reft::planner::online
