// A persisted step belongs to the owner it was written for (docs/security.md "Jobs belong to
// their owner"): every node's manifest records the job's owner, and a restore from the tier
// hands a step only to that owner's trainers (or any, for a manifest without an owner). Real
// stores, real PeerNodes on loopback, one persist directory shared by the nodes; the registry
// of owners is a fake (the one reftd has is etcd's or the node's journal).
#include <catch2/catch.hpp>
#include <map>

#include "reft/local/job_ownership.h"
#include "reft/mutex.h"
#include "tier_fixture.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::persister;
using namespace reft::recovery::test;

namespace {

class FakeOwners final : public local::JobOwnership {
 public:
  void Set(const std::string& job, std::optional<local::JobOwner> owner) {
    MutexLock lock(mu_);
    if (owner) {
      owners_[job] = *owner;
    } else {
      owners_.erase(job);
    }
  }
  void Fail(Status why) {
    MutexLock lock(mu_);
    fail_ = std::move(why);
  }

  Status Admit(const std::string&, const PeerCredentials&, const local::JobOwner&) override {
    return Status::OK();
  }
  Result<std::optional<local::JobOwner>> Owner(const std::string& job) override {
    MutexLock lock(mu_);
    if (!fail_.ok()) return fail_;
    auto it = owners_.find(job);
    if (it == owners_.end()) return std::optional<local::JobOwner>();
    return std::optional<local::JobOwner>(it->second);
  }
  Result<std::map<std::string, local::JobOwner>> All() override {
    MutexLock lock(mu_);
    return owners_;
  }
  void NoteDenied(const std::string&) override {}

 private:
  Mutex mu_;
  std::map<std::string, local::JobOwner> owners_ REFT_GUARDED_BY(mu_);
  Status fail_ REFT_GUARDED_BY(mu_);
};

local::JobOwner Owner(uint32_t uid, std::optional<uint32_t> gid = std::nullopt,
                      std::string group = "") {
  local::JobOwner o;
  o.uid = uid;
  o.gid = gid;
  o.group = std::move(group);
  return o;
}

const char* kRefusal =
    "step 5 of job 'job' in the persistent tier was written for another owner; it is not "
    "restored (reftctl jobs release and the tier: docs/security.md)";

// Persists step 5 of `spec` on a two-node cluster whose persisters record the owners of
// `owners` (none when null), then loses every node's memory (a new cluster on `dir`).
void PersistStep5(const JobSpec& spec, const std::string& dir, FakeOwners* owners) {
  Cluster c(2);
  c.Converge();
  auto place = RotatedPlacement(spec, 2);
  TierNode t0(c.node(0), dir), t1(c.node(1), dir);
  if (owners != nullptr) {
    t0.persister->SetJobOwnership(owners);
    t1.persister->SetJobOwnership(owners);
  }
  c.WriteStep(spec, place, 5);
  auto rep = t0.persister->PersistJob(spec.job, std::nullopt);
  REQUIRE(rep.ok());
  INFO((rep->problems.empty() ? std::string() : rep->problems.front()));
  REQUIRE(rep->ok());
  REQUIRE(rep->step == 5);
  c.WriteStep(spec, place, 6);
}

std::vector<persist::Manifest> Manifests(TierNode& t, const std::string& job, int64_t step) {
  auto tier = t.tier.Get(true);
  REQUIRE(tier.ok());
  auto ms = (*tier)->ReadManifests(job, step);
  INFO(ms.status().ToString());
  REQUIRE(ms.ok());
  return *ms;
}

}  // namespace

