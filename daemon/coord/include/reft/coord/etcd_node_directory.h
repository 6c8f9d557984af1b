#pragma once
/// \file etcd_node_directory.h
/// \brief Node membership in etcd: each reftd registers /reft/v1/nodes/<id> = {address, epoch}
/// under a lease it keeps alive; its death is the lease expiring (after `lease_ttl` without a
/// renewal). No probing between daemons and no membership table gossiped around: a node looks
/// up the few nodes it needs, when it needs them.
///
/// A node whose lease expired while it was alive (a long pause, a partition from etcd)
/// registers again under a new lease; listeners hear it as a `self` event, and everything bound
/// to the old lease (joined ranks, the job coordinator key) is re-established by its owners
/// (AddReregisterListener).
///
/// The lease's TTL follows the cluster's size (lease_sizing.h): at start and every
/// `check_every` the node counts the registered nodes, and when the sized TTL differs from its
/// lease's by 2x or more it moves: a new lease, its registration put under it (same epoch: the
/// node is not declared dead, no departure is seen), the owners of other keys bound to the old
/// lease told to put them under the new one (AddLeaseMoveListener), and the old lease left to
/// lapse a TTL later rather than revoked, so nothing disappears in between. Thread-safe.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <set>

#include "reft/coord/etcd_client.h"
#include "reft/coord/lease_sizing.h"
#include "reft/mutex.h"
#include "reft/peer/node_directory.h"
#include "reft/peer/peer_options.h"
#include "reft/thread.h"

namespace reft::coord {

class ControlPlaneSuspicion;
class HeldDeaths;
class SuspectedNodes;

class EtcdNodeDirectory final : public peer::NodeDirectory {
 public:
  EtcdNodeDirectory(peer::PeerOptions options, std::shared_ptr<EtcdClient> etcd,
                    LeaseSizing lease);
  ~EtcdNodeDirectory() override;

  void SetAdvertiseAddress(const std::string& address) override;
  /// Grants the lease and registers this node. Unavailable when etcd cannot be reached.
  Status Start() override;
  /// Revokes the lease: this node's keys disappear at once (a clean shutdown is not a failure
  /// the others have to wait a TTL for).
  void Stop() override;

  v1::Caller SelfCaller() const override;
  /// Changes when the node registers again after its lease expired (a new identity).
  uint64_t epoch() const override {
    reft::MutexLock lock(mu_);
    return options_.epoch;
  }
  const std::string& node_id() const override { return node_id_; }

  /// Every registered node (kAlive), and every node that registered once and whose lease has
  /// expired since (kDead): two range reads.
  std::vector<peer::MemberInfo> Members() const override;
  std::vector<peer::MemberInfo> LiveMembers() const override;
  /// A registered node, from a cache refreshed after `cache_ttl` (addresses rarely change);
  /// unregistered nodes are reported kDead.
  std::optional<peer::MemberInfo> Find(const std::string& node_id) const override;
  /// A fresh (linearizable) read: kAlive when registered, kDead when not (etcd is the
  /// authority), kUnknown when etcd cannot be reached.
  peer::NodeLiveness Liveness(const std::string& node_id) const override;
  /// One linearizable read of every registration (not one per node); when etcd cannot be
  /// reached: kUnknown, with the cached address where there is one.
  std::vector<peer::NodeStatus> Lookup(const std::vector<std::string>& node_ids) const override;
  /// No etcd read: a departure the watch delivered (once a departure listener asked for it),
  /// or the last Find/Lookup that found the node unregistered, until a read (Find, Liveness,
  /// Lookup) finds it registered.
  bool HeardDead(const std::string& node_id) const override;

  bool IsFenced() const override { return false; }
  void ClearFence() override {}
  /// Listeners hear this node's own re-registration only: other nodes' changes are not
  /// watched (each node would receive an event per node and change; at scale that is the
  /// membership traffic etcd is here to avoid).
  void AddListener(Listener listener) override;
  /// Watches the registrations' deletions (etcd's NOPUT filter: one event per departure, no
  /// event while nodes come), from the first listener on.
  void AddDepartureListener(DepartureListener listener) override;
  /// Watches the registrations' puts (NODELETE filter: one event per registration, none per
  /// lease renewal), from the first listener on.
  void AddArrivalListener(ArrivalListener listener) override;
  Status AdmitCaller(const v1::Caller& caller) override;

  /// \brief Holds lease lapses while `suspicion` says the control plane is suspect, until a
  /// second signal: the node registering again (released), or `probe` — a direct call to its
  /// reftd at an address, true when it answered — failing twice (declared dead). Held nodes
  /// count as alive meanwhile, and departure listeners hear of them only once they are
  /// declared. Before Start; without it every lapse is a death at once.
  void HoldDeathsWhileSuspect(std::shared_ptr<ControlPlaneSuspicion> suspicion,
                              std::function<bool(const std::string& address)> probe);
  peer::DeathHoldStatus DeathHolds() const override;
  /// Looked into on the "reft-suspect" thread (coord::SuspectedNodes): the node's registered
  /// port refused twice — its lease is revoked. This node is never suspected by itself.
  void Suspect(const std::string& node, const std::string& reason) override;
  /// The node whose cached registration has `address` (no etcd read: peer calls report here).
  void SuspectAddress(const std::string& address, const std::string& reason) override;

