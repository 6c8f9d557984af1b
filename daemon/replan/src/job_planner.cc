#include "reft/replan/job_planner.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <spdlog/spdlog.h>

#include "plan_finality.h"
#include "reft/planner/spare_wait.h"
#include "reft/test_point.h"
#include "reft/unix_time.h"
#include "json_text.h"

namespace reft::replan {

using nlohmann::json;

namespace {

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// planner::online::Decide (daemon/planner, a layer below) returns its document as JSON: it is
// read into the typed document here, once, and the loop works on that.
Result<PlanDocument> DecideDocument(const planner::online::JobModelView& model, const json& profile,
                                    const planner::online::Membership& membership) {
  REFT_ASSIGN_OR_RETURN(json doc, planner::online::Decide(model, profile, membership));
  return PlanDocumentFromJson(doc);
}

// The most pipeline positions the job ran with, as a published decision `doc` recorded (0: none).
int PeakUnits(const std::optional<PlanDocument>& doc) { return doc ? doc->peak_units.value_or(0) : 0; }

// Whether the published decision `doc` (of committed step `step`) is a growth of the layout the
// job still runs in `model`: decided at that step or before, on the same ranks and nodes.
bool IsGrowthOf(const std::optional<PlanDocument>& doc, int64_t step, const planner::online::JobModelView& model) {
  if (!doc || !doc->Grows() || step > model.step) return false;
  if (doc->dp != model.dp || doc->tp != model.tp || doc->pp != model.pp) return false;
  std::set<std::tuple<int, int, int, std::string>> decided, running;
  for (const RankState& r : doc->ranks) decided.emplace(r.pp, r.tp, r.dp, r.node.value_or(""));
  for (const auto& r : model.ranks) running.emplace(r.pp, r.tp, r.dp, r.node);
  return decided == running;
}

// Whether the published document `published` decides as `fresh` does. The published one may
// carry the loop's spare wait (what the loop made of the decision, set after this comparison).
bool SameDecision(const std::optional<PlanDocument>& published, const PlanDocument& fresh) {
  if (!published) return false;
  PlanDocument p = *published;
  p.decision.spare_wait.reset();
  p.phases.reset();
  return ToJson(p).dump() == ToJson(fresh).dump();
}

// What the spare-wait rule weighs in `doc`: its spares and lost nodes, the expected time to the
// next failure, restart_on_spare as if a spare were registered (Decide says what it would do)
// and the chosen candidate (none: the decision is to exit).
planner::spare_wait::Situation SituationOf(const PlanDocument& doc, int64_t wait_ms) {
  planner::spare_wait::Situation s;
  s.spare_nodes = static_cast<int>(doc.spare_nodes.size());
  s.lost_nodes = static_cast<int>(doc.lost_nodes.size());
  s.wait_ms = static_cast<double>(wait_ms);
  s.expected_interval_ms = doc.decision.expected_interval_ms.value_or(0);
  for (const PolicyCandidate& c : doc.decision.candidates.value_or(std::vector<PolicyCandidate>{})) {
    if (!c.step_ms || !c.transition_ms) continue;
    const planner::spare_wait::Option option{*c.step_ms, *c.transition_ms};
    if (c.policy == PlanPolicy::kRestartOnSpare) {
      s.on_spare = option;
    } else if (c.feasible && doc.decision.policy == c.policy) {
      s.best_now = option;
      s.best_now_policy = PlanPolicyName(c.policy);
    }
  }
  return s;
}

// Whether every node the growth `doc` grows onto is among `live`.
bool JoiningNodesLive(const PlanDocument& doc, const std::vector<std::string>& live) {
  const std::set<std::string> alive(live.begin(), live.end());
  for (const auto& n : doc.decision.joining_nodes.value_or(std::vector<std::string>{}))
    if (!alive.count(n)) return false;
  return true;
}

}  // namespace

JobPlanner::JobPlanner(std::string node_id, JobPlannerOptions options, peer::NodeDirectory* nodes,
                       PlannerAgreement agreement, const PlanProfiles* profiles,
                       ModelSource model)
    : node_id_(std::move(node_id)),
      options_(options),
      nodes_(nodes),
      agreement_(agreement),
      profiles_(profiles),
      model_(std::move(model)) {}

JobPlanner::~JobPlanner() { Stop(); }

void JobPlanner::Start() {
  // Without consensus there is nothing to publish through (plan show decides on demand).
  if (options_.mode == PlannerMode::kOff || !agreement_.restores->HasConsensus() || thread_.joinable()) return;
  // A node that left (a loss to plan for) and a job this node starts to lead (its previous
  // coordinator left) plan again; so does a node that came, once a job this node leads had a
  // decision (it may grow back onto it: FollowArrivals).
  // Heard here, the departure is `declared_at` of the loss it starts (docs/recovery.md).
  nodes_->AddDepartureListener([w = wakeup_](const std::string& node) { w->Depart(node, UnixMs()); });
  agreement_.plans->AddLeadershipListener([w = wakeup_](const std::string&) { w->Notify(); });
  thread_ = reft::Thread("reft-planner", [this] { Run(); });
}

void JobPlanner::Stop() {
  {
    MutexLock lock(wakeup_->mu);
    wakeup_->stop = true;
  }
  wakeup_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

void JobPlanner::Replan() { wakeup_->Notify(); }

void JobPlanner::Run() {
  Clock::time_point due = Clock::time_point::max();
  for (;;) {
    {
      Wakeup& w = *wakeup_;
      MutexLock lock(w.mu);
      auto ready = [&]() REFT_REQUIRES(w.mu) { return w.stop || w.changed; };
      if (due == Clock::time_point::max()) {
        lock.Wait(w.cv, ready);
      } else {
        lock.WaitUntil(w.cv, due, ready);
      }
      if (w.stop) return;
      w.changed = false;
    }
    due = Clock::time_point::max();
    for (const std::string& job : agreement_.timeline->Jobs()) due = std::min(due, PlanJob(job));
  }
}

void JobPlanner::FollowArrivals() {
  // Only coordinators of jobs that lost nodes watch registrations: every node watching them
  // would cost etcd an event per node and registration (N² as a cluster starts).
  std::call_once(arrivals_once_, [this] {
    nodes_->AddArrivalListener([w = wakeup_](const std::string&) { w->Notify(); });
  });
}

planner::online::Membership JobPlanner::CurrentMembership() const {
  planner::online::Membership m;
  m.live.push_back(node_id_);
  for (const auto& member : nodes_->LiveMembers()) m.live.push_back(member.node_id);
  for (const auto& member : nodes_->Members())
    if (member.state == peer::MemberState::kDead) m.lost.push_back(member.node_id);
  return m;
}

JobPlanner::Clock::time_point JobPlanner::PlanJob(const std::string& job) {
  constexpr auto kNever = Clock::time_point::max();
  const auto retry = Clock::now() + options_.retry;
  // The job's coordinator plans for it (one node per job, elected in etcd and fenced by its
  // lease; not a rule over each node's view of the membership, which could name two nodes
  // while their views differ). Then, cheaply, whether a node of the job is lost at all before
  // the model (which asks the holders) is read.
  if (!agreement_.plans->LeadsJob(job)) return kNever;
  auto job_nodes = agreement_.slots->JobNodes(job);
  if (!job_nodes.ok()) return retry;
  const std::vector<peer::NodeStatus> status = nodes_->Lookup(*job_nodes);  // one answer, in order
  const bool lost = std::any_of(status.begin(), status.end(),
                                [](const peer::NodeStatus& n) { return n.liveness != peer::NodeLiveness::kAlive; });
  auto published = agreement_.plans->PublishedPlanOf(job);
  if (!published.ok()) {
    if (published.status().code() == StatusCode::kUnsupported) return kNever;  // gossip
    return retry;
  }
  const std::optional<coord::PublishedPlan>& current = *published;
  // Without a loss only a job that lost nodes before (a decision was published) may grow back,
  // onto live nodes outside it (JobNodes may still name a node that ran ranks of the job at an
  // older step: the committed step's model tells).
  if (!lost && !current) return kNever;
  FollowArrivals();  // a job that lost a node may grow back later
  auto model = model_(job);
  if (!model.ok()) {
    // No committed step yet: nothing to plan until a membership change, which plans again
    // (said once). A committed step whose meta was not found is a race — a newer commit
    // recycled the slot between reading the commit point and its meta (a growth read while the
    // survivors train on: one CI run waited 120 s for a decision) — or holders that did not
    // answer: both are tried again.
    const bool committed = agreement_.timeline->Generation(job).newest_committed.has_value();
    if (model.status().code() == StatusCode::kNotFound && !committed) {
      spdlog::info("planner: job {}: no model to plan with ({})", job, model.status().ToString());
      return kNever;
    }
    spdlog::debug("planner: job {}: no model ({})", job, model.status().ToString());
    return retry;
  }
  return DecideJob(job, current, std::move(*model));
}

JobPlanner::Clock::time_point JobPlanner::DecideJob(const std::string& job,
                                                    const std::optional<coord::PublishedPlan>& current,
                                                    planner::online::JobModelView model) {
  constexpr auto kNever = Clock::time_point::max();
  const auto retry = Clock::now() + options_.retry;
  const std::optional<PlanDocument> current_doc = current ? DocumentOf(*current) : std::nullopt;
  model.peak_units = PeakUnits(current_doc);
  const json profile = profiles_ != nullptr ? profiles_->Get(job) : json(nullptr);
  auto doc = DecideDocument(model, profile, CurrentMembership());
  if (!doc.ok()) {
    // A job whose buffers name no layers, for one: `plan show` says the same to whoever asks.
    spdlog::info("planner: job {}: no decision: {}", job, doc.status().message());
    return kNever;
  }
  const PolicyDecision& decision = doc->decision;
  const uint64_t generation = agreement_.timeline->Generation(job).generation;
  if (!decision.needed) {
    // The nodes of a loss came back (a restarted reftd that adopted its slots): a decision
    // nobody acted on yet goes, so that no trainer waits on it (plan_finality.h).
    if (current && DecidesLossOf(*current, generation, model.step)) return WithdrawLoss(job, *current, *doc);
    // A job that lost nodes before and did not grow back onto a node that came: say why (the
    // score, no plan, no profile), so that a launcher waiting for a growth can be told.
    if (current && !doc->spare_nodes.empty()) {
      spdlog::info("planner: job {} (step {}): stays on its nodes — {}", job, model.step, decision.reason);
    }
    return kNever;
  }

  PlanDecision plan;
  plan.generation = generation;
  plan.step = model.step;
  const bool growth = doc->Grows();
  plan.basis =
      growth ? "+" + Join(decision.joining_nodes.value_or(std::vector<std::string>{})) : Join(doc->lost_nodes);
  plan.plan = std::move(*doc);
  // A growth stands while the job runs on in the layout it was decided for (it commits steps
  // until the launcher restarts it onto the nodes that came); a loss stops the job at its step.
  const bool same_loss = current && current->generation == generation && current->basis == plan.basis &&
                         (current->step == plan.step || (growth && IsGrowthOf(current_doc, current->step, model)));
  // A decision once made stands for its loss (trainers may be acting on it); a new loss, a
  // new generation or a new committed step is planned anew. Its transfer plan runs (or resumes:
  // this node may have taken over from a coordinator that stopped midway).
  auto current_is = [&current](PlanState state) { return current && current->state == PlanStateName(state); };
  if (same_loss && (current_is(PlanState::kDecided) || current_is(PlanState::kConfirmed))) {
    return ExecuteTransfer(job, *current);
  }
  // Confirmed on any node: look again until it is (then the transfer runs).
  // (A growth's document changes with the step it is read at, not its layout.)
  const bool same_decision = same_loss && (growth || SameDecision(current_doc, plan.plan));
  if (same_decision && current_is(PlanState::kAwaitingConfirmation) && options_.mode == PlannerMode::kConfirm) {
    return retry;
  }
  // The phases of the loss: those of its first publication (whichever node made it) stand.
  if (!growth) {
    plan.plan.phases = same_loss && current_doc && current_doc->phases ? current_doc->phases
                                                                      : LossPhases(job, plan.plan.lost_nodes);
  }
  const Clock::time_point due = ChooseState(same_loss ? current : std::nullopt, &plan);
  if (same_decision && current_is(plan.state)) return due;
  return Publish(job, current, plan, due);
}

RecoveryPhases JobPlanner::LossPhases(const std::string& job,
                                      const std::vector<std::string>& lost) const {
  RecoveryPhases phases;
  int64_t declared = 0;
  std::string last;  // the node declared last: the loss is complete with it
  {
    MutexLock lock(wakeup_->mu);
    for (const std::string& node : lost) {
      auto it = wakeup_->declared_ms.find(node);
      if (it != wakeup_->declared_ms.end() && it->second >= declared) {
        declared = it->second;
        last = node;
      }
    }
  }
  if (declared == 0) return phases;  // declared before this node listened: not known here
  phases.declared_at = PhaseMark{declared, node_id_};
  // The latest moment the node is known alive. A lease that lapsed at the departure was last
  // renewed a TTL before it; one revoked early (a suspicion confirmed: docs/coordination.md
  // "Suspicions") was renewed later, and then its last completion report — which a training
  // node sends every step — is the closer bound. (Its last peer contact is not consulted.)
  std::optional<int64_t> lost_ms;
  if (options_.lease_ttl.count() > 0) lost_ms = declared - options_.lease_ttl.count();
  if (auto heard = agreement_.plans->LastHeardFrom(job, last); heard && *heard <= declared) {
    lost_ms = std::max(lost_ms.value_or(*heard), *heard);
  }
  if (lost_ms) phases.lost_at = PhaseMark{*lost_ms, node_id_};
  return phases;
}

std::optional<LastRecovery> JobPlanner::LastRecoveryOf(const std::string& job,
                                                       const coord::PublishedPlan& record) const {
  std::optional<RecoveryPhases> phases = JobPhasesOf(record);
  if (!phases) return std::nullopt;
  LastRecovery recovery;
  recovery.phases = *phases;
  if (commits_ != nullptr) {
    if (auto first = commits_->FirstCommitAfter(job, record.step)) {
      recovery.first_commit_step = first->step;
      recovery.first_commit_at = PhaseMark{first->at_ms, node_id_};
    }
  }
  return recovery;
}

JobPlanner::Clock::time_point JobPlanner::ChooseState(const std::optional<coord::PublishedPlan>& same_loss,
                                                      PlanDecision* plan) const {
  PlanDocument& doc = plan->plan;
  if (!doc.decision.policy) {
    plan->state = PlanState::kUndecided;
    return Clock::time_point::max();
  }
  plan->state = options_.mode == PlannerMode::kConfirm ? PlanState::kAwaitingConfirmation : PlanState::kDecided;
  if (doc.lost_nodes.empty()) return Clock::time_point::max();  // a growth: no spare to wait for
  // The spare wait as a decision (reft/planner/spare_wait.h): wait only when restarting on a
  // spare after the wait trains more before the expected next failure than going on now.
  const int64_t now = UnixMs();
  const int64_t wait_ms = options_.spare_wait.count();
  const planner::spare_wait::Choice choice = planner::spare_wait::Choose(SituationOf(doc, wait_ms));
  // A wait started with the first publication of this loss, whichever node made it: its deadline
  // stands, and it began planner.spare_wait_ms (this node's setting) before it.
  const int64_t deadline = same_loss && same_loss->wait_until_ms > 0 ? same_loss->wait_until_ms : 0;
  const int64_t waited = deadline > 0 ? std::max<int64_t>(0, now - (deadline - wait_ms)) : 0;
  doc.decision.spare_wait = SpareWait{waited, choice.reason};
  if (!choice.wait) return Clock::time_point::max();
  plan->wait_until_ms = deadline > 0 ? deadline : now + wait_ms;
  const int64_t left = plan->wait_until_ms - now;
  if (left <= 0) {
    doc.decision.spare_wait->reason = "no spare came in the " + planner::spare_wait::DurationText(wait_ms) +
                                      " wait (" + choice.reason + ")";
    return Clock::time_point::max();
  }
  plan->state = PlanState::kWaitingForSpare;
  // Nodes that come are not announced: look again each retry interval until the wait ends.
  return Clock::now() + std::min<std::chrono::milliseconds>(std::chrono::milliseconds(left), options_.retry);
}

JobPlanner::Clock::time_point JobPlanner::Publish(const std::string& job,
                                                  const std::optional<coord::PublishedPlan>& current,
                                                  const PlanDecision& plan, Clock::time_point due) {
  const auto retry = Clock::now() + options_.retry;
  const coord::PublishedPlan record = ToRecord(plan, node_id_, UnixMs());
  test_point::Reach(kPlanDecided, job, this);
  auto in_force = agreement_.plans->PublishPlan(job, record, current ? current->version : 0,
                                             coord::PlanPublisher::kCoordinator);
  if (!in_force.ok()) {
    spdlog::warn("planner: job {}: publishing the decision failed: {}", job, in_force.status().ToString());
    return retry;
  }
  if (in_force->planner != node_id_ || in_force->decided_at_ms != record.decided_at_ms) {
    return std::min(due, retry);  // another node published first: look again
  }
  const PolicyDecision& decision = plan.plan.decision;
  spdlog::info("planner: job {} (step {}, lost {}): {} — {} [{}]", job, plan.step, plan.basis,
               decision.policy ? PlanPolicyName(*decision.policy) : "no decision", decision.reason,
               record.state);
  if (plan.state == PlanState::kDecided) return std::min(due, ExecuteTransfer(job, *in_force));
  if (plan.state == PlanState::kAwaitingConfirmation) return std::min(due, retry);
  return due;
}

JobPlanner::Clock::time_point JobPlanner::WithdrawLoss(const std::string& job,
                                                       const coord::PublishedPlan& current,
                                                       const PlanDocument& doc) {
  constexpr auto kNever = Clock::time_point::max();
  // Asked only now (one linearizable read): a trainer that restored under the decision, at its
  // generation and step, made it final.
  auto restored = agreement_.restores->Decision(job);
  if (!restored.ok()) return Clock::now() + options_.retry;
  const bool restored_under_it = restored->has_value() && (*restored)->generation == current.generation &&
                                 (*restored)->step == current.step;
  if (const std::string final_because = FinalBecause(current, restored_under_it); !final_because.empty()) {
    spdlog::info("planner: job {} (step {}): {} came back; the decision ({}) stands: {}", job, current.step,
                 current.basis, current.state, final_because);
    return kNever;
  }
  PlanDecision withdrawal;
  withdrawal.state = PlanState::kNoLoss;
  withdrawal.generation = current.generation;
  withdrawal.step = current.step;
  withdrawal.basis = current.basis;  // the loss it withdraws
  withdrawal.plan = doc;
  const coord::PublishedPlan plan = ToRecord(withdrawal, node_id_, UnixMs());
  auto in_force = agreement_.plans->PublishPlan(job, plan, current.version, coord::PlanPublisher::kCoordinator);
  if (!in_force.ok()) {
    spdlog::warn("planner: job {}: withdrawing the loss of {} failed: {}", job, current.basis,
                 in_force.status().ToString());
    return Clock::now() + options_.retry;
  }
  // A newer one won: look again.
  if (in_force->state != PlanStateName(PlanState::kNoLoss)) return Clock::now() + options_.retry;
  spdlog::info("planner: job {} (step {}): {} came back before the decision ({}) was acted on; the loss "
               "is withdrawn and the job goes on as it runs [{}]",
               job, plan.step, current.basis, current.state, plan.state);
  return kNever;
}

JobPlanner::Clock::time_point JobPlanner::ExecuteTransfer(const std::string& job,
                                                          const coord::PublishedPlan& published) {
  constexpr auto kNever = Clock::time_point::max();
  if (!stager_) return kNever;
  const std::optional<PlanDocument> doc = DocumentOf(published);
  if (!doc || !doc->decision.transfer) return kNever;  // no new layout to restart in
  const TransferPlan& transfer = *doc->decision.transfer;
  json progress = StoredProgress(published.transfer_json);
  if (!TransferWanted(progress, options_.transfer_attempts)) return kNever;
  if (!progress.is_object() || !progress.contains("hosts")) progress = NewTransferProgress(transfer);

  // Each publication is a compare-and-swap on the last one: a newer decision (a new loss, a
  // new generation) replaces this one, and its transfer plan is the one that runs.
  coord::PublishedPlan record = published;
  auto publish = [&](const json& p) {
    {
      // Stopping: start no further node (the next coordinator resumes the hosts not done).
      Wakeup& w = *wakeup_;
      MutexLock lock(w.mu);
      if (w.stop) return false;
    }
    coord::PublishedPlan next = record;
    next.transfer_json = p.dump();
    auto in_force = agreement_.plans->PublishPlan(job, next, record.version, coord::PlanPublisher::kCoordinator);
    if (!in_force.ok() || in_force->transfer_json != next.transfer_json) {
      spdlog::warn("planner: job {}: the transfer plan of decision version {} stops: {}", job,
                   published.version,
                   in_force.ok() ? "a newer decision replaced it" : in_force.status().ToString());
      return false;
    }
    record = *in_force;
    return true;
  };
  spdlog::info("planner: job {} (step {}): executing the transfer plan ({} nodes, {} layer moves of {} bytes)", job,
               published.step, progress["hosts"].size(), progress["moves"].size(), transfer.total_bytes);
  const json final_progress =
      RunTransfer(std::move(progress), job, published.step, stager_, options_.transfer_concurrency, publish);
  const std::string state = final_progress["state"];
  spdlog::info("planner: job {}: transfer plan {} ({} bytes staged, {} fetched)", job, state,
               final_progress.value("bytes_staged", uint64_t{0}),
               final_progress.value("bytes_fetched", uint64_t{0}));
  return state == "done" ? kNever : Clock::now() + options_.retry;
}

Result<std::string> JobPlanner::PlanJson(const std::string& job) {
  REFT_ASSIGN_OR_RETURN(PlanShow show, Show(job));
  return ToJson(show).dump();
}

Result<PlanShow> JobPlanner::Show(const std::string& job) {
  auto model = model_(job);
  std::optional<coord::PublishedPlan> published;
  if (auto p = agreement_.plans->PublishedPlanOf(job); p.ok()) {
    published = *p;
  } else if (p.status().code() != StatusCode::kUnsupported) {
    spdlog::warn("plan show: job {}: the published decision cannot be read: {}", job, p.status().ToString());
  }
  if (!model.ok() && !published) return model.status();
  // A growth stays current while the job runs on in the layout it grows (until the launcher
  // restarts the ranks onto it) and the nodes it grows onto live; any other decision is of its
  // committed step.
  const std::optional<PlanDocument> published_doc = published ? DocumentOf(*published) : std::nullopt;
  bool current = published && published->generation == agreement_.timeline->Generation(job).generation;
  if (current && model.ok()) {
    current = published_doc && published_doc->Grows()
                  ? IsGrowthOf(published_doc, published->step, *model) &&
                        JoiningNodesLive(*published_doc, CurrentMembership().live)
                  : published->step == model->step;
  }
  if (model.ok()) model->peak_units = PeakUnits(published_doc);
  PlanShow show;
  if (current) {
    if (!published_doc) {
      return Status::Corrupted("job '" + job + "': the published decision is not a planner document");
    }
    show.plan = *published_doc;
  } else {
    if (!model.ok()) return model.status();
    const json profile = profiles_ != nullptr ? profiles_->Get(job) : json(nullptr);
    REFT_ASSIGN_OR_RETURN(show.plan, DecideDocument(*model, profile, CurrentMembership()));
  }
  show.publication = published;
  show.current = current;
  if (current && show.plan.decision.transfer) {
    const json progress = StoredProgress(published->transfer_json);
    show.plan.decision.transfer->executed = progress.is_object() && TextOr(progress, "state") == "done";
  }
  show.mode = options_.mode;
  show.node = node_id_;
  // The last recovery, whether or not its decision is still current (the job may have gone on).
  if (published && published->generation == agreement_.timeline->Generation(job).generation) {
    show.last_recovery = LastRecoveryOf(job, *published);
  }
  return show;
}

Result<coord::PublishedPlan> JobPlanner::Confirm(const std::string& job, int64_t version) {
  auto p = agreement_.plans->PublishedPlanOf(job);
  if (!p.ok()) return p.status();
  if (!*p) return Status::NotFound("job '" + job + "' has no published decision to confirm");
  coord::PublishedPlan plan = **p;
  const uint64_t generation = agreement_.timeline->Generation(job).generation;
  if (plan.generation != generation) {
    return Status::InvalidArgument("the published decision of job '" + job + "' is of generation " +
                                   std::to_string(plan.generation) + "; the job is in generation " +
                                   std::to_string(generation) + " (void)");
  }
  if (plan.state != PlanStateName(PlanState::kAwaitingConfirmation)) {
    return Status::InvalidArgument("the published decision of job '" + job + "' is " + plan.state +
                                   ", not awaiting confirmation");
  }
  if (version != 0 && version != plan.version) {
    return Status::Busy("the published decision of job '" + job + "' changed since version " +
                        std::to_string(version) + " (now " + std::to_string(plan.version) +
                        "): show it again");
  }
  const int64_t shown = plan.version;
  plan.state = PlanStateName(PlanState::kConfirmed);
  plan.decided_at_ms = UnixMs();
  REFT_ASSIGN_OR_RETURN(coord::PublishedPlan in_force,
                        agreement_.plans->PublishPlan(job, plan, shown, coord::PlanPublisher::kOperator));
  if (in_force.state != plan.state || in_force.decided_at_ms != plan.decided_at_ms) {
    return Status::Busy("the published decision of job '" + job + "' changed while confirming: show it again");
  }
  spdlog::info("planner: job {}: decision of version {} confirmed", job, shown);
  return in_force;
}

}  // namespace reft::replan
