// AOR host replay throughput (BENCHMARKS.md "Protection"): AdamWUpdate over `--elems` fp32 elements
// against memcpy of the same memory traffic, in the same run, with the same thread count.
//
// Traffic of one AdamW step per element: reads param, exp_avg, exp_avg_sq (4 B each) and the
// gradient (4 or 2 B), writes the three state arrays: 28 B (fp32 gradient) or 26 B (fp16/bf16).
// The memcpy reference copies half that many bytes per element (each copied byte is read once
// and written once), from the same state and gradient arrays into one destination buffer,
// split into the same number of threads. "ratio" = memcpy time / AdamW time (1.0: the replay
// runs at memcpy speed, i.e. it is memory-bound). Best of --reps, interleaved, alternating
// which side runs first. A final "aor_budget" line per dtype gives the largest shard whose
// replay fits --budget seconds with the fastest thread count measured.
//
// Usage: aor_bench [--elems N] [--reps R] [--threads 1,2] [--dtypes fp32,bf16,fp16]
//                  [--budget S]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "reft/aor/adamw.h"
#include "reft/aor/half.h"

using namespace reft::aor;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Copy {
  const uint8_t* src;
  uint8_t* dst;
  size_t bytes;
};

/// memcpy of every job, each job cut into `threads` contiguous pieces, one worker per piece
/// index (the caller's thread is one of them), like AdamWUpdate's split.
void ParallelCopy(const std::vector<Copy>& jobs, int threads) {
  auto work = [&jobs, threads](int t) {
    for (const Copy& c : jobs) {
      const size_t per = (c.bytes + threads - 1) / threads;
      const size_t b = std::min(c.bytes, per * t), e = std::min(c.bytes, b + per);
      std::memcpy(c.dst + b, c.src + b, e - b);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = size_t{64} << 20;
  int reps = 5;
  double budget = 1.0;
  std::vector<std::string> thread_list{"1", "2"}, dtypes{"fp32", "bf16", "fp16"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--elems")
      n = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--reps")
      reps = std::atoi(argv[i + 1]);
    else if (a == "--threads")
      thread_list = Split(argv[i + 1]);
    else if (a == "--dtypes")
      dtypes = Split(argv[i + 1]);
    else if (a == "--budget")
      budget = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: aor_bench [--elems N] [--reps R] [--threads 1,2] "
                   "[--dtypes fp32,bf16,fp16] [--budget S]\n");
      return 2;
    }
  }
  if (argc % 2 == 0 || n == 0 || reps < 1) {
    std::fprintf(stderr, "aor_bench: bad arguments\n");
    return 2;
  }

  // Realistic values: weights ~ N(0, 0.02), gradients ~ N(0, 1e-3), moments from a few steps.
  std::vector<float> p(n), m(n), v(n), g32(n);
  std::vector<uint16_t> g16(n), gbf(n);
  {
    std::mt19937 rng(42);
    std::normal_distribution<float> w(0.0f, 0.02f), gd(0.0f, 1e-3f);
    for (size_t i = 0; i < n; ++i) {
      p[i] = w(rng);
      g32[i] = gd(rng);
      m[i] = 0.1f * g32[i];
      v[i] = 1e-3f * g32[i] * g32[i];
      g16[i] = FloatToHalf(g32[i] * 1024.0f);  // loss scale 2^10 keeps fp16 out of subnormals
      gbf[i] = FloatToBFloat16(g32[i]);
    }
  }
  std::vector<uint8_t> dst(14 * n);  // the largest memcpy reference (fp32 gradients)
  std::memset(dst.data(), 1, dst.size());
  const AdamWState state{p.data(), m.data(), v.data(), n};

  StepHyper h;
  h.lr = 1e-4;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  h.clip_coef = 0.5;

  struct Best {
    std::string dtype;
    int threads;
    double elems_per_s;
  };
  std::vector<Best> best;
  for (const std::string& dt : dtypes) {
    GradDtype dtype;
    const void* grad;
    if (dt == "fp32") {
      dtype = GradDtype::kFloat32;
      grad = g32.data();
    } else if (dt == "fp16") {
      dtype = GradDtype::kFloat16;
      grad = g16.data();
    } else if (dt == "bf16") {
      dtype = GradDtype::kBFloat16;
      grad = gbf.data();
    } else {
      std::fprintf(stderr, "aor_bench: unknown dtype %s\n", dt.c_str());
      return 2;
    }
    h.grad_scale = dtype == GradDtype::kFloat16 ? 1.0 / 1024 : 1.0;
    const size_t esize = GradDtypeSize(dtype);
    const size_t traffic = (28 - (4 - esize)) * n;  // bytes read + written by one step
    // memcpy moving the same traffic: 12 B/elem of state + esize/2 B/elem of gradient.
    std::vector<Copy> jobs = {
        {reinterpret_cast<const uint8_t*>(p.data()), dst.data(), 4 * n},
        {reinterpret_cast<const uint8_t*>(m.data()), dst.data() + 4 * n, 4 * n},
        {reinterpret_cast<const uint8_t*>(v.data()), dst.data() + 8 * n, 4 * n},
        {static_cast<const uint8_t*>(grad), dst.data() + 12 * n, esize * n / 2}};
    size_t copied = 0;
    for (const Copy& c : jobs) copied += c.bytes;

    for (const std::string& ts : thread_list) {
      const int threads = std::atoi(ts.c_str());
      if (threads < 1) return 2;
      double t_ours = 1e30, t_copy = 1e30;
      for (int r = 0; r < reps; ++r) {
        for (int side = 0; side < 2; ++side) {
          const bool ours = (side == 0) == (r % 2 == 0);
          const double t0 = Now();
          if (ours) {
            ++h.iteration;
            ++h.step;
            if (!AdamWUpdate(state, h, grad, dtype, n, threads).ok()) return 1;
            t_ours = std::min(t_ours, Now() - t0);
          } else {
            ParallelCopy(jobs, threads);
            t_copy = std::min(t_copy, Now() - t0);
          }
        }
      }
      bool finite = true;
      for (size_t i = 0; i < n; i += 4099) finite &= std::isfinite(p[i]) && std::isfinite(v[i]);
      const double eps_ours = static_cast<double>(n) / t_ours;
      std::printf(
          "{\"bench\":\"aor_replay\",\"dtype\":\"%s\",\"threads\":%d,\"elems\":%zu,"
          "\"traffic_bytes\":%zu,\"ours_s\":%.4f,\"memcpy_s\":%.4f,\"ours_elems_per_s\":%.4g,"
          "\"ours_gbps\":%.2f,\"memcpy_gbps\":%.2f,\"ratio\":%.3f,\"finite\":%s}\n",
          dt.c_str(), threads, n, traffic, t_ours, t_copy, eps_ours, traffic / t_ours / 1e9,
          2.0 * copied / t_copy / 1e9, t_copy / t_ours, finite ? "true" : "false");
      std::fflush(stdout);
      best.push_back({dt, threads, eps_ours});
    }
  }
  for (const std::string& dt : dtypes) {
    const Best* b = nullptr;
    for (const Best& x : best)
      if (x.dtype == dt && (!b || x.elems_per_s > b->elems_per_s)) b = &x;
    if (!b) continue;
    const double elems = b->elems_per_s * budget;
    std::printf(
        "{\"bench\":\"aor_budget\",\"dtype\":\"%s\",\"budget_s\":%.3f,\"threads\":%d,"
        "\"max_elems\":%.4g,\"fp32_state_gib\":%.3f,\"grad_gib\":%.3f}\n",
        dt.c_str(), budget, b->threads, elems, elems * 12 / (1 << 30),
        elems * static_cast<double>(dt == "fp32" ? 4 : 2) / (1 << 30));
  }
  return 0;
}
