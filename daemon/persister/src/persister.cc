/// \file persister.cc
/// \brief Committed steps to the persistent tier: one node's ranks, a whole job, the schedule.

#include "reft/persister/persister.h"

#include <algorithm>
#include <future>
#include <set>

#include "reft/local/job_ownership.h"
#include "reft/log.h"
#include "reft/peer/peer_node.h"
#include "reft/peer/rank_id.h"
#include "reft/protect/sharding.h"
#include "reft/protect/slot_meta.h"
#include "reft/recovery/snapshot_meta.h"
#include "reft/recovery/tier_restore.h"

namespace reft::persister {

using recovery::DecodeMetaRegion;
using recovery::ToManifestOwner;

namespace {

using Clock = std::chrono::steady_clock;

bool OwnRegion(const std::string& name) {
  return name == protect::kRegionMeta || name == protect::kRegionShard ||
         name.rfind("unique/", 0) == 0;
}

std::string StepStr(int64_t step) { return "step " + std::to_string(step); }

// How often a persist of "the newest committed step" follows a commit that freed its step.
constexpr int kNewestAttempts = 3;

// Marks `n` as skipped by rule (not an error).
void Skip(NodePersist* n, std::string why) {
  n->skipped = true;
  n->skipped_reason = std::move(why);
}

// The job's layout from one of this node's slots of `step` (the slot meta is the truth about
// what was snapshotted), else from the commit state.
Result<JobLayout> LayoutOf(store::SnapshotStore* store, coord::JobTimeline* timeline,
                           const std::string& job, int64_t step) {
  for (const auto& rank : store->Ranks(job)) {
    auto slot = store->Get(rank, step);
    if (!slot.ok()) continue;
    auto idx = (*slot)->FindRegion(protect::kRegionMeta);
    if (!idx.ok()) continue;
    auto meta = DecodeMetaRegion((*slot)->region_data(*idx), (*slot)->region_size(*idx));
    if (meta.ok()) return meta->layout;
  }
  auto l = timeline->Layout(job);
  if (!l) return Status::NotFound("the layout of job '" + job + "' is unknown on this node");
  return *l;
}

// The job's other nodes that are not known dead (etcd: where its slots are recorded; gossip:
// every live member).
Result<std::vector<peer::MemberInfo>> LiveJobMembers(peer::PeerNode* peer,
                                                     coord::SlotDirectory* slots,
                                                     const std::string& job) {
  auto nodes = slots->JobNodes(job);
  if (!nodes.ok()) return nodes.status().WithContext("locating the nodes of job '" + job + "'");
  std::vector<peer::MemberInfo> members;
  for (const auto& id : *nodes) {
    auto m = peer->membership().Find(id);
    if (m && m->state != peer::MemberState::kDead) members.push_back(*m);
  }
  return members;
}

}  // namespace

PersistFailureKind ClassifyPersistFailure(const Status& status) {
  const std::string& m = status.message();
  switch (status.code()) {
    case StatusCode::kNotFound:
      return m.rfind("persistent directory", 0) == 0 ? PersistFailureKind::kMissingDir
                                                     : PersistFailureKind::kOther;
    case StatusCode::kPermissionDenied:
      return PersistFailureKind::kPermission;
    case StatusCode::kIoError:
      if (m.find("no space left") != std::string::npos || m.find("quota") != std::string::npos) {
        return PersistFailureKind::kNoSpace;
      }
      return PersistFailureKind::kIo;
    default:
      return PersistFailureKind::kOther;
  }
}

bool StepFreedUnderPersist(const std::vector<NodePersist>& nodes) {
  const auto freed = [](const NodePersist& n) {
    return n.status.code() == StatusCode::kNotFound &&
           ClassifyPersistFailure(n.status) != PersistFailureKind::kMissingDir;
  };
  const bool any_freed = std::any_of(nodes.begin(), nodes.end(), freed);
  const bool failed_otherwise = std::any_of(nodes.begin(), nodes.end(), [&](const NodePersist& n) {
    return !n.status.ok() && !freed(n);
  });
  return any_freed && !failed_otherwise;
}

bool JobPersistReport::ok() const {
  if (!complete) return false;
  for (const auto& n : nodes) {
    if (!n.status.ok()) return false;
  }
  return true;
}

v1::PersistStepResponse ToProto(const NodePersist& n) {
  v1::PersistStepResponse r;
  r.set_node_id(n.node);
  r.set_job(n.job);
  r.set_step(n.step);
  r.set_code(static_cast<v1::ErrorCode>(n.status.code()));  // mirrors StatusCode one to one
  r.set_message(n.status.message());
  r.set_skipped(n.skipped);
  r.set_skipped_reason(n.skipped_reason);
  for (const auto& k : n.ranks) *r.add_ranks() = peer::ToRankId(k);
  r.set_bytes_written(n.bytes);
  r.set_seconds(n.seconds);
  return r;
}

NodePersist FromProto(const v1::PersistStepResponse& r) {
  NodePersist n;
  n.node = r.node_id();
  n.job = r.job();
  n.step = r.step();
  n.status =
      r.code() == v1::OK ? Status::OK() : Status(static_cast<StatusCode>(r.code()), r.message());
  n.skipped = r.skipped();
  n.skipped_reason = r.skipped_reason();
  for (const auto& k : r.ranks()) n.ranks.push_back({k.job(), k.pp(), k.tp(), k.dp()});
  n.bytes = r.bytes_written();
  n.seconds = r.seconds();
  return n;
}

Persister::Persister(store::SnapshotStore* store, peer::PeerNode* peer,
                     PersisterAgreement agreement, recovery::TierAccess* tier,
                     PersisterOptions options)
    : store_(store),
      peer_(peer),
      agreement_(agreement),
      tier_(tier),
      options_(std::move(options)) {}

Persister::~Persister() { Stop(); }

void Persister::Start() {
  peer_->SetPersistHandler([this](const v1::PersistStepRequest& req) {
    // A caller's wait is bounded by this node's own: no request holds a server thread longer.
    const auto wait = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(req.wait_commit_ms()), options_.next_commit_wait);
    return ToProto(PersistLocal(req.job(), req.step(), true, wait));
  });
  MutexLock lock(mu_);
  if (running_ || options_.every_steps <= 0) return;
  running_ = true;
  thread_ = reft::Thread("reft-persister", [this] { Run(); });
}

