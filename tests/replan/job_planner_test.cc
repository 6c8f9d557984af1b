// The planner loop's decisions (job_planner.h), through its public interface over fakes of the
// control plane: who publishes, in which state, when a decision waits or stands, when a loss is
// withdrawn, and when the transfer plan runs. Each test waits for the publication it expects,
// or for the planner's next pass over the jobs when it expects none; none waits for a time.
#include "reft/replan/job_planner.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "control_plane_fakes.h"
#include "reft/mutex.h"
#include "reft/unix_time.h"

using namespace reft;
using namespace reft::replan;
using nlohmann::json;
using reft::replan::testing::FakeJobCoordinator;
using reft::replan::testing::FakeNodeDirectory;

namespace {

constexpr uint64_t kGeneration = 2;
constexpr int64_t kStep = 7;

// Job "j": dp 2 × pp 2, three layers per stage, rank (d, s) on node n<d*2+s>; this node is n0.
planner::online::JobModelView Model() {
  planner::online::JobModelView m;
  m.job = "j";
  m.dp = 2;
  m.pp = 2;
  m.step = kStep;
  m.step_ms = 200;
  m.step_samples = 5;
  for (int d = 0; d < 2; ++d)
    for (int s = 0; s < 2; ++s) m.ranks.push_back({s, 0, d, "n" + std::to_string(d * 2 + s)});
  for (int l = 0; l < 6; ++l)
    m.layers.push_back({l, l / 3, 1000000u + 1000u * l, 3000000u + 7u * l});
  return m;
}

// The cluster of Model(): n1..n3 besides this node, `dead` of them declared dead, and `spares`.
struct Cluster {
  FakeNodeDirectory nodes{"n0"};
  FakeJobCoordinator coordinator;
  std::atomic<int> model_reads{0};

  explicit Cluster(std::set<std::string> dead, std::vector<std::string> spares = {}) {
    for (const std::string n : {"n1", "n2", "n3"})
      nodes.Set(n, dead.count(n) ? peer::MemberState::kDead : peer::MemberState::kAlive);
    for (const auto& s : spares) nodes.Set(s, peer::MemberState::kAlive);
    FakeJobCoordinator::Job job;
    job.nodes = {"n1", "n2", "n3"};
    job.generation = kGeneration;
    coordinator.SetJob("j", job);
  }

  JobPlanner::ModelSource Source(bool step_time_measured = true) {
    return [this, step_time_measured](const std::string&) -> Result<planner::online::JobModelView> {
      ++model_reads;
      planner::online::JobModelView m = Model();
      if (!step_time_measured) m.step_ms = m.step_samples = 0;
      return m;
    };
  }
};

JobPlannerOptions Options(PlannerMode mode, std::chrono::milliseconds spare_wait = {}) {
  JobPlannerOptions o;
  o.mode = mode;
  o.spare_wait = spare_wait;
  o.retry = std::chrono::hours(1);  // every pass of these tests is asked for (Replan)
  return o;
}

// Waits until a pass the planner starts after this call has finished: Replan() starts one,
// and a second Replan() during it starts another once it is done.
void FinishNextPass(JobPlanner& planner, const FakeJobCoordinator& coordinator) {
  const int before = coordinator.Passes();
  planner.Replan();
  REQUIRE(coordinator.WaitPasses(before));
  planner.Replan();
  REQUIRE(coordinator.WaitPasses(before + 1));
}

// A Stager that records each call (on the transfer's threads: the test checks them after)
// and stages every layer it is asked for.
struct RecordingStager {
  Mutex mu;
  std::map<std::string, int> calls REFT_GUARDED_BY(mu);  // per receiving node
  std::set<std::string> asked_for REFT_GUARDED_BY(mu);   // "job@step"

