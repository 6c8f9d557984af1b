// JSON entry points: parse (errors name the field), call the typed planners, render JSON.
#include "reft/planner/api.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "reft/json_integer.h"
#include "reft/planner/odyssey.h"
#include "reft/planner/online.h"
#include "oobleck.h"
#include "reft/planner/allreduce.h"
#include "reliability.h"

namespace reft::planner {

using nlohmann::json;

namespace {

Result<std::vector<int>> IntList(const json& in, const std::string& name, int min_value) {
  if (!in.is_array()) return Status::InvalidArgument(name + ": must be an array of integers");
  std::vector<int> out;
  for (size_t i = 0; i < in.size(); ++i) {
    int v = 0;
    if (!JsonInteger(in[i], &v) || v < min_value)
      return Status::InvalidArgument(name + "[" + std::to_string(i) + "]: must be an integer >= " +
                                     std::to_string(min_value) + ", got " + in[i].dump());
    out.push_back(v);
  }
  return out;
}

Result<std::vector<std::vector<int>>> IntLists(const json& in, const std::string& name, int min_value) {
  if (!in.is_array()) return Status::InvalidArgument(name + ": must be an array of arrays");
  std::vector<std::vector<int>> out;
  for (size_t i = 0; i < in.size(); ++i) {
    REFT_ASSIGN_OR_RETURN(auto v, IntList(in[i], name + "[" + std::to_string(i) + "]", min_value));
    out.push_back(v);
  }
  return out;
}

const json& Field(const json& in, const char* key) {
  static const json kNull;
  if (!in.is_object()) return kNull;
  auto it = in.find(key);
  return it == in.end() ? kNull : *it;
}

struct Setup {
  ModelProfile model;
  ClusterSpec cluster;
  JobSpec job;
  oobleck::NodeSpec spec;
};

Result<Setup> ParseSetup(const json& in) {
  if (!in.is_object()) return Status::InvalidArgument("input: must be an object");
  Setup s;
  REFT_ASSIGN_OR_RETURN(s.model, ParseModel(Field(in, "model")));
  REFT_ASSIGN_OR_RETURN(s.cluster, ParseCluster(Field(in, "cluster")));
  REFT_ASSIGN_OR_RETURN(s.job, ParseJob(in.contains("job") ? in["job"] : json::object()));
  int n0 = s.job.n0;
  if (n0 == 0) {
    // Smallest node count whose stage mapping fits device memory (eq. 14 per stage); the
    // aggregate bound is only the starting point.
    n0 = oobleck::MinNodesForMemory(s.model, s.cluster);
    if (s.cluster.device_memory_bytes != 0) {
      oobleck::TemplatePlanner probe(s.model, s.cluster);
      while (n0 <= s.cluster.nodes && !probe.Plan(n0).ok()) ++n0;
    }
  }
  if (n0 > s.cluster.nodes)
    return Status::InvalidArgument("cluster.nodes: the model needs at least " + std::to_string(n0) +
                                   " nodes for one pipeline, the cluster has " + std::to_string(s.cluster.nodes));
  REFT_ASSIGN_OR_RETURN(s.spec, oobleck::SpecifyNodes(s.cluster.nodes, s.job.f, n0, s.job.template_cap));
  return s;
}

json TemplateJson(const oobleck::PipelineTemplate& t) {
  json st = json::array();
  for (const auto& s : t.stages)
    st.push_back({{"layers", {s.first_layer, s.last_layer}}, {"node", s.node}, {"first_gpu", s.first_gpu},
                  {"gpus", s.gpus}, {"forward_ms", s.forward}, {"backward_ms", s.backward}});
  const int S = static_cast<int>(t.stages.size());
  auto sim = SimulatePipeline(t.ToSpec(4 * S));
  return {{"nodes", t.nodes}, {"num_stages", S}, {"stages", st}, {"t1_ms", t.t1},
          {"t2_ms", (3.0 * S + t.kstar - 1) * t.slow}, {"t3_ms", t.t3}, {"kstar", t.kstar},
          {"iteration_ms", t.iteration_time}, {"simulated_iteration_ms", sim.ok() ? sim->makespan : -1.0}};
}

Result<std::vector<oobleck::PipelineTemplate>> AllTemplates(const Setup& s, oobleck::TemplatePlanner& tp) {
  std::vector<oobleck::PipelineTemplate> out(s.spec.sizes.size());
  // Largest first: it fills the memo for the smaller ones.
  for (int i = static_cast<int>(s.spec.sizes.size()) - 1; i >= 0; --i) {
    auto t = tp.Plan(s.spec.sizes[i]);
    if (!t.ok()) return t.status().WithContext("template " + std::to_string(s.spec.sizes[i]));
    out[i] = *t;
  }
  return out;
}

Result<oobleck::InstantiationModel> InstantiationInputs(const Setup& s, oobleck::TemplatePlanner& tp) {
  oobleck::InstantiationModel im;
  im.model = &s.model;
  REFT_ASSIGN_OR_RETURN(im.templates, AllTemplates(s, tp));
  im.f = s.job.f;
  im.global_batch = s.job.global_batch;
  im.micro_batch = s.job.micro_batch;
  im.network = s.cluster.network;
  return im;
}

json OptionJson(const oobleck::InstantiationOption& o) {
  return {{"x", o.x}, {"pipeline_nodes", o.pipeline_nodes}, {"micro_batches", o.batch.micro_batches},
          {"compute_ms", o.batch.step_time}, {"allreduce_ms", o.sync.ms}, {"allreduce_rounds", o.sync.rounds},
          {"step_ms", o.step_ms}, {"throughput_samples_per_s", o.throughput * 1000}};
}

}  // namespace

Result<json> PlanTemplates(const json& in) {
  REFT_ASSIGN_OR_RETURN(auto s, ParseSetup(in));
  oobleck::TemplatePlanner tp(s.model, s.cluster);
  REFT_ASSIGN_OR_RETURN(auto ts, AllTemplates(s, tp));
  json out = {{"n0", s.spec.n0}, {"n_max", s.spec.n_max}, {"f", s.job.f}, {"layers", s.model.layers.size()}};
  out["templates"] = json::array();
  for (const auto& t : ts) out["templates"].push_back(TemplateJson(t));
  return out;
}

Result<json> PlanInstantiate(const json& in) {
  REFT_ASSIGN_OR_RETURN(auto s, ParseSetup(in));
  if (s.job.global_batch <= 0) return Status::InvalidArgument("job.global_batch: missing required field");
  int top = 10;
  if (in.contains("top")) { REFT_ASSIGN_OR_RETURN(top, GetInt(in, "input", "top", false, 10, 1)); }
  oobleck::TemplatePlanner tp(s.model, s.cluster);
  REFT_ASSIGN_OR_RETURN(auto im, InstantiationInputs(s, tp));
  REFT_ASSIGN_OR_RETURN(auto search, oobleck::SearchInstantiations(im, s.cluster.nodes, static_cast<size_t>(top)));
  json opts = json::array();
  for (const auto& o : search.best) opts.push_back(OptionJson(o));
  json out = {{"templates", s.spec.sizes}, {"num_options", search.num_options}, {"evaluated", search.evaluated},
              {"complete", search.complete}, {"options", opts}, {"best", opts[0]}};
  if (!search.complete)
    out["warning"] = "the search stopped after " + std::to_string(search.evaluated) +
                     " evaluations: the options are the best found, not necessarily the best";
  return out;
}

namespace {

Result<json> OobleckFailover(const json& in) {
  REFT_ASSIGN_OR_RETURN(auto s, ParseSetup(in));
  REFT_ASSIGN_OR_RETURN(auto pipes, IntLists(Field(in, "pipelines"), "pipelines", 0));
  std::vector<oobleck::Pipeline> cur;
  for (auto& p : pipes) cur.push_back({p});
  const json& fj = Field(in, "failure");
  std::vector<int> failed, joined;
  if (fj.contains("failed_nodes")) { REFT_ASSIGN_OR_RETURN(failed, IntList(fj["failed_nodes"], "failure.failed_nodes", 0)); }
  if (fj.contains("joined_nodes")) { REFT_ASSIGN_OR_RETURN(joined, IntList(fj["joined_nodes"], "failure.joined_nodes", 0)); }
  if (failed.empty() && joined.empty())
    return Status::InvalidArgument("failure.failed_nodes: missing (or give failure.joined_nodes)");
  oobleck::TemplatePlanner tp(s.model, s.cluster);
  REFT_ASSIGN_OR_RETURN(auto im, InstantiationInputs(s, tp));
  std::map<int, const oobleck::PipelineTemplate*> by_size;
  for (const auto& t : im.templates) by_size[t.nodes] = &t;
  oobleck::Reconfiguration r;
  r.pipelines = cur;
  if (!failed.empty()) { REFT_ASSIGN_OR_RETURN(r, oobleck::HandleFailures(s.spec, im, cur, failed)); }
  if (!joined.empty() && !r.exit_required) {
    auto j = oobleck::HandleJoins(s.spec, r.pipelines, joined);
    r.pipelines = j.pipelines;
    r.actions.insert(r.actions.end(), j.actions.begin(), j.actions.end());
  }
  json out = {{"mode", "oobleck"}, {"actions", r.actions}, {"exit_required", r.exit_required}};
  if (r.exit_required) out["exit_reason"] = r.exit_reason;
  json ps = json::array();
  for (const auto& p : r.pipelines) ps.push_back(p.nodes);
  out["pipelines"] = ps;
  if (r.exit_required) return out;
  // Layer placement: each node of a pipeline holds the layers of its template's stages on it.
  auto node_layers = [](const oobleck::PipelineTemplate& t, int k) {
    std::vector<int> v;
    for (const auto& st : t.stages)
      if (st.node == k)
        for (int l = st.first_layer; l < st.last_layer; ++l) v.push_back(l);
    return v;
  };
  std::map<int, std::vector<int>> holds;  // live node id -> layers it holds now
  std::set<int> dead(failed.begin(), failed.end());
  for (const auto& p : cur) {
    auto t = by_size.find(static_cast<int>(p.nodes.size()));
    if (t == by_size.end()) continue;  // a size outside the templates: its layers are not counted as copies
    for (size_t k = 0; k < p.nodes.size(); ++k)
      if (!dead.count(p.nodes[k])) holds[p.nodes[k]] = node_layers(*t->second, static_cast<int>(k));
  }
  std::vector<int> ids;
  std::vector<std::vector<int>> held, roles;
  for (const auto& p : r.pipelines)
    for (int id : p.nodes) {
      ids.push_back(id);
      held.push_back(holds.count(id) ? holds[id] : std::vector<int>{});
    }
  std::vector<const oobleck::PipelineTemplate*> ptr;
  std::vector<SyncDevice> devices;
  for (const auto& p : r.pipelines) {
    auto t = by_size.find(static_cast<int>(p.nodes.size()));
    if (t == by_size.end())
      return Status::Internal("reconfiguration produced a pipeline of " + std::to_string(p.nodes.size()) +
                              " nodes, which has no template");
    ptr.push_back(t->second);
    for (size_t k = 0; k < p.nodes.size(); ++k) roles.push_back(node_layers(*t->second, static_cast<int>(k)));
    for (const auto& st : t->second->stages) {
      SyncDevice d;
      for (int l = st.first_layer; l < st.last_layer; ++l) d.layers.push_back(l);
      d.gpus = st.gpus;
      devices.push_back(d);
    }
  }
  std::vector<uint64_t> bytes;
  for (size_t l = 0; l < s.model.layers.size(); ++l) bytes.push_back(s.model.StateBytes(static_cast<int>(l)));
  auto tr = odyssey::PlanTransfer(held, roles, bytes);
  if (!tr.ok()) {
    out["exit_required"] = true;
    out["exit_reason"] = "a layer has no surviving copy: " + tr.status().message();
    return out;
  }
  // KM chooses which live node takes which position; rewrite the pipelines accordingly.
  std::vector<int> at(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i) at[tr->position_of_node[i]] = ids[i];
  json ps2 = json::array();
  size_t pos = 0;
  for (const auto& p : r.pipelines) {
    json v = json::array();
    for (size_t k = 0; k < p.nodes.size(); ++k) v.push_back(at[pos++]);
    ps2.push_back(v);
  }
  out["pipelines"] = ps2;
  json moves = json::array();
  for (const auto& mv : tr->moves)
    moves.push_back({{"layer", mv.layer}, {"from_node", ids[mv.from]}, {"to_node", ids[mv.to]}, {"bytes", mv.bytes}});
  out["copies"] = {{"moves", moves}, {"total_bytes", tr->total_bytes}, {"max_sender_bytes", tr->max_sender_bytes},
                   {"max_receiver_bytes", tr->max_receiver_bytes}};
  if (s.job.global_batch > 0) {
    REFT_ASSIGN_OR_RETURN(auto bp, oobleck::DistributeBatch(ptr, s.job.global_batch, s.job.micro_batch));
    const auto sync = GradientSync(s.model, devices, s.cluster.network);
    out["micro_batches"] = bp.micro_batches;
    out["compute_ms"] = bp.step_time;
    out["allreduce_ms"] = sync.ms;
    out["step_ms"] = bp.step_time + sync.ms;
  }
  return out;
}

Result<json> OdysseyFailover(const json& in) {
  REFT_ASSIGN_OR_RETURN(auto model, ParseModel(Field(in, "model")));
  const json& pj = Field(in, "plan");
  if (!pj.is_object()) return Status::InvalidArgument("plan: missing or not an object");
  odyssey::SearchOptions so;
  REFT_ASSIGN_OR_RETURN(so.micro_batches, GetInt(pj, "plan", "micro_batches", true, 0, 1));
  REFT_ASSIGN_OR_RETURN(so.edge_latency, GetNumber(pj, "plan", "edge_latency_ms", false, 0, 0));
  if (in.contains("cluster")) {
    REFT_ASSIGN_OR_RETURN(so.device_memory, GetBytes(in["cluster"], "cluster", "device_memory", false, 0));
    REFT_ASSIGN_OR_RETURN(so.network, ParseNetwork(in["cluster"], "cluster"));
  }
  odyssey::ExecutionPlan plan;
  const int L = static_cast<int>(model.layers.size());
  if (pj.contains("pipelines")) {
    REFT_ASSIGN_OR_RETURN(plan.layers_per_stage, IntLists(pj["pipelines"], "plan.pipelines", 1));
  } else {
    REFT_ASSIGN_OR_RETURN(int dp, GetInt(pj, "plan", "dp", true, 0, 1));
    REFT_ASSIGN_OR_RETURN(int pp, GetInt(pj, "plan", "pp", true, 0, 1));
    if (pp > L) return Status::InvalidArgument("plan.pp: more stages than model layers");
    std::vector<int> counts(pp, L / pp);
    for (int i = 0; i < L % pp; ++i) ++counts[pp - 1 - i];
    plan.layers_per_stage.assign(dp, counts);
  }
  for (size_t p = 0; p < plan.layers_per_stage.size(); ++p) {
    int sum = 0;
    for (int c : plan.layers_per_stage[p]) sum += c;
    if (sum != L)
      return Status::InvalidArgument("plan.pipelines[" + std::to_string(p) + "]: holds " + std::to_string(sum) +
                                     " layers, the model has " + std::to_string(L));
  }
  std::vector<int> lens;
  for (const auto& p : plan.layers_per_stage) lens.push_back(static_cast<int>(p.size()));
  plan.micro_batches = odyssey::DistributeBatch(so.micro_batches, lens);
  REFT_RETURN_NOT_OK(odyssey::EstimateStep(model, so, plan));
  int units = 0;
  for (int l : lens) units += l;
  std::vector<int> ids(units);
  for (int i = 0; i < units; ++i) ids[i] = i;
  auto layout = odyssey::Layout::Of(plan, ids);
  const json& fj = Field(in, "failure");
  REFT_ASSIGN_OR_RETURN(auto failed, IntList(Field(fj, "failed_nodes"), "failure.failed_nodes", 0));
  if (failed.empty()) return Status::InvalidArgument("failure.failed_nodes: empty");
  std::vector<bool> alive(units, true);
  for (int u : failed) {
    if (u >= units) return Status::InvalidArgument("failure.failed_nodes: node " + std::to_string(u) +
                                                   " is not in the plan (0.." + std::to_string(units - 1) + ")");
    alive[u] = false;
  }
  const json& pol = Field(in, "policy");
  int live = 0;
  for (bool a : alive) live += a;
  REFT_ASSIGN_OR_RETURN(auto costs, online::ParseRecoveryCosts(pol.is_object() ? pol : json::object(), live));
  REFT_ASSIGN_OR_RETURN(int gb, GetInt(pj, "plan", "global_batch", false, so.micro_batches, 1));
  auto ev = odyssey::EvaluateFailure(model, layout, failed, alive, gb, so, costs);
  json cands = json::array();
  for (const auto& c : ev.candidates) {
    json x = {{"policy", odyssey::PolicyName(c.policy)}, {"feasible", c.feasible}};
    if (c.feasible) {
      x["step_ms"] = c.step_time;
      x["transition_ms"] = c.transition;
      x["score"] = c.score;
    } else {
      x["why"] = c.why;
    }
    cands.push_back(x);
  }
  const int pick = odyssey::ChooseCandidate(ev.candidates);
  json out = {{"mode", "odyssey"}, {"current_step_ms", plan.step_time}, {"current_allreduce_ms", plan.sync.ms},
              {"expected_interval_ms", costs.expected_interval_ms}, {"candidates", cands}};
  if (ev.eq13_ms >= 0) out["reroute_eq13_ms"] = ev.eq13_ms;
  if (pick < 0) {
    out["choice"] = nullptr;
    return out;
  }
  out["choice"] = odyssey::PolicyName(ev.candidates[pick].policy);
  if (ev.new_plan.ok()) {
    out["new_plan"] = {{"pipelines", ev.new_plan->layers_per_stage},
                       {"micro_batches", ev.new_plan->micro_batches},
                       {"compute_ms", ev.new_plan->compute_time},
                       {"allreduce_ms", ev.new_plan->sync.ms},
                       {"allreduce_rounds", ev.new_plan->sync.rounds},
                       {"step_ms", ev.new_plan->step_time}};
    json moves = json::array();
    for (const auto& mv : ev.transfer.moves)
      moves.push_back({{"layer", mv.layer}, {"from_node", ev.live_ids[mv.from]},
                       {"to_node", ev.live_ids[mv.to]}, {"bytes", mv.bytes}});
    json assign = json::array();
    for (size_t i = 0; i < ev.live_ids.size(); ++i)
      assign.push_back({{"node", ev.live_ids[i]},
                        {"position", ev.transfer.position_of_node.empty() ? -1 : ev.transfer.position_of_node[i]}});
    out["transfer"] = {{"assignment", assign}, {"moves", moves}, {"total_bytes", ev.transfer.total_bytes},
                       {"max_sender_bytes", ev.transfer.max_sender_bytes},
                       {"max_receiver_bytes", ev.transfer.max_receiver_bytes}};
  }
  return out;
}

}  // namespace

Result<json> PlanFailover(const json& in) {
  if (!in.is_object()) return Status::InvalidArgument("input: must be an object");
  const std::string mode = in.value("mode", std::string("odyssey"));
  if (mode == "oobleck") return OobleckFailover(in);
  if (mode == "odyssey") return OdysseyFailover(in);
  return Status::InvalidArgument("mode: must be \"odyssey\" or \"oobleck\", got \"" + mode + "\"");
}

Result<json> PlanTransferJson(const json& in) {
  if (!in.is_object()) return Status::InvalidArgument("input: must be an object");
  REFT_ASSIGN_OR_RETURN(auto held, IntLists(Field(in, "held"), "held", 0));
  REFT_ASSIGN_OR_RETURN(auto roles, IntLists(Field(in, "roles"), "roles", 0));
  std::vector<uint64_t> bytes;
  if (in.contains("layer_bytes")) {
    const json& lb = in["layer_bytes"];
    if (!lb.is_array()) return Status::InvalidArgument("layer_bytes: must be an array");
    for (size_t i = 0; i < lb.size(); ++i) {
      json wrap = {{"v", lb[i]}};
      REFT_ASSIGN_OR_RETURN(auto b, GetBytes(wrap, "layer_bytes[" + std::to_string(i) + "]", "v", true, 0));
      bytes.push_back(b);
    }
  }
  std::vector<std::string> names;
  if (in.contains("node_names")) {
    if (!in["node_names"].is_array() || in["node_names"].size() != held.size())
      return Status::InvalidArgument("node_names: must be an array with one name per held entry");
    for (const auto& n : in["node_names"]) names.push_back(n.is_string() ? n.get<std::string>() : n.dump());
  }
  auto name = [&](int i) -> json { return names.empty() ? json(i) : json(names[i]); };
  REFT_ASSIGN_OR_RETURN(auto km, odyssey::PlanTransfer(held, roles, bytes));
  REFT_ASSIGN_OR_RETURN(auto pos, odyssey::PositionalTransfer(held, roles, bytes));
  json assign = json::array(), moves = json::array();
  for (size_t i = 0; i < held.size(); ++i) assign.push_back({{"node", name(static_cast<int>(i))}, {"position", km.position_of_node[i]}});
  for (const auto& m : km.moves)
    moves.push_back({{"layer", m.layer}, {"from", name(m.from)}, {"to", name(m.to)}, {"bytes", m.bytes}});
  return json{{"assignment", assign}, {"moves", moves}, {"total_bytes", km.total_bytes},
              {"total_layers", km.total_layers}, {"max_sender_bytes", km.max_sender_bytes},
              {"positional_total_bytes", pos.total_bytes}, {"positional_total_layers", pos.total_layers}};
}

Result<json> Reliability(const json& in) {
  const json obj = in.is_object() ? in : json::object();
  ReliabilityParams p;
  const std::string n = "reliability";
  REFT_ASSIGN_OR_RETURN(p.nodes, GetInt(obj, n, "nodes", false, 3072, 1));
  REFT_ASSIGN_OR_RETURN(p.sg_size, GetInt(obj, n, "sg_size", false, 6, 1));
  REFT_ASSIGN_OR_RETURN(p.lambda_hw, GetNumber(obj, n, "lambda_hw", false, 1e-4, 0));
  REFT_ASSIGN_OR_RETURN(p.lambda_sw, GetNumber(obj, n, "lambda_sw", false, 1e-5, 0));
  REFT_ASSIGN_OR_RETURN(p.shape, GetNumber(obj, n, "shape", false, 1.3, 1e-9));
  REFT_ASSIGN_OR_RETURN(p.p_smp, GetNumber(obj, n, "p_smp", false, 1.0, 1e-12));
  REFT_RETURN_NOT_OK(Validate(p));
  REFT_ASSIGN_OR_RETURN(double thr, GetNumber(obj, n, "threshold", false, 0.9, 1e-12));
  if (thr >= 1) return Status::InvalidArgument("reliability.threshold: must be < 1");
  REFT_ASSIGN_OR_RETURN(int trials, GetInt(obj, n, "trials", false, 0, 0));
  const double t_reft = TimeToThreshold([&](double t) { return SurvivalReft(p, t); }, thr);
  const double t_ck = TimeToThreshold([&](double t) { return SurvivalCheckpoint(p, t, true); }, thr);
  const double t_hw = TimeToThreshold([&](double t) { return SurvivalCheckpoint(p, t, false); }, thr);
  json out = {{"params", {{"nodes", p.nodes}, {"sg_size", p.sg_size}, {"lambda_hw", p.lambda_hw},
                          {"lambda_sw", p.lambda_sw}, {"shape", p.shape}, {"p_smp", p.p_smp}}},
              {"threshold", thr}, {"reft_days", t_reft}, {"checkpoint_days", t_ck},
              {"checkpoint_hw_only_days", t_hw}};
  if (trials > 0) {
    std::vector<double> times;
    for (double f : {0.25, 0.5, 1.0, 1.5}) times.push_back(f * t_reft);
    const uint64_t seed = obj.value("seed", 1u);
    auto mc = MonteCarloReft(p, times, trials, seed);
    json rows = json::array();
    double worst = 0;
    for (size_t i = 0; i < times.size(); ++i) {
      const double cf = SurvivalReft(p, times[i]);
      worst = std::max(worst, std::fabs(cf - mc[i]));
      rows.push_back({{"days", times[i]}, {"closed_form", cf}, {"monte_carlo", mc[i]}});
    }
    out["monte_carlo"] = {{"trials", trials}, {"points", rows}, {"max_abs_diff", worst}};
  }
  return out;
}

}  // namespace reft::planner