void Persister::Stop() {
  peer_->SetPersistHandler(nullptr);
  {
    MutexLock lock(mu_);
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

NodePersist Persister::PersistLocal(const std::string& job, int64_t step, bool force,
                                    std::chrono::milliseconds wait_commit) {
  const auto start = Clock::now();
  NodePersist n;
  n.node = options_.node_id;
  n.job = job;
  n.step = step;
  // The ledger commits the step in the store before it wakes the waiters, so the slots
  // are pinned a whole training step before the next commit frees them. Not committed in
  // time: PinStep says so.
  if (wait_commit.count() > 0) (void)agreement_.ledger->WaitCommitted(job, step, wait_commit);
  // Pin the step's slots before anything else: the next commit frees them, and waiting for
  // another persist of this node or scanning the tier first would leave it the time to.
  std::vector<std::shared_ptr<store::SlotRef>> pins;
  std::string freed;
  const bool pinned = PinStep(job, step, &n, &pins, &freed);
  // Pinned, or nothing to pin: a hold of the job's next commit at `step` need not wait for
  // this node any longer.
  if (hold_ != nullptr) {
    if (Status s = hold_->Pinned(job, step); !s.ok()) {
      LogWarning("the pin of " + StepStr(step) + " of job '" + job + "' was not reported (the "
                 "job's next commit waits for it until its hold runs out): " + s.ToString());
    }
  }
  if (pinned) {
    MutexLock lock(write_mu_);
    PersistPinned(pins, freed, force, &n);
  }
  n.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (observer_) observer_(n);
  return n;
}

bool Persister::PinStep(const std::string& job, int64_t step, NodePersist* n,
                        std::vector<std::shared_ptr<store::SlotRef>>* pins, std::string* freed) {
  auto skip = [&](std::string why) {
    Skip(n, std::move(why));
    return false;
  };
  const auto ranks = store_->Ranks(job);
  if (ranks.empty()) return skip("no rank of job '" + job + "' on this node");
  const auto gen = agreement_.timeline->Generation(job);
  if (!gen.newest_committed || step > *gen.newest_committed) {
    n->status = Status::InvalidArgument(
        StepStr(step) + " of job '" + job + "' is not committed on node '" + n->node + "'" +
        (gen.newest_committed ? " (newest committed: " + std::to_string(*gen.newest_committed) + ")"
                              : ""));
    return false;
  }
  if (step <= gen.persist_floor) {
    return skip(StepStr(step) + " is at or below the persist floor " +
                std::to_string(gen.persist_floor) + " of generation " +
                std::to_string(gen.generation) +
                " (step directories up to it may hold files of the abandoned run)");
  }
  // A held SlotRef keeps a freed slot mapped and unchanged until the files are written.
  for (const auto& rank : ranks) {
    auto slot = store_->Get(rank, step);
    if (slot.ok()) {
      pins->push_back(std::move(*slot));
      continue;
    }
    if (slot.status().code() != StatusCode::kNotFound) {
      n->status = slot.status();
      return false;
    }
    // A rank hosted here only at other steps (e.g. its trainer moved): only a missing slot of
    // a rank that has a newer commit here means the step was freed under us.
    auto committed = store_->NewestCommitted(rank);
    if (committed && *committed > step) {
      *freed = "the slot of " + rank.ToString() + " at " + StepStr(step) +
               " was freed by the commit of step " + std::to_string(*committed) + " on node '" +
               n->node + "'";
      return true;  // an error unless the tier makes the step a skip (PersistPinned)
    }
  }
  if (pins->empty()) return skip("no slot of job '" + job + "' at " + StepStr(step) + " here");
  return true;
}

void Persister::PersistPinned(const std::vector<std::shared_ptr<store::SlotRef>>& pins,
                              const std::string& freed, bool force, NodePersist* n) {
  const std::string& job = n->job;
  const int64_t step = n->step;
  auto layout = LayoutOf(store_, agreement_.timeline, job, step);
  if (!layout.ok()) {
    n->status = layout.status();
    return;
  }
  auto tier = tier_->Get(force);
  if (!tier.ok()) {
    n->status = tier.status();
    return;
  }
  auto newest = (*tier)->NewestCompleteStep(job, *layout);
  if (!newest.ok()) {
    tier_->Report(newest.status());
    n->status = newest.status();
    return;
  }
  if (newest->has_value() && step <= **newest) {
    Skip(n, StepStr(step) + " is not newer than the tier's newest complete step " +
                std::to_string(**newest));
    return;
  }
  if (!freed.empty()) {
    n->status = Status::NotFound(freed);
    return;
  }
  std::vector<persist::RankImage> images;
  for (const auto& slot : pins) {
    persist::RankImage img{slot->info().rank, {}};
    const auto& info = slot->info();
    for (size_t i = 0; i < info.regions.size(); ++i) {
      if (!OwnRegion(info.regions[i].name)) continue;
      img.regions.push_back({info.regions[i].name, slot->region_data(i), slot->region_size(i)});
    }
    images.push_back(std::move(img));
  }
  // Already there from an earlier call (this node's ranks valid): nothing to rewrite.
  auto check = (*tier)->CheckStep(job, step, *layout);
  if (check.ok()) {
    std::set<store::RankKey> valid(check->valid.begin(), check->valid.end());
    bool all = true;
    for (const auto& img : images) all &= valid.count(img.rank) > 0;
    if (all) {
      Skip(n, "this node's ranks of " + StepStr(step) + " are already in the tier");
      return;
    }
  }

  // The manifest records the job's owner, so a restore never hands the step to another one.
  std::optional<persist::ManifestOwner> owner;
  if (owners_ != nullptr) {
    auto current = owners_->Owner(job);
    if (!current.ok()) {
      n->status = current.status().WithContext("reading the owner of job '" + job +
                                               "' for the manifest of " + StepStr(step));
      return;
    }
    if (current->has_value()) owner = ToManifestOwner(**current);
  }
  auto rep = (*tier)->PersistStep(job, step, *layout, images, owner);
  tier_->Report(rep.status());
  if (!rep.ok()) {
    n->status = rep.status();
    return;
  }
  for (const auto& f : rep->files) n->ranks.push_back(f.rank);
  n->bytes = rep->bytes_written;
  n->removed_steps = rep->removed_steps;
  n->retention_error = rep->retention_error;
  MutexLock lock(mu_);
  auto c = (*tier)->CheckStep(job, step, *layout);
  if (c.ok() && c->complete) last_complete_[job] = std::max(last_complete_[job], step);
}

Result<JobPersistReport> Persister::PersistJob(const std::string& job, std::optional<int64_t> step,
                                               const PersistProgress& progress) {
  coord::JobTimeline* timeline = agreement_.timeline;
  std::vector<std::string> warnings;
  // The newest committed step after a sync with the job's nodes.
  auto newest_committed = [&]() -> Result<int64_t> {
    Status synced = timeline->SyncNow(job, options_.sync_timeout);
    if (!synced.ok()) warnings.push_back(synced.message());
    const auto gen = timeline->Generation(job);
    if (!gen.newest_committed) return Status::NotFound("job '" + job + "' has no committed step");
    return *gen.newest_committed;
  };
  REFT_ASSIGN_OR_RETURN(int64_t newest, newest_committed());
  if (step && *step > newest) {
    return Status::InvalidArgument(StepStr(*step) + " of job '" + job +
                                   "' is not committed (newest committed: " +
                                   std::to_string(newest) + ")");
  }
  // "The newest" races the training: the next commit frees the step's slots on every node, and
  // a node that receives the request after that has nothing to write (NOT_FOUND). A training
  // that commits faster than the request reaches every node would win every such race, so a
  // lost one is not retried on the then-newest step: every node is asked for the *next* step
  // and waits for it, pinning its slots the moment it commits there (a whole training step
  // before the following commit frees them). Only when nothing but freed slots failed: a full
  // tier or an I/O error would fail the next step the same way. An explicit step is the
  // caller's choice and is reported as it went.
  //
  // With a commit hold the race is not run at all: the next commit waits until every node
  // pinned the step (a node that has not learnt the commit yet waits for it as long as the
  // hold lasts).
  std::chrono::milliseconds wait_commit{0};
  int64_t held = -1;  // the step the job's next commit is held at (-1: none)
  if (hold_ != nullptr && options_.commit_hold.count() > 0) {
    if (auto h = HoldCommit(job, step, &warnings)) {
      held = newest = *h;
      wait_commit = options_.commit_hold;
    }
  }
  for (int attempt = 1;; ++attempt) {
    auto persisted = PersistStepOnNodes(job, step ? *step : newest, progress, wait_commit);
    if (held >= 0) hold_->Release(job, held);
    held = -1;
    REFT_ASSIGN_OR_RETURN(JobPersistReport rep, std::move(persisted));
    std::optional<int64_t> next;  // the step to persist as it commits
    if (!step && attempt < kNewestAttempts && StepFreedUnderPersist(rep.nodes)) {
      auto now = newest_committed();
      if (now.ok()) next = std::max(*now, rep.step) + 1;
    }
    if (!next) {
      rep.warnings.insert(rep.warnings.begin(), warnings.begin(), warnings.end());
      return rep;
    }
    warnings.push_back(StepStr(rep.step) + " was freed by a newer commit while it was being "
                       "persisted; persisting " + StepStr(*next) + " as it commits on each node");
    newest = *next;
    wait_commit = options_.next_commit_wait;
  }
}

std::optional<int64_t> Persister::HoldCommit(const std::string& job, std::optional<int64_t> step,
                                             std::vector<std::string>* warnings) {
  auto members = LiveJobMembers(peer_, agreement_.slots, job);
  if (!members.ok()) {
    warnings->push_back("the next commit was not held: " + members.status().message());
    return std::nullopt;
  }
  std::vector<std::string> nodes{options_.node_id};
  for (const auto& m : *members) {
    if (m.node_id != options_.node_id) nodes.push_back(m.node_id);
  }
  auto held = hold_->Hold(job, step, nodes, options_.commit_hold);
  if (!held.ok()) {
    warnings->push_back("the next commit was not held (the persist races it): " +
                        held.status().ToString());
    return std::nullopt;
  }
  return *held;
}

Result<JobPersistReport> Persister::PersistStepOnNodes(const std::string& job, int64_t step,
                                                       const PersistProgress& progress,
                                                       std::chrono::milliseconds wait_commit) {
  JobPersistReport rep;
  rep.job = job;
  rep.step = step;
  REFT_ASSIGN_OR_RETURN(std::vector<peer::MemberInfo> members,
                        LiveJobMembers(peer_, agreement_.slots, job));
  const int total = 1 + static_cast<int>(members.size());
  Mutex progress_mu;
  int done = 0;
  auto finished = [&](const NodePersist& n) {
    if (!progress) return;
    MutexLock lock(progress_mu);
    ++done;
    const std::string what =
        n.status.ok() ? (n.skipped ? "skipped" : "persisted") : "failed: " + n.status.ToString();
    progress(done, total, "node '" + n.node + "' " + what);
  };
  if (progress) {
    progress(0, total, "persisting step " + std::to_string(rep.step) +
                           (wait_commit.count() > 0 ? " as it commits" : ""));
  }
  std::vector<std::pair<std::string, std::future<NodePersist>>> calls;
  for (const auto& m : members) {
    calls.emplace_back(m.node_id,
                       reft::Async("reft-persist-rq", [this, m, &job, &rep, finished, wait_commit] {
                         NodePersist n;
                         auto r = peer_->client().PersistStep(m.address, job, rep.step,
                                                              options_.peer_timeout, wait_commit);
                         if (r.ok()) {
                           n = FromProto(*r);
                         } else {
                           n.status = r.status();
                         }
                         n.node = m.node_id;
                         n.job = job;
                         n.step = rep.step;
                         finished(n);
                         return n;
                       }));
  }
  NodePersist self = PersistLocal(job, rep.step, true, wait_commit);
  finished(self);
  rep.nodes.push_back(std::move(self));
  for (auto& [node, f] : calls) rep.nodes.push_back(f.get());
  std::sort(rep.nodes.begin() + 1, rep.nodes.end(),
            [](const NodePersist& a, const NodePersist& b) { return a.node < b.node; });

  // Is the step complete in the tier now (every rank of the layout, whoever wrote it)?
  auto tier = tier_->Get(true);
  if (!tier.ok()) {
    rep.problems.push_back("persistent tier: " + tier.status().ToString());
    return rep;
  }
  auto layout = LayoutOf(store_, agreement_.timeline, job, rep.step);
  if (!layout.ok()) {
    rep.problems.push_back(layout.status().ToString());
    return rep;
  }
  auto check = (*tier)->CheckStep(job, rep.step, *layout);
  if (check.ok()) {
    rep.complete = check->complete;
    rep.problems = check->problems;
  } else if (check.status().code() == StatusCode::kNotFound) {
    rep.problems.push_back("step " + std::to_string(rep.step) + " has no directory in " +
                           tier_->options().dir);
  } else {
    tier_->Report(check.status());
    rep.problems.push_back(check.status().ToString());
  }
  auto newest = (*tier)->NewestCompleteStep(job, *layout);
  if (newest.ok()) {
    rep.newest_complete = *newest;
    if (newest->has_value()) {
      MutexLock lock(mu_);
      last_complete_[job] = std::max(last_complete_[job], **newest);
    }
  }
  return rep;
}

bool Persister::IsScheduleLeader(const std::string& job) const {
  return agreement_.plans->LeadsJob(job);
}

std::vector<JobPersistReport> Persister::RunScheduleOnce() {
  std::vector<JobPersistReport> out;
  if (options_.every_steps <= 0) return out;
  coord::JobTimeline* timeline = agreement_.timeline;
  for (const auto& job : timeline->Jobs()) {
    if (!IsScheduleLeader(job)) continue;
    const auto gen = timeline->Generation(job);
    if (!gen.newest_committed) continue;
    const int64_t newest = *gen.newest_committed;
    if (newest <= gen.persist_floor) continue;  // nothing this generation may persist yet
    std::optional<int64_t> last;
    {
      MutexLock lock(mu_);
      Schedule& s = schedule_[job];
      if (s.initialised && s.generation != gen.generation) {
        // A fallback: the job continues from the base; count K from there.
        s.last = gen.base_step;
        s.generation = gen.generation;
      }
      if (!s.initialised) {
        auto tier = tier_->Get(false);
        if (!tier.ok()) continue;  // recorded in the tier's health; retried next pass
        auto l = timeline->Layout(job);
        if (!l) continue;
        auto complete = (*tier)->NewestCompleteStep(job, *l);
        if (!complete.ok()) {
          tier_->Report(complete.status());
          continue;
        }
        s.initialised = true;
        s.generation = gen.generation;
        s.last = *complete;
        if (gen.base_step && (!s.last || *s.last < *gen.base_step)) s.last = gen.base_step;
      }
      if (s.last && newest < *s.last + options_.every_steps) continue;
      s.last = newest;  // attempted: after a failure the next try is K steps later
      last = newest;
    }
    // The newest, not `*last` itself: a commit during the persist frees `*last`, and the
    // persist then follows it.
    auto rep = PersistJob(job, std::nullopt);
    if (rep.ok()) {
      {
        MutexLock lock(mu_);
        Schedule& s = schedule_[job];
        if (s.generation == gen.generation && s.last && *s.last < rep->step) s.last = rep->step;
      }
      out.push_back(std::move(*rep));
    } else {
      LogWarning("scheduled persist of step " + std::to_string(*last) + " of job '" + job +
                 "' failed (next try " + std::to_string(options_.every_steps) +
                 " steps later): " + rep.status().ToString());
    }
  }
  return out;
}

void Persister::Run() {
  MutexLock lock(mu_);
  while (running_) {
    lock.WaitFor(cv_, options_.poll_interval, [&]() REFT_REQUIRES(mu_) { return !running_; });
    if (!running_) break;
    lock.Unlock();
    (void)RunScheduleOnce();  // failures are logged there; the reports are for direct callers
    lock.Lock();
  }
}

std::map<std::string, int64_t> Persister::LastComplete() const {
  MutexLock lock(mu_);
  return last_complete_;
}

}  // namespace reft::persister
