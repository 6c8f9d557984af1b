// Jobs belong to their owner across the cluster (docs/security.md "Jobs belong to their
// owner"), tried as an attacker on another node would: real etcd, real stores, real gRPC
// between in-process nodes. Node n0 runs the owner's job; n1 is where the stranger is.

#include <catch2/catch.hpp>

#include "etcd_fixture.h"
#include "peer_fixture.h"
#include "etcd_job_access.h"
#include "reft/coord/etcd_job_coordinator.h"
#include "reft/coord/etcd_job_owners.h"
#include "reft/coord/etcd_job_records.h"
#include "keys.h"
#include "reft/coord/records.h"

using namespace reft;
using namespace reft::peer;
using namespace reft::coord;
using namespace reft::peer::test;
using namespace reft::testing;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kOwnerUid = 1000;
constexpr uint32_t kStrangerUid = 2000;
const JobLayout kTwo{/*dp=*/2, /*tp=*/1, /*pp=*/1, /*zero=*/0};
const std::string kJob = "owned";

local::Joiner As(uint32_t uid) {
  local::Joiner j;
  j.caller.uid = uid;
  j.caller.gid = uid;
  j.claim.uid = uid;
  j.claim.claimed_on = "test";
  return j;
}

struct TwoNodes {
  explicit TwoNodes(const EtcdCluster& etcd) {
    for (int i = 0; i < 2; ++i) {
      dirs.push_back(std::make_unique<TempDir>("reft-owner"));
      nodes.push_back(std::make_unique<TestNode>("n" + std::to_string(i), dirs[i]->path(),
                                                 std::vector<std::string>{}, 0, 64 << 10, 0,
                                                 nullptr, EtcdControlPlane(etcd)));
    }
  }
  JobCoordinator* co(int n) { return nodes[n]->peer->coordinator(); }
  local::JobOwnership* owners(int n) { return nodes[n]->peer->owners(); }
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::unique_ptr<TestNode>> nodes;
};

std::unique_ptr<coord::EtcdClient> Client(const EtcdCluster& etcd) {
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto c = coord::EtcdClient::Create(eo);
  REQUIRE(c.ok());
  return std::move(*c);
}

// A refusal to a stranger names the job and the caller, nothing else of the job.
void NamesNothing(const Status& s) {
  INFO(s.ToString());
  for (const char* leak : {"n0", "dp=", "layout", "uid 1000", "params", "pp0"}) {
    CHECK_THAT(s.message(), !Catch::Contains(leak));
  }
}

}  // namespace

TEST_CASE("cluster ownership: the owner is recorded once in etcd with the layout, a stranger on "
          "another node can neither join nor learn anything", "[coord][security]") {
  EtcdCluster etcd(1);
  TwoNodes c(etcd);
  const store::RankKey r0{kJob, 0, 0, 0}, r1{kJob, 0, 0, 1};
  REQUIRE(c.co(0)->Join(r0, kTwo, As(kOwnerUid)).ok());

  auto client = Client(etcd);
  auto owner = client->Get(coord::keys::Owner(kJob));
  REQUIRE(owner.ok());
  REQUIRE(owner->has_value());
  auto decoded = coord::DecodeOwner((*owner)->key, (*owner)->value);
  REQUIRE(decoded.ok());
  CHECK(decoded->uid == kOwnerUid);
  CHECK(decoded->claimed_on == "test");
  // The layout was written in the same transaction as the owner.
  auto layout = client->Get(coord::keys::Layout(kJob));
  REQUIRE(layout.ok());
  REQUIRE(layout->has_value());
  CHECK((*layout)->mod_revision == (*owner)->mod_revision);

  // Node 1 never saw the job: its hello check (Admit) and its join both refuse the stranger,
  // whatever rank or layout it claims, naming nothing.
  PeerCredentials stranger;
  stranger.uid = kStrangerUid;
  Status admit = c.owners(1)->Admit(kJob, stranger, As(kStrangerUid).claim);
  CHECK(admit.code() == StatusCode::kPermissionDenied);
  NamesNothing(admit);
  for (const auto& [rank, layout_tried] :
       std::vector<std::pair<store::RankKey, JobLayout>>{{r1, kTwo}, {r0, kTwo},
                                                         {{kJob, 0, 0, 0}, {1, 1, 1, 0}}}) {
    Status s = c.co(1)->Join(rank, layout_tried, As(kStrangerUid));
    CHECK(s.code() == StatusCode::kPermissionDenied);
    NamesNothing(s);
  }
  CHECK(c.owners(1)->Check(kJob, stranger).code() == StatusCode::kPermissionDenied);
  // The owner record did not change.
  auto after = client->Get(coord::keys::Owner(kJob));
  REQUIRE(after.ok());
  CHECK((*after)->mod_revision == (*owner)->mod_revision);

  // The owner joins the job's other rank on node 1.
  CHECK(c.co(1)->Join(r1, kTwo, As(kOwnerUid)).ok());
  PeerCredentials owner_cred;
  owner_cred.uid = kOwnerUid;
  CHECK(c.owners(1)->Check(kJob, owner_cred).ok());
}

