#include "swim_membership.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <set>

#include "reft/peer/fencing.h"

namespace reft::coord {

using peer::CheckCallerProtocol;
using peer::kFencedPrefix;
using peer::MemberStateName;
using peer::NewEpoch;
using peer::kProtocolVersion;
using peer::MemberInfo;
using peer::MemberState;
using peer::PeerClient;
using peer::PeerOptions;

namespace {

MemberInfo FromUpdate(const v1::MemberUpdate& u) {
  MemberInfo m;
  m.node_id = u.node_id();
  m.address = u.address();
  m.epoch = u.epoch();
  m.incarnation = u.incarnation();
  m.state = static_cast<MemberState>(u.state());
  return m;
}

void ToUpdate(const MemberInfo& m, v1::MemberUpdate* u) {
  u->set_node_id(m.node_id);
  u->set_address(m.address);
  u->set_epoch(m.epoch);
  u->set_incarnation(m.incarnation);
  u->set_state(static_cast<v1::MemberState>(m.state));
}

// SWIM ordering of two facts about the same node: true when `a` supersedes `b`.
bool Supersedes(const MemberInfo& a, const MemberInfo& b) {
  if (a.epoch != b.epoch) return a.epoch > b.epoch;
  if (b.state == MemberState::kDead) return false;  // dead is final for an epoch
  if (a.state == MemberState::kDead) return true;
  if (a.incarnation != b.incarnation) return a.incarnation > b.incarnation;
  return static_cast<int>(a.state) > static_cast<int>(b.state);
}

}  // namespace

SwimMembership::SwimMembership(PeerOptions options, PeerClient* client)
    : options_(std::move(options)), client_(client), rng_(std::random_device{}()) {
  self_.node_id = options_.node_id;
  self_.address = options_.advertise_address;
  self_.epoch = options_.epoch ? options_.epoch : NewEpoch();
  self_.self = true;
  client_->SetFencedHandler([this](const std::string& m) { OnFenced(m); });
}

SwimMembership::~SwimMembership() { Stop(); }

void SwimMembership::SetAdvertiseAddress(const std::string& address) {
  reft::MutexLock lock(mu_);
  self_.address = address;
}

Status SwimMembership::Start() {
  reft::MutexLock lock(mu_);
  if (running_) return Status::OK();
  running_ = true;
  thread_ = reft::Thread("reft-membership", [this] { Run(); });
  return Status::OK();
}

void SwimMembership::Stop() {
  {
    reft::MutexLock lock(mu_);
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

v1::Caller SwimMembership::SelfCaller() const {
  reft::MutexLock lock(mu_);
  v1::Caller c;
  c.set_protocol_version(kProtocolVersion);
  c.set_node_id(self_.node_id);
  c.set_epoch(self_.epoch);
  c.set_address(self_.address);
  return c;
}

uint64_t SwimMembership::epoch() const {
  reft::MutexLock lock(mu_);
  return self_.epoch;
}

std::vector<MemberInfo> SwimMembership::Members() const {
  reft::MutexLock lock(mu_);
  std::vector<MemberInfo> out{self_};
  for (const auto& [id, e] : members_) out.push_back(e.info);
  return out;
}

std::vector<MemberInfo> SwimMembership::LiveMembers() const {
  reft::MutexLock lock(mu_);
  std::vector<MemberInfo> out;
  for (const auto& [id, e] : members_) {
    if (e.info.state != MemberState::kDead) out.push_back(e.info);
  }
  return out;
}

std::optional<MemberInfo> SwimMembership::Find(const std::string& node_id) const {
  reft::MutexLock lock(mu_);
  if (node_id == self_.node_id) return self_;
  auto it = members_.find(node_id);
  if (it == members_.end()) return std::nullopt;
  return it->second.info;
}

bool SwimMembership::IsFenced() const {
  reft::MutexLock lock(mu_);
  return fenced_;
}

void SwimMembership::ClearFence() {
  reft::MutexLock lock(mu_);
  fenced_ = false;
}

void SwimMembership::AddListener(Listener listener) {
  reft::MutexLock lock(mu_);
  listeners_.push_back(std::move(listener));
}

void SwimMembership::Notify(const std::vector<Event>& events) {
  if (events.empty()) return;
  std::vector<Listener> ls;
  {
    reft::MutexLock lock(mu_);
    ls = listeners_;
  }
  for (const auto& [m, prev] : events) {
    if (!m.self && m.state == MemberState::kDead) client_->Forget(m.address);
    for (const auto& l : ls) l(m, prev);
  }
}

Status SwimMembership::AdmitCaller(const v1::Caller& c) {
  REFT_RETURN_NOT_OK(CheckCallerProtocol(c, options_.node_id));
  std::vector<Event> events;
  Status result;
  {
    reft::MutexLock lock(mu_);
    if (c.node_id() == self_.node_id) {
      if (c.epoch() != self_.epoch) {
        result = Status::Protocol(std::string(kFencedPrefix) + " node id '" + c.node_id() +
                                  "' is already in use by this node (epoch " +
                                  std::to_string(self_.epoch) + ")");
      }
    } else {
      auto it = members_.find(c.node_id());
      if (it != members_.end()) {
        const MemberInfo& known = it->second.info;
        if (c.epoch() < known.epoch ||
            (c.epoch() == known.epoch && known.state == MemberState::kDead)) {
          result = Status::Protocol(
              std::string(kFencedPrefix) + " node '" + c.node_id() + "' epoch " +
              std::to_string(c.epoch()) + " was declared dead (known epoch " +
              std::to_string(known.epoch) + ", " + MemberStateName(known.state) +
              "); rejoin with a new epoch and treat local snapshots as stale");
        }
      }
      const bool joins = it == members_.end() || it->second.info.state == MemberState::kDead;
      if (result.ok() && joins && !RoomForOneMoreLocked()) {
        result = Status::Unsupported(
            "node '" + options_.node_id + "' refuses node '" + c.node_id() +
            "': the gossip control plane serves at most " +
            std::to_string(options_.max_gossip_nodes) +
            " live nodes and has them; give the daemons an etcd (docs/coordination.md)");
      }
      if (result.ok()) {
        MemberInfo m;
        m.node_id = c.node_id();
        m.address = c.address();
        m.epoch = c.epoch();
        m.state = MemberState::kAlive;
        // A caller is alive now: same epoch keeps the known incarnation (no downgrade of a
        // suspicion it has not refuted yet; its own gossip will), a newer epoch is a rejoin.
        if (it == members_.end() || c.epoch() > it->second.info.epoch) {
          MergeOneLocked(m, &events);
        }
      }
    }
  }
  Notify(events);
  return result;
}

void SwimMembership::MergeOneLocked(const MemberInfo& u, std::vector<Event>* events) {
  if (u.node_id.empty()) return;
  if (u.node_id == self_.node_id) {
    if (u.epoch != self_.epoch) return;  // facts about an older (or foreign) incarnation
    if (u.state == MemberState::kDead) {
      // Declared dead: fence, take a new epoch and rejoin (handled by the caller of OnFenced).
      if (!fenced_) {
        fenced_ = true;
        self_.epoch = NewEpoch();
        self_.incarnation = 0;
        events->emplace_back(self_, MemberState::kDead);
      }
    } else if (u.state == MemberState::kSuspect && u.incarnation >= self_.incarnation) {
      self_.incarnation = u.incarnation + 1;  // refute
    }
    return;
  }
  auto it = members_.find(u.node_id);
  const bool joins = it == members_.end() || it->second.info.state == MemberState::kDead;
  if (u.state != MemberState::kDead && joins && !RoomForOneMoreLocked()) return;  // bounded
  if (it == members_.end()) {
    Entry e;
    e.info = u;
    e.info.self = false;
    e.suspect_since = std::chrono::steady_clock::now();
    ChangedLocked(&e);
    members_.emplace(u.node_id, e);
    probe_order_.push_back(u.node_id);
    events->emplace_back(e.info, MemberState::kDead);
    return;
  }
  Entry& e = it->second;
  if (!Supersedes(u, e.info)) return;
  MemberState prev = e.info.state;
  bool state_changed = prev != u.state || u.epoch != e.info.epoch;
  e.info.address = u.address.empty() ? e.info.address : u.address;
  e.info.epoch = u.epoch;
  e.info.incarnation = u.incarnation;
  e.info.state = u.state;
  ChangedLocked(&e);
  if (u.state == MemberState::kSuspect && prev != MemberState::kSuspect) {
    e.suspect_since = std::chrono::steady_clock::now();
  }
  if (state_changed) events->emplace_back(e.info, prev);
}

bool SwimMembership::RoomForOneMoreLocked() const {
  uint32_t live = 1;  // this node
  for (const auto& [id, e] : members_) live += e.info.state != MemberState::kDead;
  return live < options_.max_gossip_nodes;
}

void SwimMembership::Merge(const google::protobuf::RepeatedPtrField<v1::MemberUpdate>& updates) {
  std::vector<Event> events;
  {
    reft::MutexLock lock(mu_);
    for (const auto& u : updates) MergeOneLocked(FromUpdate(u), &events);
  }
  Notify(events);
}

uint32_t RetransmitLimit(size_t members) {
  return 4 * static_cast<uint32_t>(std::ceil(std::log2(static_cast<double>(members) + 1)));
}

void SwimMembership::ChangedLocked(Entry* e) const {
  e->sends_left = RetransmitLimit(members_.size() + 1);
}

void SwimMembership::FillUpdates(google::protobuf::RepeatedPtrField<v1::MemberUpdate>* out) {
  reft::MutexLock lock(mu_);
  // Always this node: its incarnation is how it refutes a suspicion. Then every fact still
  // being disseminated; the table is bounded (max_gossip_nodes), so no per-message cap.
  ToUpdate(self_, out->Add());
  for (auto& [id, e] : members_) {
    if (e.sends_left == 0) continue;
    --e.sends_left;
    ToUpdate(e.info, out->Add());
  }
}

void SwimMembership::FillFullTable(google::protobuf::RepeatedPtrField<v1::MemberUpdate>* out) const {
  reft::MutexLock lock(mu_);
  ToUpdate(self_, out->Add());
  for (const auto& [id, e] : members_) ToUpdate(e.info, out->Add());
}

bool SwimMembership::PingFor(const std::string& target_address,
                             std::chrono::milliseconds timeout) {
  v1::PingRequest ping;
  FillUpdates(ping.mutable_updates());
  auto r = client_->Ping(target_address, ping, std::min(timeout, 2 * options_.probe_timeout));
  if (r.ok()) Merge(r->updates());
  return r.ok();
}

void SwimMembership::OnFenced(const std::string& message) {
  std::vector<Event> events;
  {
    reft::MutexLock lock(mu_);
    // A peer refused our epoch. Unless we already moved to a newer epoch, fence and rejoin.
    if (fenced_ && message.find(std::to_string(self_.epoch)) == std::string::npos) return;
    fenced_ = true;
    self_.epoch = NewEpoch();
    self_.incarnation = 0;
    events.emplace_back(self_, MemberState::kDead);
  }
  Notify(events);
}

void SwimMembership::MarkSuspectLocked(const std::string& node_id, uint64_t epoch, uint64_t incarnation,
                                   std::vector<Event>* events) {
  MemberInfo u;
  u.node_id = node_id;
  u.epoch = epoch;
  u.incarnation = incarnation;
  u.state = MemberState::kSuspect;
  MergeOneLocked(u, events);
}

std::chrono::milliseconds SuspicionTimeout(std::chrono::milliseconds base, size_t members) {
  const double scale = std::max(1.0, std::log10(static_cast<double>(std::max<size_t>(members, 1))));
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(static_cast<double>(base.count()) * scale)));
}

void SwimMembership::ExpireSuspectsLocked(std::vector<Event>* events) {
  auto now = std::chrono::steady_clock::now();
  const auto timeout = SuspicionTimeout(options_.suspicion_timeout, members_.size() + 1);
  for (auto& [id, e] : members_) {
    if (e.info.state == MemberState::kSuspect && now - e.suspect_since >= timeout) {
      MemberState prev = e.info.state;
      e.info.state = MemberState::kDead;
      ChangedLocked(&e);
      events->emplace_back(e.info, prev);
    }
  }
}

void SwimMembership::ContactSeeds() {
  std::set<std::string> known;
  {
    reft::MutexLock lock(mu_);
    known.insert(self_.address);
    for (const auto& [id, e] : members_) known.insert(e.info.address);
  }
  for (const auto& seed : options_.seeds) {
    if (known.count(seed)) continue;
    auto r = client_->Hello(seed);
    if (!r.ok()) continue;  // retried next period
    v1::MemberUpdate server;
    server.set_node_id(r->server().node_id());
    server.set_address(r->server().address().empty() ? seed : r->server().address());
    server.set_epoch(r->server().epoch());
    google::protobuf::RepeatedPtrField<v1::MemberUpdate> all = r->members();
    *all.Add() = server;
    Merge(all);
  }
}

bool SwimMembership::ProbeIndirect(const MemberInfo& target) {
  std::vector<MemberInfo> helpers;
  {
    reft::MutexLock lock(mu_);
    for (const auto& [id, e] : members_) {
      if (id != target.node_id && e.info.state == MemberState::kAlive) helpers.push_back(e.info);
    }
    std::shuffle(helpers.begin(), helpers.end(), rng_);
  }
  if (helpers.size() > options_.indirect_probes) helpers.resize(options_.indirect_probes);
  std::vector<std::future<bool>> acks;
  for (const auto& h : helpers) {
    v1::PingReqRequest req;
    req.set_target_address(target.address);
    req.set_target_node_id(target.node_id);
    req.set_timeout_ms(static_cast<uint32_t>(options_.probe_timeout.count()));
    FillUpdates(req.mutable_updates());
    acks.push_back(reft::Async("reft-ping-req", [this, h, req]() {
      auto r =
          client_->PingReq(h.address, req, 2 * options_.probe_timeout + options_.probe_timeout);
      if (!r.ok()) return false;
      Merge(r->updates());
      return r->target_acked();
    }));
  }
  bool acked = false;
  for (auto& f : acks) acked = f.get() || acked;
  return acked;
}

void SwimMembership::ProbeOnce(bool full_table) {
  std::optional<MemberInfo> target;
  {
    reft::MutexLock lock(mu_);
    // Round-robin over a shuffled order (SWIM §4.3): bounded time to the first probe of a
    // failed member, unlike uniform random picks.
    for (size_t tries = 0; tries < probe_order_.size() && !target; ++tries) {
      if (probe_next_ >= probe_order_.size()) {
        probe_next_ = 0;
        std::shuffle(probe_order_.begin(), probe_order_.end(), rng_);
      }
      auto it = members_.find(probe_order_[probe_next_++]);
      if (it != members_.end() && it->second.info.state != MemberState::kDead) {
        target = it->second.info;
      }
    }
  }
  if (!target) return;
  v1::PingRequest req;
  if (full_table) {
    FillFullTable(req.mutable_updates());
  } else {
    FillUpdates(req.mutable_updates());
  }
  auto r = client_->Ping(target->address, req, options_.probe_timeout);
  if (r.ok()) {
    Merge(r->updates());
    return;
  }
  if (r.status().code() == StatusCode::kProtocol) return;  // fenced/version: handled elsewhere
  if (ProbeIndirect(*target)) return;
  std::vector<Event> events;
  {
    reft::MutexLock lock(mu_);
    auto it = members_.find(target->node_id);
    if (it != members_.end() && it->second.info.epoch == target->epoch &&
        it->second.info.state == MemberState::kAlive) {
      MarkSuspectLocked(target->node_id, target->epoch, it->second.info.incarnation, &events);
    }
  }
  Notify(events);
}

void SwimMembership::ReconnectDead() {
  std::optional<MemberInfo> target;
  {
    reft::MutexLock lock(mu_);
    std::vector<const MemberInfo*> dead;
    for (const auto& [id, e] : members_) {
      if (e.info.state == MemberState::kDead) dead.push_back(&e.info);
    }
    if (dead.empty()) return;
    target = *dead[dead_next_++ % dead.size()];
  }
  v1::PingRequest req;
  FillFullTable(req.mutable_updates());  // both sides may hold stale facts about everyone
  auto r = client_->Ping(target->address, req, options_.probe_timeout);
  if (r.ok()) Merge(r->updates());  // a "fenced:" refusal reaches OnFenced through the client
}

void SwimMembership::Run() {
  // A dead member is pinged about once a second, whatever the probe period.
  const auto reconnect_every = std::max<int64_t>(
      1, std::chrono::milliseconds(1000).count() / std::max<int64_t>(1, options_.probe_interval.count()));
  int64_t period = 0;
  auto next = std::chrono::steady_clock::now();
  while (true) {
    {
      reft::MutexLock lock(mu_);
      next += options_.probe_interval;
      if (next < std::chrono::steady_clock::now()) next = std::chrono::steady_clock::now();
      lock.WaitUntil(cv_, next, [&]() REFT_REQUIRES(mu_) { return !running_; });
      if (!running_) return;
    }
    ContactSeeds();
    ProbeOnce(period % kFullTableEvery == 0);
    if (++period % reconnect_every == 0) ReconnectDead();
    std::vector<Event> events;
    {
      reft::MutexLock lock(mu_);
      ExpireSuspectsLocked(&events);
    }
    Notify(events);
  }
}

}  // namespace reft::coord
