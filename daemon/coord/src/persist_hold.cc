/// \file persist_hold.cc
/// \brief The commit hold of a persist on etcd: writing the hold and the pins, and the job
/// coordinator's view of them.

#include "reft/coord/persist_hold.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "reft/coord/etcd_node_directory.h"
#include "keys.h"
#include "reft/coord/records.h"
#include "reft/log.h"

namespace reft::coord {

namespace {

using json = nlohmann::json;

// How often Hold reads the commit point again when a commit landed between its read and its
// write (a training commits a step every few hundred milliseconds at most).
constexpr int kHoldAttempts = 8;
// How often a commit blocked by a hold looks again whether the nodes it waits for still live.
constexpr auto kRecheckDead = std::chrono::seconds(1);

}  // namespace

std::string PersistHold::HoldKey(const std::string& job) {
  return keys::JobPrefix(job) + "persist_hold";
}

std::string PersistHold::PinKey(const std::string& job, const std::string& node) {
  return HoldKey(job) + "/" + node;
}

PersistHold::PersistHold(std::shared_ptr<EtcdClient> etcd, EtcdNodeDirectory* nodes,
                         std::function<void()> wake)
    : etcd_(std::move(etcd)), nodes_(nodes), wake_(std::move(wake)) {}

PersistHold::~PersistHold() { Stop(); }

void PersistHold::Stop() {
  std::vector<int64_t> watches;
  {
    MutexLock lock(mu_);
    stopped_ = true;
    for (auto& [job, f] : followed_) {
      if (f.watch != 0) watches.push_back(f.watch);
    }
    followed_.clear();
  }
  for (int64_t w : watches) etcd_->CancelWatch(w);
}

// ---- the persisting node and the nodes it asks ----

Result<std::optional<int64_t>> PersistHold::Hold(const std::string& job,
                                                 std::optional<int64_t> step,
                                                 const std::vector<std::string>& nodes,
                                                 std::chrono::milliseconds timeout) {
  for (int attempt = 0; attempt < kHoldAttempts; ++attempt) {
    REFT_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd_->Get(keys::Committed(job)));
    if (!kv) return Status::NotFound("job '" + job + "' has no committed step");
    REFT_ASSIGN_OR_RETURN(CommittedRecord committed, DecodeCommitted(kv->key, kv->value));
    if (step && *step != committed.step) return std::optional<int64_t>();
    const json record = {{"step", committed.step},
                         {"timeout_ms", timeout.count()},
                         {"nodes", nodes},
                         {"by", nodes_->node_id()}};
    // Only at the commit point: a commit after the read fails the write, which reads again.
    Txn t;
    t.IfModRevision(keys::Committed(job), Compare::kEqual, kv->mod_revision)
        .ThenPut(HoldKey(job), record.dump(), nodes_->lease());
    REFT_ASSIGN_OR_RETURN(TxnResult r, etcd_->Commit(t));
    if (!r.succeeded) continue;
    MutexLock lock(mu_);
    mine_[job] = {committed.step, r.revision};
    return std::optional<int64_t>(committed.step);
  }
  return Status::Busy("the commit point of job '" + job + "' moved " +
                      std::to_string(kHoldAttempts) + " times while its persist hold was written");
}

Status PersistHold::Pinned(const std::string& job, int64_t step) {
  Txn t;
  t.IfCreateRevision(HoldKey(job), Compare::kGreater, 0)
      .ThenPut(PinKey(job, nodes_->node_id()), json{{"step", step}}.dump(), nodes_->lease());
  return etcd_->Commit(t).status();
}

void PersistHold::Release(const std::string& job, int64_t step) {
  int64_t rev = 0;
  {
    MutexLock lock(mu_);
    auto it = mine_.find(job);
    if (it == mine_.end() || it->second.first != step) return;
    rev = it->second.second;
    mine_.erase(it);
  }
  // Still ours (not replaced by another node's hold): deleted. Etcd unreachable: the hold runs
  // out at the coordinator and goes with this node's lease.
  Txn t;
  t.IfModRevision(HoldKey(job), Compare::kEqual, rev).ThenDelete(HoldKey(job));
  (void)etcd_->Commit(t);
}

