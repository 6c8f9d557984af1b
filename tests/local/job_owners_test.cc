// JobOwners, the node's own record of job owners (no etcd): the first uid of a job owns it,
// refusals name nothing of the job, the journal survives a reopen (a reftd restart) and an
// older reftd's record, a corrupt line stops the start, an owner group needs its claimer as a
// member, a forgotten job can be claimed anew, and a claim costs the same however many exist.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>

#include "reft/local/job_owners.h"
#include "test_support.h"

using reft::PeerCredentials;
using reft::StatusCode;
using reft::local::JobOwner;
using reft::local::JobOwners;
using reft::local::MakeClaim;

namespace {

PeerCredentials Uid(uint32_t uid, uint32_t gid = 100, std::vector<uint32_t> groups = {}) {
  PeerCredentials c;
  c.uid = uid;
  c.gid = gid;
  c.groups = std::move(groups);
  return c;
}

// A hello of `job` by `caller`, claiming with `group` ("" = none), as the session makes it.
reft::Status Hello(JobOwners& owners, const std::string& job, const PeerCredentials& caller,
                   const std::string& group = "") {
  auto claim = MakeClaim(caller, group, "n0");
  if (!claim.ok()) return claim.status();
  return owners.Admit(job, caller, *claim);
}

std::optional<JobOwner> OwnerOf(JobOwners& owners, const std::string& job) {
  auto o = owners.Owner(job);
  REQUIRE(o.ok());
  return *o;
}

}  // namespace

TEST_CASE("the first uid of a job owns it, others are refused and counted", "[local][owners]") {
  auto owners = JobOwners::Open("").value();
  std::vector<std::string> denied;
  owners->SetDeniedObserver([&](const std::string& job) { denied.push_back(job); });
  REQUIRE(Hello(*owners, "a", Uid(1000)).ok());
  REQUIRE(Hello(*owners, "a", Uid(1000, 5)).ok());  // the uid decides, not the group
  auto st = Hello(*owners, "a", Uid(1001));
  CHECK(st.code() == StatusCode::kPermissionDenied);
  // Nothing of the job: not even who owns it.
  CHECK(st.message() == "job 'a' belongs to another user; uid 1001 may not use it: use another "
                        "job name, or have an operator release the job once its trainers are "
                        "gone (reftctl jobs release --job a)");
  owners->NoteDenied("a");  // an Admin refusal, decided by the authorizer
  CHECK_FALSE(OwnerOf(*owners, "b").has_value());
  CHECK(owners->denied() == 2);
  CHECK(denied == std::vector<std::string>{"a", "a"});
  CHECK(Hello(*owners, "bad\njob", Uid(1)).code() == StatusCode::kInvalidArgument);
  CHECK(owners->Check("a", Uid(1000)).ok());
  CHECK(owners->Check("a", Uid(1001)).code() == StatusCode::kPermissionDenied);
  CHECK(owners->Check("nope", Uid(1001)).code() == StatusCode::kNotFound);
  CHECK(OwnerOf(*owners, "a")->claimed_on == "n0");
  CHECK(OwnerOf(*owners, "a")->claimed_at_ms > 0);
}

TEST_CASE("an owner group shares the job with its members, the claimer must be one",
          "[local][owners]") {
  auto owners = JobOwners::Open("").value();
  REQUIRE(Hello(*owners, "g", Uid(1000, 0), "0").ok());  // gid 0 (root) exists everywhere
  CHECK(OwnerOf(*owners, "g")->gid == 0u);
  CHECK(Hello(*owners, "g", Uid(1001, 0)).ok());          // primary group
  CHECK(Hello(*owners, "g", Uid(1002, 7, {9, 0})).ok());  // supplementary group
  auto st = Hello(*owners, "g", Uid(1003, 7, {9}), "0");  // a later group is ignored
  CHECK(st.code() == StatusCode::kPermissionDenied);
  // A claim may not share a job with a group the claimer is not in, nor a group that does not
  // exist (numeric or named): a failed claim claims nothing.
  CHECK(Hello(*owners, "h", Uid(1, 1), "0").code() == StatusCode::kPermissionDenied);
  CHECK(Hello(*owners, "h", Uid(1), "no-such-group-here").code() == StatusCode::kInvalidArgument);
  CHECK(Hello(*owners, "h", Uid(1), "987654").code() == StatusCode::kInvalidArgument);
  CHECK_FALSE(OwnerOf(*owners, "h").has_value());
}

TEST_CASE("owners survive a reopen of their journal, an old record is read, a corrupt line is "
          "an error", "[local][owners]") {
  reft::testing::TempDir dir("reft-owners");
  const std::string path = dir.path() + "/job-owners";
  {
    auto owners = JobOwners::Open(path).value();
    REQUIRE(Hello(*owners, "job with spaces", Uid(1000)).ok());
    REQUIRE(Hello(*owners, "g", Uid(1001, 0), "0").ok());
    REQUIRE(Hello(*owners, "gone", Uid(1002)).ok());
    REQUIRE(owners->Forget("gone").ok());
  }
  // A line an older reftd wrote (no claim time, no node).
  std::ofstream(path, std::ios::app) << "1003 - - old job\n";
  auto reopened = JobOwners::Open(path).value();
  REQUIRE(reopened->All()->size() == 3);
  CHECK(OwnerOf(*reopened, "job with spaces")->uid == 1000u);
  CHECK_FALSE(OwnerOf(*reopened, "job with spaces")->gid.has_value());
  CHECK(OwnerOf(*reopened, "g")->gid == 0u);
  CHECK(OwnerOf(*reopened, "old job")->uid == 1003u);
  CHECK_FALSE(OwnerOf(*reopened, "gone").has_value());
  CHECK(Hello(*reopened, "job with spaces", Uid(1001)).code() == StatusCode::kPermissionDenied);
  CHECK(Hello(*reopened, "gone", Uid(1001)).ok());  // forgotten: claimed anew

  std::ofstream(path, std::ios::app) << "x - - broken\n";
  auto broken = JobOwners::Open(path);
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.status().code() == StatusCode::kCorrupted);
  CHECK(broken.status().message().find("line 7") != std::string::npos);
}

TEST_CASE("a claim costs the same with 10,000 owners recorded, the journal stays bounded",
          "[local][owners]") {
  reft::testing::TempDir dir("reft-owners");
  const std::string path = dir.path() + "/job-owners";
  auto owners = JobOwners::Open(path).value();
  using Clock = std::chrono::steady_clock;
  auto claim_batch = [&](int first) {
    const auto t0 = Clock::now();
    for (int i = first; i < first + 200; ++i) REQUIRE(Hello(*owners, "j" + std::to_string(i), Uid(7)).ok());
    return Clock::now() - t0;
  };
  const auto early = claim_batch(0);
  for (int i = 200; i < 9800; i += 200) claim_batch(i);
  const auto late = claim_batch(9800);
  // Appends, not rewrites: the last 200 claims cost about what the first 200 did (the
  // rewrite-per-claim record took ~50x longer at 5,000).
  CHECK(late < 4 * early + std::chrono::milliseconds(20));
  CHECK(owners->size() == 10000);
  // Forgetting them all leaves a journal of about as many lines as live owners, not 20,000.
  for (int i = 0; i < 10000; ++i) REQUIRE(owners->Forget("j" + std::to_string(i)).ok());
  CHECK(owners->size() == 0);
  std::ifstream in(path);
  size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  CHECK(lines <= 1024);
  CHECK(JobOwners::Open(path).value()->size() == 0);
}
