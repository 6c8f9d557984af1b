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

}  // namespace reft::protect
