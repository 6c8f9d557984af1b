/// \file plan_decision.cc
/// \brief The planner document's one JSON codec, and the record and `plan show` edges.
///
/// ToJson writes what planner::online::Decide writes: the keys it sets (optional ones only when
/// it sets them), nulls where it writes null, integers where it writes integers and doubles
/// where it writes doubles (nlohmann writes 0 and 0.0 differently) — and `decision.spare_wait`
/// when the loop set it (Decide never does). Objects are written with
/// sorted keys either way (nlohmann::json), so the order the fields are set in does not matter.

#include "reft/replan/plan_decision.h"

#include <utility>

#include "reft/replan/plan_transfer.h"

namespace reft::replan {

using nlohmann::json;

namespace {

constexpr std::pair<PlanPolicy, const char*> kPolicies[] = {
    {PlanPolicy::kNone, "none"},       {PlanPolicy::kRestartOnSpare, "restart_on_spare"},
    {PlanPolicy::kReroute, "reroute"}, {PlanPolicy::kReconfigure, "reconfigure"},
    {PlanPolicy::kRestart, "restart"}, {PlanPolicy::kGrow, "grow"},
    {PlanPolicy::kStay, "stay"},       {PlanPolicy::kExit, "exit"}};

constexpr std::pair<PlanState, const char*> kStates[] = {
    {PlanState::kWaitingForSpare, "waiting_for_spare"},
    {PlanState::kAwaitingConfirmation, "awaiting_confirmation"},
    {PlanState::kDecided, "decided"},
    {PlanState::kConfirmed, "confirmed"},
    {PlanState::kUndecided, "undecided"},
    {PlanState::kNoLoss, "no_loss"}};

// Thrown (and caught in PlanDocumentFromJson) for a value nlohmann would accept but the
// document does not: an unknown policy or rank state.
struct ShapeError {
  std::string what;
};

template <typename T>
json Nullable(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

template <typename T>
void SetIf(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

// A key that may be absent or null: none either way.
template <typename T>
std::optional<T> Optional(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<T>();
}

PlanPolicy PolicyOf(const json& name) {
  auto p = ParsePlanPolicy(name.get<std::string>());
  if (!p) throw ShapeError{"unknown policy '" + name.get<std::string>() + "'"};
  return *p;
}

json ToJson(const LayerSpan& s) { return {{"first", Nullable(s.first)}, {"last", Nullable(s.last)}}; }

json ToJson(const PolicyCandidate& c) {
  json j = {{"policy", PlanPolicyName(c.policy)}, {"feasible", c.feasible}};
  SetIf(j, "step_ms", c.step_ms);
  SetIf(j, "transition_ms", c.transition_ms);
  SetIf(j, "score", c.score);
  SetIf(j, "why", c.why);
  return j;
}

json ToJson(const NewLayout& layout) {
  json pipelines = json::array();
  for (const auto& pipe : layout.pipelines) {
    json stages = json::array();
    for (const StagePlacement& st : pipe) {
      json s = {{"node", Nullable(st.node)}, {"layers", ToJson(st.layers)}};
      if (st.rerouted) s["rerouted"] = true;
      stages.push_back(std::move(s));
    }
    pipelines.push_back({{"stages", std::move(stages)}});
  }
  return {{"pipelines", std::move(pipelines)},
          {"micro_batches", layout.micro_batches},
          {"step_ms", layout.step_ms},
          {"unrestricted_step_ms", Nullable(layout.unrestricted_step_ms)}};
}

json ToJson(const TransferPlan& t) {
  json moves = json::array();
  for (const LayerMove& mv : t.moves)
    moves.push_back({{"layer", mv.layer}, {"from_node", mv.from_node}, {"to_node", mv.to_node}, {"bytes", mv.bytes}});
  json hosts = json::array();
  for (const HostedLayers& h : t.hosts) hosts.push_back({{"node", h.node}, {"layers", h.layers}});
  return {{"moves", std::move(moves)},
          {"hosts", std::move(hosts)},
          {"fill_bytes", t.fill_bytes},
          {"total_bytes", t.total_bytes},
          {"max_sender_bytes", t.max_sender_bytes},
          {"max_receiver_bytes", t.max_receiver_bytes},
          {"executed", t.executed}};
}

json ToJson(const PolicyDecision& d) {
  json j = {{"needed", d.needed},
            {"policy", d.policy ? json(PlanPolicyName(*d.policy)) : json(nullptr)},
            {"reason", d.reason}};
  SetIf(j, "current_step_ms", d.current_step_ms);
  SetIf(j, "f", d.f);
  SetIf(j, "n0", d.n0);
  SetIf(j, "live_units", d.live_units);
  if (d.candidates) {
    json cs = json::array();
    for (const PolicyCandidate& c : *d.candidates) cs.push_back(ToJson(c));
    j["candidates"] = std::move(cs);
  }
  SetIf(j, "expected_interval_ms", d.expected_interval_ms);
  if (d.new_layout) j["new_layout"] = ToJson(*d.new_layout);
  if (d.transfer) j["transfer"] = ToJson(*d.transfer);
  SetIf(j, "joining_nodes", d.joining_nodes);
  SetIf(j, "restore_fetch_bytes", d.restore_fetch_bytes);
  if (d.spare_wait) j["spare_wait"] = {{"waited_ms", d.spare_wait->waited_ms}, {"reason", d.spare_wait->reason}};
  return j;
}

LayerSpan SpanFromJson(const json& j) {
  return {Optional<int>(j, "first"), Optional<int>(j, "last")};
}

PolicyCandidate CandidateFromJson(const json& j) {
  PolicyCandidate c;
  c.policy = PolicyOf(j.at("policy"));
  c.feasible = j.at("feasible").get<bool>();
  c.step_ms = Optional<double>(j, "step_ms");
  c.transition_ms = Optional<double>(j, "transition_ms");
  c.score = Optional<double>(j, "score");
  c.why = Optional<std::string>(j, "why");
  return c;
}

NewLayout LayoutFromJson(const json& j) {
  NewLayout layout;
  for (const json& pipe : j.at("pipelines")) {
    std::vector<StagePlacement> stages;
    for (const json& s : pipe.at("stages"))
      stages.push_back({Optional<std::string>(s, "node"), SpanFromJson(s.at("layers")), s.value("rerouted", false)});
    layout.pipelines.push_back(std::move(stages));
  }
  layout.micro_batches = j.at("micro_batches").get<std::vector<int>>();
  layout.step_ms = j.at("step_ms").get<double>();
  layout.unrestricted_step_ms = Optional<double>(j, "unrestricted_step_ms");
  return layout;
}

TransferPlan TransferFromJson(const json& j) {
  TransferPlan t;
  for (const json& mv : j.at("moves"))
    t.moves.push_back({mv.at("layer").get<int>(), mv.at("from_node").get<std::string>(),
                       mv.at("to_node").get<std::string>(), mv.at("bytes").get<uint64_t>()});
  for (const json& h : j.value("hosts", json::array()))
    t.hosts.push_back({h.at("node").get<std::string>(), h.at("layers").get<std::vector<int>>()});
  t.fill_bytes = j.value("fill_bytes", uint64_t{0});
  t.total_bytes = j.at("total_bytes").get<uint64_t>();
  t.max_sender_bytes = j.value("max_sender_bytes", uint64_t{0});
  t.max_receiver_bytes = j.value("max_receiver_bytes", uint64_t{0});
  t.executed = j.value("executed", false);
  return t;
}

PolicyDecision DecisionFromJson(const json& j) {
  PolicyDecision d;
  d.needed = j.at("needed").get<bool>();
  if (!j.at("policy").is_null()) d.policy = PolicyOf(j.at("policy"));
  d.reason = j.at("reason").get<std::string>();
  d.current_step_ms = Optional<double>(j, "current_step_ms");
  d.f = Optional<int>(j, "f");
  d.n0 = Optional<int>(j, "n0");
  d.live_units = Optional<int>(j, "live_units");
  if (auto it = j.find("candidates"); it != j.end()) {
    d.candidates.emplace();
    for (const json& c : *it) d.candidates->push_back(CandidateFromJson(c));
  }
  d.expected_interval_ms = Optional<double>(j, "expected_interval_ms");
  if (auto it = j.find("new_layout"); it != j.end()) d.new_layout = LayoutFromJson(*it);
  if (auto it = j.find("transfer"); it != j.end()) d.transfer = TransferFromJson(*it);
  d.joining_nodes = Optional<std::vector<std::string>>(j, "joining_nodes");
  d.restore_fetch_bytes = Optional<uint64_t>(j, "restore_fetch_bytes");
  if (auto it = j.find("spare_wait"); it != j.end()) {
    d.spare_wait = SpareWait{it->at("waited_ms").get<int64_t>(), it->at("reason").get<std::string>()};
  }
  return d;
}

constexpr std::pair<std::optional<PhaseMark> RecoveryPhases::*, const char*> kPhases[] = {
    {&RecoveryPhases::lost_at, "lost_at"},
    {&RecoveryPhases::declared_at, "declared_at"},
    {&RecoveryPhases::decided_at, "decided_at"},
    {&RecoveryPhases::staged_at, "staged_at"},
    {&RecoveryPhases::reconnected_at, "reconnected_at"},
    {&RecoveryPhases::restore_started_at, "restore_started_at"},
    {&RecoveryPhases::restore_ended_at, "restore_ended_at"}};

RecoveryPhases PhasesFromJson(const json& j) {
  RecoveryPhases phases;
  if (!j.is_object()) throw ShapeError{"phases must be an object"};
  for (const auto& [member, key] : kPhases) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    phases.*member = PhaseMark{it->at("at_ms").get<int64_t>(), it->at("node").get<std::string>()};
  }
  return phases;
}

PlanDocument DocumentFromJson(const json& j) {
  PlanDocument doc;
  doc.job = j.at("job").get<std::string>();
  doc.step = j.at("step").get<int64_t>();
  const json& layout = j.at("layout");
  doc.dp = layout.at("dp").get<int>();
  doc.tp = layout.at("tp").get<int>();
  doc.pp = layout.at("pp").get<int>();
  for (const json& r : j.at("ranks")) {
    const std::string state = r.at("state").get<std::string>();
    if (state != "alive" && state != "lost") throw ShapeError{"unknown rank state '" + state + "'"};
    doc.ranks.push_back({r.at("pp").get<int>(), r.at("tp").get<int>(), r.at("dp").get<int>(),
                         Optional<std::string>(r, "node"), state == "alive"});
  }
  const json& model = j.at("model");
  for (const json& l : model.at("layers"))
    doc.model.layers.push_back({l.at("layer").get<int>(), l.at("stage").get<int>(), l.at("param_bytes").get<uint64_t>(),
                                l.at("optimizer_bytes").get<uint64_t>(), l.at("bytes").get<uint64_t>()});
  doc.model.total_bytes = model.at("total_bytes").get<uint64_t>();
  doc.model.step_ms = Optional<double>(model, "step_ms");
  doc.model.step_samples = model.at("step_samples").get<int>();
  doc.live_nodes = j.at("live_nodes").get<std::vector<std::string>>();
  doc.lost_nodes = j.at("lost_nodes").get<std::vector<std::string>>();
  doc.spare_nodes = j.at("spare_nodes").get<std::vector<std::string>>();
  const json& profile = j.at("profile");
  doc.profile = {profile.at("source").get<std::string>(), profile.at("note").get<std::string>()};
  doc.peak_units = Optional<int>(j, "peak_units");
  doc.decision = DecisionFromJson(j.at("decision"));
  // Absent from a document published before decisions carried the phases of their loss.
  if (auto it = j.find("phases"); it != j.end() && !it->is_null()) doc.phases = PhasesFromJson(*it);
  return doc;
}

}  // namespace

const char* PlanPolicyName(PlanPolicy policy) {
  for (const auto& [p, name] : kPolicies)
    if (p == policy) return name;
  return "?";
}

std::optional<PlanPolicy> ParsePlanPolicy(const std::string& name) {
  for (const auto& [p, n] : kPolicies)
    if (name == n) return p;
  return std::nullopt;
}

const char* PlanStateName(PlanState state) {
  for (const auto& [s, name] : kStates)
    if (s == state) return name;
  return "?";
}

std::optional<PlanState> ParsePlanState(const std::string& name) {
  for (const auto& [s, n] : kStates)
    if (name == n) return s;
  return std::nullopt;
}

json ToJson(const RecoveryPhases& phases) {
  json j = json::object();
  for (const auto& [member, key] : kPhases) {
    const std::optional<PhaseMark>& mark = phases.*member;
    j[key] = mark ? json{{"at_ms", mark->at_ms}, {"node", mark->node}} : json(nullptr);
  }
  return j;
}

Result<RecoveryPhases> RecoveryPhasesFromJson(const json& j) {
  try {
    return PhasesFromJson(j);
  } catch (const json::exception& e) {
    return Status::Corrupted(std::string("recovery phases: ") + e.what());
  } catch (const ShapeError& e) {
    return Status::Corrupted("recovery phases: " + e.what);
  }
}

json ToJson(const PlanDocument& doc) {
  json ranks = json::array();
  for (const RankState& r : doc.ranks)
    ranks.push_back({{"pp", r.pp}, {"tp", r.tp}, {"dp", r.dp}, {"node", Nullable(r.node)},
                     {"state", r.alive ? "alive" : "lost"}});
  json layers = json::array();
  for (const LayerState& l : doc.model.layers)
    layers.push_back({{"layer", l.layer}, {"stage", l.stage}, {"param_bytes", l.param_bytes},
                      {"optimizer_bytes", l.optimizer_bytes}, {"bytes", l.bytes}});
  json j = {{"job", doc.job},
            {"step", doc.step},
            {"layout", {{"dp", doc.dp}, {"tp", doc.tp}, {"pp", doc.pp}}},
            {"ranks", std::move(ranks)},
            {"model", {{"layers", std::move(layers)},
                       {"total_bytes", doc.model.total_bytes},
                       {"step_ms", Nullable(doc.model.step_ms)},
                       {"step_samples", doc.model.step_samples}}},
            {"live_nodes", doc.live_nodes},
            {"lost_nodes", doc.lost_nodes},
            {"spare_nodes", doc.spare_nodes},
            {"profile", {{"source", doc.profile.source}, {"note", doc.profile.note}}},
            {"decision", ToJson(doc.decision)}};
  SetIf(j, "peak_units", doc.peak_units);
  if (doc.phases) j["phases"] = ToJson(*doc.phases);
  return j;
}

Result<PlanDocument> PlanDocumentFromJson(const json& doc) {
  try {
    return DocumentFromJson(doc);
  } catch (const json::exception& e) {
    return Status::Corrupted(std::string("planner document: ") + e.what());
  } catch (const ShapeError& e) {
    return Status::Corrupted("planner document: " + e.what);
  }
}

coord::PublishedPlan ToRecord(const PlanDecision& decision, const std::string& planner, int64_t decided_at_ms) {
  coord::PublishedPlan record;
  record.generation = decision.generation;
  record.step = decision.step;
  record.basis = decision.basis;
  record.planner = planner;
  record.state = PlanStateName(decision.state);
  record.decided_at_ms = decided_at_ms;
  record.wait_until_ms = decision.wait_until_ms;
  record.plan_json = ToJson(decision.plan).dump();
  return record;
}

std::optional<PlanDocument> DocumentOf(const coord::PublishedPlan& record) {
  const json doc = json::parse(record.plan_json, nullptr, false);
  if (!doc.is_object()) return std::nullopt;
  auto typed = PlanDocumentFromJson(doc);
  if (!typed.ok()) return std::nullopt;
  return std::move(*typed);
}

std::optional<RecoveryPhases> JobPhasesOf(const coord::PublishedPlan& record) {
  const std::optional<PlanDocument> doc = DocumentOf(record);
  if (!doc || !doc->phases || doc->lost_nodes.empty() || doc->Grows()) return std::nullopt;
  if (record.state == PlanStateName(PlanState::kNoLoss)) return std::nullopt;
  RecoveryPhases phases;
  phases.lost_at = doc->phases->lost_at;
  phases.declared_at = doc->phases->declared_at;
  const bool final_decision =
      record.state == PlanStateName(PlanState::kDecided) || record.state == PlanStateName(PlanState::kConfirmed);
  if (!final_decision) return phases;
  phases.decided_at = PhaseMark{record.decided_at_ms, record.planner};
  const json progress = StoredProgress(record.transfer_json);
  if (progress.is_object() && progress.value("state", std::string()) == "done") {
    const auto finished = progress.find("finished_at_ms");
    if (finished != progress.end() && finished->is_number_integer()) {
      phases.staged_at = PhaseMark{finished->get<int64_t>(), record.planner};
    }
  }
  return phases;
}

json ToJson(const LastRecovery& recovery) {
  return {{"phases", ToJson(recovery.phases)},
          {"first_commit_step", Nullable(recovery.first_commit_step)},
          {"first_commit_at", recovery.first_commit_at
                                  ? json{{"at_ms", recovery.first_commit_at->at_ms}, {"node", recovery.first_commit_at->node}}
                                  : json(nullptr)}};
}

json ToJson(const PlanShow& show) {
  json j = ToJson(show.plan);
  if (show.publication) {
    const coord::PublishedPlan& p = *show.publication;
    j["publication"] = {{"state", p.state},
                        {"generation", p.generation},
                        {"step", p.step},
                        {"basis", p.basis},
                        {"planner", p.planner},
                        {"decided_at_ms", p.decided_at_ms},
                        {"version", p.version},
                        {"current", show.current},
                        {"wait_until_ms", p.wait_until_ms > 0 ? json(p.wait_until_ms) : json(nullptr)},
                        {"transfer", StoredProgress(p.transfer_json)}};
  } else {
    j["publication"] = nullptr;
  }
  j["planner_mode"] = PlannerModeName(show.mode);
  j["node"] = show.node;  // who answered: a launcher places each node's ranks by it
  j["last_recovery"] = show.last_recovery ? ToJson(*show.last_recovery) : json(nullptr);
  return j;
}

}  // namespace reft::replan
