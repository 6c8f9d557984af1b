/// \file snapshot_meta.cc
/// \brief Slot meta regions: reading them from located slots.

#include "reft/recovery/snapshot_meta.h"

namespace reft::recovery {

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

}  // namespace reft::recovery
