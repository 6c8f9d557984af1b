/// \file slot_meta.cc
/// \brief JSON form of a slot's "meta" region.

#include "reft/protect/slot_meta.h"

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reft/protect/json_io.h"

namespace reft::protect {
namespace {

using nlohmann::json;

constexpr int kMetaVersion = 1;

Result<int> IntField(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || !obj[key].is_number_integer()) {
    return Status::InvalidArgument("slot meta: " + where + key + ": missing integer");
  }
  const auto v = obj[key].get<int64_t>();
  if (v < 0 || v > (1 << 20)) {
    return Status::InvalidArgument("slot meta: " + where + key + ": " + std::to_string(v) +
                                   " out of range");
  }
  return static_cast<int>(v);
}

}  // namespace

std::vector<uint8_t> SlotMeta::Encode() const {
  const json doc = {{"version", kMetaVersion},
                    {"job", job},
                    {"rank", {{"pp", coord.pp}, {"tp", coord.tp}, {"dp", coord.dp}}},
                    {"layout",
                     {{"dp", layout.dp},
                      {"tp", layout.tp},
                      {"pp", layout.pp},
                      {"zero_stage", layout.zero}}},
                    {"scheme", scheme.ToString()},
                    {"chunk", shard_chunk},
                    {"buffers", BuffersToJson(buffers)}};
  const std::string text = doc.dump();
  return std::vector<uint8_t>(text.begin(), text.end());
}

Result<SlotMeta> SlotMeta::Decode(const uint8_t* data, uint64_t size) {
  if (size == 0 || size > kMaxSlotMetaBytes) {
    return Status::Corrupted("slot meta: " + std::to_string(size) + " bytes (expected 1.." +
                             std::to_string(kMaxSlotMetaBytes) + ")");
  }
  const json doc = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return Status::Corrupted("slot meta: not a JSON object");
  const int64_t version = doc.contains("version") && doc["version"].is_number_integer()
                              ? doc["version"].get<int64_t>()
                              : -1;
  if (version != kMetaVersion) {
    return Status::Unsupported("slot meta: version " + std::to_string(version) +
                               " (this reftd reads version " + std::to_string(kMetaVersion) + ")");
  }
  SlotMeta m;
  if (!doc.contains("job") || !doc["job"].is_string() || doc["job"].get<std::string>().empty()) {
    return Status::InvalidArgument("slot meta: job: missing string");
  }
  m.job = doc["job"].get<std::string>();
  if (!doc.contains("rank") || !doc["rank"].is_object() || !doc.contains("layout") ||
      !doc["layout"].is_object()) {
    return Status::InvalidArgument("slot meta: rank and layout objects are required");
  }
  REFT_ASSIGN_OR_RETURN(m.coord.pp, IntField(doc["rank"], "pp", "rank."));
  REFT_ASSIGN_OR_RETURN(m.coord.tp, IntField(doc["rank"], "tp", "rank."));
  REFT_ASSIGN_OR_RETURN(m.coord.dp, IntField(doc["rank"], "dp", "rank."));
  REFT_ASSIGN_OR_RETURN(m.layout.dp, IntField(doc["layout"], "dp", "layout."));
  REFT_ASSIGN_OR_RETURN(m.layout.tp, IntField(doc["layout"], "tp", "layout."));
  REFT_ASSIGN_OR_RETURN(m.layout.pp, IntField(doc["layout"], "pp", "layout."));
  REFT_ASSIGN_OR_RETURN(m.layout.zero, IntField(doc["layout"], "zero_stage", "layout."));
  if (!doc.contains("scheme") || !doc["scheme"].is_string()) {
    return Status::InvalidArgument("slot meta: scheme: missing string");
  }
  REFT_ASSIGN_OR_RETURN(m.scheme, Scheme::Parse(doc["scheme"].get<std::string>()));
  if (!doc.contains("chunk") || !doc["chunk"].is_number_unsigned() ||
      doc["chunk"].get<uint64_t>() == 0) {
    return Status::InvalidArgument("slot meta: chunk: missing positive integer");
  }
  m.shard_chunk = doc["chunk"].get<uint64_t>();
  if (!doc.contains("buffers")) return Status::InvalidArgument("slot meta: buffers: missing");
  REFT_ASSIGN_OR_RETURN(m.buffers, BuffersFromJson(doc["buffers"], "slot meta: buffers"));
  // Validates layout, coordinates, buffers and the scheme against dp in one place.
  REFT_RETURN_NOT_OK(m.Plan().status().WithContext("slot meta"));
  return m;
}

