// The C ABI: versioned options, integer codes equal to reft::StatusCode, thread-local errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>

#include "reft/client.h"
#include "reft/local/plan_source.h"
#include "reft/reft.h"
#include "server_fixture.h"

extern "C" int reft_c_header_check(const char* socket_path);

using reft::testing::RandomBytes;
using reft::testing::ServerFixture;

TEST_CASE("C ABI codes mirror reft::StatusCode") {
  CHECK(REFT_CORRUPTED == static_cast<int>(reft::StatusCode::kCorrupted));
  CHECK(REFT_INTERNAL == static_cast<int>(reft::StatusCode::kInternal));
  CHECK(std::string(reft_status_name(REFT_OUT_OF_MEMORY)) == "out_of_memory");
  CHECK(std::string(reft_status_name(99)) == "unknown");
}

TEST_CASE("C ABI round trip, errors and thread-local messages") {
  ServerFixture f;
  CHECK(reft_c_header_check(f.socket.c_str()) == REFT_OK);

  reft_options o;
  reft_options_init(&o);
  o.socket_path = f.socket.c_str();
  o.job = "c-job";
  o.protection = "arc17";
  reft_client* c = nullptr;
  CHECK(reft_connect(&o, &c) == REFT_INVALID_ARGUMENT);
  CHECK(c == nullptr);
  CHECK(std::string(reft_last_error()).find("arc17") != std::string::npos);
  // Another thread has its own last error.
  std::string other;
  std::thread([&] { other = reft_last_error(); }).join();
  CHECK(other.empty());

  o.protection = nullptr;
  REQUIRE(reft_connect(&o, &c) == REFT_OK);
  CHECK(std::string(reft_last_error()).empty());
  std::vector<uint8_t> buf = RandomBytes(12346, 3);  // whole bf16 elements
  const std::vector<uint8_t> want = buf;
  reft_buffer_options bo;
  reft_buffer_options_init(&bo);
  bo.kind = REFT_KIND_UNIQUE;
  bo.dtype = "bfloat16";
  bo.layer = 2;
  REQUIRE(reft_register(c, "opt", buf.data(), buf.size(), &bo) == REFT_OK);
  CHECK(reft_register(c, "opt", buf.data(), buf.size(), nullptr) == REFT_ALREADY_EXISTS);
  bo.kind = 7;
  CHECK(reft_register(c, "bad", buf.data(), buf.size(), &bo) == REFT_INVALID_ARGUMENT);
  bo.struct_size = 4;  // a caller compiled against a struct that cannot be this old
  CHECK(reft_register(c, "bad", buf.data(), buf.size(), &bo) == REFT_INVALID_ARGUMENT);
  REQUIRE(reft_snapshot(c, 9) == REFT_OK);
  REQUIRE(reft_fence(c) == REFT_OK);
  int committed = 0;
  REQUIRE(reft_wait_committed(c, 9, 10000, &committed) == REFT_OK);
  CHECK(committed == 1);
  REQUIRE(reft_wait_committed(c, 10, 20, &committed) == REFT_OK);
  CHECK(committed == 0);
  std::memset(buf.data(), 0, buf.size());
  reft_restore_report report;
  reft_restore_report_init(&report);
  CHECK(reft_last_restore(c, &report) == REFT_NOT_FOUND);  // nothing restored yet
  int64_t step = -2;
  REQUIRE(reft_restore(c, &step) == REFT_OK);
  CHECK(step == 9);
  CHECK(buf == want);
  REQUIRE(reft_last_restore(c, &report) == REFT_OK);
  CHECK(report.step == 9);
  CHECK(std::string(report.source) == "memory");
  CHECK(report.reshaped == 0);
  CHECK(report.total_ns > 0);  // this fixture's in-process restorer reports no daemon time
  CHECK(report.total_ns >= report.daemon_ns);
  CHECK(report.agreement_ns <= report.daemon_ns);
  report.struct_size = 8;  // a caller's struct that cannot hold version 1
  CHECK(reft_last_restore(c, &report) == REFT_INVALID_ARGUMENT);
  CHECK(reft_close(c) == REFT_OK);
  CHECK(reft_close(nullptr) == REFT_OK);
  CHECK(reft_snapshot(nullptr, 1) == REFT_INVALID_ARGUMENT);
}

