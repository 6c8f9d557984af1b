// aor_copy_bench: what AOR in reftd costs per step against what it replaces, in one run.
//
// For one ZeRO-1 optimizer shard of n elements (12n bytes of fp32 state):
//   replay      the host replay reftd runs per step: AdamWUpdateInto from the previous slot's
//               region into the new slot's region (both tmpfs-backed store slots) with the
//               neighbour's gradient slice (fp32 or bf16), 1 or 2 threads;
//   grpc_copy   the copy AOR replaces: FetchRegion of the neighbour's sealed "unique/opt" region
//               from another PeerNode over gRPC on loopback (the path reftd's PublishedCopier
//               takes when the neighbour is on another node; checksummed 1 MiB chunks);
//   local_copy  memcpy of the same bytes (the same-node neighbour case, NodeLocalPeerCopier).
// Prints JSON lines; `copy_over_replay` = grpc_copy / replay time (> 1: the replay is cheaper).
// Loopback is the copy's best case: a real link is slower, and the copy also loads the network
// every step, which the replay does not.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "reft/aor/adamw.h"
#include "reft/aor/half.h"
#include "reft/peer/peer_options.h"
#include "reft/store/snapshot_store.h"
#include "reft/units.h"
#include "bench_util.h"
#include "loopback_peer.h"

using namespace reft;
using Clock = std::chrono::steady_clock;

using bench::Best;
using bench::Die;
using bench::LoopbackPeer;
using bench::SecondsSince;

namespace {

}  // namespace