Result<RankPlan> SlotMeta::Plan() const {
  return ComputeRankPlan(layout, scheme, coord, buffers, shard_chunk);
}

Result<SgGeometry> SlotMeta::Geometry() const {
  return BuildGeometry(layout.dp, buffers, shard_chunk, scheme);
}

SlotMeta SlotMeta::ForMember(int dp) const {
  SlotMeta m = *this;
  m.coord.dp = dp;
  return m;
}

namespace {

template <typename T>
void Diff(std::string* out, const std::string& what, const T& here, const T& there,
          const std::string& there_name) {
  if (here == there) return;
  std::ostringstream os;
  os << std::boolalpha << what << " " << here << " (" << there_name << ": " << there << ")";
  if (!out->empty()) *out += "; ";
  *out += os.str();
}

std::string KindName(BufferKind k) { return k == BufferKind::kUnique ? "unique" : "replicated"; }

}  // namespace

std::string SlotMeta::DifferenceFrom(const SlotMeta& o, const std::string& other_name) const {
  std::string out;
  Diff(&out, "job", job, o.job, other_name);
  Diff(&out, "layout dp", layout.dp, o.layout.dp, other_name);
  Diff(&out, "layout tp", layout.tp, o.layout.tp, other_name);
  Diff(&out, "layout pp", layout.pp, o.layout.pp, other_name);
  Diff(&out, "zero stage", layout.zero, o.layout.zero, other_name);
  Diff(&out, "protection", scheme.ToString(), o.scheme.ToString(), other_name);
  Diff(&out, "shard alignment", shard_chunk, o.shard_chunk, other_name);
  std::map<std::string, const BufferSpec*> theirs;
  for (const auto& b : o.buffers) theirs[b.name] = &b;
  std::map<std::string, const BufferSpec*> ours;
  for (const auto& b : buffers) ours[b.name] = &b;
  const std::string registered = "registered", absent = "absent";
  for (const auto& a : buffers) {
    auto it = theirs.find(a.name);
    if (it == theirs.end()) {
      Diff(&out, "buffer '" + a.name + "'", registered, absent, other_name);
      continue;
    }
    const BufferSpec& b = *it->second;
    const std::string at = "buffer '" + a.name + "' ";
    Diff(&out, at + "size", a.size, b.size, other_name);
    Diff(&out, at + "dtype", a.dtype, b.dtype, other_name);
    Diff(&out, at + "kind", KindName(a.kind), KindName(b.kind), other_name);
    Diff(&out, at + "layer", a.layer, b.layer, other_name);
    Diff(&out, at + "optimizer", a.optimizer, b.optimizer, other_name);
  }
  for (const auto& b : o.buffers) {
    if (!ours.count(b.name)) Diff(&out, "buffer '" + b.name + "'", absent, registered, other_name);
  }
  if (out.empty()) {  // the same buffers, registered in another order: the plan differs
    std::string a, b;
    for (const auto& x : buffers) a += (a.empty() ? "" : ",") + x.name;
    for (const auto& x : o.buffers) b += (b.empty() ? "" : ",") + x.name;
    Diff(&out, "buffer order", a, b, other_name);
  }
  return out;
}

}  // namespace reft::protect
