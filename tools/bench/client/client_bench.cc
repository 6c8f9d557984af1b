// reft_bench_client: ingest of one buffer into a real in-process reftd local server, as ratios
// against a single-thread memcpy of the same bytes in the same run (BENCHMARKS.md).
//
//   reft_bench_client [--size 1G] [--reps 5] [--shm-dir /dev/shm]
//
// Prints JSON lines: {"bench":"memcpy"...}, {"bench":"staged"...}, {"bench":"emulated_pull"...},
// {"bench":"snapshot_call"...}. ratio = memcpy seconds / mode seconds (1.0 = as fast as memcpy);
// each timed step is preceded by its own memcpy of the same bytes, and ratio_median_of_pairs
// is the median of those back-to-back pairs (robust when other jobs load the machine).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "reft/client.h"
#include "reft/kernels/emulated.h"
#include "node_local_hooks.h"
#include "reft/local/local_server.h"
#include "single_node_commit.h"
#include "reft/units.h"
#include "bench_util.h"

using namespace reft;
using Clock = std::chrono::steady_clock;

using bench::Median;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int Fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "reft_bench_client: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size = 1ull << 30;
  int reps = 5;
  std::string shm_root = "/dev/shm";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--size") {
      auto s = ParseByteSize(argv[i + 1]);
      if (!s.ok()) return Fail("--size", s.status());
      size = *s;
    } else if (a == "--reps") {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--shm-dir") {
      shm_root = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: reft_bench_client [--size BYTES] [--reps N] [--shm-dir DIR]\n");
      return 2;
    }
  }
  const std::string dir = shm_root + "/reft-bench-client-" + std::to_string(::getpid());
  const std::string socket = "/tmp/reft-bench-client-" + std::to_string(::getpid()) + ".sock";

  // Reference: single-thread memcpy into memory that is already faulted in.
  std::vector<uint8_t> src(size), dst(size);
  for (uint64_t i = 0; i < size; i += 4096) src[i] = static_cast<uint8_t>(i >> 12);
  std::memset(dst.data(), 0, size);
  std::vector<double> mc;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), size);
    mc.push_back(Seconds(Clock::now() - t0));
  }
  std::printf("{\"bench\":\"memcpy\",\"bytes\":%llu,\"seconds\":%.6f,\"gib_per_s\":%.3f}\n",
              static_cast<unsigned long long>(size), Median(mc), size / Median(mc) / (1 << 30));
  // The reference is re-measured right before every timed step of every mode (same load).
  auto memcpy_once = [&](const void* from) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), from, size);
    return Seconds(Clock::now() - t0);
  };

  store::StoreOptions so;
  so.shm_dir = dir;
  so.slots_per_rank = 3;
  auto store = store::SnapshotStore::Open(so);
  if (!store.ok()) return Fail("store", store.status());
  coord::SingleNodeCommitCoordinator coordinator(store->get());
  testing::NodeLocalPeerCopier copier(store->get());
  testing::NodeLocalRestoreProvider restorer(store->get(), &coordinator);
  local::LocalServerOptions lo;
  lo.socket_path = socket;
  auto server = local::LocalServer::Create(lo, store->get(), &coordinator,
                                           local::ClusterHooks{&copier, &restorer});
  if (!server.ok()) return Fail("server", server.status());
  if (Status st = (*server)->Start(); !st.ok()) return Fail("server start", st);

  auto run_mode = [&](const char* name, const std::string& job, void* data,
                      MemoryLocation memory) -> int {
    ClientOptions co;
    co.socket_path = socket;
    co.job = job;
    auto c = Client::Connect(co);
    if (!c.ok()) return Fail(name, c.status());
    BufferOptions bo;
    bo.memory = memory;
    if (Status st = (*c)->Register("state", data, size, bo); !st.ok()) return Fail(name, st);
    std::vector<double> ingest, call, ref, pair_ratio;
    // Two warm-up steps map every slot the rotation uses; then timed steps. wait_committed is
    // outside the timing so the daemon's seal of step s never overlaps the copy of s+1.
    for (int step = 0; step < reps + 2; ++step) {
      const double ref_s = memcpy_once(data);
      auto t0 = Clock::now();
      if (Status st = (*c)->Snapshot(step); !st.ok()) return Fail(name, st);
      auto t1 = Clock::now();
      if (Status st = (*c)->Fence(); !st.ok()) return Fail(name, st);
      auto t2 = Clock::now();
      auto committed = (*c)->WaitCommitted(step, std::chrono::seconds(120));
      if (!committed.ok() || !*committed) return Fail(name, Status::Timeout("commit"));
      if (step >= 2) {
        ref.push_back(ref_s);
        pair_ratio.push_back(ref_s / Seconds(t2 - t0));
        call.push_back(Seconds(t1 - t0));
        ingest.push_back(Seconds(t2 - t0));
      }
    }
    const double s = Median(ingest);
    const double memcpy_s = Median(ref);
    std::printf("{\"bench\":\"%s\",\"bytes\":%llu,\"seconds\":%.6f,\"gib_per_s\":%.3f,"
                "\"memcpy_seconds\":%.6f,\"ratio_vs_memcpy\":%.3f,\"ratio_median_of_pairs\":%.3f,"
                "\"reps\":%d}\n",
                name, static_cast<unsigned long long>(size), s, size / s / (1 << 30), memcpy_s,
                memcpy_s / s, Median(pair_ratio), reps);
    std::printf("{\"bench\":\"snapshot_call\",\"mode\":\"%s\",\"bytes\":%llu,"
                "\"median_ms\":%.4f,\"max_ms\":%.4f}\n",
                name, static_cast<unsigned long long>(size), Median(call) * 1e3,
                *std::max_element(call.begin(), call.end()) * 1e3);
    std::fflush(stdout);
    return (*c)->Close().ok() ? 0 : 1;
  };

  int rc = run_mode("staged", "bench-staged", src.data(), MemoryLocation::kHost);
  (void)(*store)->RemoveJob("bench-staged");
  if (rc == 0) {
    kernels::SetEmulatedCopyBandwidth(0);  // unlimited: measures the pull path itself
    auto alloc = EmulatedBuffer::Create(size);
    if (!alloc.ok()) return Fail("emulated allocation", alloc.status());
    std::memcpy((*alloc)->data(), src.data(), size);
    rc = run_mode("emulated_pull", "bench-emulated", (*alloc)->data(), MemoryLocation::kEmulated);
    (void)(*store)->RemoveJob("bench-emulated");
  }
  (*server)->Stop();
  store->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}
