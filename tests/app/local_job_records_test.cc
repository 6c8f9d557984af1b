// LocalJobRecords: the job records of a reftd without etcd (one node, gossip) — listing, an
// operator's release and its refusals, and the sweeper that forgets gone jobs' owners.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "local_job_records.h"
#include "reft/local/job_owners.h"
#include "reft/recovery/tier_access.h"
#include "reft/store/snapshot_store.h"
#include "test_support.h"

namespace reft::app {
namespace {

using namespace std::chrono_literals;

constexpr const char* kNode = "node-a";

local::JobOwner Claim(uint32_t uid, int64_t at_ms = 1000) {
  local::JobOwner o;
  o.uid = uid;
  o.claimed_at_ms = at_ms;
  o.claimed_on = kNode;
  return o;
}

PeerCredentials Caller(uint32_t uid) {
  PeerCredentials c;
  c.uid = uid;
  c.gid = uid;
  return c;
}

// A node's sources: an in-memory owner record, a store on a temp dir, sessions the test sets,
// and a persistent tier on a directory of its own.
struct Fixture {
  explicit Fixture(std::chrono::milliseconds forget_after = 10min, bool tier_dir_exists = true)
      : dir("reft-job-records") {
    owners = local::JobOwners::Open("").value();
    store::StoreOptions so;
    so.shm_dir = dir.path() + "/shm";
    so.chunk_size = 64 << 10;
    so.slots_per_rank = 2;
    store = store::SnapshotStore::Open(so).value();
    persist::PersistOptions po;
    po.dir = dir.path() + "/tier";
    po.node_id = kNode;
    if (tier_dir_exists) REQUIRE(::mkdir(po.dir.c_str(), 0750) == 0);
    tier = std::make_unique<recovery::TierAccess>(po, 0ms);
    LocalJobRecordsOptions o;
    o.forget_after = forget_after;
    o.node_id = kNode;
    records = std::make_unique<LocalJobRecords>(
        owners.get(), store.get(),
        [this] {
          std::lock_guard<std::mutex> lock(mu);
          ++session_reads;
          return session_reads >= sessions_from_read ? sessions
                                                     : std::vector<local::SessionInfo>();
        },
        tier.get(), o);
  }

  void Join(const std::string& job, int dp = 0, uid_t uid = 1000) {
    local::SessionInfo s;
    s.id = sessions.size() + 1;
    s.uid = uid;
    s.joined = true;
    s.rank = store::RankKey(job, RankCoord{0, 0, dp});
    std::lock_guard<std::mutex> lock(mu);
    sessions.push_back(s);
  }
  void LeaveAll() {
    std::lock_guard<std::mutex> lock(mu);
    sessions.clear();
  }
  // A committed slot of `step` for rank dp0 of `job`.
  void Commit(const std::string& job, int64_t step) {
    const store::RankKey rank(job, RankCoord{0, 0, 0});
    REQUIRE(store->ConfigureRank(rank, {{"w", 4096}}).ok());
    REQUIRE(store->BeginWrite(rank, step).ok());
    REQUIRE(store->Seal(rank, step).ok());
    REQUIRE(store->Commit(rank, step).ok());
  }
  // A step directory of `job` in the tier (what a persist leaves, complete or not).
  void Persisted(const std::string& job, int64_t step) {
    const std::string job_dir = dir.path() + "/tier/" + job;
    ::mkdir(job_dir.c_str(), 0750);
    char name[40];
    std::snprintf(name, sizeof name, "/step-%012lld", static_cast<long long>(step));
    REQUIRE(::mkdir((job_dir + name).c_str(), 0750) == 0);
  }
  std::optional<local::JobOwner> Owner(const std::string& job) { return owners->Owner(job).value(); }
  peer::JobRecord Record(const std::string& job) {
    auto list = records->List();
    REQUIRE(list.ok());
    for (const auto& r : *list) {
      if (r.job == job) return r;
    }
    FAIL("job " << job << " is not listed");
    return {};
  }