int main(int argc, char** argv) {
  uint64_t elems = 16ull << 20;  // 16 Mi elements: 192 MiB of optimizer state
  int reps = 5;
  std::string shm_root = "/dev/shm";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--elems" && i + 1 < argc) {
      auto r = ParseByteSize(argv[++i]);  // accepts 16M, 64G ... as element counts (powers of 1024)
      if (!r.ok()) Die("--elems", r.status());
      elems = *r;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--shm-dir" && i + 1 < argc) {
      shm_root = argv[++i];
    } else {
      std::fprintf(stderr, "usage: aor_copy_bench [--elems N] [--reps N] [--shm-dir DIR]\n");
      return 2;
    }
  }
  if (!peer::TuneMallocForPeerStreams()) std::fprintf(stderr, "mallopt refused a setting\n");
  const uint64_t n = elems;
  const uint64_t state_bytes = 12 * n;

  // One store holding the rank's two slots (previous and new step) and the neighbour's slot.
  const std::string dir = shm_root + "/reft-bench-aor-" + std::to_string(getpid());
  store::StoreOptions so;
  so.shm_dir = dir;
  so.chunk_size = 1ull << 20;
  auto st = store::SnapshotStore::Open(so);
  if (!st.ok()) Die("open store", st.status());
  store::SnapshotStore& s = **st;
  const store::RankKey me{"bench", 0, 0, 0}, next{"bench", 0, 0, 1};
  for (const auto& r : {me, next}) {
    if (Status x = s.ConfigureRank(r, {{"opt", state_bytes}}); !x.ok()) Die("configure", x);
  }
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto fill_state = [&](float* p) {
    for (uint64_t i = 0; i < n; ++i) p[i] = normal(rng);
    for (uint64_t i = n; i < 3 * n; ++i) p[i] = std::abs(normal(rng)) * 1e-3f;
  };
  // The neighbour's sealed "unique/opt" (served over gRPC).
  {
    auto w = s.BeginWrite(next, 1);
    if (!w.ok()) Die("begin write", w.status());
    fill_state(reinterpret_cast<float*>((*w)->region_data(0)));
  }
  if (Status x = s.Seal(next, 1); !x.ok()) Die("seal", x);
  auto neighbour = s.Get(next, 1);
  if (!neighbour.ok()) Die("get", neighbour.status());
  // This rank's previous slot (the replica of step s-1) and its new slot (step s).
  auto prev = s.BeginWrite(me, 1);
  if (!prev.ok()) Die("begin write", prev.status());
  fill_state(reinterpret_cast<float*>((*prev)->region_data(0)));
  auto cur = s.BeginWrite(me, 2);
  if (!cur.ok()) Die("begin write", cur.status());
  std::memset((*cur)->region_data(0), 0, state_bytes);  // pre-fault
  auto* pp = reinterpret_cast<float*>((*prev)->region_data(0));
  auto* cp = reinterpret_cast<float*>((*cur)->region_data(0));
  const aor::AdamWState from{pp, pp + n, pp + 2 * n, n}, into{cp, cp + n, cp + 2 * n, n};
  std::vector<float> grad32(n);
  std::vector<uint16_t> grad16(n);
  for (uint64_t i = 0; i < n; ++i) {
    grad32[i] = normal(rng) * 1e-2f;
    grad16[i] = aor::FloatToBFloat16(grad32[i]);
  }

  // The neighbour's node: a PeerNode serving the store; this side fetches with a PeerClient.
  LoopbackPeer source(&s);
  peer::PeerClient& client = source.client();
  const std::string& addr = source.address();

  aor::StepHyper h;
  h.lr = 1e-4;
  h.beta2 = 0.95;
  h.weight_decay = 0.1;
  h.clip_coef = 0.5;
  uint64_t step = 0;
  struct Run {
    const char* dtype;
    int threads;
    std::vector<double> replay, grpc, local;
  };
  std::vector<Run> runs = {{"fp32", 1, {}, {}, {}}, {"fp32", 2, {}, {}, {}},
                           {"bf16", 1, {}, {}, {}}, {"bf16", 2, {}, {}, {}}};
  for (int r = 0; r <= reps; ++r) {  // r == 0 is the warm-up
    for (auto& run : runs) {
      const bool bf16 = std::string(run.dtype) == "bf16";
      h.iteration = h.step = ++step;
      auto t0 = Clock::now();
      Status x = aor::AdamWUpdateInto(from, into, h,
                                      bf16 ? static_cast<const void*>(grad16.data())
                                           : static_cast<const void*>(grad32.data()),
                                      bf16 ? aor::GradDtype::kBFloat16 : aor::GradDtype::kFloat32,
                                      n, run.threads);
      const double replay = SecondsSince(t0);
      if (!x.ok()) Die("replay", x);
      t0 = Clock::now();
      x = client.FetchRegion(addr, next, 1, "opt", reinterpret_cast<uint8_t*>(cp), state_bytes);
      const double grpc = SecondsSince(t0);
      if (!x.ok()) Die("FetchRegion", x);
      if (std::memcmp(cp, (*neighbour)->region_data(0), state_bytes) != 0) {
        Die("verify", Status::Corrupted("fetched bytes differ"));
      }
      t0 = Clock::now();
      std::memcpy(cp, (*neighbour)->region_data(0), state_bytes);
      const double local = SecondsSince(t0);
      if (r == 0) continue;
      run.replay.push_back(replay);
      run.grpc.push_back(grpc);
      run.local.push_back(local);
    }
  }
  const double gib = static_cast<double>(state_bytes) / (1ull << 30);
  for (const auto& run : runs) {
    const double rp = Best(run.replay), gr = Best(run.grpc), lc = Best(run.local);
    std::printf("{\"bench\":\"aor_replay_vs_copy\",\"elems\":%llu,\"state_gib\":%.3f,"
                "\"grad\":\"%s\",\"threads\":%d,\"reps\":%d,\"replay_s\":%.4f,"
                "\"grpc_copy_s\":%.4f,\"local_copy_s\":%.4f,\"copy_over_replay\":%.2f,"
                "\"local_copy_over_replay\":%.2f,\"network_bytes_per_step_copy\":%llu,"
                "\"network_bytes_per_step_replay\":0}\n",
                static_cast<unsigned long long>(n), gib, run.dtype, run.threads, reps, rp, gr, lc,
                gr / rp, lc / rp, static_cast<unsigned long long>(state_bytes));
  }
  neighbour->reset();
  prev->reset();
  cur->reset();
  source.Stop();
  (void)s.RemoveJob("bench");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
