/// \file buffer_spec.cc
/// \brief Element sizes of dtype names.

#include "reft/protect/buffer_spec.h"

namespace reft::protect {

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

Status CheckShard(const BufferSpec& b, int dp, int members) {
  if (!b.sharded()) {
    if (b.shard_offset != 0) {
      return Status::InvalidArgument("buffer '" + b.name + "': shard offset " +
                                     std::to_string(b.shard_offset) + " without a shard total");
    }
    return Status::OK();
  }
  const std::string at = "sharded buffer '" + b.name + "'";
  if (b.kind != BufferKind::kUnique) {
    return Status::InvalidArgument(at + " must be registered as unique (each rank holds its part)");
  }
  if (b.size == 0) return Status::InvalidArgument(at + " has size 0");
  const uint64_t m = static_cast<uint64_t>(members);
  const uint64_t want = static_cast<uint64_t>(dp) * b.size;
  // The parts tile [0, total) exactly once per group: equal parts in dp order, the last one
  // holding the remainder (padded to the common size).
  if (b.shard_offset != want || b.shard_total <= (m - 1) * b.size || b.shard_total > m * b.size) {
    const uint64_t part = (b.shard_total + m - 1) / m;
    return Status::InvalidArgument(
        at + ": rank dp" + std::to_string(dp) + " of " + std::to_string(members) + " holds [" +
        std::to_string(b.shard_offset) + ", " + std::to_string(b.shard_offset + b.size) +
        ") of " + std::to_string(b.shard_total) + " bytes; the " + std::to_string(members) +
        " parts must tile [0, total) in dp order with one size: every rank registers " +
        std::to_string(part) + " bytes (the last part padded) at offset dp*" +
        std::to_string(part) + " = " + std::to_string(static_cast<uint64_t>(dp) * part));
  }
  return Status::OK();
}

}  // namespace reft::protect
