// JobOwners: the first uid of a job owns it, the record survives a reopen (a reftd restart),
// a corrupt record stops the start, an owner group lets its members in.
#include <catch2/catch.hpp>

#include <fstream>

#include "reft/local/job_owners.h"
#include "test_support.h"

using reft::PeerCredentials;
using reft::StatusCode;
using reft::local::JobOwners;

namespace {

PeerCredentials Uid(uint32_t uid, uint32_t gid = 100, std::vector<uint32_t> groups = {}) {
  PeerCredentials c;
  c.uid = uid;
  c.gid = gid;
  c.groups = std::move(groups);
  return c;
}

}  // namespace

TEST_CASE("the first uid of a job owns it, others are refused and counted", "[local][owners]") {
  auto owners = JobOwners::Open("").value();
  std::vector<std::string> denied;
  owners->SetDeniedObserver([&](const std::string& job) { denied.push_back(job); });
  REQUIRE(owners->Admit("a", Uid(1000), "").ok());
  REQUIRE(owners->Admit("a", Uid(1000, 5), "").ok());  // the uid decides, not the group
  auto st = owners->Admit("a", Uid(1001), "");
  CHECK(st.code() == StatusCode::kPermissionDenied);
  CHECK(st.message() == "job 'a' belongs to uid 1000; uid 1001 may not use it");
  owners->NoteDenied("a");  // an Admin refusal, decided by the authorizer
  CHECK_FALSE(owners->Owner("b").has_value());
  CHECK(owners->denied() == 2);
  CHECK(denied == std::vector<std::string>{"a", "a"});
  CHECK(owners->Admit("bad\njob", Uid(1), "").code() == StatusCode::kInvalidArgument);
}

TEST_CASE("an owner group shares the job with its members", "[local][owners]") {
  auto owners = JobOwners::Open("").value();
  REQUIRE(owners->Admit("g", Uid(1000), "4242").ok());
  CHECK(owners->Owner("g")->gid == 4242u);
  CHECK(owners->Admit("g", Uid(1001, 4242), "").ok());          // primary group
  CHECK(owners->Admit("g", Uid(1002, 7, {9, 4242}), "").ok());  // supplementary group
  auto st = owners->Admit("g", Uid(1003, 7, {9}), "4242");       // a later group is ignored
  CHECK(st.code() == StatusCode::kPermissionDenied);
  CHECK(st.message() ==
        "job 'g' belongs to uid 1000 (group '4242', gid 4242); uid 1003 may not use it");
  CHECK(owners->Admit("h", Uid(1), "no-such-group-here").code() == StatusCode::kInvalidArgument);
  CHECK_FALSE(owners->Owner("h").has_value());  // a failed claim claims nothing
}

TEST_CASE("owners survive a reopen of their record and a corrupt record is an error",
          "[local][owners]") {
  reft::testing::TempDir dir("reft-owners");
  const std::string path = dir.path() + "/job-owners";
  {
    auto owners = JobOwners::Open(path).value();
    REQUIRE(owners->Admit("job with spaces", Uid(1000), "").ok());
    REQUIRE(owners->Admit("g", Uid(1001), "0").ok());
  }
  auto reopened = JobOwners::Open(path).value();
  REQUIRE(reopened->All().size() == 2);
  CHECK(reopened->Owner("job with spaces")->uid == 1000u);
  CHECK_FALSE(reopened->Owner("job with spaces")->gid.has_value());
  CHECK(reopened->Owner("g")->gid == 0u);
  CHECK(reopened->Admit("job with spaces", Uid(1001), "").code() ==
        StatusCode::kPermissionDenied);

  std::ofstream(path, std::ios::app) << "x - - broken\n";
  auto broken = JobOwners::Open(path);
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.status().code() == StatusCode::kCorrupted);
  CHECK(broken.status().message().find("line 3") != std::string::npos);
}
