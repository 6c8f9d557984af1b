// Crash consistency: a child process runs the store's write/seal/commit loop and is killed
// with SIGKILL at random points; the parent re-opens the directory each time and checks that
// the newest committed snapshot is intact and that nothing half-done survives.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "reft/store/snapshot_store.h"
#include "store_test_util.h"
#include "test_support.h"


using namespace reft::store;
using reft::Status;
namespace stt = reft::store::testing;

namespace {

// Large regions: most kills land while the slot is being written. Tiny regions: the loop is
// dominated by header transitions (BeginWrite, Seal, Commit), so kills land inside those.
const std::vector<RegionSpec> kLarge = {{"params", 3u << 20}, {"optim", 1000003}, {"rng", 9}};
const std::vector<RegionSpec> kTiny = {{"params", 5000}, {"rng", 9}};
const RankKey kRank{"crash-job", 1, 0, 2};

/// The child: adopt, then write/seal/commit steps forever, reporting each commit on `fd`.
[[noreturn]] void ChildLoop(const StoreOptions& o, const std::vector<RegionSpec>& layout, int fd,
                            uint64_t seed) {
  auto st = SnapshotStore::Open(o);
  if (!st.ok()) _exit(10);
  SnapshotStore& store = **st;
  if (!store.ConfigureRank(kRank, layout).ok()) _exit(11);
  int64_t step = store.NewestCommitted(kRank).value_or(-1) + 1;
  std::mt19937_64 rng(seed);
  for (;; ++step) {
    auto w = store.BeginWrite(kRank, step);
    if (!w.ok()) {
      std::fprintf(stderr, "child: %s\n", w.status().ToString().c_str());
      _exit(12);
    }
    stt::FillPattern(**w, step);
    w = Status::Internal("released");
    if (!store.Seal(kRank, step).ok()) _exit(13);
    // Sometimes leave a complete step uncommitted for a while (two-phase commit).
    if (rng() % 4 == 0) continue;
    if (!store.Commit(kRank, step).ok()) _exit(14);
    if (::write(fd, &step, sizeof step) != sizeof step) _exit(15);
  }
}

}  // namespace

TEST_CASE("store: SIGKILL at random points keeps the newest committed snapshot", "[store][crash]") {
  const bool large = GENERATE(true, false);
  const auto& layout = large ? kLarge : kTiny;
  INFO((large ? "large" : "tiny") << " regions");
  stt::ShmTestDir dir;
  auto o = stt::TestOptions(dir.shm_dir());
  o.checksum_threads = 2;
  const uint64_t seed = reft::testing::TestSeed(20261122);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  int64_t last_reported = -1;
  size_t partial = 0, complete_kept = 0;
  constexpr int kRounds = 30;
  for (int round = 0; round < kRounds; ++round) {
    int pipefd[2];
    REQUIRE(::pipe(pipefd) == 0);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(pipefd[0]);
      ChildLoop(o, layout, pipefd[1], seed + round);
    }
    ::close(pipefd[1]);
    // Let it adopt and run a few steps, then kill it somewhere inside the loop.
    std::this_thread::sleep_for(std::chrono::microseconds(20000 + rng() % 60000));
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    INFO("round " << round << " child status " << status);
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
    int64_t s = 0;
    while (::read(pipefd[0], &s, sizeof s) == sizeof s) last_reported = std::max(last_reported, s);
    ::close(pipefd[0]);

    AdoptionReport rep;
    auto st = SnapshotStore::Open(o, &rep);
    REQUIRE(st.ok());
    std::string q;
    for (const auto& x : rep.quarantined) q += x + "\n";
    INFO("quarantined: " << q);
    CHECK(rep.quarantined.empty());
    partial += rep.discarded_partial.size();
    auto newest = (*st)->NewestCommitted(kRank);
    INFO("last reported commit " << last_reported);
    if (last_reported >= 0) {
      REQUIRE(newest.has_value());
      // Nothing reported committed is lost; at most the one being committed is newer.
      CHECK(*newest >= last_reported);
      CHECK(*newest <= last_reported + 20);
      last_reported = *newest;
      auto slot = (*st)->Get(kRank, *newest);
      REQUIRE(slot.ok());
      CHECK(stt::CheckPattern(**slot, *newest));
      CHECK((*st)->Verify(kRank, *newest)->bad.empty());
    }
    for (const auto& info : (*st)->List()) {
      CHECK(info.state != SlotState::kWriting);  // partial slots were discarded
      if (info.state == SlotState::kComplete) {
        ++complete_kept;
        CHECK(stt::CheckPattern(**(*st)->Get(kRank, info.step), info.step));
      }
      if (info.state == SlotState::kCommitted) CHECK(info.step == *newest);
    }
    CHECK((*st)->Usage().slots <= o.slots_per_rank);
  }
  INFO("partial " << partial << " complete kept " << complete_kept);
  CHECK(last_reported >= 3);  // the loop made progress
  if (large) CHECK(partial >= 1);  // some kills landed mid-write
}
