// Harness-style integration tests: a real reftd (emulated device, paced copy engine), stage
// processes running 1F1B with HAS hints. Short: a few hundred ms per pipeline.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "pipeline.h"
#include "reft/client.h"
#include "reft/reft.h"
#include "test_support.h"

using namespace reft::has_bench;

namespace {

constexpr double kBandwidth = 200e6;

// ss_over_idle is taken at the nominal copy rate; the paced engine's effective rate on a loaded
// 2-core machine is ~1.5x lower, so 0.25 keeps t_ss well below t_bubble.
PipelineOptions Short(const std::string& socket, double ss_over_idle) {
  PipelineOptions o;
  o.socket = socket;
  o.stages = 3;
  o.micro_batches = 4;
  o.forward_s = 0.010;
  o.backward_s = 0.020;
  o.warmup = 3;
  o.iterations = 4;
  o.mode = Mode::kHas;
  const double idle = (o.stages - 1) * (o.forward_s + o.backward_s);  // simulated, uniform 1F1B
  o.bytes = static_cast<uint64_t>(ss_over_idle * idle * kBandwidth) / (128 << 10) * (128 << 10);
  return o;
}

}  // namespace

TEST_CASE("HAS harness: no deadline miss and >= 95 % of bytes in bubbles when t_ss <= t_bubble",
          "[has][integration]") {
  reft::testing::TempDir dir;
  auto daemon = ReftdProcess::Start(REFT_TEST_REFTD, dir.path(), static_cast<uint64_t>(kBandwidth), 128 << 10);
  REQUIRE(daemon.ok());
  SECTION("snapshot fits the bubbles") {
    // Timing on a shared 2-core machine: a second attempt is allowed when a load spike of
    // other processes disturbed the first (both attempts failing fails the test).
    auto o = Short((*daemon)->socket(), 0.25);  // see Short(): t_ss well below t_bubble
    std::string why;
    for (int attempt = 0; attempt < 2; ++attempt) {
      o.job = "has-fit-" + std::to_string(attempt);
      auto res = RunPipeline(o);
      REQUIRE(res.ok());
      why.clear();
      for (const auto& r : *res) {
        REQUIRE(r.snapshot_bytes > 0);
        CHECK(r.bubble_bytes + r.compute_bytes == r.snapshot_bytes);
        if (r.deadline_misses != 0) {
          why += "stage " + std::to_string(r.stage) + ": " + std::to_string(r.deadline_misses) +
                 " deadline misses (max fence wait " + std::to_string(r.max_fence_wait) + " s); ";
        }
        if (static_cast<double>(r.landed_in_bubble_bytes) < 0.95 * r.snapshot_bytes) {
          why += "stage " + std::to_string(r.stage) + ": only " +
                 std::to_string(r.landed_in_bubble_bytes) + " of " +
                 std::to_string(r.snapshot_bytes) + " bytes landed in bubbles; ";
        }
      }
      if (why.empty()) break;
      WARN("attempt " << attempt << ": " << why);
    }
    INFO(why);
    CHECK(why.empty());
  }
  SECTION("snapshot exceeds the bubbles: the rest goes alongside compute") {
    auto o = Short((*daemon)->socket(), 1.5);
    o.job = "has-exceed";
    auto res = RunPipeline(o);
    REQUIRE(res.ok());
    for (const auto& r : *res) {
      INFO("stage " << r.stage << " max fence wait " << r.max_fence_wait);
      // No deadline assertion here: with t_ss near T_iter the fence may wait (docs/has.md);
      // it never returns before every byte is in the slot (the restore test checks bytes).
      CHECK(r.bubble_bytes > 0);
      CHECK(r.compute_bytes > 0);
    }
  }
}