// ---- the job coordinator ----

Status PersistHold::Read(const std::string& job) {
  REFT_ASSIGN_OR_RETURN(RangeResult r, etcd_->GetPrefix(HoldKey(job)));
  bool watch = false;
  {
    MutexLock lock(mu_);
    if (stopped_) return Status::OK();
    Followed& f = followed_[job];
    const auto now = Clock::now();
    bool hold_found = false;
    f.pins.clear();
    for (const auto& kv : r.kvs) {
      hold_found |= kv.key == HoldKey(job);
      ApplyLocked(f, kv, false, job);
    }
    if (!hold_found && f.hold_rev != 0) {
      UnblockLocked(f, now);
      f.hold_rev = 0;
      f.hold_step = -1;
    }
    f.read_rev = r.revision;
    f.stale = false;
    watch = f.watch == 0;
  }
  if (!watch) return Status::OK();
  auto w = etcd_->Watch(HoldKey(job), /*prefix=*/true, r.revision + 1,
                        [this, job](const WatchUpdate& u) { OnEvent(job, u); });
  MutexLock lock(mu_);
  if (!w.ok() || stopped_) {
    followed_[job].stale = true;  // read and watch again at the next decision
    if (w.ok()) {
      lock.Unlock();
      etcd_->CancelWatch(*w);
    }
    return w.status();
  }
  followed_[job].watch = *w;
  return Status::OK();
}

void PersistHold::OnEvent(const std::string& job, const WatchUpdate& u) {
  {
    MutexLock lock(mu_);
    auto it = followed_.find(job);
    if (stopped_ || it == followed_.end()) return;
    Followed& f = it->second;
    if (u.reset) {
      f.stale = true;
    } else {
      for (const auto& e : u.events) {
        if (e.kv.mod_revision <= f.read_rev) continue;  // the last read has it already
        ApplyLocked(f, e.kv, e.type == WatchEvent::Type::kDelete, job);
      }
    }
  }
  if (wake_) wake_();
}

void PersistHold::ApplyLocked(Followed& f, const KeyValue& kv, bool deleted,
                              const std::string& job) {
  const auto now = Clock::now();
  if (kv.key == HoldKey(job)) {
    if (deleted) {
      UnblockLocked(f, now);
      f.hold_rev = 0;
      f.hold_step = -1;
      return;
    }
    if (kv.mod_revision == f.hold_rev) return;
    const json j = json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step")) {
      LogWarning("ignoring a malformed persist hold of job '" + job + "': " + kv.value);
      return;
    }
    UnblockLocked(f, now);
    f.hold_rev = kv.mod_revision;
    f.hold_step = j.value("step", int64_t{-1});
    f.timeout = std::chrono::milliseconds(j.value("timeout_ms", int64_t{0}));
    f.nodes = j.value("nodes", std::vector<std::string>{});
    f.seen_at = now;
    f.timed_out = false;
    return;
  }
  const std::string node = kv.key.substr(HoldKey(job).size() + 1);
  if (deleted) {
    f.pins.erase(node);
    return;
  }
  const json j = json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) f.pins[node] = j.value("step", int64_t{-1});
}

void PersistHold::UnblockLocked(Followed& f, Clock::time_point now) {
  if (!f.blocked_since) return;
  stats_.held_seconds += std::chrono::duration<double>(now - *f.blocked_since).count();
  f.blocked_since.reset();
}

std::vector<std::string> PersistHold::MissingPinsLocked(const Followed& f,
                                                       const std::set<std::string>& dead) const {
  std::vector<std::string> missing;
  for (const auto& n : f.nodes) {
    auto p = f.pins.find(n);
    if ((p == f.pins.end() || p->second < f.hold_step) && dead.count(n) == 0) missing.push_back(n);
  }
  return missing;
}

