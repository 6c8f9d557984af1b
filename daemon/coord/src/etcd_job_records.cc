#include "reft/coord/etcd_job_records.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "keys.h"
#include "reft/coord/records.h"

namespace reft::coord {
namespace {

// A published plan that still waits for something (a spare, an operator) keeps its job.
bool PlanWaits(const std::string& state) {
  return state == "waiting_for_spare" || state == "awaiting_confirmation";
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

EtcdJobRecords::EtcdJobRecords(std::shared_ptr<EtcdClient> etcd, EtcdNodeDirectory* nodes,
                               JobRecordsOptions options)
    : JobRecords(peer::SweepInterval(options.forget_after)),
      etcd_(std::move(etcd)),
      nodes_(nodes),
      options_(options) {}

EtcdJobRecords::~EtcdJobRecords() { Stop(); }

bool EtcdJobRecords::HoldSweeperKey() {
  const int64_t lease = nodes_->lease();
  if (lease == 0) return false;
  // Create-only under this node's lease: the key goes with the node that holds it. Asked at
  // every sweep (one small transaction): a node that lost the key stops sweeping at once.
  Txn t;
  t.IfCreateRevision(keys::Sweeper(), Compare::kEqual, 0)
      .ThenPut(keys::Sweeper(), Encode(NodeRef{nodes_->node_id(), -1}), lease)
      .ElseGet(keys::Sweeper());
  auto r = etcd_->Commit(t);
  if (!r.ok()) return false;
  bool mine = r->succeeded;
  if (!mine && !r->gets.empty() && !r->gets[0].kvs.empty()) {
    const KeyValue& kv = r->gets[0].kvs[0];
    auto ref = DecodeNodeRef(kv.key, kv.value);
    mine = ref.ok() && ref->node == nodes_->node_id() && kv.lease == lease;
  }
  MutexLock lock(mu_);
  if (mine && held_lease_ != lease) {
    spdlog::info("this node sweeps job records gone for {:.1f} s",
                 std::chrono::duration<double>(options_.forget_after).count());
  }
  held_lease_ = mine ? lease : 0;
  if (!mine) gone_.clear();  // another node sweeps: its view counts
  return mine;
}

Result<std::map<std::string, EtcdJobRecords::Seen>> EtcdJobRecords::ReadAll() {
  Txn read;
  read.ThenGetPrefix(keys::JobsPrefix()).ThenGetPrefix(keys::NodesPrefix());
  REFT_ASSIGN_OR_RETURN(TxnResult r, etcd_->Commit(read));
  if (r.gets.size() != 2) return Status::Internal("etcd answered a 2-read txn with fewer reads");
  std::set<std::string> live;
  for (const auto& kv : r.gets[1].kvs) live.insert(keys::NodeIdOf(kv.key));
  std::map<std::string, Seen> jobs;
  std::map<std::string, std::set<std::string>> nodes;
  std::set<std::string> in_use;  // a live slot, a coordinator, a rebuild or a waiting plan
  for (const auto& kv : r.gets[0].kvs) {
    const std::string job = keys::JobOf(kv.key);
    if (job.empty()) continue;
    Seen& s = jobs[job];
    s.record.job = job;
    s.newest_rev = std::max(s.newest_rev, kv.mod_revision);
    const std::string what = kv.key.substr(keys::JobPrefix(job).size());
    auto activity = [&](int64_t ms) {
      s.record.last_activity_ms = std::max(s.record.last_activity_ms, ms);
    };
    if (what == "owner") {
      auto o = DecodeOwner(kv.key, kv.value);
      if (o.ok()) {
        activity(o->claimed_at_ms);
        s.record.owner = std::move(*o);
      }
    } else if (what == "committed") {
      auto c = DecodeCommitted(kv.key, kv.value);
      if (c.ok() && c->step >= 0) {
        s.record.committed_step = c->step;
        activity(c->at_ms);
      }
    } else if (what == "persisted") {
      auto p = DecodePersisted(kv.key, kv.value);
      if (p.ok()) {
        s.record.persisted_step = p->step;
        activity(p->at_ms);
      }
    } else if (what == "plan") {
      auto p = DecodePlan(kv.key, kv.value);
      if (p.ok()) {
        activity(p->decided_at_ms);
        if (PlanWaits(p->state)) in_use.insert(job);
      }
    } else if (what == "coordinator") {
      in_use.insert(job);
    } else if (what.rfind("operator/", 0) == 0) {
      in_use.insert(job);
    } else if (what.rfind("joined/", 0) == 0) {
      auto ref = DecodeNodeRef(kv.key, kv.value);
      s.record.trainers++;
      if (ref.ok()) nodes[job].insert(ref->node);
    } else if (what.rfind("locations/", 0) == 0) {
      auto ref = DecodeNodeRef(kv.key, kv.value);
      if (ref.ok() && live.count(ref->node) > 0) {
        nodes[job].insert(ref->node);
        in_use.insert(job);
      }
    }
  }
  for (auto& [job, s] : jobs) {
    const auto& n = nodes[job];
    s.record.nodes.assign(n.begin(), n.end());
    if (s.record.trainers > 0) {
      s.record.state = "running";
    } else if (in_use.count(job) > 0) {
      s.record.state = "idle";
    } else if (s.record.persisted_step) {
      s.record.state = "persisted";
    } else {
      s.record.state = "gone";
      s.gone = true;
    }
  }
  return jobs;
}

Result<std::vector<std::string>> EtcdJobRecords::SweepOnce() {
  if (!HoldSweeperKey()) return std::vector<std::string>();
  REFT_ASSIGN_OR_RETURN(auto jobs, ReadAll());
  const auto now = Clock::now();
  std::vector<std::pair<std::string, int64_t>> expired;
  {
    MutexLock lock(mu_);
    for (auto it = gone_.begin(); it != gone_.end();) {  // jobs deleted or in use again
      auto j = jobs.find(it->first);
      it = (j == jobs.end() || !j->second.gone) ? gone_.erase(it) : std::next(it);
    }
    for (const auto& [job, s] : jobs) {
      if (!s.gone) continue;
      auto [it, first] = gone_.try_emplace(job, Gone{now, s.newest_rev});
      if (!first && it->second.rev != s.newest_rev) it->second = Gone{now, s.newest_rev};
      if (now - it->second.since >= options_.forget_after) expired.emplace_back(job, s.newest_rev);
    }
  }
  return Delete(expired);
}

std::vector<std::string> EtcdJobRecords::Delete(
    const std::vector<std::pair<std::string, int64_t>>& jobs) {
  std::vector<std::string> deleted;
  auto commit = [&](size_t first, size_t last) {
    Txn t;
    for (size_t i = first; i < last; ++i) {
      const std::string prefix = keys::JobPrefix(jobs[i].first);
      t.IfPrefixModRevision(prefix, Compare::kLess, jobs[i].second + 1)
          .ThenDeleteRange(prefix, PrefixEnd(prefix));
    }
    auto r = etcd_->Commit(t);
    return r.ok() && r->succeeded;
  };
  const size_t batch = std::max<size_t>(1, options_.max_deletes_per_txn);
  for (size_t first = 0; first < jobs.size(); first += batch) {
    const size_t last = std::min(jobs.size(), first + batch);
    std::vector<std::pair<size_t, size_t>> ranges{{first, last}};
    if (!commit(first, last)) {
      ranges.clear();  // one job changed meanwhile: each on its own
      for (size_t i = first; i < last; ++i) {
        if (commit(i, i + 1)) ranges.emplace_back(i, i + 1);
      }
    }
    for (const auto& [a, b] : ranges) {
      for (size_t i = a; i < b; ++i) deleted.push_back(jobs[i].first);
    }
  }
  if (!deleted.empty()) {
    spdlog::info("forgot {} job(s) gone for {:.1f} s{}{}", deleted.size(),
                 std::chrono::duration<double>(options_.forget_after).count(),
                 deleted.size() <= 8 ? ": " : "", deleted.size() <= 8 ? JoinNames(deleted) : "");
    MutexLock lock(mu_);
    for (const auto& job : deleted) gone_.erase(job);
  }
  return deleted;
}

Status EtcdJobRecords::NotePersisted(const std::string& job, int64_t step) {
  auto put = etcd_->Put(keys::Persisted(job), Encode(PersistedRecord{step, NowUnixMs()}));
  return put.ok() ? Status::OK() : put.status();
}

Result<std::vector<peer::JobRecord>> EtcdJobRecords::List() {
  REFT_ASSIGN_OR_RETURN(auto jobs, ReadAll());
  const auto now = Clock::now();
  MutexLock lock(mu_);
  std::vector<peer::JobRecord> out;
  for (auto& [job, s] : jobs) {
    if (s.gone) {
      // The sweeper's own count when this node sweeps; otherwise at most forget_after.
      auto it = gone_.find(job);
      auto left = options_.forget_after;
      if (it != gone_.end() && it->second.rev == s.newest_rev) {
        left -= std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.since);
      }
      s.record.forget_in_ms = std::max<int64_t>(0, left.count());
    }
    out.push_back(std::move(s.record));
  }
  return out;
}

Status EtcdJobRecords::Release(const std::string& job, bool force) {
  REFT_ASSIGN_OR_RETURN(auto jobs, ReadAll());
  auto it = jobs.find(job);
  if (it == jobs.end()) return Status::NotFound("no job '" + job + "' has records");
  const peer::JobRecord& r = it->second.record;
  REFT_RETURN_NOT_OK(peer::CheckReleasable(r, force));
  const std::string prefix = keys::JobPrefix(job);
  Txn t;
  t.IfPrefixModRevision(prefix, Compare::kLess, it->second.newest_rev + 1)
      .ThenDeleteRange(prefix, PrefixEnd(prefix));
  REFT_ASSIGN_OR_RETURN(TxnResult res, etcd_->Commit(t));
  if (!res.succeeded) {
    return Status::Busy("job '" + job + "' changed while it was being released; try again");
  }
  spdlog::warn("job {} released by an operator{} (owner {})", job, force ? " (forced)" : "",
               r.owner ? r.owner->Describe() : "none");
  MutexLock lock(mu_);
  gone_.erase(job);
  return Status::OK();
}

}  // namespace reft::coord
