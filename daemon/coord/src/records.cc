#include "reft/coord/records.h"

#include <chrono>

#include <nlohmann/json.hpp>
#include <type_traits>

#include "reft/json_integer.h"

namespace reft::coord {

using json = nlohmann::json;

namespace {

Result<json> Parse(const std::string& key, const std::string& value) {
  json j = json::parse(value, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corrupted("etcd key " + key + " does not hold a JSON object");
  }
  return j;
}

// `v` as a T: integers must be integral JSON numbers within T's range (JsonInteger), other
// types follow nlohmann's conversion.
template <typename T>
bool Convert(const json& v, T* out) {
  if constexpr (std::is_integral_v<T>) {
    return JsonInteger(v, out);
  } else {
    try {
      *out = v.template get<T>();
      return true;
    } catch (const json::exception&) {
      return false;
    }
  }
}

template <typename T>
Result<T> Field(const json& j, const std::string& key, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return Status::Corrupted("etcd key " + key + ": field '" + name + "' missing");
  T v{};
  if (!Convert(*it, &v)) {
    return Status::Corrupted("etcd key " + key + ": field '" + name + "' has the wrong type");
  }
  return v;
}

template <typename T>
T FieldOr(const json& j, const char* name, T fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  T v{};
  return Convert(*it, &v) ? v : fallback;
}

}  // namespace

std::string Encode(const NodeRecord& r) {
  return json{{"address", r.address}, {"epoch", r.epoch}}.dump();
}

std::string Encode(const JobLayout& r) {
  return json{{"dp", r.dp}, {"tp", r.tp}, {"pp", r.pp}, {"zero", r.zero}}.dump();
}

std::string Encode(const GenerationRecord& r) {
  json j{{"generation", r.generation}, {"persist_floor", r.persist_floor}, {"reason", r.reason}};
  j["base_step"] = r.base_step ? json(*r.base_step) : json(nullptr);
  return j.dump();
}

std::string Encode(const CommittedRecord& r) {
  json j{{"step", r.step}, {"generation", r.generation}};
  if (r.at_ms != 0) j["at_ms"] = r.at_ms;
  if (r.epoch != 0) j["epoch"] = r.epoch;
  if (r.layout_revision != 0) j["layout_revision"] = r.layout_revision;
  return j.dump();
}

std::string Encode(const CompletionRecord& r) {
  json ranks = json::array();
  for (const auto& k : r.ranks) ranks.push_back({k.pp, k.tp, k.dp});
  return json{{"generation", r.generation},
              {"epoch", r.epoch},
              {"layout_revision", r.layout_revision},
              {"ranks", ranks}}
      .dump();
}

std::string Encode(const NodeRef& r) { return json{{"node", r.node}, {"step", r.step}}.dump(); }

std::string Encode(const local::JobOwner& r) {
  json j{{"uid", r.uid},
         {"claimed_at_ms", r.claimed_at_ms},
         {"claimed_on", r.claimed_on}};
  j["gid"] = r.gid ? json(*r.gid) : json(nullptr);
  j["group"] = r.group.empty() ? json(nullptr) : json(r.group);
  return j.dump();
}

std::string Encode(const RestoreDecision& r) {
  return json{{"generation", r.generation}, {"step", r.step},
              {"source", RestoreSourceName(r.source)},
              {"decided_by", r.decided_by}, {"detail", r.detail}}
      .dump();
}

std::string Encode(const PublishedPlan& r) {
  json plan = json::parse(r.plan_json, nullptr, false);
  if (plan.is_discarded()) plan = nullptr;
  json transfer = r.transfer_json.empty() ? json(nullptr) : json::parse(r.transfer_json, nullptr, false);
  if (transfer.is_discarded()) transfer = nullptr;
  return json{{"generation", r.generation},       {"step", r.step},
              {"basis", r.basis},                 {"planner", r.planner},
              {"state", r.state},                 {"decided_at_ms", r.decided_at_ms},
              {"wait_until_ms", r.wait_until_ms}, {"plan", plan},
              {"transfer", transfer}}
      .dump();
}

Result<NodeRecord> DecodeNode(const std::string& key, const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  NodeRecord r;
  REFT_ASSIGN_OR_RETURN(r.address, Field<std::string>(j, key, "address"));
  r.epoch = FieldOr<uint64_t>(j, "epoch", 0);
  return r;
}

Result<JobLayout> DecodeLayout(const std::string& key, const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  JobLayout l;
  REFT_ASSIGN_OR_RETURN(l.dp, Field<int32_t>(j, key, "dp"));
  REFT_ASSIGN_OR_RETURN(l.tp, Field<int32_t>(j, key, "tp"));
  REFT_ASSIGN_OR_RETURN(l.pp, Field<int32_t>(j, key, "pp"));
  l.zero = FieldOr<int32_t>(j, "zero", 0);
  Status v = l.Validate();
  if (!v.ok()) return Status::Corrupted("etcd key " + key + ": " + v.message());
  return l;
}

Result<GenerationRecord> DecodeGeneration(const std::string& key, const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  GenerationRecord r;
  REFT_ASSIGN_OR_RETURN(r.generation, Field<uint64_t>(j, key, "generation"));
  auto base = j.find("base_step");
  if (base != j.end() && !base->is_null()) {
    REFT_ASSIGN_OR_RETURN(int64_t b, Field<int64_t>(j, key, "base_step"));
    r.base_step = b;
  }
  r.persist_floor = FieldOr<int64_t>(j, "persist_floor", -1);
  r.reason = FieldOr<std::string>(j, "reason", "");
  return r;
}

Result<CommittedRecord> DecodeCommitted(const std::string& key, const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  CommittedRecord r;
  REFT_ASSIGN_OR_RETURN(r.step, Field<int64_t>(j, key, "step"));
  r.generation = FieldOr<uint64_t>(j, "generation", 0);
  r.at_ms = FieldOr<int64_t>(j, "at_ms", 0);
  r.epoch = FieldOr<int64_t>(j, "epoch", 0);
  r.layout_revision = FieldOr<int64_t>(j, "layout_revision", 0);
  return r;
}

Result<CompletionRecord> DecodeCompletion(const std::string& job, const std::string& key,
                                          const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  CompletionRecord r;
  r.generation = FieldOr<uint64_t>(j, "generation", 0);
  r.epoch = FieldOr<int64_t>(j, "epoch", 0);
  r.layout_revision = FieldOr<int64_t>(j, "layout_revision", 0);
  auto ranks = j.find("ranks");
  if (ranks == j.end() || !ranks->is_array()) {
    return Status::Corrupted("etcd key " + key + ": field 'ranks' missing");
  }
  for (const auto& k : *ranks) {
    store::RankKey rank{job, 0, 0, 0};
    if (!k.is_array() || k.size() != 3 || !JsonInteger(k[0], &rank.pp) ||
        !JsonInteger(k[1], &rank.tp) || !JsonInteger(k[2], &rank.dp)) {
      return Status::Corrupted("etcd key " + key + ": a rank is not [pp, tp, dp]");
    }
    r.ranks.push_back(std::move(rank));
  }
  return r;
}

Result<NodeRef> DecodeNodeRef(const std::string& key, const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  NodeRef r;
  REFT_ASSIGN_OR_RETURN(r.node, Field<std::string>(j, key, "node"));
  r.step = FieldOr<int64_t>(j, "step", -1);
  return r;
}

std::string Encode(const PersistedRecord& r) {
  return json{{"step", r.step}, {"at_ms", r.at_ms}}.dump();
}

Result<PersistedRecord> DecodePersisted(const std::string& key, const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  PersistedRecord r;
  REFT_ASSIGN_OR_RETURN(r.step, Field<int64_t>(j, key, "step"));
  r.at_ms = FieldOr<int64_t>(j, "at_ms", 0);
  return r;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<local::JobOwner> DecodeOwner(const std::string& key, const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  local::JobOwner o;
  REFT_ASSIGN_OR_RETURN(o.uid, Field<uint32_t>(j, key, "uid"));
  auto gid = j.find("gid");
  if (gid != j.end() && !gid->is_null()) {
    uint32_t g = 0;
    if (!Convert(*gid, &g)) return Status::Corrupted("etcd key " + key + ": field 'gid' has the wrong type");
    o.gid = g;
  }
  o.group = FieldOr<std::string>(j, "group", "");
  o.claimed_at_ms = FieldOr<int64_t>(j, "claimed_at_ms", 0);
  o.claimed_on = FieldOr<std::string>(j, "claimed_on", "");
  return o;
}

std::string Encode(const local::ReplicatedBuffers& r) {
  json buffers = json::array();
  for (const auto& b : r) buffers.push_back({{"name", b.name}, {"dtype", b.dtype}, {"size", b.size}});
  return json{{"buffers", buffers}}.dump();
}

Result<local::ReplicatedBuffers> DecodeReplicated(const std::string& key,
                                                  const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  auto buffers = j.find("buffers");
  if (buffers == j.end() || !buffers->is_array()) {
    return Status::Corrupted("etcd key " + key + ": field 'buffers' missing");
  }
  local::ReplicatedBuffers out;
  for (const auto& b : *buffers) {
    if (!b.is_object()) return Status::Corrupted("etcd key " + key + ": a buffer is not an object");
    local::ReplicatedBuffer r;
    REFT_ASSIGN_OR_RETURN(r.name, Field<std::string>(b, key, "name"));
    REFT_ASSIGN_OR_RETURN(r.dtype, Field<std::string>(b, key, "dtype"));
    REFT_ASSIGN_OR_RETURN(r.size, Field<uint64_t>(b, key, "size"));
    out.push_back(std::move(r));
  }
  return out;
}

Result<RestoreDecision> DecodeDecision(const std::string& key, const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  RestoreDecision d;
  REFT_ASSIGN_OR_RETURN(d.generation, Field<uint64_t>(j, key, "generation"));
  REFT_ASSIGN_OR_RETURN(d.step, Field<int64_t>(j, key, "step"));
  REFT_ASSIGN_OR_RETURN(std::string source, Field<std::string>(j, key, "source"));
  auto parsed = ParseRestoreSource(source);
  if (!parsed.ok()) return Status::Corrupted("etcd key " + key + ": " + parsed.status().message());
  d.source = *parsed;
  d.decided_by = FieldOr<std::string>(j, "decided_by", "");
  d.detail = FieldOr<std::string>(j, "detail", "");
  return d;
}

Result<PublishedPlan> DecodePlan(const std::string& key, const std::string& value) {
  REFT_ASSIGN_OR_RETURN(json j, Parse(key, value));
  PublishedPlan p;
  REFT_ASSIGN_OR_RETURN(p.generation, Field<uint64_t>(j, key, "generation"));
  REFT_ASSIGN_OR_RETURN(p.step, Field<int64_t>(j, key, "step"));
  REFT_ASSIGN_OR_RETURN(p.basis, Field<std::string>(j, key, "basis"));
  REFT_ASSIGN_OR_RETURN(p.state, Field<std::string>(j, key, "state"));
  p.planner = FieldOr<std::string>(j, "planner", "");
  p.decided_at_ms = FieldOr<int64_t>(j, "decided_at_ms", 0);
  p.wait_until_ms = FieldOr<int64_t>(j, "wait_until_ms", 0);
  auto plan = j.find("plan");
  if (plan == j.end() || !plan->is_object()) {
    return Status::Corrupted("etcd key " + key + ": field 'plan' is not an object");
  }
  p.plan_json = plan->dump();
  auto transfer = j.find("transfer");
  if (transfer != j.end() && !transfer->is_null()) {
    if (!transfer->is_object()) {
      return Status::Corrupted("etcd key " + key + ": field 'transfer' is not an object");
    }
    p.transfer_json = transfer->dump();
  }
  return p;
}

}  // namespace reft::coord
