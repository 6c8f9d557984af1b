#include "reft/planner/profile.h"

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include <toml++/toml.h>

#include "reft/units.h"

namespace reft::planner {

using nlohmann::json;

double ModelProfile::F(int l, int d) const {
  return d <= 1 ? layers[l].forward : layers[l].forward / (d * intra_stage_efficiency);
}
double ModelProfile::B(int l, int d) const {
  return d <= 1 ? layers[l].backward : layers[l].backward / (d * intra_stage_efficiency);
}

namespace {
json TomlNodeToJson(const toml::node& n) {
  if (auto t = n.as_table()) {
    json o = json::object();
    for (auto&& [k, v] : *t) o[std::string(k.str())] = TomlNodeToJson(v);
    return o;
  }
  if (auto a = n.as_array()) {
    json o = json::array();
    for (auto&& v : *a) o.push_back(TomlNodeToJson(v));
    return o;
  }
  if (auto v = n.as_integer()) return json(v->get());
  if (auto v = n.as_floating_point()) return json(v->get());
  if (auto v = n.as_boolean()) return json(v->get());
  if (auto v = n.as_string()) return json(v->get());
  // Dates and times: keep them as their TOML text.
  if (auto v = n.as_date()) return json(std::to_string(v->get().year) + "-" + std::to_string(v->get().month) + "-" + std::to_string(v->get().day));
  return json(nullptr);
}
}  // namespace

Result<json> TomlToJson(const std::string& text, const std::string& source) {
  try {
    toml::table t = toml::parse(text, source);
    return TomlNodeToJson(t);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << source << ": TOML parse error at line " << e.source().begin.line << ": " << e.description();
    return Status::InvalidArgument(os.str());
  }
}

Result<json> LoadDocument(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open input file");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const bool is_json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (is_json || (!text.empty() && text.find_first_not_of(" \t\r\n") != std::string::npos &&
                  text[text.find_first_not_of(" \t\r\n")] == '{')) {
    try {
      return json::parse(text);
    } catch (const json::parse_error& e) {
      return Status::InvalidArgument(path + ": JSON parse error: " + e.what());
    }
  }
  return TomlToJson(text, path);
}

Result<double> GetNumber(const json& j, const std::string& path, const char* key, bool required,
                         double def, double min_value) {
  const std::string name = path + "." + key;
  if (!j.is_object()) return Status::InvalidArgument(path + ": must be an object");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Status::InvalidArgument(name + ": missing required field");
    return def;
  }
  if (!it->is_number()) return Status::InvalidArgument(name + ": must be a number, got " + it->dump());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < min_value) {
    std::ostringstream os;
    os << name << ": value " << it->dump() << " is below the minimum " << min_value;
    return Status::InvalidArgument(os.str());
  }
  return v;
}

Result<int> GetInt(const json& j, const std::string& path, const char* key, bool required, int def,
                   int min_value) {
  const std::string name = path + "." + key;
  if (!j.is_object()) return Status::InvalidArgument(path + ": must be an object");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Status::InvalidArgument(name + ": missing required field");
    return def;
  }
  if (!it->is_number_integer())
    return Status::InvalidArgument(name + ": must be an integer, got " + it->dump());
  const long long v = it->get<long long>();
  if (v < min_value || v > 1000000000)
    return Status::InvalidArgument(name + ": value " + std::to_string(v) + " out of range (minimum " +
                                   std::to_string(min_value) + ")");
  return static_cast<int>(v);
}

Result<uint64_t> GetBytes(const json& j, const std::string& path, const char* key, bool required,
                          uint64_t def) {
  const std::string name = path + "." + key;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Status::InvalidArgument(name + ": missing required field");
    return def;
  }
  if (it->is_string()) {
    auto r = ParseByteSize(it->get<std::string>());
    if (!r.ok()) return r.status().WithContext(name);
    return *r;
  }
  if (!it->is_number()) return Status::InvalidArgument(name + ": must be a byte count or size string");
  const double v = it->get<double>();
  if (!(v >= 0)) return Status::InvalidArgument(name + ": negative size " + it->dump());
  return static_cast<uint64_t>(v);
}

namespace {
Result<LayerProfile> ParseLayer(const json& j, const std::string& path) {
  LayerProfile l;
  REFT_ASSIGN_OR_RETURN(l.forward, GetNumber(j, path, "forward_ms", true, 0, 0));
  REFT_ASSIGN_OR_RETURN(l.backward, GetNumber(j, path, "backward_ms", false, 2 * l.forward, 0));
  REFT_ASSIGN_OR_RETURN(l.param_bytes, GetBytes(j, path, "param_bytes", false, 0));
  REFT_ASSIGN_OR_RETURN(l.optimizer_bytes, GetBytes(j, path, "optimizer_bytes", false, 2 * l.param_bytes));
  REFT_ASSIGN_OR_RETURN(l.activation_bytes, GetBytes(j, path, "activation_bytes", false, 0));
  return l;
}
}  // namespace