TEST_CASE("every node's manifest records the job's owner, a tier restore refuses another owner "
          "and restores to the same one",
          "[recovery][persist][security]") {
  reft::testing::TempDir dir("reft-persist-owner");
  const JobSpec spec = MakeJob(2, 1, 1, "arc1");
  FakeOwners owners;
  owners.Set(spec.job, Owner(1000, 2000, "team"));
  PersistStep5(spec, dir.path(), &owners);

  Cluster c(2);
  c.Converge();
  TierNode t0(c.node(0), dir.path()), t1(c.node(1), dir.path());
  const auto manifests = Manifests(t0, spec.job, 5);
  REQUIRE(manifests.size() == 2);  // one per node, both with the owner
  for (const auto& m : manifests) {
    INFO(m.node_id);
    REQUIRE(m.owner.has_value());
    CHECK(m.owner->uid == 1000);
    CHECK(m.owner->gid == std::optional<uint32_t>(2000));
    CHECK(m.owner->group == "team");
  }

  // The name was released and claimed by another user (or by the same uid with another group):
  // nothing of the old owner's step is restored, nothing names it, no generation is started.
  FakeOwners now;
  t0.load.SetJobOwnership(&now);
  t1.load.SetJobOwnership(&now);
  for (const auto& other : {Owner(1001), Owner(1000), Owner(1000, 2001, "team")}) {
    INFO(other.Describe());
    now.Set(spec.job, other);
    RestoreStats stats;
    auto st = t1.load.Restore(spec.Meta({0, 0, 1}), &stats);
    REQUIRE_FALSE(st.ok());
    CHECK(st.status().code() == StatusCode::kPermissionDenied);
    CHECK(st.status().message() == kRefusal);
    CHECK(stats.bytes_persistent == 0);
    // A probe says the same (it would otherwise announce a step the restore then refuses).
    local::RestoreRequest probe;
    probe.probe = true;
    auto p = t0.load.Restore(spec.Meta({0, 0, 0}), &stats, nullptr, probe);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == StatusCode::kPermissionDenied);
    CHECK(c.node(0).peer->coordinator()->Generation(spec.job).generation == 0);
    CHECK(c.node(1).peer->coordinator()->Generation(spec.job).generation == 0);
  }
  // The tier's health is not blamed for a refusal.
  CHECK(t0.tier.Health().last_error.empty());

  // The owner it was written for gets it (and starts the fallback generation).
  now.Set(spec.job, Owner(1000, 2000, "team"));
  auto mine = t1.load.Restore(spec.Meta({0, 0, 1}));
  INFO(mine.status().ToString());
  REQUIRE(mine.ok());
  CheckRestoredFrom(*mine, spec, {0, 0, 1}, 5, "tier");
  CHECK(c.node(0).peer->coordinator()->Generation(spec.job).generation == 1);

  // A rank that follows that decision is checked too: released to uid 1001 in between, it is
  // refused; back with its owner, it restores the same step.
  now.Set(spec.job, Owner(1001));
  auto follow = t0.load.Restore(spec.Meta({0, 0, 0}));
  REQUIRE_FALSE(follow.ok());
  CHECK(follow.status().code() == StatusCode::kPermissionDenied);
  CHECK(follow.status().message() == kRefusal);
  now.Set(spec.job, Owner(1000, 2000, "team"));
  auto other = t0.load.Restore(spec.Meta({0, 0, 0}));
  INFO(other.status().ToString());
  REQUIRE(other.ok());
  CheckRestoredFrom(*other, spec, {0, 0, 0}, 5, "tier");

  // A job whose owner is unknown (no record at the moment) is not refused.
  now.Set(spec.job, std::nullopt);
  auto unknown = t1.load.Restore(spec.Meta({0, 0, 1}));
  INFO(unknown.status().ToString());
  REQUIRE(unknown.ok());
  CHECK(unknown->step == 5);
}

TEST_CASE("a step persisted without an owner (an older reftd) is restored to the job's owner",
          "[recovery][persist][security]") {
  reft::testing::TempDir dir("reft-persist-owner");
  const JobSpec spec = MakeJob(2, 1, 1, "arc1");
  PersistStep5(spec, dir.path(), nullptr);

  Cluster c(2);
  c.Converge();
  TierNode t0(c.node(0), dir.path()), t1(c.node(1), dir.path());
  for (const auto& m : Manifests(t0, spec.job, 5)) CHECK_FALSE(m.owner.has_value());
  FakeOwners now;
  now.Set(spec.job, Owner(1001));
  t0.load.SetJobOwnership(&now);
  t1.load.SetJobOwnership(&now);
  auto st = t1.load.Restore(spec.Meta({0, 0, 1}));
  INFO(st.status().ToString());
  REQUIRE(st.ok());
  CheckRestoredFrom(*st, spec, {0, 0, 1}, 5, "tier");
  auto other = t0.load.Restore(spec.Meta({0, 0, 0}));
  REQUIRE(other.ok());
  CheckRestoredFrom(*other, spec, {0, 0, 0}, 5, "tier");
}

TEST_CASE("a persist whose owner cannot be read fails on that node, writing nothing",
          "[recovery][persist][security]") {
  reft::testing::TempDir dir("reft-persist-owner");
  const JobSpec spec = MakeJob(2, 1, 1, "arc1");
  Cluster c(2);
  c.Converge();
  auto place = RotatedPlacement(spec, 2);
  TierNode t0(c.node(0), dir.path()), t1(c.node(1), dir.path());
  FakeOwners owners;
  owners.Fail(Status::Unavailable("etcd is unreachable"));
  t0.persister->SetJobOwnership(&owners);
  c.WriteStep(spec, place, 3);
  NodePersist n = t0.persister->PersistLocal(spec.job, 3);
  CHECK(n.status.code() == StatusCode::kUnavailable);
  CHECK_THAT(n.status.message(), Catch::Contains("reading the owner of job 'job'"));
  CHECK(n.ranks.empty());
  auto tier = t0.tier.Get(true);
  REQUIRE(tier.ok());
  auto steps = (*tier)->ListSteps(spec.job);
  REQUIRE(steps.ok());
  CHECK(steps->empty());
}