  Stager Get() {
    return [this](const std::string& node, const std::string& job, int64_t step,
                  const std::vector<int>& layers) -> Result<StageOutcome> {
      MutexLock lock(mu);
      ++calls[node];
      asked_for.insert(job + "@" + std::to_string(step));
      return StageOutcome{100u * layers.size(), 100u * layers.size(), 0};
    };
  }
  size_t Nodes() {
    MutexLock lock(mu);
    return calls.size();
  }
};

bool TransferIs(const coord::PublishedPlan& p, const std::string& state) {
  const json progress = json::parse(p.transfer_json.empty() ? "null" : p.transfer_json);
  return progress.is_object() && progress.value("state", "") == state;
}

}  // namespace

TEST_CASE("planner loop: the coordinator decides a loss, publishes it and runs its transfer plan",
          "[job_planner]") {
  Cluster cluster({"n3"});
  RecordingStager stager;
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source());
  planner.SetStager(stager.Get());
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished(
      "j", [](const coord::PublishedPlan& p) { return TransferIs(p, "done"); }));
  planner.Stop();

  const coord::PublishedPlan p = *cluster.coordinator.Published("j");
  CHECK(p.state == "decided");
  CHECK(p.basis == "n3");
  CHECK(p.generation == kGeneration);
  CHECK(p.step == kStep);
  CHECK(p.planner == "n0");
  const json doc = json::parse(p.plan_json);
  CHECK(doc["decision"]["policy"] == "reconfigure");
  // Every host of the transfer plan staged the decided step once, none of them the lost node.
  const json progress = json::parse(p.transfer_json);
  REQUIRE(doc["decision"]["transfer"].contains("hosts"));
  CHECK(progress["hosts"].size() == doc["decision"]["transfer"]["hosts"].size());
  CHECK(!progress["hosts"].empty());
  MutexLock lock(stager.mu);
  CHECK(stager.calls.size() == progress["hosts"].size());
  CHECK(stager.asked_for == std::set<std::string>{"j@" + std::to_string(kStep)});
  for (const json& h : progress["hosts"]) {
    CHECK(h["state"] == "done");
    CHECK(h["node"] != "n3");
    CHECK(stager.calls[h["node"].get<std::string>()] == 1);
  }
}

TEST_CASE("planner loop: a published loss carries when its node was lost and declared, its record the rest",
          "[job_planner]") {
  Cluster cluster({"n3"});
  cluster.nodes.Departed("n3");
  RecordingStager stager;
  JobPlannerOptions options = Options(PlannerMode::kAutomatic);
  options.lease_ttl = std::chrono::seconds(2);
  JobPlanner planner("n0", options, &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator), nullptr,
                     cluster.Source());
  planner.SetStager(stager.Get());
  const int64_t before = UnixMs();
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished(
      "j", [](const coord::PublishedPlan& p) { return TransferIs(p, "done"); }));
  planner.Stop();
  const int64_t after = UnixMs();

  const coord::PublishedPlan p = *cluster.coordinator.Published("j");
  const std::optional<PlanDocument> doc = DocumentOf(p);
  REQUIRE(doc);
  REQUIRE(doc->phases);
  // Heard as the planner started listening, by this node; the lease lapsed a TTL after n3
  // renewed it last.
  REQUIRE(doc->phases->declared_at);
  CHECK(doc->phases->declared_at->node == "n0");
  CHECK(doc->phases->declared_at->at_ms >= before);
  CHECK(doc->phases->declared_at->at_ms <= p.decided_at_ms);
  REQUIRE(doc->phases->lost_at);
  CHECK(doc->phases->lost_at->at_ms == doc->phases->declared_at->at_ms - 2000);
  CHECK(!doc->phases->decided_at);  // the record's
  const std::optional<RecoveryPhases> phases = JobPhasesOf(p);
  REQUIRE(phases);
  REQUIRE(phases->decided_at);
  CHECK(phases->decided_at->at_ms == p.decided_at_ms);
  CHECK(phases->decided_at->node == "n0");
  REQUIRE(phases->staged_at);
  CHECK(phases->staged_at->at_ms >= p.decided_at_ms);
  CHECK(phases->staged_at->at_ms <= after);

  // plan show: the last recovery, no step committed after it yet, then the first one.
  StepCadence commits;
  planner.SetCommitLog(&commits);
  auto shown = planner.Show("j");
  REQUIRE(shown.ok());
  REQUIRE(shown->last_recovery);
  CHECK(shown->last_recovery->phases.staged_at->at_ms == phases->staged_at->at_ms);
  CHECK(!shown->last_recovery->first_commit_step);
  commits.NoteCommitted("j", kStep, 10);  // the restored step itself is not after the recovery
  commits.NoteCommitted("j", kStep + 1, 20);
  commits.NoteCommitted("j", kStep + 2, 30);
  shown = planner.Show("j");
  REQUIRE(shown.ok());
  CHECK(shown->last_recovery->first_commit_step == kStep + 1);
  CHECK(shown->last_recovery->first_commit_at->at_ms == 20);
  CHECK(shown->last_recovery->first_commit_at->node == "n0");
}