  testing::TempDir dir;
  std::unique_ptr<local::JobOwners> owners;
  std::unique_ptr<store::SnapshotStore> store;
  std::unique_ptr<recovery::TierAccess> tier;
  std::mutex mu;
  std::vector<local::SessionInfo> sessions;
  int session_reads = 0;
  int sessions_from_read = 0;  ///< sessions are seen from this read of them on
  std::unique_ptr<LocalJobRecords> records;
};

}  // namespace

TEST_CASE("local job records: list shows each job's owner, state, nodes and steps", "[app]") {
  Fixture f;
  const int64_t before = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  REQUIRE(f.owners->Admit("run", Caller(1000), Claim(1000, 5)).ok());
  REQUIRE(f.owners->Admit("idle", Caller(1001), Claim(1001, 6)).ok());
  REQUIRE(f.owners->Admit("kept", Caller(1002), Claim(1002, 7)).ok());
  REQUIRE(f.owners->Admit("left", Caller(1003), Claim(1003, 8)).ok());
  f.Join("run", 0);
  f.Join("run", 1);
  f.Commit("idle", 3);
  f.Persisted("kept", 7);
  f.Commit("orphan", 2);  // slots without an owner (adopted from an older reftd)

  auto list = f.records->List();
  REQUIRE(list.ok());
  std::vector<std::string> names;
  for (const auto& r : *list) names.push_back(r.job);
  CHECK(names == std::vector<std::string>{"idle", "kept", "left", "orphan", "run"});

  auto run = f.Record("run");
  CHECK(run.state == "running");
  CHECK(run.trainers == 2);
  CHECK(run.nodes == std::vector<std::string>{kNode});
  REQUIRE(run.owner);
  CHECK(run.owner->uid == 1000);
  CHECK(run.owner->claimed_on == kNode);
  CHECK(run.last_activity_ms >= before);  // a trainer is joined now
  CHECK(run.forget_in_ms == -1);

  auto idle = f.Record("idle");
  CHECK(idle.state == "idle");
  CHECK(idle.trainers == 0);
  CHECK(idle.nodes == std::vector<std::string>{kNode});
  CHECK(idle.committed_step == std::optional<int64_t>(3));
  CHECK(idle.last_activity_ms >= before - 1000);  // the committed slot's write

  auto kept = f.Record("kept");
  CHECK(kept.state == "persisted");
  CHECK(kept.nodes.empty());
  CHECK(kept.persisted_step == std::optional<int64_t>(7));
  CHECK(kept.forget_in_ms == -1);

  auto left = f.Record("left");
  CHECK(left.state == "gone");
  CHECK(left.last_activity_ms == 8);  // the claim is all that is known
  CHECK(left.forget_in_ms == 600000);  // the sweeper has not seen it gone yet

  auto orphan = f.Record("orphan");
  CHECK_FALSE(orphan.owner);
  CHECK(orphan.state == "idle");
}

TEST_CASE("local job records: release refuses a job in use unless forced", "[app]") {
  Fixture f;
  REQUIRE(f.owners->Admit("j", Caller(1000), Claim(1000)).ok());

  SECTION("a connected trainer") {
    f.Join("j");
    Status st = f.records->Release("j", false);
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Catch::Contains("1 trainer(s) connected (on node-a)") &&
                                 Catch::Contains("--force"));
    CHECK(f.Owner("j"));
    REQUIRE(f.records->Release("j", true).ok());
    CHECK_FALSE(f.Owner("j"));
    // The next hello claims the name anew, whoever makes it.
    CHECK(f.owners->Admit("j", Caller(2000), Claim(2000)).ok());
  }
  SECTION("a step in the persistent tier") {
    f.Persisted("j", 4);
    Status st = f.records->Release("j", false);
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Catch::Contains("persistent tier holds step 4"));
    REQUIRE(f.records->Release("j", true).ok());
    CHECK_FALSE(f.Owner("j"));
  }
  SECTION("snapshots on this node") {
    f.Commit("j", 1);
    Status st = f.records->Release("j", false);
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Catch::Contains("snapshots drop"));
    REQUIRE(f.store->Drop("j", 1).ok());
    REQUIRE(f.records->Release("j", false).ok());
    CHECK_FALSE(f.Owner("j"));
  }
  SECTION("a gone job, then an unknown one") {
    REQUIRE(f.records->Release("j", false).ok());
    CHECK_FALSE(f.Owner("j"));
    CHECK(f.records->Release("j", false).code() == StatusCode::kNotFound);
    CHECK(f.records->Release("never", true).code() == StatusCode::kNotFound);
  }
}