  /// The lease this node's registration is bound to (0 before Start / after Stop).
  int64_t lease() const;
  /// Called (on the etcd client's lease-lost thread, after re-registration) with the new lease.
  void AddReregisterListener(std::function<void(int64_t lease)> listener);
  /// The TTL of the lease this node is registered under now.
  std::chrono::seconds lease_ttl() const;

  /// An owner of keys bound to this node's lease, told about lease moves.
  struct LeaseMoveListener {
    /// Asked before a move; false vetoes it (a job's coordinator keeps its lease: moving the
    /// coordinator key would hand the job to another node).
    std::function<bool()> may_move;
    /// After the move, with the new lease: put what was bound to the old one under it before
    /// the old lease lapses (one old TTL from now).
    std::function<void(int64_t lease)> moved;
  };
  void AddLeaseMoveListener(LeaseMoveListener listener);
  /// Counts the registered nodes and moves to a lease of the sized TTL if it differs by 2x or
  /// more (what the sizing thread does every `check_every`; tests call it directly). True when
  /// the lease moved.
  bool SizeLease();

 private:
  // Listeners of one kind of registration change and the etcd watch that feeds them.
  struct RegistrationWatch {
    std::vector<std::function<void(const std::string&)>> listeners;
    int64_t handle = 0;  // etcd watch handle (0: none)
  };

  /// Grants a lease of `ttl` and puts this node's registration under it; the lease on success.
  Result<int64_t> Register(std::chrono::seconds ttl);
  /// The sized TTL for the nodes registered now, this one included (the floor when etcd does
  /// not answer).
  std::chrono::seconds SizedTtl(bool self_registered) const;
  void SizeLeaseLoop();
  std::vector<peer::MemberInfo> Registered() const;
  void OnLeaseLost(int64_t lease);
  /// The departure watch saw `node`'s registration go: true when its death is held.
  bool HoldLapse(const std::string& node);
  /// Tells the departure listeners that `node` left.
  void Depart(const std::string& node);
  /// A held node as a live member (from the cached or the known record).
  std::optional<peer::MemberInfo> HeldMember(const std::string& node) const;
  bool IsHeld(const std::string& node) const;
  /// The suspicions' judge, bound to this directory's etcd (etcd_node_suspicions.cc).
  std::unique_ptr<SuspectedNodes> MakeSuspectedNodes();
  /// The lease TTL changed: the suspicion's window follows it.
  void SetLeaseTtlLocked(std::chrono::seconds ttl) REFT_REQUIRES(mu_);
  /// Adds `listener` to `w` and, with the first one, watches the registrations' `type` events.
  void FollowRegistrations(RegistrationWatch* w, WatchEvent::Type type,
                           std::function<void(const std::string&)> listener);
  /// Watches the registrations (`events` of them) from now on; 0 when etcd does not answer.
  int64_t WatchRegistrations(WatchEvents events, std::function<void(const WatchUpdate&)> notify,
                             const char* what);

  const std::string node_id_;  // options_.node_id, which never changes (read without mu_)
  std::shared_ptr<EtcdClient> etcd_;
  const LeaseSizing sizing_;
  // Held through a registration or a move: a lease lost while the node moves to another one
  // waits for the move to finish (and the other way round).
  reft::Mutex register_mu_;
  mutable reft::Mutex mu_;
  peer::PeerOptions options_ REFT_GUARDED_BY(mu_);  // the epoch and address change
  std::chrono::seconds lease_ttl_ REFT_GUARDED_BY(mu_);
  int64_t lease_ REFT_GUARDED_BY(mu_) = 0;
  bool stopped_ REFT_GUARDED_BY(mu_) = false;
  std::condition_variable sizing_cv_;  // also: a lost lease's callback returned
  int lease_lost_running_ REFT_GUARDED_BY(mu_) = 0;  // OnLeaseLost calls in progress
  reft::Thread sizing_thread_;
  std::vector<LeaseMoveListener> move_listeners_ REFT_GUARDED_BY(mu_);
  std::vector<Listener> listeners_ REFT_GUARDED_BY(mu_);
  std::vector<std::function<void(int64_t)>> reregister_listeners_ REFT_GUARDED_BY(mu_);
  RegistrationWatch departures_ REFT_GUARDED_BY(mu_);  // deletions
  RegistrationWatch arrivals_ REFT_GUARDED_BY(mu_);    // puts
  struct Cached {
    std::optional<peer::MemberInfo> info;
    std::chrono::steady_clock::time_point at;
  };
  mutable std::map<std::string, Cached> cache_ REFT_GUARDED_BY(mu_);
  // Nodes whose departure was heard, until a read finds them registered again.
  mutable std::set<std::string> departed_ REFT_GUARDED_BY(mu_);
  // Set before Start (HoldDeathsWhileSuspect), read without mu_ afterwards.
  std::shared_ptr<ControlPlaneSuspicion> suspicion_;
  std::unique_ptr<HeldDeaths> held_;
  std::unique_ptr<SuspectedNodes> suspected_;  // set in the constructor
  mutable std::atomic<size_t> registered_{1};  // the last count of registrations (SizedTtl)
  std::atomic<uint64_t> reregistrations_{0};
  std::atomic<uint64_t> deaths_declared_{0};  // departures the listeners heard
};

}  // namespace reft::coord