TEST_CASE("planner loop: a lost node's last completion report bounds lost_at when it is later than "
          "its lease's last renewal", "[job_planner]") {
  // A lease revoked early (a suspicion confirmed) was renewed after declared − TTL: the last
  // completion report the coordinator took is then the latest sign of life. One from after the
  // departure (a late copy through etcd) is no bound.
  for (const int64_t heard_after_start_ms : {int64_t{-300}, int64_t{60000}}) {
    CAPTURE(heard_after_start_ms);
    Cluster cluster({"n3"});
    cluster.nodes.Departed("n3");
    const int64_t before = UnixMs();
    FakeJobCoordinator::Job job;
    job.nodes = {"n1", "n2", "n3"};
    job.generation = kGeneration;
    job.last_heard_ms["n3"] = before + heard_after_start_ms;
    cluster.coordinator.SetJob("j", job);
    JobPlannerOptions options = Options(PlannerMode::kAutomatic);
    options.lease_ttl = std::chrono::seconds(5);
    JobPlanner planner("n0", options, &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                       nullptr, cluster.Source());
    planner.Start();
    REQUIRE(cluster.coordinator.WaitPublished(
        "j", [](const coord::PublishedPlan& p) { return p.state == "decided"; }));
    planner.Stop();
    const std::optional<PlanDocument> doc = DocumentOf(*cluster.coordinator.Published("j"));
    REQUIRE(doc);
    REQUIRE(doc->phases);
    REQUIRE(doc->phases->declared_at);
    REQUIRE(doc->phases->lost_at);
    if (heard_after_start_ms < 0) {
      CHECK(doc->phases->lost_at->at_ms == before + heard_after_start_ms);
    } else {
      CHECK(doc->phases->lost_at->at_ms == doc->phases->declared_at->at_ms - 5000);
    }
  }
}

TEST_CASE("planner loop: a loss whose departure this node did not hear has no lost or declared phase",
          "[job_planner]") {
  Cluster cluster({"n3"});
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source());
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished("j", [](const coord::PublishedPlan& p) { return p.state == "decided"; }));
  planner.Stop();
  const std::optional<PlanDocument> doc = DocumentOf(*cluster.coordinator.Published("j"));
  REQUIRE(doc);
  REQUIRE(doc->phases);
  CHECK(!doc->phases->declared_at);
  CHECK(!doc->phases->lost_at);
  const std::optional<RecoveryPhases> phases = JobPhasesOf(*cluster.coordinator.Published("j"));
  REQUIRE(phases);
  CHECK(phases->decided_at);
  CHECK(!phases->staged_at);  // no stager: the transfer plan never ran
}

// A job that lost a node after one committed step (no step time yet) and has no profile cannot
// be decided: the decision's policy is null, which the loop must read as "no policy" — it once
// ended reftd (nlohmann's value() throws on a null).
TEST_CASE("planner loop: a loss that cannot be decided yet is published as undecided",
          "[job_planner]") {
  Cluster cluster({"n3"});
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source(/*step_time_measured=*/false));
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished("j", [](const coord::PublishedPlan&) { return true; }));
  planner.Stop();
  const coord::PublishedPlan p = *cluster.coordinator.Published("j");
  CHECK(p.state == "undecided");
  CHECK(p.basis == "n3");
  const json doc = json::parse(p.plan_json);
  CHECK(doc["decision"]["policy"].is_null());
  CHECK_THAT(doc["decision"]["reason"].get<std::string>(), Catch::Contains("no step time"));
}

