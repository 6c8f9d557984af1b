// Ratio benchmarks of member-local redundancy encoding against ISA-L on the same buffers:
//   aec_encode: EncodeMember("aec") vs xor_gen over the same m-1 sub-chunks;
//   rs_encode:  EncodeMember("rs<r>") vs ec_encode_data over the same stripe blocks.
// Prints one JSON line per case; "ratio" = reference time / ours (>= 1 means we are faster).
//
// Usage: protect_bench [--mib W] [--reps N] [--threads T]

#include <isa-l/erasure_code.h>
#include <isa-l/raid.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "reft/protect/codec.h"
#include "reft/protect/rebuild_analysis.h"
#include "reft/protect/sharding.h"

using namespace reft::protect;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Best-of-reps seconds of ours and ref, interleaved so both see the same machine state.
template <typename A, typename B>
std::pair<double, double> TimeBoth(int reps, A ours, B ref) {
  double best_a = 1e30, best_b = 1e30;
  for (int i = 0; i < reps; ++i) {
    // Alternate which side runs first so neither always inherits the other's cache state.
    for (int side = 0; side < 2; ++side) {
      const bool run_ours = (side == 0) == (i % 2 == 0);
      const double t0 = Now();
      if (run_ours) {
        ours();
        best_a = std::min(best_a, Now() - t0);
      } else {
        ref();
        best_b = std::min(best_b, Now() - t0);
      }
    }
  }
  return {best_a, best_b};
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mib = 256;
  int reps = 7;
  int threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mib")
      mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--reps")
      reps = std::atoi(argv[i + 1]);
    else if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: protect_bench [--mib W] [--reps N] [--threads T]\n");
      return 2;
    }
  }
  const uint64_t w = mib << 20;
  // 64-byte aligned buffer so ISA-L's aligned path applies to both sides.
  auto* raw = static_cast<uint8_t*>(std::aligned_alloc(64, w));
  for (uint64_t i = 0; i < w; ++i) raw[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  // Each case uses the largest prefix of the buffer for which every sub-chunk is whole and
  // 64-byte aligned, so the ISA-L reference (which needs aligned pointers and no padding)
  // computes exactly the same bytes; "identical" checks that.
  const uint64_t chunk = 64 << 10;
  std::vector<BufferSpec> specs;
  ReplicatedSource src;
  auto use_prefix = [&](uint64_t multiple) {
    const uint64_t wc = w / multiple * multiple;
    specs = {{"params", wc, "uint8"}};
    src = {{"params", ConstSpan{raw, wc}}};
  };

  for (int m : {4, 8}) {
    // AEC
    {
      Scheme s;
      s.aec = true;
      use_prefix(chunk * m * (m - 1));
      auto g = *BuildGeometry(m, specs, chunk, s);
      std::vector<uint8_t> out(g.aec_sub), ref(g.aec_sub);
      const int k = 0;
      std::vector<void*> ptrs;
      for (int j = 0; j < m; ++j) {
        if (j == k) continue;
        const uint64_t pos = static_cast<uint64_t>(AecIndex(m, j, k)) * g.aec_sub;
        ptrs.push_back(raw + g.shard_begin[j] + std::min(pos, g.ShardSize(j)));
      }
      ptrs.push_back(ref.data());
      std::map<std::string, MutableSpan> regions{{kRegionAec, {out.data(), out.size()}}};
      // Reference XORs whole sub-chunks; only valid when none reaches into padding.
      bool full = true;
      for (int j = 0; j < m; ++j) {
        if (j != k) full &= (AecIndex(m, j, k) + 1) * g.aec_sub <= g.ShardSize(j);
      }
      auto [ours, theirs] = TimeBoth(
          reps, [&] { (void)EncodeMember(g, s, k, src, regions, threads); },
          [&] {
            xor_gen(static_cast<int>(ptrs.size()), static_cast<int>(g.aec_sub), ptrs.data());
          });
      const bool same = full && out == ref;
      std::printf(
          "{\"bench\":\"aec_encode\",\"m\":%d,\"w_bytes\":%llu,\"parity_bytes\":%llu,\"threads\":%"
          "d,"
          "\"ours_gbps\":%.3f,\"xor_gen_gbps\":%.3f,\"ratio\":%.3f,\"identical\":%s}\n",
          m, static_cast<unsigned long long>(g.total), static_cast<unsigned long long>(g.aec_sub),
          threads, (m - 1) * g.aec_sub / ours / 1e9, (m - 1) * g.aec_sub / theirs / 1e9,
          theirs / ours, same ? "true" : "false");
    }
    // RS
    for (int r : {2, 3}) {
      Scheme s;
      s.rs = r;
      use_prefix(chunk * m * (m - r));
      auto g = *BuildGeometry(m, specs, chunk, s);
      const int k = m - r;
      std::vector<uint8_t> out(g.rs_sub * r), ref(g.rs_sub * r);
      std::vector<unsigned char> mat(static_cast<size_t>(m) * k),
          tables(static_cast<size_t>(32) * k * r);
      gf_gen_cauchy1_matrix(mat.data(), m, k);
      ec_init_tables(k, r, mat.data() + k * k, tables.data());
      const int member = 0;
      std::vector<std::vector<unsigned char*>> data(r);
      bool full = true;
      for (int q = 0; q < r; ++q) {
        const int t = ((member - q) % m + m) % m;
        for (int p = 0; p < k; ++p) {
          const int j = RsDataShard(m, r, t, p);
          const uint64_t pos = static_cast<uint64_t>(AecIndex(m, j, t)) * g.rs_sub;
          full &= pos + g.rs_sub <= g.ShardSize(j);
          data[q].push_back(raw + g.shard_begin[j] + std::min(pos, g.ShardSize(j)));
        }
      }
      std::map<std::string, MutableSpan> regions{{kRegionRs, {out.data(), out.size()}}};
      auto [ours, theirs] = TimeBoth(
          reps, [&] { (void)EncodeMember(g, s, member, src, regions, threads); },
          [&] {
            for (int q = 0; q < r; ++q) {
              unsigned char* dst = ref.data() + q * g.rs_sub;
              ec_encode_data(static_cast<int>(g.rs_sub), k, 1, tables.data() + 32 * k * q,
                             data[q].data(), &dst);
            }
          });
      const bool same = full && out == ref;
      std::printf(
          "{\"bench\":\"rs_encode\",\"m\":%d,\"r\":%d,\"w_bytes\":%llu,\"parity_bytes\":%llu,"
          "\"ours_gbps\":%.3f,\"ec_encode_data_gbps\":%.3f,\"ratio\":%.3f,\"identical\":%s}\n",
          m, r, static_cast<unsigned long long>(g.total),
          static_cast<unsigned long long>(g.rs_sub * r),
          static_cast<double>(k) * r * g.rs_sub / ours / 1e9,
          static_cast<double>(k) * r * g.rs_sub / theirs / 1e9, theirs / ours,
          same ? "true" : "false");
    }
  }
  std::free(raw);
  return 0;
}
