/// has_pipeline_bench: O_in-mem / T_iter of an emulated 1F1B pipeline (BENCHMARKS.md "HAS") for
/// the snapshot modes none, blocking, naive_async and has, all in one run against one reftd it
/// starts itself. Prints one JSON line per mode; overheads are ratios to the `none` run.

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipeline.h"
#include "reft/has/bubble_estimate.h"

using namespace reft::has_bench;

int main(int argc, char** argv) {
  CLI::App app{"HAS emulated 1F1B pipeline benchmark"};
  PipelineOptions o;
  std::string reftd, modes = "none,blocking,naive_async,has";
  double ss_over_bubble = 0.5, bandwidth = 200e6;
  double f_ms = 10, b_ms = 20, opt_ms = 2;
  uint64_t chunk = 512 << 10;
  app.add_option("--reftd", reftd, "reftd binary")->required();
  app.add_option("--stages", o.stages, "pipeline stages (processes)");
  app.add_option("--micro-batches", o.micro_batches, "micro-batches per step");
  app.add_option("--forward-ms", f_ms);
  app.add_option("--backward-ms", b_ms);
  app.add_option("--optimizer-ms", opt_ms);
  app.add_option("--iterations", o.iterations);
  app.add_option("--warmup", o.warmup);
  app.add_option("--interference", o.interference, "compute slowdown while a copy runs");
  app.add_option("--bandwidth", bandwidth, "emulated device->host bandwidth, bytes/s");
  app.add_option("--chunk", chunk, "HAS copy-chunk bytes");
  app.add_option("--ss-over-bubble", ss_over_bubble,
                 "snapshot time / simulated idle time of a stage (sets the bytes per stage)");
  app.add_option("--modes", modes);
  CLI11_PARSE(app, argc, argv);
  o.forward_s = f_ms / 1e3;
  o.backward_s = b_ms / 1e3;
  o.optimizer_s = opt_ms / 1e3;

  reft::planner::PipelineSpec spec;
  spec.forward.assign(o.stages, o.forward_s);
  spec.backward.assign(o.stages, o.backward_s);
  spec.micro_batches = o.micro_batches;
  auto est = reft::has::EstimateBubbles(spec, 1.0);
  if (!est.ok()) {
    std::fprintf(stderr, "%s\n", est.status().ToString().c_str());
    return 2;
  }
  const double idle = (*est)[0].idle;  // uniform stages: the same on every stage
  o.bytes = static_cast<uint64_t>(ss_over_bubble * idle * bandwidth);
  o.bytes = std::max<uint64_t>(chunk, o.bytes / chunk * chunk);

  char tmpl[] = "/tmp/reft-has-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 2;
  auto daemon = ReftdProcess::Start(reftd, tmpl, static_cast<uint64_t>(bandwidth), chunk);
  if (!daemon.ok()) {
    std::fprintf(stderr, "%s\n", daemon.status().ToString().c_str());
    return 2;
  }
  o.socket = (*daemon)->socket();
  double base = 0;
  int rc = 0;
  size_t pos = 0;
  while (pos <= modes.size()) {
    size_t end = modes.find(',', pos);
    if (end == std::string::npos) end = modes.size();
    auto mode = ParseMode(modes.substr(pos, end - pos));
    pos = end + 1;
    if (!mode.ok()) {
      std::fprintf(stderr, "%s\n", mode.status().ToString().c_str());
      return 2;
    }
    o.mode = *mode;
    o.job = std::string("has-bench-") + ModeName(o.mode);
    auto res = RunPipeline(o);
    if (!res.ok()) {
      std::fprintf(stderr, "%s: %s\n", ModeName(o.mode), res.status().ToString().c_str());
      rc = 1;
      continue;
    }
    double t_iter = 0, wait = 0, max_wait = 0;
    uint64_t bytes = 0, bubble = 0, landed = 0, compute = 0;
    int misses = 0;
    for (const auto& r : *res) {
      t_iter = std::max(t_iter, r.t_iter);
      wait += r.fence_wait / res->size();
      max_wait = std::max(max_wait, r.max_fence_wait);
      misses += r.deadline_misses;
      bytes += r.snapshot_bytes;
      bubble += r.bubble_bytes;
      compute += r.compute_bytes;
      landed += r.landed_in_bubble_bytes;
    }
    if (o.mode == Mode::kNone) base = t_iter;
    nlohmann::json j;
    j["bench"] = "has_pipeline";
    j["mode"] = ModeName(o.mode);
    j["stages"] = o.stages;
    j["micro_batches"] = o.micro_batches;
    j["t_iter_ms"] = t_iter * 1e3;
    if (base > 0) j["overhead_ratio"] = (t_iter - base) / base;  // O_in-mem / T_iter
    j["t_ss_ms"] = static_cast<double>(o.bytes) / bandwidth * 1e3;
    j["t_idle_sim_ms"] = idle * 1e3;
    j["ss_over_bubble"] = ss_over_bubble;
    j["bytes_per_stage"] = o.bytes;
    j["interference"] = o.interference;
    j["fence_wait_ms_mean"] = wait * 1e3;
    j["fence_wait_ms_max"] = max_wait * 1e3;
    j["deadline_misses"] = misses;
    if (bytes > 0) {
      j["bubble_fraction"] = static_cast<double>(bubble) / bytes;
      j["landed_in_bubble_fraction"] = static_cast<double>(landed) / bytes;
      j["compute_fraction"] = static_cast<double>(compute) / bytes;
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return rc;
}
