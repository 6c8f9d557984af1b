#pragma once
/// \file pipeline.h
/// \brief Emulated 1F1B pipeline for HAS (BENCHMARKS.md "HAS"): PP stages as forked processes,
/// each with an emulated device buffer registered with a real reftd, timed compute (sleeps), p2p
/// messages between neighbouring stages over socketpairs, a step-end token (optimizer sync) and
/// a snapshot every step in one of four modes. Shared by the benchmark and tests/has.
///
/// Contention model (Q fidelity, documented in docs/has.md): timed compute does not slow down by
/// itself when a copy runs, so a compute slice during which reftd reports a device copy in
/// flight (the hint page's `copying` flag) is stretched by `interference` (0.3 = 30 % slower),
/// standing for the HBM/PCIe/SM contention of a real device. Copies inside bubbles cost nothing.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/result.h"

namespace reft::has_bench {

enum class Mode { kNone, kBlocking, kNaive, kHas };
const char* ModeName(Mode m);
Result<Mode> ParseMode(const std::string& s);

struct PipelineOptions {
  std::string socket;      ///< reftd's local socket
  std::string job = "has-bench";
  int stages = 4;
  int micro_batches = 4;
  double forward_s = 0.010, backward_s = 0.020, optimizer_s = 0.002;
  double interference = 0.3;  ///< compute slowdown while a copy is in flight
  uint64_t bytes = 8ull << 20;  ///< snapshot bytes per stage (one emulated buffer)
  int warmup = 2, iterations = 6;
  Mode mode = Mode::kHas;
  double miss_threshold_s = 0.001;  ///< a fence wait longer than this is a deadline miss
};

/// \brief Per-stage result over the measured iterations.
struct StageResult {
  int stage = 0;
  double t_iter = 0;          ///< mean iteration time (s)
  double fence_wait = 0;      ///< mean time fence() waited before the optimizer step (s)
  double max_fence_wait = 0;
  int deadline_misses = 0;    ///< iterations whose fence (HAS/naive) waited > miss_threshold
  uint64_t snapshot_bytes = 0;  ///< bytes snapshotted in the measured iterations
  uint64_t bubble_bytes = 0, compute_bytes = 0, landed_in_bubble_bytes = 0;
  std::string error;          ///< empty when the stage ran to the end
};

/// \brief Runs one pipeline (forks `stages` processes) and collects their results.
Result<std::vector<StageResult>> RunPipeline(const PipelineOptions& o);

/// \brief A reftd child process on a private socket/shm dir, with the emulated copy
/// bandwidth set (env REFT_EMULATED_BANDWIDTH). Killed (SIGKILL) and reaped by the destructor.
class ReftdProcess {
 public:
  static Result<std::unique_ptr<ReftdProcess>> Start(const std::string& reftd,
                                                     const std::string& root,
                                                     uint64_t copy_bytes_per_second,
                                                     uint64_t has_chunk_bytes);
  ~ReftdProcess();
  const std::string& socket() const { return socket_; }

 private:
  ReftdProcess() = default;
  int pid_ = -1;
  std::string socket_;
};

}  // namespace reft::has_bench
