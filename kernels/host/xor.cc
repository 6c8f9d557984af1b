/// \file xor.cc
/// \brief Host XOR reduction: ISA-L `xor_gen` on the 64-byte-aligned bulk, a word loop for
/// heads, tails and pointer sets whose misalignments differ (xor_gen requires 32-byte aligned
/// pointers, so no single aligned bulk exists for them).

#include "reft/kernels/xor.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <isa-l/raid.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace reft::kernels {
namespace {

constexpr size_t kAlign = 64;
/// xor_gen takes an int length and an int vector count; stay well inside both.
constexpr size_t kMaxIsalLen = size_t{1} << 30;
constexpr size_t kMaxIsalSrcs = 64;
/// Below this many bytes per thread, spawning threads costs more than it saves.
constexpr size_t kMinBytesPerThread = size_t{4} << 20;

/// Word loop with unaligned loads (memcpy), used for every non-ISA-L piece. `off` is a byte offset
/// applied to dst and every src.
void XorWords(uint8_t* dst, const void* const* srcs, size_t nsrc, size_t off, size_t size) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t acc;
    std::memcpy(&acc, static_cast<const uint8_t*>(srcs[0]) + off + i, 8);
    for (size_t s = 1; s < nsrc; ++s) {
      uint64_t w;
      std::memcpy(&w, static_cast<const uint8_t*>(srcs[s]) + off + i, 8);
      acc ^= w;
    }
    std::memcpy(dst + off + i, &acc, 8);
  }
  for (; i < size; ++i) {
    uint8_t acc = static_cast<const uint8_t*>(srcs[0])[off + i];
    for (size_t s = 1; s < nsrc; ++s) acc ^= static_cast<const uint8_t*>(srcs[s])[off + i];
    dst[off + i] = acc;
  }
}

#if defined(__x86_64__)
/// AVX2 with unaligned loads: for sources whose misalignments differ, where xor_gen (which
/// needs 32-byte aligned pointers) cannot run. 128 bytes per step, word loop for the tail.
__attribute__((target("avx2"))) void XorAvx2(uint8_t* dst, const void* const* srcs, size_t nsrc,
                                             size_t off, size_t size) {
  size_t i = 0;
  for (; i + 128 <= size; i += 128) {
    const auto* s0 = static_cast<const uint8_t*>(srcs[0]) + off + i;
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0 + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0 + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0 + 96));
    for (size_t s = 1; s < nsrc; ++s) {
      const auto* p = static_cast<const uint8_t*>(srcs[s]) + off + i;
      a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      b = _mm256_xor_si256(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
      c = _mm256_xor_si256(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64)));
      d = _mm256_xor_si256(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 96)));
    }
    auto* o = reinterpret_cast<__m256i*>(dst + off + i);
    _mm256_storeu_si256(o, a);
    _mm256_storeu_si256(o + 1, b);
    _mm256_storeu_si256(o + 2, c);
    _mm256_storeu_si256(o + 3, d);
  }
  XorWords(dst, srcs, nsrc, off + i, size - i);
}

bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}
#endif

/// Mutually misaligned sources: SIMD with unaligned loads where available.
void XorUnaligned(uint8_t* dst, const void* const* srcs, size_t nsrc, size_t off, size_t size) {
#if defined(__x86_64__)
  if (HaveAvx2()) {
    XorAvx2(dst, srcs, nsrc, off, size);
    return;
  }
#endif
  XorWords(dst, srcs, nsrc, off, size);
}

