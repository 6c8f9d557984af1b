#include "manifest.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "paths.h"
#include "reft/json_integer.h"

namespace reft::persist::internal {
namespace {

constexpr const char* kFormat = "reft-persist-manifest";
constexpr int kVersion = 1;

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

bool ParseHex64(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

// The integer field `key` of `obj`; throws (caught by DecodeManifest) when it is missing, not
// an integer, or out of T's range.
template <typename T>
T Integer(const nlohmann::json& obj, const char* key) {
  T v;
  if (!JsonInteger(obj.at(key), &v)) {
    throw std::invalid_argument(std::string("field '") + key + "' is not an integer in range: " +
                                obj.at(key).dump());
  }
  return v;
}

}  // namespace

std::string EncodeManifest(const Manifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) {
    nlohmann::json regions = nlohmann::json::array();
    for (const auto& r : f.regions) regions.push_back({{"name", r.name}, {"size", r.size}});
    files.push_back({{"file", f.file},
                     {"pp", f.rank.pp},
                     {"tp", f.rank.tp},
                     {"dp", f.rank.dp},
                     {"bytes", f.file_bytes},
                     {"payload_bytes", f.payload_bytes},
                     {"chunk_size", f.chunk_size},
                     {"chunk_count", f.chunk_count},
                     {"chunk_table_xxh3", Hex64(f.chunk_table_checksum)},
                     {"regions", std::move(regions)}});
  }
  nlohmann::json j = {{"format", kFormat},
                      {"version", kVersion},
                      {"job", m.job},
                      {"step", m.step},
                      {"node_id", m.node_id},
                      {"layout", {{"pp", m.layout.pp}, {"tp", m.layout.tp}, {"dp", m.layout.dp}}},
                      {"created_unix_ms", m.created_unix_ms},
                      {"files", std::move(files)}};
  if (m.owner) {  // absent: unknown (an older reftd wrote none)
    const ManifestOwner& o = *m.owner;
    j["owner"] = {{"uid", o.uid},
                  {"gid", o.gid ? nlohmann::json(*o.gid) : nlohmann::json()},
                  {"group", o.group.empty() ? nlohmann::json() : nlohmann::json(o.group)}};
  }
  return j.dump(1) + "\n";
}

Result<Manifest> DecodeManifest(const std::string& text, const std::string& name) {
  auto bad = [&](const std::string& why) { return Status::Corrupted(name + ": " + why); };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  try {
    if (j.at("format").get<std::string>() != kFormat) return bad("not a reft manifest");
    if (Integer<int>(j, "version") != kVersion) {
      return bad("manifest version " + j.at("version").dump() + " (this reads " +
                 std::to_string(kVersion) + ")");
    }
    Manifest m;
    m.path = name;
    m.job = j.at("job").get<std::string>();
    m.step = Integer<int64_t>(j, "step");
    m.node_id = j.at("node_id").get<std::string>();
    const auto& l = j.at("layout");
    m.layout.pp = Integer<int32_t>(l, "pp");
    m.layout.tp = Integer<int32_t>(l, "tp");
    m.layout.dp = Integer<int32_t>(l, "dp");
    m.created_unix_ms = Integer<int64_t>(j, "created_unix_ms");
    // "owner" is optional (manifests of an older reftd have none; null is the same: unknown).
    if (auto it = j.find("owner"); it != j.end() && !it->is_null()) {
      const auto& o = *it;
      if (!o.is_object()) return bad("field 'owner' is not an object: " + o.dump());
      ManifestOwner owner;
      owner.uid = Integer<uint32_t>(o, "uid");
      if (auto g = o.find("gid"); g != o.end() && !g->is_null()) {
        owner.gid = Integer<uint32_t>(o, "gid");
      }
      if (auto g = o.find("group"); g != o.end() && !g->is_null()) {
        owner.group = g->get<std::string>();
      }
      m.owner = std::move(owner);
    }
    for (const auto& f : j.at("files")) {
      RankFileInfo info;
      info.file = f.at("file").get<std::string>();
      info.rank.job = m.job;
      info.rank.pp = Integer<int32_t>(f, "pp");
      info.rank.tp = Integer<int32_t>(f, "tp");
      info.rank.dp = Integer<int32_t>(f, "dp");
      info.step = m.step;
      info.file_bytes = Integer<uint64_t>(f, "bytes");
      info.payload_bytes = Integer<uint64_t>(f, "payload_bytes");
      info.chunk_size = Integer<uint64_t>(f, "chunk_size");
      info.chunk_count = Integer<uint64_t>(f, "chunk_count");
      if (!ParseHex64(f.at("chunk_table_xxh3").get<std::string>(), &info.chunk_table_checksum)) {
        return bad("bad chunk_table_xxh3 of " + info.file);
      }
      for (const auto& r : f.at("regions")) {
        info.regions.push_back({r.at("name").get<std::string>(), Integer<uint64_t>(r, "size")});
      }
      if (info.file != RankFileName(info.rank)) {
        return bad("entry '" + info.file + "' does not match its coordinates");
      }
      m.files.push_back(std::move(info));
    }
    return m;
  } catch (const std::exception& e) {  // nlohmann's exceptions and Integer's
    return bad(std::string("malformed manifest: ") + e.what());
  }
}

}  // namespace reft::persist::internal