Result<std::optional<PersistHold::Clock::time_point>> PersistHold::HeldUntil(
    const std::string& job, int64_t step) {
  using Until = std::optional<Clock::time_point>;
  bool read;
  {
    MutexLock lock(mu_);
    if (stopped_) return Until();
    read = followed_[job].stale;
  }
  if (read) REFT_RETURN_NOT_OK(Read(job));
  // A node of the hold that died never pins: its part of the persist fails, and the commit
  // must not wait for it until the hold runs out (a recovered job would stand still that
  // long). Its liveness is read without the lock, once per check of a blocked commit.
  std::vector<std::string> missing;
  {
    MutexLock lock(mu_);
    auto it = followed_.find(job);
    if (it == followed_.end()) return Until();  // stopped meanwhile
    if (it->second.hold_rev != 0 && step > it->second.hold_step) {
      missing = MissingPinsLocked(it->second, {});
    }
  }
  std::set<std::string> dead;
  if (!missing.empty()) {
    const auto status = nodes_->Lookup(missing);
    for (size_t i = 0; i < missing.size() && i < status.size(); ++i) {
      if (status[i].liveness == peer::NodeLiveness::kDead) dead.insert(missing[i]);
    }
  }
  MutexLock lock(mu_);
  auto it = followed_.find(job);
  if (it == followed_.end()) return Until();  // stopped meanwhile
  Followed& f = it->second;
  const auto now = Clock::now();
  if (f.hold_rev == 0 || step <= f.hold_step) {
    UnblockLocked(f, now);
    return Until();
  }
  missing = MissingPinsLocked(f, dead);
  if (missing.empty()) {
    if (!dead.empty()) {
      std::string names;
      for (const auto& n : dead) names += (names.empty() ? "" : ", ") + n;
      LogWarning("job '" + job + "': nodes " + names + " of the persist hold of step " +
                 std::to_string(f.hold_step) + " are dead: committing step " +
                 std::to_string(step) + " without their pins (their part of the persist fails)");
    }
    UnblockLocked(f, now);
    return Until();
  }
  const auto deadline = f.seen_at + f.timeout;
  if (now >= deadline) {
    if (!f.timed_out) {
      f.timed_out = true;
      ++stats_.timeouts;
      std::string names;
      for (const auto& n : missing) names += (names.empty() ? "" : ", ") + n;
      LogWarning("job '" + job + "': the persist hold of step " + std::to_string(f.hold_step) +
                 " ran out after " + std::to_string(f.timeout.count()) +
                 " ms without the pins of " + names + "; committing step " +
                 std::to_string(step) + " (their part of the persist fails)");
    }
    UnblockLocked(f, now);
    return Until();
  }
  if (!f.blocked_since) f.blocked_since = now;
  ++stats_.held_checks;
  // Decided again at the deadline, when a pin arrives, or after kRecheckDead: a node of the
  // hold may have died meanwhile.
  return Until(std::min(deadline, now + kRecheckDead));
}

void PersistHold::Guard(const std::string& job, Txn* txn) {
  int64_t rev = 0;
  {
    MutexLock lock(mu_);
    auto it = followed_.find(job);
    if (it != followed_.end()) rev = it->second.hold_rev;
  }
  txn->IfModRevision(HoldKey(job), Compare::kEqual, rev);
}

void PersistHold::Forget(const std::string& job) {
  int64_t watch = 0;
  {
    MutexLock lock(mu_);
    auto it = followed_.find(job);
    if (it == followed_.end()) return;
    watch = it->second.watch;
    followed_.erase(it);
  }
  if (watch != 0) etcd_->CancelWatch(watch);
}

CommitHoldStats PersistHold::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

std::set<std::string> PersistHold::PinsSeen(const std::string& job) const {
  MutexLock lock(mu_);
  std::set<std::string> out;
  auto it = followed_.find(job);
  if (it == followed_.end()) return out;
  for (const auto& [node, step] : it->second.pins) {
    if (it->second.hold_rev != 0 && step >= it->second.hold_step) out.insert(node);
  }
  return out;
}

}  // namespace reft::coord