TEST_CASE("planner loop: a node that does not lead the job neither reads its model nor publishes",
          "[job_planner]") {
  Cluster cluster({"n3"});
  FakeJobCoordinator::Job job;
  job.leads = false;
  job.nodes = {"n1", "n2", "n3"};
  job.generation = kGeneration;
  cluster.coordinator.SetJob("j", job);
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source());
  planner.Start();
  FinishNextPass(planner, cluster.coordinator);
  planner.Stop();
  CHECK(cluster.coordinator.Publications().empty());
  CHECK(cluster.model_reads.load() == 0);
}

TEST_CASE("planner loop: a job with every node alive and no decision is left alone",
          "[job_planner]") {
  Cluster cluster({});
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source());
  planner.Start();
  FinishNextPass(planner, cluster.coordinator);
  planner.Stop();
  CHECK(cluster.coordinator.Publications().empty());
  CHECK(cluster.model_reads.load() == 0);  // no loss and nothing published: nothing to read
}

// Reconfiguring runs a third slower than the running layout; a failure is expected every 3.3 h
// (10 h per node over 3), of which a 10 min wait costs 5 %: waiting for a spare pays. (A wait of
// an hour would not: the coordinator decides at once then.)
TEST_CASE("planner loop: without a spare the decision first waits for one, and says so once",
          "[job_planner]") {
  Cluster cluster({"n3"});
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic, std::chrono::minutes(10)), &cluster.nodes,
                     PlannerAgreement::Of(&cluster.coordinator), nullptr, cluster.Source());
  const int64_t before = UnixMs();
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished("j", [](const coord::PublishedPlan&) { return true; }));
  FinishNextPass(planner, cluster.coordinator);
  planner.Stop();

  const auto publications = cluster.coordinator.Publications();
  REQUIRE(publications.size() == 1);  // the second pass found the same decision in force
  CHECK(publications[0].state == "waiting_for_spare");
  CHECK(publications[0].wait_until_ms >= before + 600 * 1000);
  CHECK(publications[0].wait_until_ms <= UnixMs() + 600 * 1000);
}

namespace {

// A profile for Model() whose stage 0 layers take `stage0_forward_ms` and stage 1 layers
// `stage1_forward_ms` per micro-batch (backward twice that), with a failure expected every
// 20 min (1 h per node over the 3 that live): waiting 30 s for a spare and loading a snapshot
// cost about 3 % of it, so reconfiguring onto the survivors decides now when its step is within
// about 3 % of the running one, and the coordinator waits when it is much slower.
json StageProfile(double stage0_forward_ms, double stage1_forward_ms) {
  json layers = json::array();
  for (int l = 0; l < 6; ++l) layers.push_back({{"forward_ms", l < 3 ? stage0_forward_ms : stage1_forward_ms}});
  return {{"model", {{"layers", layers}}}, {"policy", {{"mtbf_hours_per_node", 1}}}};
}

// The candidate `policy` of the published document `doc`.
json Candidate(const json& doc, const std::string& policy) {
  for (const json& c : doc["decision"]["candidates"])
    if (c["policy"] == policy) return c;
  return nullptr;
}

}  // namespace

