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
// --form names the replay form (docs/protection.md "What is exact"), as the Python client writes
// it: "mul-add" (default: torch 1.x, reft's own owners), "lerp", "lerp+fma" (torch >= 2.0 on
// AVX2/AVX-512), "fused8+fma" (torch's fused CPU AdamW), with "+l2" for Adam's L2 decay.
// --state bf16: the shard is 3n bf16 (an optimizer over bf16 parameters; with --form fused16+fma,
// torch's fused kernel on them), 6n bytes, the gradient bf16 only.
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

/// The StepHyper form fields of "fused8+fma+l2" and the like; false for an unknown form.
bool ParseForm(const std::string& text, aor::StepHyper* h) {
  std::vector<std::string> parts;
  size_t at = 0;
  for (size_t plus; (plus = text.find('+', at)) != std::string::npos; at = plus + 1) {
    parts.push_back(text.substr(at, plus - at));
  }
  parts.push_back(text.substr(at));
  const std::string& first = parts[0];
  if (first == "lerp") {
    h->lerp_first_moment = true;
  } else if (first.rfind("fused", 0) == 0 && first.size() > 5) {
    const int width = std::atoi(first.c_str() + 5);
    if (width < 1 || width > 64) return false;
    h->lerp_first_moment = true;
    h->fused_width = static_cast<uint8_t>(width);
  } else if (first != "mul-add") {
    return false;
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "fma") {
      h->fma = true;
    } else if (parts[i] == "l2") {
      h->l2_weight_decay = true;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t elems = 16ull << 20;  // 16 Mi elements: 192 MiB of optimizer state
  int reps = 5;
  std::string shm_root = "/dev/shm";
  std::string form = "mul-add";
  std::string state = "fp32";
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
    } else if (a == "--form" && i + 1 < argc) {
      form = argv[++i];
    } else if (a == "--state" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "fp32" || std::string(argv[i + 1]) == "bf16")) {
      state = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: aor_copy_bench [--elems N] [--reps N] [--shm-dir DIR] [--form F] "
                   "[--state fp32|bf16]\n");
      return 2;
    }
  }
  if (!peer::TuneMallocForPeerStreams()) std::fprintf(stderr, "mallopt refused a setting\n");
  const uint64_t n = elems;
  const bool bf16_state = state == "bf16";
  const aor::StateDtype state_dtype =
      bf16_state ? aor::StateDtype::kBFloat16 : aor::StateDtype::kFloat32;
  const uint64_t array_bytes = n * aor::StateDtypeSize(state_dtype);
  const uint64_t state_bytes = 3 * array_bytes;

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
  auto fill_state = [&](uint8_t* region) {
    auto value = [&](uint64_t i) { return i < n ? normal(rng) : std::abs(normal(rng)) * 1e-3f; };
    for (uint64_t i = 0; i < 3 * n; ++i) {
      if (bf16_state) {
        reinterpret_cast<uint16_t*>(region)[i] = aor::FloatToBFloat16(value(i));
      } else {
        reinterpret_cast<float*>(region)[i] = value(i);
      }
    }
  };
  // The neighbour's sealed "unique/opt" (served over gRPC).
  {
    auto w = s.BeginWrite(next, 1);
    if (!w.ok()) Die("begin write", w.status());
    fill_state((*w)->region_data(0));
  }
  if (Status x = s.Seal(next, 1); !x.ok()) Die("seal", x);
  auto neighbour = s.Get(next, 1);
  if (!neighbour.ok()) Die("get", neighbour.status());
  // This rank's previous slot (the replica of step s-1) and its new slot (step s).
  auto prev = s.BeginWrite(me, 1);
  if (!prev.ok()) Die("begin write", prev.status());
  fill_state((*prev)->region_data(0));
  auto cur = s.BeginWrite(me, 2);
  if (!cur.ok()) Die("begin write", cur.status());
  std::memset((*cur)->region_data(0), 0, state_bytes);  // pre-fault
  uint8_t* pp = (*prev)->region_data(0);
  uint8_t* cp = (*cur)->region_data(0);
  const aor::AdamWState from{pp, pp + array_bytes, pp + 2 * array_bytes, n, state_dtype};
  const aor::AdamWState into{cp, cp + array_bytes, cp + 2 * array_bytes, n, state_dtype};
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
  if (!ParseForm(form, &h)) {
    std::fprintf(stderr, "aor_copy_bench: unknown --form '%s'\n", form.c_str());
    return 2;
  }
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
  std::vector<Run> runs = {{"bf16", 1, {}, {}, {}}, {"bf16", 2, {}, {}, {}}};
  if (!bf16_state) {  // bf16 parameters come with bf16 gradients
    runs.insert(runs.begin(), {{"fp32", 1, {}, {}, {}}, {"fp32", 2, {}, {}, {}}});
  }
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
      x = client.FetchRegion(addr, next, 1, "opt", cp, state_bytes);
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
    std::printf(
        "{\"bench\":\"aor_replay_vs_copy\",\"form\":\"%s\",\"state\":\"%s\","
        "\"elems\":%llu,\"state_gib\":%.3f,\"grad\":\"%s\",\"threads\":%d,\"reps\":%d,\"replay_s\":"
        "%.4f,"
        "\"grpc_copy_s\":%.4f,\"local_copy_s\":%.4f,\"copy_over_replay\":%.2f,"
        "\"local_copy_over_replay\":%.2f,\"network_bytes_per_step_copy\":%llu,"
        "\"network_bytes_per_step_replay\":0}\n",
        form.c_str(), state.c_str(), static_cast<unsigned long long>(n), gib, run.dtype,
        run.threads, reps, rp, gr, lc, gr / rp, lc / rp,
        static_cast<unsigned long long>(state_bytes));
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