TEST_CASE("cluster ownership: a member of the owner group shares the job on another node",
          "[coord][security]") {
  EtcdCluster etcd(1);
  TwoNodes c(etcd);
  local::Joiner owner = As(kOwnerUid);
  owner.claim.gid = 3000;
  owner.claim.group = "team";
  REQUIRE(c.co(0)->Join({kJob, 0, 0, 0}, kTwo, owner).ok());
  local::Joiner member = As(kStrangerUid);
  member.caller.groups = {3000};
  CHECK(c.co(1)->Join({kJob, 0, 0, 1}, kTwo, member).ok());
  // (A claim's group must have the claimer as a member: MakeClaim, tests/local.)
}

TEST_CASE("cluster ownership: a rank joined on another node is refused with AlreadyExists "
          "naming the node, until it leaves", "[coord][security]") {
  EtcdCluster etcd(1);
  TwoNodes c(etcd);
  const store::RankKey r0{kJob, 0, 0, 0};
  REQUIRE(c.co(0)->Join(r0, kTwo, As(kOwnerUid)).ok());
  Status twice = c.co(1)->Join(r0, kTwo, As(kOwnerUid));
  CHECK(twice.code() == StatusCode::kAlreadyExists);
  CHECK_THAT(twice.message(), Catch::Contains("n0"));  // the owner may know where
  // The trainer on node 0 leaves; its node deletes the joined key; node 1 may take the rank.
  c.co(0)->Leave(r0);
  REQUIRE(reft::testing::Eventually([&] { return c.co(1)->Join(r0, kTwo, As(kOwnerUid)).ok(); }, 10s));
  CHECK(c.co(0)->JoinedNode(r0) == std::optional<std::string>("n1"));
}