// The spare wait as a decision (reft/planner/spare_wait.h). Stage 0 2.7 times as slow as
// stage 1: the running pipelines wait on stage 0, and three single-stage pipelines on the
// survivors (the reconfiguration) run about 2 % slower, so waiting for a spare does not pay.
TEST_CASE("planner loop: without a spare, a reconfiguration nearly as good is decided at once", "[job_planner]") {
  Cluster cluster({"n3"});
  PlanProfiles profiles("");
  REQUIRE(profiles.Attach("j", StageProfile(2.7, 1)).ok());
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic, std::chrono::seconds(30)), &cluster.nodes,
                     PlannerAgreement::Of(&cluster.coordinator), &profiles, cluster.Source());
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished("j", [](const coord::PublishedPlan&) { return true; }));
  FinishNextPass(planner, cluster.coordinator);
  planner.Stop();

  const auto publications = cluster.coordinator.Publications();
  REQUIRE(publications.size() == 1);  // decided once, never waiting_for_spare
  const coord::PublishedPlan& p = publications[0];
  const json doc = json::parse(p.plan_json);
  INFO(doc["decision"].dump(2));
  CHECK(p.state == "decided");
  CHECK(p.wait_until_ms == 0);
  CHECK(doc["decision"]["policy"] == "reconfigure");
  const double spare_step = Candidate(doc, "restart_on_spare")["step_ms"];
  const double reconfigure_step = Candidate(doc, "reconfigure")["step_ms"];
  CHECK(reconfigure_step < spare_step * 1.03);  // nearly as good as the running layout
  REQUIRE(doc["decision"].contains("spare_wait"));
  CHECK(doc["decision"]["spare_wait"]["waited_ms"] == 0);
  CHECK_THAT(doc["decision"]["spare_wait"]["reason"].get<std::string>(),
             Catch::Contains("no spare; reconfigure now loses less than waiting 30 s for one"));
}

// Every layer alike: three single-stage pipelines on the survivors run a third slower than the
// running layout, which restarting on a spare keeps, so the coordinator waits for one.
TEST_CASE("planner loop: without a spare, a reconfiguration much worse waits for one", "[job_planner]") {
  Cluster cluster({"n3"});
  PlanProfiles profiles("");
  REQUIRE(profiles.Attach("j", StageProfile(1, 1)).ok());
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic, std::chrono::seconds(30)), &cluster.nodes,
                     PlannerAgreement::Of(&cluster.coordinator), &profiles, cluster.Source());
  const int64_t before = UnixMs();
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished("j", [](const coord::PublishedPlan&) { return true; }));
  planner.Stop();

  const coord::PublishedPlan p = cluster.coordinator.Publications().at(0);
  const json doc = json::parse(p.plan_json);
  INFO(doc["decision"].dump(2));
  CHECK(p.state == "waiting_for_spare");
  CHECK(p.wait_until_ms >= before + 30 * 1000);
  const double spare_step = Candidate(doc, "restart_on_spare")["step_ms"];
  const double reconfigure_step = Candidate(doc, "reconfigure")["step_ms"];
  CHECK(reconfigure_step > spare_step * 1.3);  // much worse than the running layout
  REQUIRE(doc["decision"].contains("spare_wait"));
  CHECK(doc["decision"]["spare_wait"]["waited_ms"] == 0);
  CHECK_THAT(doc["decision"]["spare_wait"]["reason"].get<std::string>(),
             Catch::Contains("no spare; waiting up to 30 s: restart on a spare would train"));
}

TEST_CASE("planner loop: a spare that suffices is taken at once, without a wait", "[job_planner]") {
  Cluster cluster({"n3"}, {"spare"});
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic, std::chrono::hours(1)), &cluster.nodes,
                     PlannerAgreement::Of(&cluster.coordinator), nullptr, cluster.Source());
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished("j", [](const coord::PublishedPlan&) { return true; }));
  planner.Stop();
  const coord::PublishedPlan p = *cluster.coordinator.Published("j");
  CHECK(p.state == "decided");
  CHECK(p.wait_until_ms == 0);
  const json decision = json::parse(p.plan_json)["decision"];
  CHECK(decision["policy"] == "restart_on_spare");
  CHECK(decision["spare_wait"]["waited_ms"] == 0);
  CHECK_THAT(decision["spare_wait"]["reason"].get<std::string>(),
             Catch::Contains("a spare is registered for every lost node (1 for 1)"));
}

