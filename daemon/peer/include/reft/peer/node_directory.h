#pragma once
/// \file node_directory.h
/// \brief Who the other reftd nodes are, where they listen and whether they are alive: the
/// seam between the data plane (manifests, region fetches, persists) and the membership source.
/// Two implementations: `coord::EtcdNodeDirectory` (each node registers under a lease in etcd;
/// its death is the lease expiring) and `Membership` (SWIM probes between the daemons, for a
/// few nodes without etcd). Thread-safe.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reft/result.h"
#include "reft/v1/peer.pb.h"

namespace reft::peer {

/// \brief What the control plane knows about one node's liveness.
enum class NodeLiveness {
  kAlive,    ///< registered and not declared dead: its answers must be waited for
  kDead,     ///< declared dead (lease expired, or SWIM's verdict): its memory is gone
  kUnknown,  ///< never heard of
};

enum class MemberState { kAlive = 0, kSuspect = 1, kDead = 2 };
const char* MemberStateName(MemberState s);  ///< "alive", "suspect", "dead"

struct MemberInfo {
  std::string node_id;
  std::string address;
  uint64_t epoch = 0;
  uint64_t incarnation = 0;
  MemberState state = MemberState::kAlive;
  bool self = false;
};

/// \brief What Lookup() knows of one node: Liveness() and Find() in one answer.
struct NodeStatus {
  NodeLiveness liveness = NodeLiveness::kUnknown;
  std::optional<MemberInfo> info;  ///< where it listens, when known
};

/// \brief What became of the suspicions this node looked into (NodeDirectory::Suspect): a
/// suspicion is confirmed only by the node's port refusing connections, twice in a row.
struct SuspicionStats {
  uint64_t received_total = 0;    ///< suspicions reported (trainers, peer calls), merged or not
  uint64_t confirmed_total = 0;   ///< the port refused twice: the node's lease was revoked
  uint64_t refuted_total = 0;     ///< the port accepted: its process lives
  uint64_t unresolved_total = 0;  ///< no answer: left to the node's lease
  uint64_t dropped_total = 0;     ///< too many suspected nodes at once: not looked into
};

/// \brief Deaths the membership source holds back because it suspects itself rather than the
/// nodes (etcd: leases lapsing in bulk, etcd slow or changing leader), for status and metrics.
struct DeathHoldStatus {
  bool suspect = false;  ///< the control plane is suspect now
  std::chrono::system_clock::time_point since{};
  std::string reason;
  std::vector<std::string> held;  ///< nodes whose lapse is not confirmed (nor refuted) yet
  uint64_t held_total = 0;        ///< lapses held so far
  uint64_t released_total = 0;    ///< held nodes that registered again: no death
  uint64_t declared_total = 0;    ///< held nodes declared dead after all
  uint64_t reregistrations_total = 0;  ///< this node registered again after its lease lapsed
  /// Departures this node's listeners heard (deaths declared: at once, or after a hold).
  uint64_t deaths_declared_total = 0;
  SuspicionStats suspicions;
};

class NodeDirectory {
 public:
  /// A change of a member's state (or a new member); `self` events report this node's fencing.
  using Listener = std::function<void(const MemberInfo& member, MemberState previous)>;

  virtual ~NodeDirectory() = default;

  /// Sets the address peers reach this node at (a port chosen by the server). Before Start().
  virtual void SetAdvertiseAddress(const std::string& address) = 0;
  /// Registers this node and starts tracking the others.
  virtual Status Start() = 0;
  virtual void Stop() = 0;

  /// Stamp for outgoing requests: protocol version, node id, current epoch, address.
  virtual v1::Caller SelfCaller() const = 0;
  virtual uint64_t epoch() const = 0;
  virtual const std::string& node_id() const = 0;

  /// Everyone known, this node included (may be a full read of the control plane: for
  /// operators, not for hot paths).
  virtual std::vector<MemberInfo> Members() const = 0;
  /// Alive or suspect members, this node excluded.
  virtual std::vector<MemberInfo> LiveMembers() const = 0;
  /// One node (this one included), or std::nullopt if unknown.
  virtual std::optional<MemberInfo> Find(const std::string& node_id) const = 0;
  /// kAlive (alive or suspect), kDead, or kUnknown (never heard of, or the membership source
  /// cannot be asked right now). The restore path asks it before declaring bytes lost.
  virtual NodeLiveness Liveness(const std::string& node_id) const;
  /// Liveness() and Find() of each of `node_ids` (in order), as one answer: etcd reads every
  /// registration once instead of once per node (a restore asks about every node of its job).
  virtual std::vector<NodeStatus> Lookup(const std::vector<std::string>& node_ids) const;
  /// Whether this node already knows `node_id` is dead — its departure heard, or a lookup
  /// that found it unregistered — without asking anyone. For judgements many nodes make at
  /// once while the control plane is loaded (is a coordinator that answers late dead?), where
  /// a read each would add to the load. The default asks Find.
  virtual bool HeardDead(const std::string& node_id) const;

  /// True once this node learned it had been declared dead: its snapshots may be stale.
  virtual bool IsFenced() const = 0;
  /// The daemon dropped (or re-validated) its stale state; the node serves again.
  virtual void ClearFence() = 0;
  virtual void AddListener(Listener listener) = 0;
  /// Called (on a directory thread; must not block) with the id of another node that left:
  /// declared dead or unregistered; "" when departures may have been missed (re-check). The
  /// default follows AddListener's changes to dead; a directory that reports no such changes
  /// (etcd: nodes look each other up on demand) watches for departures once one is asked for.
  using DepartureListener = std::function<void(const std::string& node_id)>;
  virtual void AddDepartureListener(DepartureListener listener);
  /// Called (on a directory thread; must not block) with the id of another node that came: a
  /// new registration, or a node back after it was declared dead. The default follows
  /// AddListener's changes from dead; etcd watches the registrations' puts once one is asked for.
  using ArrivalListener = std::function<void(const std::string& node_id)>;
  virtual void AddArrivalListener(ArrivalListener listener);

  /// Server side: refuses incompatible protocol versions and callers declared dead.
  virtual Status AdmitCaller(const v1::Caller& caller) = 0;
  /// What deaths are held now and why (nothing held by a source that never suspects itself).
  virtual DeathHoldStatus DeathHolds() const { return {}; }

  /// \brief A suspicion that `node` died — a trainer's report (a collective failed), a peer
  /// call that found it unreachable. Never a death by itself: etcd knocks at the node's
  /// registered port and, when it is refused twice in a row (the process is gone), revokes the
  /// node's lease, so the death everyone then sees is the lapse that would have come a TTL
  /// later; a port that accepts or does not answer leaves the node to its lease. Gossip does
  /// nothing: SWIM probes every member each period. Returns at once (looked into on a thread).
  virtual void Suspect(const std::string& /*node*/, const std::string& /*reason*/) {}
  /// \brief Suspect() of the node registered at `address`, if one is known.
  virtual void SuspectAddress(const std::string& /*address*/, const std::string& /*reason*/) {}
};

/// \brief The part of AdmitCaller that needs no membership: the caller speaks this node's
/// protocol version (Protocol otherwise, naming both) and names itself (InvalidArgument).
Status CheckCallerProtocol(const v1::Caller& caller, const std::string& self_node_id);

}  // namespace reft::peer
