// A trainer (libreft in a child process) SIGKILLed at many points of its snapshot loop: the
// restored step is always a committed one and its bytes are exactly that step's bytes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "reft/client.h"
#include "server_fixture.h"

using namespace reft;
using reft::testing::ServerFixture;

namespace {

constexpr size_t kSize = (3u << 20) + 17;

void Fill(std::vector<uint8_t>& v, int64_t step) {
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 7919);
  for (size_t i = 0; i + 8 <= v.size(); i += 8) {
    uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  for (size_t i = v.size() & ~size_t{7}; i < v.size(); ++i) v[i] = static_cast<uint8_t>(step);
}

ClientOptions Opts(const ServerFixture& f) {
  ClientOptions o;
  o.socket_path = f.socket;
  o.job = "killjob";
  return o;
}

/// Snapshots every step until killed; writes one byte to `started` once it is registered, so
/// the kill lands in the snapshot loop whatever the machine's load.
[[noreturn]] void TrainerLoop(const ServerFixture& f, int64_t first_step, int started) {
  auto c = Client::Connect(Opts(f));
  if (!c.ok()) ::_exit(1);
  std::vector<uint8_t> buf(kSize);
  if (!(*c)->Register("state", buf.data(), kSize).ok()) ::_exit(1);
  const char one = 1;
  if (::write(started, &one, 1) != 1) ::_exit(1);
  for (int64_t step = first_step;; ++step) {
    if (!(*c)->Fence().ok()) ::_exit(1);  // buffers may be modified again
    Fill(buf, step);
    if (!(*c)->Snapshot(step).ok()) ::_exit(1);
  }
}

}  // namespace

TEST_CASE("trainer SIGKILL at many points of a snapshot never loses the committed step") {
  ServerFixture f;
  uint64_t seed = reft::testing::TestSeed(99);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  int64_t next_first = 1;
  int64_t last_restored = 0;
  for (int round = 0; round < 12; ++round) {
    int started[2];
    REQUIRE(::pipe(started) == 0);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) TrainerLoop(f, next_first, started[1]);
    ::close(started[1]);
    char byte = 0;
    REQUIRE(::read(started[0], &byte, 1) == 1);
    ::close(started[0]);
    if (round == 0) {
      // At least one commit before the first kill, so the test checks a restored state.
      CHECK(reft::testing::Eventually([&] { return f.store->NewestCommitted({"killjob", 0, 0, 0}).has_value(); }));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    // Restart: restore what is committed, check it byte for byte.
    auto c = Client::Connect(Opts(f));
    REQUIRE(c.ok());
    std::vector<uint8_t> buf(kSize, 0);
    REQUIRE((*c)->Register("state", buf.data(), kSize).ok());
    auto step = (*c)->Restore();
    INFO(step.status().ToString());
    REQUIRE(step.ok());
    if (step->has_value()) {
      int64_t s = **step;
      CHECK(s >= last_restored);
      std::vector<uint8_t> want(kSize);
      Fill(want, s);
      CHECK(buf == want);
      last_restored = s;
      next_first = s + 1000;  // new steps are always newer than anything begun before
    } else {
      next_first += 1000;
    }
    REQUIRE((*c)->Close().ok());
  }
  // No writing slot survives its dead writer.
  for (const auto& s : f.store->List("killjob")) CHECK(s.state != store::SlotState::kWriting);
  CHECK(last_restored > 0);
}
