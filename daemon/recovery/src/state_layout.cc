/// \file state_layout.cc
#include "state_layout.h"

namespace reft::recovery {

namespace {
constexpr uint64_t kUniqueAlign = 4096;
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

uint64_t BufferSize(const protect::SlotMeta& meta, const std::string& name) {
  for (const auto& b : meta.buffers) {
    if (b.name == name) return b.size;
  }
  return 0;
}

StateLayout ComputeStateLayout(const protect::SlotMeta& meta, const protect::SgGeometry& g) {
  StateLayout out;
  for (const auto& b : g.buffers) out.offsets[b.name] = b.offset;
  uint64_t end = g.total;
  for (const auto& name : g.unique) {
    end = AlignUp(end, kUniqueAlign);
    out.offsets[name] = end;
    end += BufferSize(meta, name);
  }
  out.size = end;
  return out;
}

}  // namespace reft::recovery
