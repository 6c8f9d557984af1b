/// \file snapshot_meta.cc
/// \brief Slot meta regions: reading them from located slots, comparing them with a trainer's.

#include "reft/recovery/snapshot_meta.h"

#include <map>
#include <sstream>

namespace reft::recovery {

namespace {

const char* KindName(protect::BufferKind k) {
  return k == protect::BufferKind::kUnique ? "unique" : "replicated";
}

template <typename T>
void Diff(std::string* out, const std::string& what, const T& declared, const T& snapshot) {
  if (declared == snapshot) return;
  std::ostringstream os;
  os << std::boolalpha;
  os << what << " " << declared << " (snapshot: " << snapshot << ")";
  if (!out->empty()) *out += "; ";
  *out += os.str();
}

}  // namespace

Result<protect::SlotMeta> DecodeMetaRegion(const uint8_t* data, uint64_t size,
                                           uint64_t* encoded_size) {
  uint64_t n = size;
  while (n > 0 && data[n - 1] == 0) --n;
  if (encoded_size != nullptr) *encoded_size = n;
  return protect::SlotMeta::Decode(data, n);
}

Result<LocatedMeta> ReadSnapshotMeta(const std::vector<const SlotEntry*>& candidates,
                                     const RegionReader& reader,
                                     std::chrono::steady_clock::time_point deadline) {
  if (candidates.empty()) return Status::NotFound("no slot to read a snapshot meta from");
  std::string errors;
  StatusCode code = StatusCode::kNotFound;
  for (const SlotEntry* slot : candidates) {
    const RegionEntry* r = slot->Region(protect::kRegionMeta);
    Status st;
    if (r == nullptr) {
      st = Status::Corrupted("slot has no '" + std::string(protect::kRegionMeta) + "' region");
    } else if (r->size == 0 || r->size > protect::kMaxSlotMetaBytes) {
      st = Status::Corrupted("'meta' region of " + std::to_string(r->size) + " bytes");
    } else {
      std::vector<uint8_t> bytes(r->size);
      st = reader.Read(*slot, protect::kRegionMeta, 0, bytes.data(), bytes.size(), deadline);
      if (st.ok()) {
        uint64_t encoded = 0;
        auto meta = DecodeMetaRegion(bytes.data(), bytes.size(), &encoded);
        if (meta.ok() && (meta->job != slot->rank.job || meta->coord.pp != slot->rank.pp ||
                          meta->coord.tp != slot->rank.tp || meta->coord.dp != slot->rank.dp)) {
          st = Status::Corrupted("its meta describes " + meta->job + "/" + meta->coord.ToString());
        } else if (!meta.ok()) {
          st = meta.status();
        } else {
          return LocatedMeta{std::move(*meta), slot, r->size, encoded};
        }
      }
    }
    if (!errors.empty()) errors += "; ";
    errors += slot->rank.ToString() + " step " + std::to_string(slot->step) + " on " +
              slot->Where() + ": " + st.ToString();
    code = st.code();
  }
  return Status(code, "no readable snapshot meta: " + errors);
}

std::string DescribeMetaDifference(const protect::SlotMeta& d, const protect::SlotMeta& s) {
  if (d.SameJobLayout(s)) return "";
  std::string out;
  Diff(&out, "job", d.job, s.job);
  Diff(&out, "layout dp", d.layout.dp, s.layout.dp);
  Diff(&out, "layout tp", d.layout.tp, s.layout.tp);
  Diff(&out, "layout pp", d.layout.pp, s.layout.pp);
  Diff(&out, "zero stage", d.layout.zero_stage, s.layout.zero_stage);
  Diff(&out, "protection", d.scheme.ToString(), s.scheme.ToString());
  Diff(&out, "shard alignment", d.shard_chunk, s.shard_chunk);
  std::map<std::string, const protect::BufferSpec*> snap;
  for (const auto& b : s.buffers) snap[b.name] = &b;
  std::map<std::string, const protect::BufferSpec*> decl;
  for (const auto& b : d.buffers) decl[b.name] = &b;
  for (const auto& b : d.buffers) {
    auto it = snap.find(b.name);
    if (it == snap.end()) {
      Diff(&out, "buffer '" + b.name + "'", std::string("registered"), std::string("absent"));
      continue;
    }
    const auto& o = *it->second;
    const std::string n = "buffer '" + b.name + "' ";
    Diff(&out, n + "size", b.size, o.size);
    Diff(&out, n + "dtype", b.dtype, o.dtype);
    Diff(&out, n + "kind", std::string(KindName(b.kind)), std::string(KindName(o.kind)));
    Diff(&out, n + "layer", b.layer, o.layer);
    Diff(&out, n + "optimizer", b.optimizer, o.optimizer);
  }
  for (const auto& b : s.buffers) {
    if (!decl.count(b.name)) {
      Diff(&out, "buffer '" + b.name + "'", std::string("absent"), std::string("registered"));
    }
  }
  if (out.empty()) {
    // Same names and specs, different registration order.
    std::string dn, sn;
    for (const auto& b : d.buffers) dn += (dn.empty() ? "" : ",") + b.name;
    for (const auto& b : s.buffers) sn += (sn.empty() ? "" : ",") + b.name;
    Diff(&out, "buffer order", dn, sn);
  }
  return out;
}

}  // namespace reft::recovery