TEST_CASE(
    "planner loop: in confirm mode the transfer runs only once an operator confirmed the shown "
    "version",
    "[job_planner]") {
  Cluster cluster({"n3"});
  RecordingStager stager;
  JobPlanner planner("n0", Options(PlannerMode::kConfirm), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source());
  planner.SetStager(stager.Get());
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished(
      "j", [](const coord::PublishedPlan& p) { return p.state == "awaiting_confirmation"; }));
  FinishNextPass(planner, cluster.coordinator);
  CHECK(stager.Nodes() == 0);
  const coord::PublishedPlan shown = *cluster.coordinator.Published("j");

  auto stale = planner.Confirm("j", shown.version + 100);
  CHECK(stale.status().code() == StatusCode::kBusy);
  auto confirmed = planner.Confirm("j", shown.version);
  REQUIRE(confirmed.ok());
  CHECK(confirmed->state == "confirmed");
  auto again = planner.Confirm("j", 0);  // no longer awaiting confirmation
  CHECK(again.status().code() == StatusCode::kInvalidArgument);

  planner.Replan();
  REQUIRE(cluster.coordinator.WaitPublished(
      "j", [](const coord::PublishedPlan& p) { return TransferIs(p, "done"); }));
  planner.Stop();
  CHECK(cluster.coordinator.Published("j")->state == "confirmed");
  CHECK(stager.Nodes() > 0);
}

TEST_CASE("planner loop: a decision of an older generation cannot be confirmed", "[job_planner]") {
  Cluster cluster({"n3"});
  coord::PublishedPlan old;
  old.generation = kGeneration - 1;
  old.step = kStep;
  old.basis = "n3";
  old.state = "awaiting_confirmation";
  cluster.coordinator.SetPublished("j", old);
  JobPlanner planner("n0", Options(PlannerMode::kConfirm), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source());
  CHECK(planner.Confirm("j", 0).status().code() == StatusCode::kInvalidArgument);
  CHECK(cluster.coordinator.Publications().empty());
}

namespace {

// A loss of n3 at the job's generation and step that nobody acted on yet.
coord::PublishedPlan PendingLoss() {
  coord::PublishedPlan p;
  p.generation = kGeneration;
  p.step = kStep;
  p.basis = "n3";
  p.planner = "n0";
  p.state = "waiting_for_spare";
  return p;
}

}  // namespace

TEST_CASE("planner loop: a loss whose node came back before anyone acted on it is withdrawn",
          "[job_planner]") {
  Cluster cluster({});  // n3 is back
  cluster.coordinator.SetPublished("j", PendingLoss());
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source());
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished(
      "j", [](const coord::PublishedPlan& p) { return p.state == "no_loss"; }));
  planner.Stop();
  const coord::PublishedPlan p = *cluster.coordinator.Published("j");
  CHECK(p.basis == "n3");  // the loss it withdraws
  CHECK(p.step == kStep);
  CHECK(p.generation == kGeneration);
}

TEST_CASE("planner loop: a loss a trainer restored under stands when its node comes back",
          "[job_planner]") {
  Cluster cluster({});
  cluster.coordinator.SetPublished("j", PendingLoss());
  FakeJobCoordinator::Job job;
  job.nodes = {"n1", "n2", "n3"};
  job.generation = kGeneration;
  job.published = cluster.coordinator.Published("j");
  coord::RestoreDecision restored;  // a trainer restored at the decision's generation and step
  restored.generation = kGeneration;
  restored.step = kStep;
  job.decision = restored;
  cluster.coordinator.SetJob("j", job);
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source());
  planner.Start();
  FinishNextPass(planner, cluster.coordinator);
  planner.Stop();
  CHECK(cluster.model_reads.load() > 0);  // it did look at the job
  CHECK(cluster.coordinator.Publications().empty());
  CHECK(cluster.coordinator.Published("j")->state == "waiting_for_spare");
}

// A wait another coordinator started for this loss keeps its deadline; the decision that ends it
// says how long it was (from the deadline and planner.spare_wait_ms).
namespace {
// A 10-minute spare wait another coordinator started, with the given deadline, taken over by a
// planner on n0: the decision it publishes.
coord::PublishedPlan DecidedAfterWait(Cluster& cluster, int64_t deadline) {
  coord::PublishedPlan waiting = PendingLoss();
  waiting.wait_until_ms = deadline;
  cluster.coordinator.SetPublished("j", waiting);
  JobPlanner planner("n0", Options(PlannerMode::kAutomatic, std::chrono::minutes(10)), &cluster.nodes,
                     PlannerAgreement::Of(&cluster.coordinator), nullptr, cluster.Source());
  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished("j", [](const coord::PublishedPlan& p) { return p.state == "decided"; }));
  planner.Stop();
  return *cluster.coordinator.Published("j");
}
}  // namespace