TEST_CASE("C ABI: ZeRO-1 under aor, gradient buffers and optimizer hyper-parameters") {
  ServerFixture f;
  const size_t n = 256;
  std::vector<float> opt0(3 * n, 0.5f), opt1(3 * n, 0.25f), grad0(2 * n, 0.01f), grad1 = grad0;
  std::vector<float>* opts[2] = {&opt0, &opt1};
  std::vector<float>* grads[2] = {&grad0, &grad1};
  reft_client* c[2] = {nullptr, nullptr};
  for (int d = 0; d < 2; ++d) {
    reft_options o;
    reft_options_init(&o);
    o.socket_path = f.socket.c_str();
    o.job = "c-aor";
    o.dp = d;
    o.layout_dp = 2;
    o.protection = "aor";
    if (d == 0) {  // ZeRO stage 0 is refused with a message
      CHECK(reft_connect(&o, &c[d]) == REFT_INVALID_ARGUMENT);
      CHECK(std::string(reft_last_error()).find("ZeRO stage is 0") != std::string::npos);
    }
    o.layout_zero = 1;
    REQUIRE(reft_connect(&o, &c[d]) == REFT_OK);
    reft_buffer_options bo;
    reft_buffer_options_init(&bo);
    bo.kind = REFT_KIND_UNIQUE;
    bo.dtype = "float32";
    bo.optimizer = 1;
    bo.gradient = "grad";
    REQUIRE(reft_register(c[d], "opt", opts[d]->data(), 4 * opts[d]->size(), &bo) == REFT_OK);
    reft_buffer_options go;
    reft_buffer_options_init(&go);
    go.kind = REFT_KIND_GRADIENT;
    go.dtype = "float32";
    REQUIRE(reft_register(c[d], "grad", grads[d]->data(), 4 * grads[d]->size(), &go) == REFT_OK);
  }
  // Plain reft_snapshot is refused: the replay needs the hyper-parameters.
  CHECK(reft_snapshot(c[0], 1) == REFT_INVALID_ARGUMENT);
  CHECK(std::string(reft_last_error()).find("replays optimizer shard 'opt'") != std::string::npos);
  reft_optimizer_step hs[2];
  reft_optimizer_step_init(&hs[0]);
  hs[0].lr = 1e-3;
  CHECK(reft_snapshot_aor(c[0], 1, hs, 1) == REFT_INVALID_ARGUMENT);  // step 0 is not a step
  CHECK(std::string(reft_last_error()).find("step = 0") != std::string::npos);
  CHECK(reft_snapshot_aor(c[0], 1, nullptr, 0) == REFT_INVALID_ARGUMENT);
  hs[0].step = 1;
  hs[1] = hs[0];
  CHECK(reft_snapshot_aor(c[0], 1, hs, 2) == REFT_INVALID_ARGUMENT);  // two unnamed records
  hs[0].buffer = "opt";
  for (int step = 1; step <= 3; ++step) {
    hs[0].step = static_cast<uint64_t>(step);
    // Step 2 as a caller compiled before lerp_first_moment existed sends it: a shorter record.
    hs[0].struct_size = step == 2 ? offsetof(reft_optimizer_step, lerp_first_moment)
                                  : sizeof(reft_optimizer_step);
    for (int d = 0; d < 2; ++d) {
      REQUIRE(reft_fence(c[d]) == REFT_OK);
      INFO(reft_last_error());
      REQUIRE(reft_snapshot_aor(c[d], step, hs, 1) == REFT_OK);
    }
  }
  int committed = 0;
  for (int d = 0; d < 2; ++d) REQUIRE(reft_fence(c[d]) == REFT_OK);
  REQUIRE(reft_wait_committed(c[0], 3, 10000, &committed) == REFT_OK);
  CHECK(committed == 1);
  for (const auto& s : f.server->Sessions()) {
    if (!s.joined) continue;
    // These owners never update their shards, unlike what the records say: the first replay,
    // compared with the owner's state on probation, differs; AOR is off from then on.
    CHECK(s.aor_copies == 2);
    CHECK(s.aor_replays == 1);
    CHECK(s.aor_mismatches == 1);
    CHECK(s.aor_state == "off: mismatch at step 2");
  }
  for (int d = 0; d < 2; ++d) CHECK(reft_close(c[d]) == REFT_OK);
}