Result<ModelProfile> ParseModel(const json& j, const std::string& path) {
  if (!j.is_object()) return Status::InvalidArgument(path + ": missing or not an object");
  ModelProfile m;
  REFT_ASSIGN_OR_RETURN(m.intra_stage_efficiency,
                        GetNumber(j, path, "intra_stage_efficiency", false, 0.9, 1e-3));
  if (j.contains("layers")) {
    const json& ls = j["layers"];
    if (!ls.is_array() || ls.empty())
      return Status::InvalidArgument(path + ".layers: must be a non-empty array");
    for (size_t i = 0; i < ls.size(); ++i) {
      REFT_ASSIGN_OR_RETURN(auto l, ParseLayer(ls[i], path + ".layers[" + std::to_string(i) + "]"));
      m.layers.push_back(l);
    }
  } else {
    REFT_ASSIGN_OR_RETURN(int n, GetInt(j, path, "num_layers", true, 0, 1));
    if (!j.contains("layer"))
      return Status::InvalidArgument(path + ".layer: missing (needed with num_layers, or give layers[])");
    REFT_ASSIGN_OR_RETURN(auto l, ParseLayer(j["layer"], path + ".layer"));
    m.layers.assign(n, l);
  }
  return m;
}

Result<ClusterSpec> ParseCluster(const json& j, const std::string& path) {
  if (!j.is_object()) return Status::InvalidArgument(path + ": missing or not an object");
  ClusterSpec c;
  REFT_ASSIGN_OR_RETURN(c.nodes, GetInt(j, path, "nodes", true, 0, 1));
  REFT_ASSIGN_OR_RETURN(c.gpus_per_node, GetInt(j, path, "gpus_per_node", false, 1, 1));
  REFT_ASSIGN_OR_RETURN(c.device_memory_bytes, GetBytes(j, path, "device_memory", false, 0));
  REFT_ASSIGN_OR_RETURN(c.memory_margin, GetNumber(j, path, "memory_margin", false, 0.10, 0));
  REFT_ASSIGN_OR_RETURN(c.network, ParseNetwork(j, path));
  return c;
}

Result<NetworkSpec> ParseNetwork(const json& j, const std::string& path) {
  NetworkSpec n;
  if (j.is_null()) return n;
  // Gbit/s -> bytes per ms: 1 Gbit/s = 1.25e8 B/s = 1.25e5 B/ms.
  REFT_ASSIGN_OR_RETURN(double gbps, GetNumber(j, path, "network_gbps", false, n.bandwidth_bytes_per_ms / 1.25e5, 0));
  REFT_ASSIGN_OR_RETURN(double us, GetNumber(j, path, "network_latency_us", false, n.latency_ms * 1000, 0));
  n.bandwidth_bytes_per_ms = gbps * 1.25e5;
  n.latency_ms = us / 1000;
  return n;
}

Result<JobSpec> ParseJob(const json& j, const std::string& path) {
  if (!j.is_object()) return Status::InvalidArgument(path + ": missing or not an object");
  JobSpec s;
  REFT_ASSIGN_OR_RETURN(s.f, GetInt(j, path, "f", false, 1, 0));
  REFT_ASSIGN_OR_RETURN(s.micro_batch, GetInt(j, path, "micro_batch", false, 1, 1));
  REFT_ASSIGN_OR_RETURN(s.global_batch, GetInt(j, path, "global_batch", false, 0, 0));
  REFT_ASSIGN_OR_RETURN(s.n0, GetInt(j, path, "n0", false, 0, 0));
  REFT_ASSIGN_OR_RETURN(s.template_cap, GetInt(j, path, "template_cap", false, 0, 0));
  return s;
}

ModelProfile SyntheticModel(int layers, uint64_t seed, double jitter) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(1 - jitter, 1 + jitter);
  ModelProfile m;
  for (int i = 0; i < layers; ++i) {
    LayerProfile l;
    const double base = (i == 0 || i == layers - 1) ? 1.5 : 1.0;
    l.forward = 10.0 * base * u(rng);
    l.backward = 2 * l.forward;
    l.param_bytes = static_cast<uint64_t>(64.0 * base * (1 << 20));
    l.optimizer_bytes = 2 * l.param_bytes;
    l.activation_bytes = 16u << 20;
    m.layers.push_back(l);
  }
  return m;
}

}  // namespace reft::planner