/// XOR of bytes [off, off+size) for nsrc <= kMaxIsalSrcs sources into dst.
void XorRange(uint8_t* dst, const void* const* srcs, size_t nsrc, size_t off, size_t size) {
  if (size == 0) return;
  if (nsrc == 1) {
    // memmove: dst may alias srcs[0] (then this is a no-op).
    if (dst != srcs[0]) std::memmove(dst + off, static_cast<const uint8_t*>(srcs[0]) + off, size);
    return;
  }
  const uintptr_t mis = (reinterpret_cast<uintptr_t>(dst) + off) % kAlign;
  bool same = true;
  for (size_t s = 0; s < nsrc && same; ++s) {
    same = (reinterpret_cast<uintptr_t>(srcs[s]) + off) % kAlign == mis;
  }
  if (!same) {
    XorUnaligned(dst, srcs, nsrc, off, size);
    return;
  }
  const size_t head = std::min(size, mis == 0 ? size_t{0} : kAlign - mis);
  XorWords(dst, srcs, nsrc, off, head);
  size_t pos = off + head;
  size_t left = size - head;
  void* ptrs[kMaxIsalSrcs + 1];
  while (left >= kAlign) {
    const size_t len = std::min(left - left % kAlign, kMaxIsalLen);
    for (size_t s = 0; s < nsrc; ++s) {
      ptrs[s] = const_cast<uint8_t*>(static_cast<const uint8_t*>(srcs[s]) + pos);
    }
    ptrs[nsrc] = dst + pos;
    // xor_gen reads every source block before storing the destination block, so dst == srcs[0]
    // (the in-place accumulate the contract allows) is safe. A nonzero return means the
    // dispatched variant rejected the geometry; the word loop gives the identical result.
    if (xor_gen(static_cast<int>(nsrc + 1), static_cast<int>(len), ptrs) != 0) {
      XorWords(dst, srcs, nsrc, pos, len);
    }
    pos += len;
    left -= len;
  }
  XorWords(dst, srcs, nsrc, pos, left);
}

/// Any nsrc: folds sources in groups, accumulating into dst after the first group.
void XorRangeAnyCount(uint8_t* dst, const void* const* srcs, size_t nsrc, size_t off, size_t size) {
  if (nsrc <= kMaxIsalSrcs) {
    XorRange(dst, srcs, nsrc, off, size);
    return;
  }
  // Later groups read dst as their first source, so an aliasing of dst by a later srcs[i]
  // (not allowed by the contract) is the only hazard; srcs[0] == dst is handled by the first group.
  XorRange(dst, srcs, kMaxIsalSrcs, off, size);
  std::vector<const void*> group;
  for (size_t s = kMaxIsalSrcs; s < nsrc;) {
    const size_t take = std::min(kMaxIsalSrcs - 1, nsrc - s);
    group.assign(1, dst);
    group.insert(group.end(), srcs + s, srcs + s + take);
    XorRange(dst, group.data(), group.size(), off, size);
    s += take;
  }
}

}  // namespace

Status XorReduce(void* dst, const void* const* srcs, size_t nsrc, size_t size, int threads) {
  if (nsrc == 0) return Status::InvalidArgument("XorReduce: nsrc must be >= 1");
  if (size == 0) return Status::OK();
  if (dst == nullptr || srcs == nullptr)
    return Status::InvalidArgument("XorReduce: null dst or srcs");
  for (size_t s = 0; s < nsrc; ++s) {
    if (srcs[s] == nullptr)
      return Status::InvalidArgument("XorReduce: srcs[" + std::to_string(s) + "] is null");
  }
  auto* d = static_cast<uint8_t*>(dst);
  size_t nthreads = threads > 1 ? static_cast<size_t>(threads) : 1;
  nthreads = std::min(nthreads, std::max<size_t>(1, size / kMinBytesPerThread));
  if (nthreads == 1) {
    XorRangeAnyCount(d, srcs, nsrc, 0, size);
    return Status::OK();
  }
  // Split on kAlign boundaries so each piece keeps the common alignment.
  size_t per = (size / nthreads + kAlign - 1) / kAlign * kAlign;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < nthreads; ++t) {
    const size_t off = t * per;
    if (off >= size) break;
    const size_t len = std::min(per, size - off);
    pool.emplace_back([=] { XorRangeAnyCount(d, srcs, nsrc, off, len); });
  }
  for (auto& th : pool) th.join();
  return Status::OK();
}

void XorReduceRef(void* dst, const void* const* srcs, size_t nsrc, size_t size) {
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < size; ++i) {
    uint8_t acc = 0;
    for (size_t s = 0; s < nsrc; ++s) acc ^= static_cast<const uint8_t*>(srcs[s])[i];
    d[i] = acc;
  }
}

}  // namespace reft::kernels
