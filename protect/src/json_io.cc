/// \file json_io.cc
/// \brief JSON parsing/printing for the sharding input and protection reports.

#include "reft/protect/json_io.h"

#include "reft/units.h"

namespace reft::protect {
namespace {

using nlohmann::json;

Result<uint64_t> Bytes(const json& v, const std::string& field) {
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0))
    return v.get<uint64_t>();
  if (v.is_string()) {
    auto r = ParseByteSize(v.get<std::string>());
    if (!r.ok()) return r.status().WithContext(field);
    return r;
  }
  return Status::InvalidArgument(field + ": expected a byte count (number or \"64KiB\")");
}

Result<int> Int(const json& obj, const std::string& key, int def, const std::string& where) {
  if (!obj.contains(key)) return def;
  const auto& v = obj.at(key);
  if (!v.is_number_integer())
    return Status::InvalidArgument(where + "." + key + ": expected an integer");
  return v.get<int>();
}

json Regions(const std::vector<Region>& regions) {
  json arr = json::array();
  for (const auto& r : regions) arr.push_back({{"name", r.name}, {"size", r.size}});
  return arr;
}

}  // namespace

Result<std::vector<BufferSpec>> BuffersFromJson(const json& arr, const std::string& where) {
  if (!arr.is_array()) return Status::InvalidArgument(where + ": expected an array of buffers");
  std::vector<BufferSpec> out;
  for (size_t i = 0; i < arr.size(); ++i) {
    const auto& b = arr[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object()) return Status::InvalidArgument(at + ": expected an object");
    BufferSpec s;
    if (!b.contains("name") || !b["name"].is_string())
      return Status::InvalidArgument(at + ".name: missing string");
    s.name = b["name"].get<std::string>();
    if (!b.contains("size")) return Status::InvalidArgument(at + ".size: missing");
    REFT_ASSIGN_OR_RETURN(s.size, Bytes(b["size"], at + ".size"));
    if (b.contains("dtype")) {
      if (!b["dtype"].is_string()) return Status::InvalidArgument(at + ".dtype: expected a string");
      s.dtype = b["dtype"].get<std::string>();
    }
    if (b.contains("kind") && !b["kind"].is_string())
      return Status::InvalidArgument(at + ".kind: expected \"replicated\" or \"unique\"");
    const std::string kind = b.value("kind", std::string("replicated"));
    if (kind == "replicated") {
      s.kind = BufferKind::kReplicated;
    } else if (kind == "unique") {
      s.kind = BufferKind::kUnique;
    } else {
      return Status::InvalidArgument(at + ".kind: '" + kind + "' is not replicated or unique");
    }
    REFT_ASSIGN_OR_RETURN(s.layer, Int(b, "layer", -1, at));
    if (b.contains("optimizer") && !b["optimizer"].is_boolean())
      return Status::InvalidArgument(at + ".optimizer: expected true or false");
    s.optimizer = b.value("optimizer", false);
    out.push_back(std::move(s));
  }
  return out;
}

json BuffersToJson(const std::vector<BufferSpec>& buffers) {
  json arr = json::array();
  for (const auto& b : buffers) {
    arr.push_back({{"name", b.name},
                   {"size", b.size},
                   {"dtype", b.dtype},
                   {"kind", b.kind == BufferKind::kUnique ? "unique" : "replicated"},
                   {"layer", b.layer},
                   {"optimizer", b.optimizer}});
  }
  return arr;
}

Result<ShardingInput> ShardingInputFromJson(const json& doc) {
  if (!doc.is_object()) return Status::InvalidArgument("input: expected a JSON object");
  ShardingInput in;
  if (!doc.contains("layout") || !doc["layout"].is_object()) {
    return Status::InvalidArgument("layout: missing object {dp, tp, pp, zero_stage, nodes}");
  }
  const auto& l = doc["layout"];
  REFT_ASSIGN_OR_RETURN(in.layout.dp, Int(l, "dp", 1, "layout"));
  REFT_ASSIGN_OR_RETURN(in.layout.tp, Int(l, "tp", 1, "layout"));
  REFT_ASSIGN_OR_RETURN(in.layout.pp, Int(l, "pp", 1, "layout"));
  REFT_ASSIGN_OR_RETURN(in.layout.zero, Int(l, "zero_stage", 0, "layout"));
  if (l.contains("nodes")) {
    if (!l["nodes"].is_array())
      return Status::InvalidArgument("layout.nodes: expected an array of node names");
    for (const auto& n : l["nodes"]) {
      if (!n.is_string())
        return Status::InvalidArgument("layout.nodes: every entry must be a string");
      in.placement.push_back(n.get<std::string>());
    }
  }
  REFT_RETURN_NOT_OK(in.CheckLayout());
  if (doc.contains("scheme")) {
    if (!doc["scheme"].is_string())
      return Status::InvalidArgument("scheme: expected a string like \"arc1+aec\"");
    auto s = Scheme::Parse(doc["scheme"].get<std::string>());
    if (!s.ok()) return s.status();
    in.scheme = *s;
  }
  if (doc.contains("chunk")) {
    REFT_ASSIGN_OR_RETURN(in.chunk, Bytes(doc["chunk"], "chunk"));
  }
  if (doc.contains("buffers")) {
    REFT_ASSIGN_OR_RETURN(in.buffers, BuffersFromJson(doc["buffers"], "buffers"));
  }
  if (doc.contains("groups")) {
    if (!doc["groups"].is_array()) return Status::InvalidArgument("groups: expected an array");
    for (size_t i = 0; i < doc["groups"].size(); ++i) {
      const auto& gj = doc["groups"][i];
      const std::string at = "groups[" + std::to_string(i) + "]";
      ShardingInput::GroupBuffers gb;
      REFT_ASSIGN_OR_RETURN(gb.pp, Int(gj, "pp", 0, at));
      REFT_ASSIGN_OR_RETURN(gb.tp, Int(gj, "tp", 0, at));
      if (!gj.contains("buffers")) return Status::InvalidArgument(at + ".buffers: missing");
      REFT_ASSIGN_OR_RETURN(gb.buffers, BuffersFromJson(gj["buffers"], at + ".buffers"));
      in.group_buffers.push_back(std::move(gb));
    }
  }
  if (doc.contains("strict_placement") && !doc["strict_placement"].is_boolean())
    return Status::InvalidArgument("strict_placement: expected true or false");
  in.strict_placement = doc.value("strict_placement", false);
  return in;
}