TEST_CASE("restore after kill -9 of a stage under HAS is bit-exact", "[has][integration]") {
  reft::testing::TempDir dir;
  auto daemon = ReftdProcess::Start(REFT_TEST_REFTD, dir.path(), static_cast<uint64_t>(kBandwidth), 128 << 10);
  REQUIRE(daemon.ok());
  const uint64_t bytes = 3 << 20;
  const std::string socket = (*daemon)->socket();
  auto pattern = [&](int64_t step) { return reft::testing::RandomBytes(bytes, 1000 + static_cast<uint64_t>(step)); };
  reft::ClientOptions co;
  co.socket_path = socket;
  co.job = "has-kill";
  int pfd[2];
  REQUIRE(::pipe(pfd) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The stage: state(step) = pattern(step); snapshot every step with bubble hints; reports
    // each committed step; runs until killed.
    ::close(pfd[0]);
    auto c = reft::Client::Connect(co);
    auto buf = reft::EmulatedBuffer::Create(bytes);
    if (!c.ok() || !buf.ok()) ::_exit(3);
    reft::BufferOptions bo;
    bo.memory = reft::MemoryLocation::kEmulated;
    if (!(*c)->Register("params", (*buf)->data(), bytes, bo).ok()) ::_exit(4);
    for (int64_t step = 0;; ++step) {
      auto p = pattern(step);
      std::memcpy((*buf)->data(), p.data(), bytes);
      if (!(*c)->Snapshot(step).ok()) ::_exit(5);
      (void)(*c)->BubbleBegin();
      ::usleep(5000);  // idle: the copy runs here
      (void)(*c)->BubbleEnd();
      ::usleep(5000);  // "compute"
      if (!(*c)->Fence().ok()) ::_exit(6);
      auto committed = (*c)->WaitCommitted(step, std::chrono::milliseconds(5000));
      if (!committed.ok() || !*committed) ::_exit(7);
      if (::write(pfd[1], &step, sizeof(step)) != sizeof(step)) ::_exit(8);
    }
  }
  ::close(pfd[1]);
  int64_t last = -1;
  while (last < 4) REQUIRE(::read(pfd[0], &last, sizeof(last)) == sizeof(last));
  ::usleep(3000);  // somewhere inside the next step's gated copy
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(pfd[0]);
  CHECK(WIFSIGNALED(status));

  // Restart the stage and restore.
  auto c = reft::Client::Connect(co);
  REQUIRE(c.ok());
  auto buf = reft::EmulatedBuffer::Create(bytes);
  REQUIRE(buf.ok());
  reft::BufferOptions bo;
  bo.memory = reft::MemoryLocation::kEmulated;
  REQUIRE((*c)->Register("params", (*buf)->data(), bytes, bo).ok());
  REQUIRE((*c)->EnableHas().ok());
  auto restored = (*c)->Restore();
  REQUIRE(restored.ok());
  REQUIRE(restored->has_value());
  CHECK(**restored >= last);
  auto expect = pattern(**restored);
  CHECK(std::memcmp((*buf)->data(), expect.data(), bytes) == 0);
}

TEST_CASE("C ABI: enable_has validates the pipeline and hints drive a gated device pull", "[has][integration]") {
  reft::testing::TempDir dir;
  auto daemon = ReftdProcess::Start(REFT_TEST_REFTD, dir.path(), static_cast<uint64_t>(kBandwidth), 128 << 10);
  REQUIRE(daemon.ok());
  CHECK(reft_bubble_begin(nullptr) != REFT_OK);
  reft_options opts;
  reft_options_init(&opts);
  const std::string socket = (*daemon)->socket();
  opts.socket_path = socket.c_str();
  opts.job = "has-c";
  reft_client* c = nullptr;
  REQUIRE(reft_connect(&opts, &c) == REFT_OK);
  auto buf = reft::EmulatedBuffer::Create(1 << 20);
  REQUIRE(buf.ok());
  reft_buffer_options bo;
  reft_buffer_options_init(&bo);
  bo.memory = REFT_MEMORY_EMULATED;
  REQUIRE(reft_register(c, "w", (*buf)->data(), 1 << 20, &bo) == REFT_OK);
  CHECK(reft_enable_has(c, 2, 5, 4, 0.01, 0.02) == REFT_INVALID_ARGUMENT);  // stage >= stages
  REQUIRE(reft_enable_has(c, 2, 1, 4, 0.01, 0.02) == REFT_OK);
  for (int64_t step = 0; step < 3; ++step) {
    REQUIRE(reft_snapshot(c, step) == REFT_OK);
    REQUIRE(reft_bubble_begin(c) == REFT_OK);
    ::usleep(20000);  // 1 MiB at 200 MB/s takes ~5 ms: fits this bubble
    REQUIRE(reft_bubble_end(c) == REFT_OK);
    REQUIRE(reft_fence(c) == REFT_OK);
  }
  REQUIRE(reft_close(c) == REFT_OK);
}
