// Store benchmark: ratios against single-thread memcpy of the same bytes, in the same run.
//  - write:   memcpy into a slot's pre-faulted (re-used) segment vs memcpy into pre-faulted
//             private memory;
//  - create:  BeginWrite that creates + pre-faults a new segment, then the copy, vs memcpy;
//  - seal:    Seal (per-chunk XXH3 with 1 and 2 threads) vs memcpy;
//  - verify:  Verify vs memcpy;
//  - adopt:   SnapshotStore::Open re-verifying a committed slot (1 and 2 threads) vs memcpy.
// Output: one JSON object per line, {"bench":..., "bytes":..., "ratio_min/med/max":...} where
// ratio = throughput / memcpy throughput (higher is better; 1.0 = as fast as memcpy).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "reft/store/snapshot_store.h"
#include "bench_util.h"

using namespace reft;
using namespace reft::store;

using bench::CheckOk;
using bench::SecondsOf;

namespace {

struct Stats {
  double min, med, max;
};
Stats Summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

void Emit(const char* bench, uint64_t bytes, int threads, const std::vector<double>& ratios,
          const std::vector<double>& gbps, const std::vector<double>& memcpy_gbps) {
  Stats r = Summarise(ratios), g = Summarise(gbps), m = Summarise(memcpy_gbps);
  std::printf(
      "{\"bench\":\"%s\",\"bytes\":%llu,\"threads\":%d,\"runs\":%zu,"
      "\"ratio_min\":%.3f,\"ratio_med\":%.3f,\"ratio_max\":%.3f,"
      "\"gbps_med\":%.2f,\"memcpy_gbps_med\":%.2f,\"memcpy_gbps_min\":%.2f,\"memcpy_gbps_max\":%.2f}\n",
      bench, static_cast<unsigned long long>(bytes), threads, ratios.size(), r.min, r.med, r.max,
      g.med, m.med, m.min, m.max);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t bytes = 1ull << 30;
  int runs = 3;
  std::string base = "/dev/shm";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bytes" && i + 1 < argc) {
      bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--dir" && i + 1 < argc) {
      base = argv[++i];
    } else {
      std::fprintf(stderr, "usage: store_bench [--bytes N] [--runs R] [--dir TMPFS_DIR]\n");
      return 2;
    }
  }
  if (runs < 1 || bytes < 4096) {
    std::fprintf(stderr, "store_bench: --runs must be >= 1 and --bytes >= 4096\n");
    return 2;
  }
  const std::string dir = base + "/reft-store-bench-" + std::to_string(::getpid());
  StoreOptions o;
  o.shm_dir = dir;
  o.slots_per_rank = 2;
  o.checksum_threads = 1;

  // Reference buffers, pre-faulted.
  std::vector<uint8_t> src(bytes), dst(bytes);
  for (uint64_t i = 0; i < bytes; i += 8) {
    uint64_t w = i * 0x9E3779B97F4A7C15ull;
    std::memcpy(&src[i], &w, std::min<uint64_t>(8, bytes - i));
  }
  std::memset(dst.data(), 1, bytes);
  auto memcpy_s = [&] { return SecondsOf([&] { std::memcpy(dst.data(), src.data(), bytes); }); };
  auto gb = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };

  const RankKey rank{"bench", 0, 0, 0};
  const std::vector<RegionSpec> layout = {{"payload", bytes}};
  std::vector<double> m_gbps, w_ratio, w_gbps, c_ratio, c_gbps;
  std::vector<std::vector<double>> s_ratio(2), s_gbps(2), v_ratio(2), v_gbps(2), a_ratio(2),
      a_gbps(2);
  int64_t step = 0;
  for (int run = 0; run < runs; ++run) {
    std::filesystem::remove_all(dir);
    StoreOptions opt = o;
    auto st_or = SnapshotStore::Open(opt);
    CheckOk(st_or.status(), "open");
    auto st = std::move(*st_or);
    CheckOk(st->ConfigureRank(rank, layout), "configure");

    // create: new segment (allocation + pre-fault) + copy.
    double mc = memcpy_s();
    m_gbps.push_back(gb(mc));
    double t_create = SecondsOf([&] {
      auto w = st->BeginWrite(rank, ++step);
      CheckOk(w.status(), "begin (create)");
      std::memcpy((*w)->region_data(0), src.data(), bytes);
    });
    c_ratio.push_back(mc / t_create);
    c_gbps.push_back(gb(t_create));
    CheckOk(st->Seal(rank, step), "seal");
    CheckOk(st->Commit(rank, step), "commit");
    // Second segment created (untimed) so that the next writes re-use segments.
    {
      auto w = st->BeginWrite(rank, ++step);
      CheckOk(w.status(), "begin");
      std::memcpy((*w)->region_data(0), src.data(), bytes);
    }
    CheckOk(st->Seal(rank, step), "seal");
    CheckOk(st->Commit(rank, step), "commit");

    // write into a re-used, pre-faulted slot vs memcpy into pre-faulted private memory.
    mc = memcpy_s();
    auto w = st->BeginWrite(rank, ++step);
    CheckOk(w.status(), "begin (reuse)");
    double t_write = SecondsOf([&] { std::memcpy((*w)->region_data(0), src.data(), bytes); });
    w_ratio.push_back(mc / t_write);
    w_gbps.push_back(gb(t_write));
    w = Status::Internal("released");

    // seal with 1 and 2 threads (the second Seal of the same step would be a no-op, so each
    // thread count seals its own step).
    for (int t = 0; t < 2; ++t) {
      StoreOptions so = o;
      so.checksum_threads = t + 1;
      st.reset();
      auto s2 = SnapshotStore::Open(so);  // adopts (and discards the writing slot)
      CheckOk(s2.status(), "reopen");
      st = std::move(*s2);
      auto w2 = st->BeginWrite(rank, ++step);
      CheckOk(w2.status(), "begin (seal)");
      std::memcpy((*w2)->region_data(0), src.data(), bytes);
      w2 = Status::Internal("released");
      mc = memcpy_s();
      double t_seal = SecondsOf([&] { CheckOk(st->Seal(rank, step), "seal"); });
      s_ratio[t].push_back(mc / t_seal);
      s_gbps[t].push_back(gb(t_seal));
      CheckOk(st->Commit(rank, step), "commit");
      mc = memcpy_s();
      double t_verify = SecondsOf([&] {
        auto v = st->Verify(rank, step);
        CheckOk(v.status(), "verify");
        if (!v->bad.empty()) CheckOk(Status::Corrupted("verify found bad chunks"), "verify");
      });
      v_ratio[t].push_back(mc / t_verify);
      v_gbps[t].push_back(gb(t_verify));
    }

    // adopt: a restarted store re-verifies the committed slot (1 and 2 checksum threads).
    st.reset();
    for (int t = 0; t < 2; ++t) {
      StoreOptions ao = o;
      ao.checksum_threads = t + 1;
      mc = memcpy_s();
      AdoptionReport rep;
      double t_adopt = SecondsOf([&] {
        auto s3 = SnapshotStore::Open(ao, &rep);
        CheckOk(s3.status(), "adopt");
      });
      if (rep.adopted.size() != 1 || !rep.quarantined.empty()) {
        CheckOk(Status::Internal("adoption did not find exactly one good slot"), "adopt");
      }
      a_ratio[t].push_back(mc / t_adopt);
      a_gbps[t].push_back(gb(t_adopt));
    }
  }
  std::filesystem::remove_all(dir);
  Emit("write_prefaulted_slot_vs_memcpy", bytes, 1, w_ratio, w_gbps, m_gbps);
  Emit("create_segment_and_write_vs_memcpy", bytes, 1, c_ratio, c_gbps, m_gbps);
  for (int t = 0; t < 2; ++t) {
    Emit("seal_checksum_vs_memcpy", bytes, t + 1, s_ratio[t], s_gbps[t], m_gbps);
    Emit("verify_vs_memcpy", bytes, t + 1, v_ratio[t], v_gbps[t], m_gbps);
  }
  for (int t = 0; t < 2; ++t) {
    Emit("adopt_reverify_vs_memcpy", bytes, t + 1, a_ratio[t], a_gbps[t], m_gbps);
  }
  return 0;
}