TEST_CASE("C ABI: staged device memory, its reason, no_staging and streams") {
  ServerFixture f;
  reft_options o;
  reft_options_init(&o);
  o.socket_path = f.socket.c_str();
  o.job = "c-staged";
  reft_client* c = nullptr;
  REQUIRE(reft_connect(&o, &c) == REFT_OK);
  auto dev = reft::EmulatedBuffer::Create(1 << 16, /*exportable=*/false);
  REQUIRE(dev.ok());
  reft_buffer_options bo;
  reft_buffer_options_init(&bo);
  bo.memory = REFT_MEMORY_EMULATED;
  bo.no_staging = 1;
  CHECK(reft_register(c, "strict", (*dev)->data(), (*dev)->size(), &bo) == REFT_UNSUPPORTED);
  bo.no_staging = 0;
  REQUIRE(reft_register(c, "w", (*dev)->data(), (*dev)->size(), &bo) == REFT_OK);
  char why[256];
  REQUIRE(reft_staged_reason(c, "w", why, sizeof(why)) == REFT_OK);
  CHECK(std::string(why).find("not exportable") != std::string::npos);
  char tiny[4];
  REQUIRE(reft_staged_reason(c, "w", tiny, sizeof(tiny)) == REFT_OK);
  CHECK(std::strlen(tiny) == 3);  // truncated, NUL-terminated
  CHECK(reft_staged_reason(c, "nope", why, sizeof(why)) == REFT_NOT_FOUND);
  CHECK(reft_set_stream(c, REFT_MEMORY_HOST, 0, nullptr) == REFT_INVALID_ARGUMENT);
  CHECK(reft_set_stream(c, REFT_MEMORY_EMULATED, 0, nullptr) == REFT_OK);
  std::memset((*dev)->data(), 0x5a, (*dev)->size());
  REQUIRE(reft_snapshot(c, 1) == REFT_OK);
  REQUIRE(reft_fence(c) == REFT_OK);
  std::memset((*dev)->data(), 0, (*dev)->size());
  int committed = 0;
  REQUIRE(reft_wait_committed(c, 1, 10000, &committed) == REFT_OK);
  int64_t step = -1;
  REQUIRE(reft_restore(c, &step) == REFT_OK);
  CHECK(step == 1);
  const auto* p = static_cast<const uint8_t*>((*dev)->data());
  CHECK(std::all_of(p, p + (*dev)->size(), [](uint8_t v) { return v == 0x5a; }));
  CHECK(reft_close(c) == REFT_OK);
}

namespace {
// The planner seam for the C ABI test: a fixed document for any job (the owner is checked
// before it is asked).
class FixedPlans final : public reft::local::PlanSource {
 public:
  reft::Result<std::string> PlanJson(const std::string& job) override {
    return "{\"job\": \"" + job + "\"}";
  }
};
}  // namespace

TEST_CASE("C ABI: a plan query and a rank joined twice") {
  FixedPlans plans;
  ServerFixture f({}, &plans);
  reft_options o;
  reft_options_init(&o);
  CHECK(o.connect_timeout_ms == 0);  // the default, 10 s
  o.socket_path = f.socket.c_str();
  o.job = "c-plan";
  reft_client* c = nullptr;
  REQUIRE(reft_connect(&o, &c) == REFT_OK);  // claims the job for this uid

  char* json = nullptr;
  REQUIRE(reft_query_plan(f.socket.c_str(), "c-plan", 0, &json) == REFT_OK);
  REQUIRE(json != nullptr);
  CHECK(std::string(json) == "{\"job\": \"c-plan\"}");
  reft_free(json);
  reft_free(nullptr);
  json = reinterpret_cast<char*>(1);
  CHECK(reft_query_plan(f.socket.c_str(), "no-such-job", 5000, &json) == REFT_NOT_FOUND);
  CHECK(json == nullptr);
  CHECK(reft_query_plan(f.socket.c_str(), "c-plan", 0, nullptr) == REFT_INVALID_ARGUMENT);
  CHECK(reft_query_plan((f.socket + ".gone").c_str(), "c-plan", 0, &json) == REFT_UNAVAILABLE);

  // The same rank again while the first is joined: refused at once (< 0), or after retrying.
  reft_client* again = nullptr;
  o.connect_timeout_ms = -1;
  CHECK(reft_connect(&o, &again) == REFT_ALREADY_EXISTS);
  o.connect_timeout_ms = 300;
  const auto start = std::chrono::steady_clock::now();
  CHECK(reft_connect(&o, &again) == REFT_ALREADY_EXISTS);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
  CHECK(std::string(reft_last_error()).find("connect_timeout") != std::string::npos);
  CHECK(again == nullptr);
  // A caller compiled against version 1 of reft_options (no connect_timeout_ms) connects too.
  CHECK(reft_close(c) == REFT_OK);
  o.struct_size = offsetof(reft_options, connect_timeout_ms);
  REQUIRE(reft_connect(&o, &again) == REFT_OK);
  CHECK(reft_close(again) == REFT_OK);
}
