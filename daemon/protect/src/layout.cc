/// \file layout.cc
/// \brief Layout validation and dtype sizes.

#include "reft/protect/layout.h"

#include <cstdint>

namespace reft::protect {

std::string RankCoord::ToString() const {
  return "pp" + std::to_string(pp) + "-tp" + std::to_string(tp) + "-dp" + std::to_string(dp);
}

std::string Layout::NodeOf(const RankCoord& c) const {
  const int g = GlobalRank(c);
  if (nodes.empty()) return "rank" + std::to_string(g);
  return nodes[static_cast<size_t>(g)];
}

Status Layout::Validate() const {
  if (dp < 1 || tp < 1 || pp < 1) {
    return Status::InvalidArgument("layout: dp, tp, pp must be >= 1 (dp=" + std::to_string(dp) +
                                   " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) + ")");
  }
  // world() and GlobalRank() are int: refuse a rank count that does not fit (a slot meta
  // admits up to 2^20 per dimension, so the product could overflow).
  if (int64_t{dp} * tp > INT32_MAX || int64_t{dp} * tp * pp > INT32_MAX) {
    return Status::InvalidArgument("layout: dp*tp*pp (dp=" + std::to_string(dp) + " tp=" +
                                   std::to_string(tp) + " pp=" + std::to_string(pp) +
                                   ") exceeds 2147483647 ranks");
  }
  if (zero_stage < 0 || zero_stage > 3) {
    return Status::InvalidArgument("layout: zero_stage must be 0..3, got " +
                                   std::to_string(zero_stage));
  }
  if (!nodes.empty() && nodes.size() != static_cast<size_t>(world())) {
    return Status::InvalidArgument("layout: nodes has " + std::to_string(nodes.size()) +
                                   " entries, expected dp*tp*pp = " + std::to_string(world()));
  }
  return Status::OK();
}

Result<int> DtypeSize(const std::string& dtype) {
  // Names as torch and numpy print them, plus short forms.
  if (dtype == "fp32" || dtype == "float32" || dtype == "int32" || dtype == "uint32") return 4;
  if (dtype == "fp16" || dtype == "float16" || dtype == "half" || dtype == "bf16" ||
      dtype == "bfloat16" || dtype == "int16" || dtype == "uint16") {
    return 2;
  }
  if (dtype == "fp64" || dtype == "float64" || dtype == "double" || dtype == "int64" ||
      dtype == "uint64" || dtype == "complex64") {
    return 8;
  }
  if (dtype == "complex128") return 16;
  if (dtype == "int8" || dtype == "uint8" || dtype == "bool" || dtype == "bytes") return 1;
  return Status::InvalidArgument("unknown dtype '" + dtype +
                                 "' (fp32, fp16, bf16, fp64, int8..int64, uint8..uint64, bool, "
                                 "complex64, complex128, bytes)");
}

}  // namespace reft::protect
