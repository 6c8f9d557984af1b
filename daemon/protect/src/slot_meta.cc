/// \file slot_meta.cc
/// \brief JSON form of a slot's "meta" region.

#include "reft/protect/slot_meta.h"

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
                      {"zero_stage", layout.zero_stage}}},
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
  REFT_ASSIGN_OR_RETURN(m.layout.zero_stage, IntField(doc["layout"], "zero_stage", "layout."));
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

std::string SlotMeta::DifferenceFrom(const SlotMeta& o) const {
  auto pair = [](const std::string& what, const std::string& a, const std::string& b) {
    return what + ": " + a + " here, " + b + " there";
  };
  auto lay = [](const Layout& l) {
    return "dp=" + std::to_string(l.dp) + ",tp=" + std::to_string(l.tp) +
           ",pp=" + std::to_string(l.pp) + ",zero=" + std::to_string(l.zero_stage);
  };
  if (job != o.job) return pair("job", job, o.job);
  if (lay(layout) != lay(o.layout)) return pair("layout", lay(layout), lay(o.layout));
  if (!(scheme == o.scheme)) return pair("protection", scheme.ToString(), o.scheme.ToString());
  if (shard_chunk != o.shard_chunk) {
    return pair("shard alignment", std::to_string(shard_chunk), std::to_string(o.shard_chunk));
  }
  for (size_t i = 0; i < std::max(buffers.size(), o.buffers.size()); ++i) {
    if (i >= buffers.size()) return "buffer '" + o.buffers[i].name + "' only there";
    if (i >= o.buffers.size()) return "buffer '" + buffers[i].name + "' only here";
    const auto& a = buffers[i];
    const auto& b = o.buffers[i];
    const std::string at = "buffer #" + std::to_string(i) + " '" + a.name + "'";
    if (a.name != b.name) return pair("buffer #" + std::to_string(i), a.name, b.name);
    if (a.size != b.size) {
      return pair(at, std::to_string(a.size) + " bytes", std::to_string(b.size) + " bytes");
    }
    if (a.dtype != b.dtype) return pair(at + " dtype", a.dtype, b.dtype);
    if (a.kind != b.kind) {
      return pair(at + " kind", a.kind == BufferKind::kUnique ? "unique" : "replicated",
                  b.kind == BufferKind::kUnique ? "unique" : "replicated");
    }
    if (a.layer != b.layer) return pair(at + " layer", std::to_string(a.layer), std::to_string(b.layer));
    if (a.optimizer != b.optimizer) {
      return pair(at + " optimizer flag", a.optimizer ? "set" : "unset", b.optimizer ? "set" : "unset");
    }
  }
  return "";
}

}  // namespace reft::protect