TEST_CASE("cluster ownership: holders serve a job's bytes only to nodes etcd ties to the job",
          "[coord][security]") {
  EtcdCluster etcd(1);
  TwoNodes c(etcd);
  const store::RankKey r0{kJob, 0, 0, 0}, r1{kJob, 0, 0, 1};
  REQUIRE(c.co(0)->Join(r0, kTwo, As(kOwnerUid)).ok());
  const auto bytes = RandomBytes(8192, 11);
  WriteSlot(c.nodes[0]->store.get(), r0, 1, bytes);
  std::vector<uint8_t> got(bytes.size());
  // Node 1 has no part in the job: FetchRegion of its bytes is refused before a byte moves.
  Status refused =
      c.nodes[1]->peer->FetchRegion("n0", r0, 1, "params", got.data(), got.size());
  CHECK(refused.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(refused.message(), Catch::Contains("no part in job"));
  CHECK(got != bytes);
  // A rank of the job joins node 1: it may fetch now.
  REQUIRE(c.co(1)->Join(r1, kTwo, As(kOwnerUid)).ok());
  CHECK(c.nodes[1]->peer->FetchRegion("n0", r0, 1, "params", got.data(), got.size()).ok());
  CHECK(got == bytes);
  // Its trainer leaves: node 1 has no part in the job any more. An operator's command there
  // (rebuild, persist) ties it again, and only while it runs.
  c.co(1)->Leave(r1);
  auto* access = dynamic_cast<coord::EtcdJobAccess*>(c.nodes[0]->peer->access());
  REQUIRE(access != nullptr);
  auto tied_to = [&](const std::string& node) {
    auto tied = access->TiedNodes(kJob);
    return tied.ok() && tied->count(node) == 1;
  };
  REQUIRE(reft::testing::Eventually([&] { return !tied_to("n1"); }, 10s));
  REQUIRE(c.nodes[1]->peer->access()->BeginOperatorCommand(kJob).ok());
  CHECK(tied_to("n1"));
  c.nodes[1]->peer->access()->EndOperatorCommand(kJob);
  CHECK_FALSE(tied_to("n1"));
  CHECK(access->TiedNodes("other-job")->empty());
}

TEST_CASE("cluster ownership: a completion report counts only ranks of the reporting node",
          "[coord][security]") {
  EtcdCluster etcd(1);
  TwoNodes c(etcd);
  const store::RankKey r0{kJob, 0, 0, 0}, r1{kJob, 0, 0, 1};
  REQUIRE(c.co(0)->Join(r0, kTwo, As(kOwnerUid)).ok());
  REQUIRE(c.co(1)->Join(r1, kTwo, As(kOwnerUid)).ok());
  REQUIRE(reft::testing::Eventually([&] { return c.co(0)->LeadsJob(kJob) || c.co(1)->LeadsJob(kJob); }, 5s));
  const int leader = c.co(0)->LeadsJob(kJob) ? 0 : 1;
  const int other = 1 - leader;
  const store::RankKey leaders_rank = leader == 0 ? r0 : r1;
  const store::RankKey others_rank = leader == 0 ? r1 : r0;
  const int64_t epoch = c.co(other)->RestoreEpoch(kJob);
  // Stamped like the node's own reports: with the layout record its ranks joined under.
  auto layout = Client(etcd)->Get(coord::keys::Layout(kJob));
  REQUIRE(layout.ok());
  REQUIRE(layout->has_value());
  const int64_t layout_rev = (*layout)->mod_revision;
  PeerClient& client = c.nodes[other]->peer->client();
  // The other node claims to have completed the leader's rank (and both): refused, named.
  for (const auto& ranks : std::vector<std::vector<store::RankKey>>{{leaders_rank},
                                                                    {others_rank, leaders_rank}}) {
    Status forged = client.ReportStepCompletion(
        c.nodes[leader]->address, StepCompletionReport{kJob, 1, "", 0, epoch, ranks, layout_rev});
    CHECK(forged.code() == StatusCode::kPermissionDenied);
    CHECK_THAT(forged.message(), Catch::Contains(leaders_rank.ToString()));
  }
  // Its own rank's report counts; the step commits only once the leader's rank completed it.
  WriteSlot(c.nodes[other]->store.get(), others_rank, 1, RandomBytes(4096, 1));
  REQUIRE(c.co(other)->Complete(others_rank, 1, epoch).ok());
  CHECK_FALSE(c.co(leader)->WaitCommitted(kJob, 1, 500ms));
  WriteSlot(c.nodes[leader]->store.get(), leaders_rank, 1, RandomBytes(4096, 2));
  REQUIRE(c.co(leader)->Complete(leaders_rank, 1, c.co(leader)->RestoreEpoch(kJob)).ok());
  CHECK(c.co(other)->WaitCommitted(kJob, 1, 10s));
}

TEST_CASE("cluster ownership: a gone job is forgotten everywhere, its name can be claimed again",
          "[coord][security]") {
  EtcdCluster etcd(1);
  TwoNodes c(etcd);
  auto client = Client(etcd);
  const store::RankKey r0{kJob, 0, 0, 0};
  REQUIRE(c.co(0)->Join(r0, kTwo, As(kOwnerUid)).ok());
  c.co(0)->Leave(r0);
  auto* records = dynamic_cast<coord::EtcdJobRecords*>(c.nodes[0]->peer->records());
  REQUIRE(records != nullptr);
  // Listed while its records exist; once nothing holds it, it is gone.
  REQUIRE(reft::testing::Eventually([&] {
    auto list = records->List();
    return list.ok() && list->size() == 1 && (*list)[0].state == "gone";
  }, 10s));
  auto list = records->List();
  CHECK((*list)[0].owner->uid == kOwnerUid);
  // The sweepers (test: 600 s by default) are driven by hand here with a short forget time.
  coord::EtcdJobRecords sweeper(std::shared_ptr<coord::EtcdClient>(Client(etcd)),
                                dynamic_cast<coord::EtcdNodeDirectory*>(&c.nodes[1]->peer->membership()),
                                coord::JobRecordsOptions{100ms});
  // Whichever node holds the sweeper key sweeps; make it node 1's by deleting the key first.
  REQUIRE(client->Delete(coord::keys::Sweeper()).ok());
  REQUIRE(sweeper.SweepOnce().ok());
  std::this_thread::sleep_for(150ms);
  auto swept = sweeper.SweepOnce();
  REQUIRE(swept.ok());
  CHECK(*swept == std::vector<std::string>{kJob});
  CHECK(*client->CountPrefix(coord::keys::JobPrefix(kJob)) == 0);
  auto* co0 = dynamic_cast<coord::EtcdJobCoordinator*>(c.co(0));
  REQUIRE(reft::testing::Eventually([&] { return co0->followed_jobs() == 0; }, 5s));
  // Another uid may claim the name now.
  CHECK(c.co(1)->Join(r0, kTwo, As(kStrangerUid)).ok());

  // A job whose steps the tier holds keeps its owner, whatever the sweeper sees.
  const std::string kept = "persisted-job";
  REQUIRE(c.co(0)->Join({kept, 0, 0, 0}, kTwo, As(kOwnerUid)).ok());
  REQUIRE(records->NotePersisted(kept, 7).ok());
  c.co(0)->Leave({kept, 0, 0, 0});
  REQUIRE(reft::testing::Eventually([&] {
    auto l = records->List();
    if (!l.ok()) return false;
    for (const auto& r : *l)
      if (r.job == kept) return r.state == "persisted";
    return false;
  }, 10s));
  REQUIRE(sweeper.SweepOnce().ok());
  std::this_thread::sleep_for(150ms);
  REQUIRE(sweeper.SweepOnce().ok());
  CHECK(c.co(1)->Join({kept, 0, 0, 1}, kTwo, As(kStrangerUid)).code() ==
        StatusCode::kPermissionDenied);
  // An operator's release refuses it without --force, names why.
  Status release = records->Release(kept, false);
  CHECK(release.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(release.message(), Catch::Contains("persistent tier holds step 7"));
  CHECK(records->Release(kept, true).ok());
  CHECK(records->Release(kept, true).code() == StatusCode::kNotFound);
}