TEST_CASE("local job records: a tier that cannot be read keeps every owner", "[app]") {
  Fixture f(50ms, /*tier_dir_exists=*/false);
  REQUIRE(f.owners->Admit("j", Caller(1000), Claim(1000)).ok());
  REQUIRE(f.records->SweepOnce().ok());
  std::this_thread::sleep_for(80ms);
  auto swept = f.records->SweepOnce();
  REQUIRE(swept.ok());
  CHECK(swept->empty());
  CHECK(f.Owner("j"));
  Status st = f.records->Release("j", false);
  CHECK(st.code() == StatusCode::kUnavailable);
  CHECK_THAT(st.message(), Catch::Contains("cannot tell whether the persistent tier"));
  CHECK(f.records->Release("j", true).ok());
}

TEST_CASE("local job records: the sweep forgets jobs gone for forget_after, and only those",
          "[app]") {
  Fixture f(100ms);
  for (int i = 0; i < 200; ++i) {
    REQUIRE(f.owners->Admit("name-" + std::to_string(i), Caller(1000), Claim(1000)).ok());
  }
  REQUIRE(f.owners->Admit("running", Caller(1000), Claim(1000)).ok());
  REQUIRE(f.owners->Admit("idle", Caller(1000), Claim(1000)).ok());
  REQUIRE(f.owners->Admit("persisted", Caller(1000), Claim(1000)).ok());
  f.Join("running");
  f.Commit("idle", 1);
  f.Persisted("persisted", 1);

  auto first = f.records->SweepOnce();  // sees them gone: the count starts
  REQUIRE(first.ok());
  CHECK(first->empty());
  auto gone = f.Record("name-0");
  CHECK(gone.forget_in_ms <= 100);
  std::this_thread::sleep_for(120ms);
  auto second = f.records->SweepOnce();
  REQUIRE(second.ok());
  CHECK(second->size() == 200);
  CHECK(f.owners->size() == 3);
  CHECK(f.Owner("running"));
  CHECK(f.Owner("idle"));
  CHECK(f.Owner("persisted"));
  // A forgotten name is free.
  CHECK(f.owners->Admit("name-0", Caller(2000), Claim(2000)).ok());
  CHECK(f.Owner("name-0")->uid == 2000);
}

TEST_CASE("local job records: a job used again restarts its count", "[app]") {
  Fixture f(100ms);
  REQUIRE(f.owners->Admit("j", Caller(1000), Claim(1000)).ok());
  REQUIRE(f.records->SweepOnce().ok());
  std::this_thread::sleep_for(60ms);
  f.Join("j");  // a trainer comes back...
  REQUIRE(f.records->SweepOnce().ok());
  f.LeaveAll();  // ...and leaves
  std::this_thread::sleep_for(60ms);
  auto swept = f.records->SweepOnce();  // 120 ms since first seen gone, 60 since last used
  REQUIRE(swept.ok());
  CHECK(swept->empty());
  std::this_thread::sleep_for(120ms);
  swept = f.records->SweepOnce();
  REQUIRE(swept.ok());
  CHECK(*swept == std::vector<std::string>{"j"});
}

TEST_CASE("local job records: a trainer that joins as its job is forgotten keeps the owner",
          "[app]") {
  Fixture f(50ms);
  const local::JobOwner owner = Claim(1000, 42);
  REQUIRE(f.owners->Admit("j", Caller(1000), owner).ok());
  REQUIRE(f.records->SweepOnce().ok());
  std::this_thread::sleep_for(70ms);
  // The trainer's session shows up only after the sweep decided (its third read of the
  // sessions in this sweep: after ReadAll and the re-check, i.e. after the job was forgotten).
  f.Join("j");
  {
    std::lock_guard<std::mutex> lock(f.mu);
    f.sessions_from_read = f.session_reads + 3;
  }
  auto swept = f.records->SweepOnce();
  REQUIRE(swept.ok());
  CHECK(swept->empty());  // forgotten, then given back
  auto now = f.Owner("j");
  REQUIRE(now);
  CHECK(now->uid == 1000);
  CHECK(now->claimed_at_ms == 42);
}

TEST_CASE("local job records: the sweeper thread bounds the owner record", "[app]") {
  Fixture f(50ms);
  REQUIRE(f.records->Start().ok());
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(f.owners->Admit("claim-" + std::to_string(i), Caller(1000), Claim(1000)).ok());
  }
  CHECK(testing::Eventually([&] { return f.owners->size() == 0; }, 10s));
  f.records->Stop();
  f.records->Stop();  // idempotent
}

}  // namespace reft::app
