#include "reft/coord/etcd_node_directory.h"

#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "control_plane_suspicion.h"
#include "held_deaths.h"
#include "suspected_nodes.h"
#include "keys.h"
#include "reft/coord/records.h"
#include "reft/thread.h"

namespace reft::coord {

namespace {
// A node's address is looked up on every fetch; a restarted node keeps its id and address, and
// a failed fetch makes the reader try another source anyway.
constexpr auto kCacheTtl = std::chrono::seconds(2);

peer::MemberInfo ToMember(const std::string& id, const NodeRecord& r, bool self) {
  peer::MemberInfo m;
  m.node_id = id;
  m.address = r.address;
  m.epoch = r.epoch;
  m.state = peer::MemberState::kAlive;
  m.self = self;
  return m;
}
}  // namespace

EtcdNodeDirectory::EtcdNodeDirectory(peer::PeerOptions options, std::shared_ptr<EtcdClient> etcd,
                                     LeaseSizing lease)
    : node_id_(options.node_id),
      etcd_(std::move(etcd)),
      sizing_(lease),
      options_(std::move(options)),
      lease_ttl_(lease.floor) {
  if (options_.epoch == 0) options_.epoch = peer::NewEpoch();
  suspected_ = MakeSuspectedNodes();
}

EtcdNodeDirectory::~EtcdNodeDirectory() { Stop(); }

void EtcdNodeDirectory::SetAdvertiseAddress(const std::string& address) {
  reft::MutexLock lock(mu_);
  options_.advertise_address = address;
}

std::chrono::seconds EtcdNodeDirectory::SizedTtl(bool self_registered) const {
  auto registered = etcd_->CountPrefix(keys::NodesPrefix());
  // This node counts whether or not it is registered yet.
  const int64_t self = self_registered ? 0 : 1;
  if (registered.ok()) registered_ = static_cast<size_t>(*registered + self);
  return SizedLeaseTtl(sizing_, registered.ok() ? *registered + self : 1);
}

Result<int64_t> EtcdNodeDirectory::Register(std::chrono::seconds ttl) {
  int64_t lease;
  REFT_ASSIGN_OR_RETURN(lease, etcd_->GrantLease(ttl, [this](int64_t l) { OnLeaseLost(l); }));
  NodeRecord rec;
  {
    reft::MutexLock lock(mu_);
    rec.address = options_.advertise_address;
    rec.epoch = options_.epoch;  // a new one after the lease expired (OnLeaseLost)
  }
  // The leased key says "alive"; the known record (no lease) keeps the node listed as dead
  // once the lease expires.
  Status put = etcd_
                   ->Commit(Txn()
                                .ThenPut(keys::Node(node_id_), Encode(rec), lease)
                                .ThenPut(keys::Known(node_id_), Encode(rec)))
                   .status();
  if (!put.ok()) {
    (void)etcd_->RevokeLease(lease);  // best effort: it expires by itself otherwise
    return put.WithContext("registering node '" + node_id_ + "' in etcd");
  }
  return lease;
}

Status EtcdNodeDirectory::Start() {
  {
    reft::MutexLock lock(mu_);
    stopped_ = false;
  }
  {
    reft::MutexLock reg(register_mu_);
    const std::chrono::seconds ttl = SizedTtl(false);
    int64_t lease;
    REFT_ASSIGN_OR_RETURN(lease, Register(ttl));
    reft::MutexLock lock(mu_);
    lease_ = lease;
    SetLeaseTtlLocked(ttl);
  }
  if (sizing_.renewals_per_s > 0 && !sizing_thread_.joinable()) {
    sizing_thread_ = reft::Thread("reft-etcd-lease", [this] { SizeLeaseLoop(); });
  }
  return Status::OK();
}

void EtcdNodeDirectory::Stop() {
  {
    reft::MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  sizing_cv_.notify_all();
  if (held_) held_->Stop();  // declares nothing more
  suspected_->Stop();         // revokes nothing more
  if (sizing_thread_.joinable() && sizing_thread_.get_id() != std::this_thread::get_id()) {
    sizing_thread_.join();
  }
  {
    // A lost lease's re-registration in progress sees stopped_ and gives up; it must be over
    // before this directory may go away (it runs on the etcd client's thread).
    reft::MutexLock lock(mu_);
    lock.Wait(sizing_cv_, [&]() REFT_REQUIRES(mu_) { return lease_lost_running_ == 0; });
  }
  int64_t lease;
  {
    // After a move in progress (SizeLease called by another thread than the sizing one).
    reft::MutexLock reg(register_mu_);
    reft::MutexLock lock(mu_);
    lease = lease_;
    lease_ = 0;
  }
  if (lease != 0) (void)etcd_->RevokeLease(lease);  // expires by itself if etcd is unreachable
  int64_t watches[2];
  {
    reft::MutexLock lock(mu_);
    watches[0] = std::exchange(departures_.handle, 0);
    watches[1] = std::exchange(arrivals_.handle, 0);
  }
  for (int64_t watch : watches)
    if (watch != 0) etcd_->CancelWatch(watch);
}

void EtcdNodeDirectory::OnLeaseLost(int64_t lost) {
  std::vector<Listener> listeners;
  std::vector<std::function<void(int64_t)>> rereg;
  {
    reft::MutexLock lock(mu_);
    if (stopped_ || lost != lease_) return;
    lease_ = 0;
    listeners = listeners_;
    ++lease_lost_running_;  // Stop() waits for this call to return
  }
  struct Done {
    EtcdNodeDirectory* d;
    ~Done() {
      {
        reft::MutexLock lock(d->mu_);
        --d->lease_lost_running_;
      }
      d->sizing_cv_.notify_all();
    }
  } done{this};
  // Declared dead while alive: register again, with backoff while etcd is unreachable (on the
  // client's lease-lost thread: the keep-alive rounds go on meanwhile).
  // Like a SWIM refutation: the node comes back under a new epoch, so that anything still in
  // flight under the old identity is refused by its peers (AdmitCaller).
  uint64_t new_epoch = peer::NewEpoch();
  std::chrono::seconds old_ttl;
  {
    reft::MutexLock lock(mu_);
    new_epoch = std::max(new_epoch, options_.epoch + 1);
    options_.epoch = new_epoch;
    old_ttl = lease_ttl_;
  }
  spdlog::warn(
      "node {}: its etcd lease expired (paused or cut off from etcd for longer than "
      "the lease TTL of {} s): declared dead by the others; registering again under "
      "epoch {}",
      node_id_, old_ttl.count(), new_epoch);
  int64_t lease = 0;
  {
    reft::MutexLock reg(register_mu_);
    for (auto backoff = std::chrono::milliseconds(100);;
         backoff = std::min(backoff * 2, std::chrono::milliseconds(2000))) {
      {
        reft::MutexLock lock(mu_);
        if (stopped_) return;
      }
      const std::chrono::seconds ttl = SizedTtl(false);  // its key is gone with the lease
      auto registered = Register(ttl);
      if (registered.ok()) {
        lease = *registered;
        reft::MutexLock lock(mu_);
        lease_ = lease;
        SetLeaseTtlLocked(ttl);
        rereg = reregister_listeners_;
        break;
      }
      std::this_thread::sleep_for(backoff);
    }
  }
  ++reregistrations_;
  peer::MemberInfo self = ToMember(node_id_, {SelfCaller().address(), epoch()}, true);
  for (const auto& l : listeners) l(self, peer::MemberState::kDead);
  for (const auto& l : rereg) l(lease);
}

bool EtcdNodeDirectory::SizeLease() {
  reft::MutexLock reg(register_mu_);
  const std::chrono::seconds wanted = SizedTtl(true);
  int64_t old;
  std::chrono::seconds current;
  std::vector<LeaseMoveListener> owners;
  {
    reft::MutexLock lock(mu_);
    if (stopped_ || lease_ == 0) return false;  // stopping, or registering again
    old = lease_;
    current = lease_ttl_;
    owners = move_listeners_;
  }
  if (!ShouldMoveLease(current, wanted)) return false;
  for (const auto& o : owners) {
    if (o.may_move && !o.may_move()) return false;
  }
  auto moved = Register(wanted);  // same epoch: the node's identity does not change
  if (!moved.ok()) return false;  // next time
  bool taken = false;
  {
    reft::MutexLock lock(mu_);
    // Not when stopped, or when the old lease was lost meanwhile (its re-registration waits
    // for this move, and registers again after it): then the new lease is not this node's.
    if (!stopped_ && lease_ == old) {
      lease_ = *moved;
      SetLeaseTtlLocked(wanted);
      taken = true;
    }
  }
  if (!taken) {
    (void)etcd_->RevokeLease(*moved);
    return false;
  }
  for (const auto& o : owners) {
    if (o.moved) o.moved(*moved);
  }
  // Not revoked: what the owners have not put under the new lease yet stays until it lapses.
  etcd_->ForgetLease(old);
  spdlog::info(
      "node {}: lease TTL {} s -> {} s for the nodes registered now (renewal budget "
      "{}/s)",
      node_id_, current.count(), wanted.count(), sizing_.renewals_per_s);
  return true;
}

void EtcdNodeDirectory::SizeLeaseLoop() {
  reft::MutexLock lock(mu_);  // also for the epoch: OnLeaseLost changes it
  std::mt19937_64 rng(std::hash<std::string>{}(node_id_) ^ options_.epoch);
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  while (!stopped_) {
    // Jittered: nodes started together must not all count (and move) at the same moment.
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        sizing_.check_every * jitter(rng));
    if (lock.WaitFor(sizing_cv_, wait, [&]() REFT_REQUIRES(mu_) { return stopped_; })) break;
    lock.Unlock();
    (void)SizeLease();
    lock.Lock();
  }
}

std::chrono::seconds EtcdNodeDirectory::lease_ttl() const {
  reft::MutexLock lock(mu_);
  return lease_ttl_;
}

void EtcdNodeDirectory::AddLeaseMoveListener(LeaseMoveListener listener) {
  reft::MutexLock lock(mu_);
  move_listeners_.push_back(std::move(listener));
}

v1::Caller EtcdNodeDirectory::SelfCaller() const {
  reft::MutexLock lock(mu_);
  v1::Caller c;
  c.set_protocol_version(peer::kProtocolVersion);
  c.set_node_id(node_id_);
  c.set_epoch(options_.epoch);
  c.set_address(options_.advertise_address);
  return c;
}

std::vector<peer::MemberInfo> EtcdNodeDirectory::Registered() const {
  std::vector<peer::MemberInfo> out;
  auto all = etcd_->GetPrefix(keys::NodesPrefix());
  bool self_listed = false;
  if (all.ok()) {
    for (const auto& kv : all->kvs) {
      const std::string id = keys::NodeIdOf(kv.key);
      auto rec = DecodeNode(kv.key, kv.value);
      if (id.empty() || !rec.ok()) continue;
      const bool self = id == node_id_;
      self_listed |= self;
      out.push_back(ToMember(id, *rec, self));
    }
  }
  if (!self_listed)
    out.insert(out.begin(), ToMember(node_id_, {SelfCaller().address(), epoch()}, true));
  return out;
}

std::vector<peer::MemberInfo> EtcdNodeDirectory::Members() const {
  std::vector<peer::MemberInfo> out = Registered();
  std::set<std::string> alive;
  for (const auto& m : out) alive.insert(m.node_id);
  auto known = etcd_->GetPrefix(keys::KnownPrefix());
  if (!known.ok()) return out;
  for (const auto& kv : known->kvs) {
    const std::string id = kv.key.substr(keys::KnownPrefix().size());
    auto rec = DecodeNode(kv.key, kv.value);
    if (id.empty() || !rec.ok() || alive.count(id) != 0) continue;
    peer::MemberInfo member = ToMember(id, *rec, false);
    if (!IsHeld(id)) member.state = peer::MemberState::kDead;  // held: alive until confirmed
    out.push_back(std::move(member));
  }
  return out;
}

std::vector<peer::MemberInfo> EtcdNodeDirectory::LiveMembers() const {
  std::vector<peer::MemberInfo> out;
  std::set<std::string> listed;
  for (auto& m : Registered()) {
    listed.insert(m.node_id);
    if (!m.self) out.push_back(std::move(m));
  }
  if (held_) {
    for (const auto& node : held_->Held()) {
      if (listed.count(node) != 0) continue;
      if (auto m = HeldMember(node)) out.push_back(std::move(*m));
    }
  }
  return out;
}

std::optional<peer::MemberInfo> EtcdNodeDirectory::Find(const std::string& node_id) const {
  if (node_id == node_id_) {
    return ToMember(node_id, {SelfCaller().address(), epoch()}, true);
  }
  const auto now = std::chrono::steady_clock::now();
  {
    reft::MutexLock lock(mu_);
    auto it = cache_.find(node_id);
    if (it != cache_.end() && now - it->second.at < kCacheTtl) return it->second.info;
  }
  auto kv = etcd_->Get(keys::Node(node_id));
  if (!kv.ok()) {
    // etcd unreachable: the last thing known is the best guess (a fetch will tell), and it is
    // kept for another TTL: otherwise every peer call into a node cut off from etcd waits for
    // an etcd timeout first (AdmitCaller looks its caller up), and a few callers at once
    // occupy its server long enough to stall its neighbours' copies.
    reft::MutexLock lock(mu_);
    auto it = cache_.find(node_id);
    if (it == cache_.end()) return std::nullopt;
    it->second.at = now;
    return it->second.info;
  }
  std::optional<peer::MemberInfo> info;
  if (kv->has_value()) {
    auto rec = DecodeNode((*kv)->key, (*kv)->value);
    if (rec.ok()) info = ToMember(node_id, *rec, false);
  } else {
    peer::MemberInfo dead;
    dead.node_id = node_id;
    dead.state = peer::MemberState::kDead;
    info = dead;
  }
  reft::MutexLock lock(mu_);
  cache_[node_id] = {info, now};
  if (info && info->state != peer::MemberState::kDead) departed_.erase(node_id);
  return info;
}

bool EtcdNodeDirectory::HeardDead(const std::string& node_id) const {
  reft::MutexLock lock(mu_);
  if (departed_.count(node_id) != 0) return true;
  auto it = cache_.find(node_id);
  return it != cache_.end() && it->second.info &&
         it->second.info->state == peer::MemberState::kDead;
}

peer::NodeLiveness EtcdNodeDirectory::Liveness(const std::string& node_id) const {
  if (node_id == node_id_) return peer::NodeLiveness::kAlive;
  auto kv = etcd_->Get(keys::Node(node_id));
  if (!kv.ok()) return peer::NodeLiveness::kUnknown;
  {
    reft::MutexLock lock(mu_);
    cache_.erase(node_id);
    if (kv->has_value()) departed_.erase(node_id);
  }
  // A lapse not confirmed yet is not a death (HoldDeathsWhileSuspect).
  const bool alive = kv->has_value() || IsHeld(node_id);
  return alive ? peer::NodeLiveness::kAlive : peer::NodeLiveness::kDead;
}

std::vector<peer::NodeStatus> EtcdNodeDirectory::Lookup(
    const std::vector<std::string>& node_ids) const {
  std::vector<peer::NodeStatus> out(node_ids.size());
  auto all = etcd_->GetPrefix(keys::NodesPrefix());
  if (!all.ok()) {
    reft::MutexLock lock(mu_);
    for (size_t i = 0; i < node_ids.size(); ++i) {
      auto it = cache_.find(node_ids[i]);
      if (it != cache_.end()) out[i].info = it->second.info;
    }
    return out;
  }
  std::map<std::string, NodeRecord> registered;
  for (const auto& kv : all->kvs) {
    auto rec = DecodeNode(kv.key, kv.value);
    if (rec.ok()) registered[keys::NodeIdOf(kv.key)] = *rec;
  }
  const auto now = std::chrono::steady_clock::now();
  std::set<std::string> held;
  if (held_) {
    for (auto& node : held_->Held()) held.insert(std::move(node));
  }
  reft::MutexLock lock(mu_);
  for (size_t i = 0; i < node_ids.size(); ++i) {
    const std::string& id = node_ids[i];
    if (id == node_id_) {
      out[i] = {peer::NodeLiveness::kAlive,
                ToMember(id, {options_.advertise_address, options_.epoch}, true)};
      continue;
    }
    auto it = registered.find(id);
    if (it != registered.end()) {
      out[i] = {peer::NodeLiveness::kAlive, ToMember(id, it->second, false)};
      departed_.erase(id);
    } else if (held.count(id) != 0) {
      // A lapse not confirmed yet: alive, at the address last known.
      auto c = cache_.find(id);
      out[i] = {peer::NodeLiveness::kAlive, c != cache_.end() ? c->second.info : std::nullopt};
      continue;  // the cache keeps the address
    } else {
      peer::MemberInfo dead;
      dead.node_id = id;
      dead.state = peer::MemberState::kDead;
      out[i] = {peer::NodeLiveness::kDead, dead};
    }
    cache_[id] = {out[i].info, now};
  }
  return out;
}

void EtcdNodeDirectory::AddListener(Listener listener) {
  reft::MutexLock lock(mu_);
  listeners_.push_back(std::move(listener));
}

void EtcdNodeDirectory::AddDepartureListener(DepartureListener listener) {
  // The address cache is left alone: a node whose lease expired may still be serving its peers
  // (cut off from etcd only), and Find() answers from the cache as before.
  FollowRegistrations(&departures_, WatchEvent::Type::kDelete, std::move(listener));
}

void EtcdNodeDirectory::AddArrivalListener(ArrivalListener listener) {
  FollowRegistrations(&arrivals_, WatchEvent::Type::kPut, std::move(listener));
}

void EtcdNodeDirectory::FollowRegistrations(RegistrationWatch* w, WatchEvent::Type type,
                                            std::function<void(const std::string&)> listener) {
  {
    reft::MutexLock lock(mu_);
    w->listeners.push_back(std::move(listener));
    if (w->handle != 0) return;
  }
  // The registrations last put (arrivals): a put of the same record again is its node moving
  // to a lease of another TTL (SizeLease), not an arrival. A node that restarted puts a new
  // epoch. Only this watch's callback (one thread) touches it.
  auto seen = std::make_shared<std::map<std::string, std::string>>();
  auto notify = [this, w, type, seen](const WatchUpdate& u) {
    std::vector<std::string> nodes;
    if (u.reset) nodes.push_back("");  // history compacted: changes may be missed
    for (const auto& ev : u.events) {
      const std::string id = keys::NodeIdOf(ev.kv.key);
      if (ev.type != type || id.empty() || id == node_id_) continue;
      if (ev.type == WatchEvent::Type::kPut) {
        std::string& last = (*seen)[id];
        if (last == ev.kv.value) continue;
        last = ev.kv.value;
      } else if (HoldLapse(id)) {
        continue;  // heard of once declared (HeldDeaths)
      }
      nodes.push_back(id);
    }
    std::vector<std::function<void(const std::string&)>> listeners;
    {
      reft::MutexLock lock(mu_);
      listeners = w->listeners;
    }
    for (const auto& id : nodes) {
      if (type == WatchEvent::Type::kDelete && !id.empty()) {
        Depart(id);  // declared at once: counted and told like a confirmed hold
        continue;
      }
      for (const auto& l : listeners) l(id);
    }
  };
  const bool deletes = type == WatchEvent::Type::kDelete;
  const int64_t h = WatchRegistrations(deletes ? WatchEvents::kDeletesOnly : WatchEvents::kPutsOnly, notify,
                                       deletes ? "departures" : "arrivals");
  reft::MutexLock lock(mu_);
  w->handle = h;
}

int64_t EtcdNodeDirectory::WatchRegistrations(WatchEvents events, std::function<void(const WatchUpdate&)> notify,
                                              const char* what) {
  // From the store's revision now (one key read for it), so that every change after this call
  // returns is heard; 0 (from whenever the watch starts) when etcd does not answer.
  auto now = etcd_->GetPrefix(keys::Node(node_id_), 1);
  const int64_t from = now.ok() ? now->revision + 1 : 0;
  auto h = etcd_->Watch(keys::NodesPrefix(), true, from, std::move(notify), events);
  if (!h.ok()) {
    spdlog::warn("node {}: cannot watch {} in etcd: {}", node_id_, what, h.status().ToString());
    return 0;
  }
  return *h;
}

void EtcdNodeDirectory::AddReregisterListener(std::function<void(int64_t)> listener) {
  reft::MutexLock lock(mu_);
  reregister_listeners_.push_back(std::move(listener));
}

int64_t EtcdNodeDirectory::lease() const {
  reft::MutexLock lock(mu_);
  return lease_;
}

Status EtcdNodeDirectory::AdmitCaller(const v1::Caller& c) {
  REFT_RETURN_NOT_OK(peer::CheckCallerProtocol(c, node_id_));
  // Fencing: a caller older than the epoch it registered since was declared dead and came
  // back; what it says under the old identity is not believed.
  auto known = Find(c.node_id());
  if (known && known->state == peer::MemberState::kAlive && c.epoch() != 0 &&
      c.epoch() < known->epoch) {
    return Status::Protocol(  // "fenced:" is what peer clients recognise
        "fenced: node '" + c.node_id() + "' epoch " + std::to_string(c.epoch()) +
        " was declared dead; it registered again under epoch " + std::to_string(known->epoch));
  }
  return Status::OK();
}

void EtcdNodeDirectory::SetLeaseTtlLocked(std::chrono::seconds ttl) {
  lease_ttl_ = ttl;
  if (suspicion_) suspicion_->SetWindow(ttl);
}

void EtcdNodeDirectory::HoldDeathsWhileSuspect(std::shared_ptr<ControlPlaneSuspicion> suspicion,
                                               std::function<bool(const std::string&)> probe) {
  suspicion_ = std::move(suspicion);
  {
    reft::MutexLock lock(mu_);
    suspicion_->SetWindow(lease_ttl_);
  }
  HeldDeaths::Hooks hooks;
  hooks.registered = [this](const std::string& node) -> std::optional<bool> {
    auto kv = etcd_->Get(keys::Node(node));
    if (!kv.ok()) return std::nullopt;
    return kv->has_value();
  };
  hooks.probe = [this, probe = std::move(probe)](const std::string& node) {
    auto m = HeldMember(node);
    const bool answered = m && !m->address.empty() && probe(m->address);
    return answered ? ProbeAnswer::kAnswered : ProbeAnswer::kNoAnswer;
  };
  hooks.suspect = [this] { return suspicion_->Current(std::chrono::steady_clock::now()).has_value(); };
  hooks.window = [this] { return suspicion_->window(); };
  hooks.declare = [this](const std::string& node) { Depart(node); };
  held_ = std::make_unique<HeldDeaths>(HeldDeathsOptions{}, std::move(hooks));
}

bool EtcdNodeDirectory::HoldLapse(const std::string& node) {
  if (!held_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!suspicion_->Lapsed(now, registered_.load())) return false;
  auto s = suspicion_->Current(now);
  spdlog::warn("node {}: lease of node {} lapsed while the control plane is suspect ({}): its "
               "death is held until a probe confirms it",
               node_id_, node, s ? s->reason : "");
  held_->Hold(node);
  return true;
}

void EtcdNodeDirectory::Depart(const std::string& node) {
  ++deaths_declared_;
  std::vector<std::function<void(const std::string&)>> listeners;
  {
    reft::MutexLock lock(mu_);
    departed_.insert(node);
    listeners = departures_.listeners;
  }
  for (const auto& l : listeners) l(node);
}

bool EtcdNodeDirectory::IsHeld(const std::string& node) const {
  return held_ && held_->IsHeld(node);
}

std::optional<peer::MemberInfo> EtcdNodeDirectory::HeldMember(const std::string& node) const {
  {
    reft::MutexLock lock(mu_);
    auto it = cache_.find(node);
    if (it != cache_.end() && it->second.info && !it->second.info->address.empty()) {
      peer::MemberInfo m = *it->second.info;
      m.state = peer::MemberState::kAlive;
      return m;
    }
  }
  // Its known record (no lease) outlives the lapse.
  auto kv = etcd_->Get(keys::Known(node));
  if (!kv.ok() || !kv->has_value()) return std::nullopt;
  auto rec = DecodeNode((*kv)->key, (*kv)->value);
  if (!rec.ok()) return std::nullopt;
  return ToMember(node, *rec, false);
}

peer::DeathHoldStatus EtcdNodeDirectory::DeathHolds() const {
  peer::DeathHoldStatus out;
  out.reregistrations_total = reregistrations_.load();
  out.deaths_declared_total = deaths_declared_.load();
  out.suspicions = suspected_->stats();
  if (!held_) return out;
  const auto now = std::chrono::steady_clock::now();
  if (auto s = suspicion_->Current(now)) {
    out.suspect = true;
    out.since = std::chrono::system_clock::now() -
                std::chrono::duration_cast<std::chrono::system_clock::duration>(now - s->since);
    out.reason = s->reason;
  }
  out.held = held_->Held();
  const HeldDeathStats st = held_->stats();
  out.held_total = st.held_total;
  out.released_total = st.released_total;
  out.declared_total = st.declared_total;
  return out;
}

}  // namespace reft::coord
