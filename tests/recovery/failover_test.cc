// Source failover during REFT-load: a peer that hangs mid-stream (SIGSTOP of a real process),
// and bytes corrupted in a slot after sealing.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>

#include "recovery_fixture.h"
#include "reft/recovery/reft_load.h"

extern char** environ;

using namespace reft;
using namespace reft::recovery;
using namespace reft::recovery::test;
using namespace std::chrono_literals;

namespace {

// reft_peer_testd serving the segments already in `dir` (a node in its own process, so the test
// can SIGSTOP it).
struct Child {
  Child(const std::string& node_id, const std::string& dir, const std::string& seed) {
    int out[2];
    REQUIRE(pipe(out) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<const char*> argv = {REFT_PEER_TESTD, node_id.c_str(), dir.c_str(), seed.c_str(),
                                     nullptr};
    REQUIRE(posix_spawn(&pid, REFT_PEER_TESTD, &fa, nullptr, const_cast<char**>(argv.data()),
                        environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    out_ = fdopen(out[0], "r");
    char line[256] = {0};
    REQUIRE(fgets(line, sizeof line, out_) != nullptr);
    REQUIRE(std::string(line).rfind("ADDR ", 0) == 0);
  }
  ~Child() {
    kill(pid, SIGCONT);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    fclose(out_);
  }
  pid_t pid = 0;
  FILE* out_ = nullptr;
};

// Slots of `ranks` written, sealed and committed into a store in `dir` that is closed again,
// so a node started on `dir` adopts them.
void PrewriteSlots(const std::string& dir, const JobSpec& spec,
                   const std::vector<RankCoord>& ranks, int64_t step) {
  store::StoreOptions so;
  so.shm_dir = dir;
  so.prefault = false;
  so.chunk_size = 64 << 10;
  auto s = store::SnapshotStore::Open(so);
  REQUIRE(s.ok());
  for (const auto& rc : ranks) WriteContractSlot(s->get(), spec, rc, step, /*commit=*/true);
}


}  // namespace

TEST_CASE("a peer that hangs mid-stream is abandoned at the piece deadline or its death, whichever "
          "comes first",
          "[recovery]") {
  for (const std::string scheme : {"arc1", "none"}) {
    SECTION(scheme) {
      const int dp = scheme == "arc1" ? 3 : 2;
      // ~3.5 MiB shards, read at 4 MiB/s per peer: the stream from the hung peer is in flight.
      const JobSpec spec = MakeJob(dp, 1, 1, scheme, /*with_unique=*/scheme == "arc1", 20);
      reft::testing::TempDir da("reft-recovery"), db("reft-recovery"), dc("reft-recovery");
      TestNode a("n0", da.path(), {}, 0, 64 << 10, /*bandwidth=*/4 << 20);
      WriteContractSlot(a.store.get(), spec, {0, 0, 0}, 7, true);
      PrewriteSlots(dc.path(), spec, {{0, 0, 1}}, 7);
      Child hung("hung", dc.path(), a.address);
      std::unique_ptr<TestNode> b;
      if (dp == 3) {
        b = std::make_unique<TestNode>("n1", db.path(), std::vector<std::string>{a.address});
        WriteContractSlot(b->store.get(), spec, {0, 0, 2}, 7, true);
      }
      REQUIRE(peer::test::Eventually(
          [&] { return a.peer->membership().LiveMembers().size() == static_cast<size_t>(dp - 1); },
          3s));

      RecoveryOptions o = TestOptions();
      o.piece_bytes = 256 << 10;
      o.piece_timeout = 1000ms;
      ReftLoad load(a.store.get(), a.peer.get(), RecoveryAgreement::Of(a.peer->coordinator()), o);
      std::atomic<bool> stopped{false};
      RestoreStats stats;
      auto t0 = std::chrono::steady_clock::now();
      auto st = load.Restore(spec.Meta({0, 0, 0}), &stats, [&](const Progress& p) {
        if (p.message.find("shard dp1") != std::string::npos && !stopped.exchange(true)) {
          kill(hung.pid, SIGSTOP);  // after its first verified piece: mid-transfer
        }
      });
      auto took = std::chrono::steady_clock::now() - t0;
      INFO(st.status().ToString()
           << " after " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
           << " ms; " << stats.detail);
      CHECK(stopped);
      CHECK(took < 6s);  // never hangs: one piece deadline, then the other source
      if (scheme == "arc1") {
        REQUIRE(st.ok());
        CheckRestored(*st, spec, {0, 0, 0}, 7);
        CHECK(stats.retries >= 1);
        CHECK_THAT(st->detail, Catch::Contains("rep/arc+1 of pp0-tp0-dp0 on this node"));
        CHECK_THAT(st->detail, Catch::Contains("node 'hung'"));  // it did serve some pieces
      } else {
        // No other copy of dp1's shard: a clear failure naming the shard and why its fetch
        // ended — the piece deadline, or the membership declaring the stopped peer dead first
        // (its fetches are then cancelled).
        REQUIRE_FALSE(st.ok());
        CHECK(st.status().code() == StatusCode::kLost);
        CHECK_THAT(st.status().message(), Catch::Contains("shard dp1"));
        CHECK_THAT(st.status().message(), Catch::Contains("timeout") ||
                                              Catch::Contains("the peer left the cluster"));
      }
    }
  }
}

TEST_CASE("a shard corrupted on one node is taken from its ARC copy or rebuilt from parity",
          "[recovery]") {
  for (const std::string scheme : {"arc1", "aec", "rs1"}) {
    SECTION(scheme) {
      Cluster c(3);
      c.Converge();
      const JobSpec spec = MakeJob(3, 1, 1, scheme);
      auto place = RotatedPlacement(spec, 3);
      c.WriteStep(spec, place, 4);
      // dp1's own shard is damaged on node 1 after sealing (memory corruption, not in transit).
      FlipByteInSegment(c.node(1).store.get(), spec.Key({0, 0, 1}), 4, "rep/shard", 70001);
      for (size_t n : {size_t{0}, size_t{1}}) {  // read remotely, and locally on node 1
        const RankCoord rc{0, 0, static_cast<int>(n)};
        ReftLoad load(c.node(n).store.get(), c.node(n).peer.get(),
                      RecoveryAgreement::Of(c.node(n).peer->coordinator()), TestOptions());
        RestoreStats stats;
        auto st = load.Restore(spec.Meta(rc), &stats);
        INFO("restoring dp" << n << ": " << st.status().ToString() << "; " << stats.detail);
        REQUIRE(st.ok());
        CheckRestored(*st, spec, rc, 4);
        std::string warnings;
        for (const auto& w : stats.warnings) warnings += w + "\n";
        INFO(warnings);
        if (scheme == "arc1") {
          CHECK(stats.retries >= 1);
          CHECK_THAT(st->detail, Catch::Contains("dp1 rep/arc+1 of pp0-tp0-dp0"));
        } else {
          CHECK(stats.bytes_rebuilt > 0);
          CHECK_THAT(st->detail, Catch::Contains("dp1 rebuilt from"));
          CHECK_THAT(warnings, Catch::Contains("dp1"));
          CHECK_THAT(warnings, Catch::Contains("checksum"));
        }
      }
    }
  }
  SECTION("a unique buffer corrupted in its own slot comes from the ring predecessor's copy") {
    Cluster c(3);
    c.Converge();
    const JobSpec spec = MakeJob(3, 1, 1, "aec");
    auto place = RotatedPlacement(spec, 3);
    c.WriteStep(spec, place, 4);
    FlipByteInSegment(c.node(2).store.get(), spec.Key({0, 0, 2}), 4, "unique/optim.shard", 12);
    ReftLoad load(c.node(2).store.get(), c.node(2).peer.get(),
                  RecoveryAgreement::Of(c.node(2).peer->coordinator()), TestOptions());
    RestoreStats stats;
    auto st = load.Restore(spec.Meta({0, 0, 2}), &stats);
    REQUIRE(st.ok());
    CheckRestored(*st, spec, {0, 0, 2}, 4);
    CHECK_THAT(st->detail, Catch::Contains("optim.shard peer/optim.shard of pp0-tp0-dp1"));
  }
}