TEST_CASE("planner loop: a spare wait that ran out is decided without a spare and says how long it was",
          "[job_planner]") {
  Cluster cluster({"n3"});
  const int64_t deadline = UnixMs() - 1;  // ran out just now
  const coord::PublishedPlan p = DecidedAfterWait(cluster, deadline);
  CHECK(p.wait_until_ms == deadline);  // the wait it decides after
  const json decision = json::parse(p.plan_json)["decision"];
  CHECK(decision["policy"] == "reconfigure");
  CHECK(decision["spare_wait"]["waited_ms"].get<int64_t>() >= 600 * 1000);
  CHECK(decision["spare_wait"]["waited_ms"].get<int64_t>() <= UnixMs() - (deadline - 600 * 1000));
  CHECK_THAT(decision["spare_wait"]["reason"].get<std::string>(),
             Catch::Contains("no spare came in the 10 min wait (no spare; waiting up to 10 min"));
}

TEST_CASE("planner loop: a spare that comes during the wait is taken, and the wait says how long it was",
          "[job_planner]") {
  Cluster cluster({"n3"}, {"spare"});
  const int64_t deadline = UnixMs() + 240 * 1000;  // 6 of its 10 minutes waited
  const coord::PublishedPlan p = DecidedAfterWait(cluster, deadline);
  CHECK(p.wait_until_ms == 0);  // it did not wait to the end
  const json decision = json::parse(p.plan_json)["decision"];
  CHECK(decision["policy"] == "restart_on_spare");
  CHECK(decision["spare_wait"]["waited_ms"].get<int64_t>() >= 360 * 1000);
  CHECK(decision["spare_wait"]["waited_ms"].get<int64_t>() <= UnixMs() - (deadline - 600 * 1000));
  CHECK_THAT(decision["spare_wait"]["reason"].get<std::string>(), Catch::Contains("a spare is registered"));
}

TEST_CASE("planner loop: plan show decides from this node's view until a decision is published",
          "[job_planner]") {
  Cluster cluster({"n3"});
  JobPlanner planner("n0", Options(PlannerMode::kConfirm), &cluster.nodes, PlannerAgreement::Of(&cluster.coordinator),
                     nullptr, cluster.Source());
  auto shown = planner.Show("j");
  REQUIRE(shown.ok());
  CHECK(!shown->publication);
  CHECK(shown->mode == PlannerMode::kConfirm);
  CHECK(shown->node == "n0");
  CHECK(shown->plan.decision.needed);
  CHECK(shown->plan.lost_nodes == std::vector<std::string>{"n3"});
  json text = json::parse(*planner.PlanJson("j"));  // the edge: what reft.plan and Admin get
  CHECK(text["publication"].is_null());
  CHECK(text["planner_mode"] == "confirm");
  CHECK(text["node"] == "n0");

  planner.Start();
  REQUIRE(cluster.coordinator.WaitPublished("j", [](const coord::PublishedPlan&) { return true; }));
  planner.Stop();
  shown = planner.Show("j");
  REQUIRE(shown.ok());
  REQUIRE(shown->publication);
  CHECK(shown->publication->state == "awaiting_confirmation");
  CHECK(shown->current);
  REQUIRE(shown->plan.decision.transfer);
  CHECK(!shown->plan.decision.transfer->executed);
  // Shown as published: the document is the published one, byte for byte.
  text = json::parse(*planner.PlanJson("j"));
  CHECK(text["publication"]["state"] == "awaiting_confirmation");
  CHECK(text["publication"]["current"] == true);
  CHECK(text["decision"]["transfer"]["executed"] == false);
  for (const char* key : {"publication", "planner_mode", "node", "last_recovery"}) text.erase(key);
  CHECK(text.dump() == cluster.coordinator.Published("j")->plan_json);
}
