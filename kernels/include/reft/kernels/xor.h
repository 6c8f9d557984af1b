#pragma once
/// \file xor.h
/// \brief Host XOR parity, the primitive under AEC and the ARC/AEC decoders.
///
/// Contract (ISA-L style): `dst` and every `srcs[i]` hold `size` bytes; any alignment and any
/// size (0 included) are accepted; `dst` may alias `srcs[0]` (in-place accumulate) but no other
/// overlap is allowed. Results are bit-identical across every variant.

#include <cstddef>

#include "reft/status.h"

namespace reft::kernels {

/// \brief dst = srcs[0] ^ srcs[1] ^ ... ^ srcs[nsrc-1]  (nsrc >= 1), fastest host variant
/// (ISA-L `xor_gen` for the aligned bulk, own tail handling), multithreaded above a size threshold
/// only when `threads > 1`.
Status XorReduce(void* dst, const void* const* srcs, size_t nsrc, size_t size, int threads = 1);

/// \brief The plain byte/word loop every other variant is tested against.
void XorReduceRef(void* dst, const void* const* srcs, size_t nsrc, size_t size);

}  // namespace reft::kernels
