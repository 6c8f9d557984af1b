// Plan queries on the local socket (reft::QueryPlan): no hello needed, the job's owner gets the
// plan document (inline or, when large, in a sealed memfd), anyone else a refusal that names
// nothing of the job and never reaches the planner.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "reft/client.h"
#include "reft/local/job_owners.h"
#include "reft/local/plan_source.h"
#include "reft/local_proto/messages.h"
#include "reft/mutex.h"
#include "server_fixture.h"

using namespace reft;
using reft::testing::ServerFixture;

namespace {

// The planner seam: answers every job it is asked about (the session checks the owner first)
// and records who was asked, so a test sees that a refused query never got this far.
class FakePlans final : public local::PlanSource {
 public:
  Result<std::string> PlanJson(const std::string& job) override REFT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    asked_.insert(job);
    if (job == "fresh") return Status::NotFound("job '" + job + "' has no committed step");
    std::string doc = "{\"job\": \"" + job + "\", \"layout\": \"dp=2 on node-secret\"";
    if (big_bytes_ > 0) doc += ", \"pad\": \"" + std::string(big_bytes_, 'x') + "\"";
    return doc + "}";
  }
  bool Asked(const std::string& job) const REFT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return asked_.count(job) > 0;
  }
  void SetBig(size_t bytes) REFT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    big_bytes_ = bytes;
  }

 private:
  mutable Mutex mu_;
  std::set<std::string> asked_ REFT_GUARDED_BY(mu_);
  size_t big_bytes_ REFT_GUARDED_BY(mu_) = 0;
};

// A uid that is not this test's: the owner of the job the test must not see.
uint32_t OtherUid() { return ::getuid() == 0 ? 4242 : ::getuid() + 1; }

// Claims `job` for `uid` as its first hello would have.
void ClaimFor(local::JobOwners& owners, const std::string& job, uint32_t uid) {
  PeerCredentials cred;
  cred.uid = uid;
  cred.gid = uid;
  local::JobOwner claim;
  claim.uid = uid;
  claim.claimed_on = "node-secret";
  REQUIRE(owners.Admit(job, cred, claim).ok());
}

std::unique_ptr<Client> JoinAs(const ServerFixture& f, const std::string& job) {
  ClientOptions o;
  o.socket_path = f.socket;
  o.job = job;
  auto c = Client::Connect(o);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return std::move(*c);
}

}  // namespace

TEST_CASE("a plan query answers the job's owner without a hello, and no one else",
          "[local][plan]") {
  auto owners = local::JobOwners::Open("").value();
  FakePlans plans;
  local::LocalServerOptions options;
  options.job_owners = owners.get();
  ServerFixture f(options, &plans);
  ClaimFor(*owners, "theirs", OtherUid());
  auto trainer = JoinAs(f, "mine");  // the hello claims "mine" for this test's uid

  SECTION("the owner gets the document on a connection that never said hello") {
    auto doc = QueryPlan(f.socket, "mine");
    INFO(doc.status().ToString());
    REQUIRE(doc.ok());
    CHECK(*doc == "{\"job\": \"mine\", \"layout\": \"dp=2 on node-secret\"}");
  }
  SECTION("a document larger than a frame comes in a sealed file") {
    plans.SetBig(local_proto::PlanReply::kMaxInline + 100000);
    auto doc = QueryPlan(f.socket, "mine");
    INFO(doc.status().ToString());
    REQUIRE(doc.ok());
    CHECK(doc->size() > local_proto::PlanReply::kMaxInline + 100000);
    CHECK(doc->rfind("x\"}") == doc->size() - 3);
  }
  SECTION("another uid's job is refused, naming nothing of it, before the planner is asked") {
    auto doc = QueryPlan(f.socket, "theirs");
    REQUIRE(doc.status().code() == StatusCode::kPermissionDenied);
    const std::string& m = doc.status().message();
    CHECK(m.find(std::to_string(OtherUid())) == std::string::npos);  // not the owner
    CHECK(m.find("node-secret") == std::string::npos);               // not where it runs
    CHECK(m.find("dp=") == std::string::npos);                       // not its layout
    CHECK_FALSE(plans.Asked("theirs"));
    CHECK(owners->denied() >= 1);  // counted like a refused hello
  }
  SECTION("a job nobody owns is NotFound, the planner's NotFound passes through") {
    CHECK(QueryPlan(f.socket, "nobodys").status().code() == StatusCode::kNotFound);
    CHECK_FALSE(plans.Asked("nobodys"));
    auto fresh = JoinAs(f, "fresh");
    auto doc = QueryPlan(f.socket, "fresh");
    CHECK(doc.status().code() == StatusCode::kNotFound);
    CHECK(doc.status().message() == "job 'fresh' has no committed step");
  }
  SECTION("bad arguments and an unreachable reftd") {
    CHECK(QueryPlan(f.socket, "").status().code() == StatusCode::kInvalidArgument);
    CHECK(QueryPlan(f.socket, "bad\njob").status().code() == StatusCode::kInvalidArgument);
    CHECK(QueryPlan(f.dir.path() + "/no.sock", "mine").status().code() ==
          StatusCode::kUnavailable);
  }
}

TEST_CASE("a reftd without a planner refuses a stranger first, then says it has none",
          "[local][plan]") {
  auto owners = local::JobOwners::Open("").value();
  local::LocalServerOptions options;
  options.job_owners = owners.get();
  ServerFixture f(options);
  ClaimFor(*owners, "theirs", OtherUid());
  auto trainer = JoinAs(f, "mine");
  CHECK(QueryPlan(f.socket, "theirs").status().code() == StatusCode::kPermissionDenied);
  auto doc = QueryPlan(f.socket, "mine");
  CHECK(doc.status().code() == StatusCode::kUnavailable);
  CHECK(doc.status().message() == "this daemon has no planner");
}

TEST_CASE("a second session of a joined rank is retried for connect_timeout, then refused",
          "[local][plan]") {
  ServerFixture f;
  ClientOptions o;
  o.socket_path = f.socket;
  o.job = "twice";
  auto first = JoinAs(f, "twice");
  o.connect_timeout = std::chrono::milliseconds(0);
  auto now = Client::Connect(o);
  CHECK(now.status().code() == StatusCode::kAlreadyExists);

  o.connect_timeout = std::chrono::milliseconds(400);
  const auto start = std::chrono::steady_clock::now();
  auto late = Client::Connect(o);
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(late.status().code() == StatusCode::kAlreadyExists);
  CHECK(late.status().message().find("connect_timeout") != std::string::npos);
  CHECK(waited >= std::chrono::milliseconds(400));
  CHECK(waited < std::chrono::seconds(5));

  // The first session goes away while the second retries: the second joins.
  o.connect_timeout = std::chrono::seconds(10);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    (void)first->Close();
  });
  auto second = Client::Connect(o);
  closer.join();
  INFO(second.status().ToString());
  CHECK(second.ok());
}