Result<json> RecommendationJson(const json& doc, const ShardingInput& input) {
  if (!doc.is_object() || !doc.contains("io")) return json();
  const auto& io = doc["io"];
  if (!io.is_object()) return Status::InvalidArgument("io: expected {\"bandwidth\", \"window_s\"}");
  if (!io.contains("bandwidth"))
    return Status::InvalidArgument("io.bandwidth: missing (bytes per second)");
  REFT_ASSIGN_OR_RETURN(uint64_t bw, Bytes(io["bandwidth"], "io.bandwidth"));
  if (!io.contains("window_s") || !io["window_s"].is_number()) {
    return Status::InvalidArgument(
        "io.window_s: missing number (seconds of snapshot window per iteration)");
  }
  REFT_ASSIGN_OR_RETURN(
      auto rec, RecommendScheme(input, static_cast<double>(bw), io["window_s"].get<double>()));
  return json{{"scheme", rec.scheme.ToString()},
              {"reason", rec.reason},
              {"arc_seconds", rec.arc_seconds},
              {"aec_seconds", rec.aec_seconds}};
}

json ToJson(const RankPlan& p) {
  json pieces = json::array();
  for (const auto& s : p.pieces) {
    pieces.push_back({{"buffer", s.buffer},
                      {"buffer_offset", s.buffer_offset},
                      {"shard_offset", s.shard_offset},
                      {"size", s.size}});
  }
  return {{"rank", p.coord.ToString()},
          {"pp", p.coord.pp},
          {"tp", p.coord.tp},
          {"dp", p.coord.dp},
          {"node", p.node},
          {"shard", {p.shard_begin, p.shard_end}},
          {"pieces", pieces},
          {"regions", Regions(p.regions)},
          {"total_bytes", p.total_bytes},
          {"redundancy_bytes", p.redundancy_bytes}};
}

json ToJson(const ProtectionReport& rep, const Scheme& scheme) {
  json groups = json::array();
  for (size_t i = 0; i < rep.groups.size(); ++i) {
    const auto& gp = rep.groups[i];
    const auto& plan = rep.sharding.groups[i];
    json ranks = json::array();
    for (const auto& r : plan.ranks) ranks.push_back(ToJson(r));
    const double w = static_cast<double>(gp.replicated_bytes);
    const double m = gp.members;
    json formula = json::object();
    if (scheme.arc > 0) formula["arc_bytes_per_rank"] = (1 + scheme.arc) * w / m;
    if (scheme.aec && m >= 2) formula["aec_bytes_per_rank"] = w / m + w / (m * (m - 1));
    if (scheme.rs > 0) formula["rs_bytes_per_rank"] = w / m + scheme.rs * w / (m * (m - scheme.rs));
    groups.push_back({{"pp", gp.pp},
                      {"tp", gp.tp},
                      {"members", gp.members},
                      {"nodes", gp.nodes},
                      {"replicated_bytes", gp.replicated_bytes},
                      {"max_rank_bytes", gp.max_rank_bytes},
                      {"max_rank_redundancy_bytes", gp.max_rank_redundancy},
                      {"node_failures", gp.node_failures},
                      {"replicated_node_failures", gp.replicated_node_failures},
                      {"exact", gp.exact},
                      {"first_fatal", gp.first_fatal},
                      {"first_fatal_loss", gp.first_fatal_loss},
                      {"failure_sets_analysed", gp.analyses},
                      {"formula", formula},
                      {"ranks", ranks}});
  }
  return {{"scheme", scheme.ToString()},
          {"node_failures", rep.node_failures},
          {"warnings", rep.sharding.warnings},
          {"groups", groups}};
}

}  // namespace reft::protect
