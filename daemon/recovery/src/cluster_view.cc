/// \file cluster_view.cc
/// \brief Locating a job's slots: this node's store plus every live member's manifest.

#include "reft/recovery/cluster_view.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "reft/peer/peer_node.h"
#include "reft/peer/rank_id.h"
#include "reft/peer/sealed_checksums.h"
#include "reft/thread.h"

namespace reft::recovery {

namespace {

// Slots of one member's manifest, as view entries.
void AddManifest(const std::string& node, const std::string& address, const std::string& job,
                 const v1::GetManifestResponse& m, ClusterView* view) {
  for (const auto& s : m.slots()) {
    if (s.rank().job() != job) continue;
    SlotEntry e;
    e.node = node;
    e.address = address;
    e.rank = peer::FromRankId(s.rank());
    e.step = s.step();
    e.state = s.state();
    for (const auto& r : s.regions()) {
      RegionEntry re;
      re.name = r.name();
      re.size = r.size();
      re.chunk_size = r.chunk_size();
      re.chunks.assign(r.chunk_checksums().begin(), r.chunk_checksums().end());
      e.regions.push_back(std::move(re));
    }
    view->slots.push_back(std::move(e));
  }
  for (const auto& r : m.joined()) {
    if (r.job() == job) view->joined[peer::FromRankId(r)].insert(node);
  }
}

}  // namespace

const RegionEntry* SlotEntry::Region(const std::string& name) const {
  for (const auto& r : regions) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string SlotEntry::Where() const {
  return local ? "this node (" + node + ")" : "node '" + node + "'";
}

std::vector<const SlotEntry*> ClusterView::Find(const store::RankKey& rank, int64_t step) const {
  std::vector<const SlotEntry*> out;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& s : slots) {
      if (s.local == (pass == 0) && s.step == step && s.rank == rank) out.push_back(&s);
    }
  }
  return out;
}

std::set<store::RankKey> ClusterView::RanksAt(int64_t step) const {
  std::set<store::RankKey> out;
  for (const auto& s : slots) {
    if (s.step == step) out.insert(s.rank);
  }
  return out;
}

namespace {
// Manifest calls in flight at once per Collect.
constexpr size_t kManifestFanout = 16;
}  // namespace

Locator::Locator(store::SnapshotStore* store, peer::PeerNode* peer, coord::SlotDirectory* slots)
    : store_(store), peer_(peer), slots_(slots) {}

Result<ClusterView> Locator::Collect(const std::string& job,
                                     std::chrono::milliseconds timeout) const {
  ClusterView view;
  view.job = job;
  view.self = peer_->membership().node_id();
  view.addresses[view.self] = "";
  // Ask every node of the job at once (etcd: where its slots and trainers are recorded;
  // gossip: every live member); each call ends at its own deadline. A node the control plane
  // reports dead is not asked: its memory is gone.
  auto nodes = slots_->JobNodes(job);
  if (!nodes.ok()) return nodes.status().WithContext("locating the nodes of job '" + job + "'");
  const std::vector<peer::NodeStatus> status = peer_->membership().Lookup(*nodes);
  std::vector<peer::MemberInfo> ask;
  for (size_t i = 0; i < nodes->size(); ++i) {
    const auto& m = status[i].info;
    if (status[i].liveness == peer::NodeLiveness::kDead || !m ||
        m->state == peer::MemberState::kDead) {
      view.dead.push_back((*nodes)[i]);
      continue;
    }
    ask.push_back(*m);
  }
  // A few threads share the calls, however many nodes the job has (several ranks of a node
  // restore at once: a thread per node and rank would be thousands at cluster scale).
  std::vector<Result<v1::GetManifestResponse>> answers(ask.size(),
                                                       Status::Unavailable("not asked"));
  std::atomic<size_t> next{0};
  std::vector<reft::Thread> askers;
  for (size_t t = 0; t < std::min(ask.size(), kManifestFanout); ++t) {
    askers.emplace_back("reft-manifest", [&] {
      for (size_t i = next++; i < ask.size(); i = next++) {
        answers[i] = peer_->client().GetManifest(ask[i].address, job, timeout);
      }
    });
  }
  // This node: complete and committed slots with the checksums sealed in their chunk tables.
  Status local_error;
  for (const auto& info : store_->List(job)) {
    if (info.state != store::SlotState::kComplete && info.state != store::SlotState::kCommitted) {
      continue;
    }
    auto ref = store_->Get(info.rank, info.step);
    if (!ref.ok()) continue;  // freed since List (a newer commit)
    SlotEntry e;
    e.node = view.self;
    e.local = true;
    e.rank = info.rank;
    e.step = info.step;
    e.state = store::SlotStateName((*ref)->info().state);
    bool readable = true;
    for (size_t i = 0; i < (*ref)->info().regions.size(); ++i) {
      auto sealed = peer::ReadSealedChecksums(**ref, i);
      if (!sealed.ok()) {
        if (local_error.ok()) local_error = sealed.status();
        readable = false;
        break;
      }
      RegionEntry re;
      re.name = (*ref)->info().regions[i].name;
      re.size = (*ref)->region_size(i);
      re.chunk_size = sealed->chunk_size;
      re.chunks = std::move(sealed->chunks);
      e.regions.push_back(std::move(re));
    }
    if (readable) view.slots.push_back(std::move(e));
  }
  for (const auto& r : slots_->JoinedRanks(job)) view.joined[r].insert(view.self);
  for (auto& t : askers) t.join();
  for (size_t i = 0; i < ask.size(); ++i) {
    const peer::MemberInfo& member = ask[i];
    auto& m = answers[i];
    if (!m.ok()) {
      view.unreachable.push_back(member.node_id + ": " + m.status().ToString());
      if (peer_->membership().Liveness(member.node_id) != peer::NodeLiveness::kDead) {
        view.waiting.push_back(member.node_id);
      } else {
        view.dead.push_back(member.node_id);
      }
      continue;
    }
    view.addresses[member.node_id] = member.address;
    AddManifest(member.node_id, member.address, job, *m, &view);
  }
  if (view.slots.empty() && !local_error.ok()) return local_error;
  return view;
}

Result<ClusterView> Locator::CollectSettled(
    const std::string& job, std::chrono::milliseconds timeout,
    std::chrono::steady_clock::time_point deadline, Settling* settling,
    const std::function<void(const std::string&)>& progress) const {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::milliseconds(20);
  while (true) {
    REFT_ASSIGN_OR_RETURN(ClusterView view, Collect(job, timeout));
    const auto now = std::chrono::steady_clock::now();
    if (view.waiting.empty() || now >= deadline) {
      if (settling) settling->waited = now - start;
      return view;
    }
    std::string who;
    for (const auto& n : view.waiting) who += (who.empty() ? "" : ", ") + n;
    const std::string line = "waiting for node(s) " + who +
                             " (alive, not answering yet) before deciding the restore of job '" +
                             job + "'";
    if (settling && settling->reason.empty()) settling->reason = line;
    if (progress) progress(line);
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace reft::recovery
