#pragma once
/// \file swim_membership.h
/// \brief SWIM-style membership of reftd nodes (docs/peer.md "Membership": OFFLINE is raised by the
/// survivors on heartbeat timeout, never broadcast by the failed node).
///
/// Every probe_interval the node pings the next member of a shuffled round-robin order (so every
/// member is probed at least once per n periods: bounded detection time); without an ack within
/// probe_timeout it asks `indirect_probes` other members to PingReq the target; without any ack
/// the target becomes SUSPECT, and DEAD after suspicion_timeout (scaled with log n:
/// SuspicionTimeout) unless it refutes by gossiping a higher incarnation. Membership facts
/// travel piggybacked on pings as deltas (SWIM §4.4, infection-style): a fact that changed is
/// sent RetransmitLimit(n) times, O(log n), then no more, so a ping in a quiet cluster carries
/// the sender alone. The full table travels only where a node needs all of it: the answer to
/// a Hello (a joiner), the ping to a dead member (after a partition), and, every
/// kFullTableEvery probe periods, the probe itself — anti-entropy that repairs a delta lost
/// with its last retransmission (memberlist's push/pull does the same).
///
/// Bounded (docs/coordination.md): at most PeerOptions::max_gossip_nodes live members, this one
/// included; a newcomer beyond that is refused (its Hello fails naming the bound) and never
/// enters the table, so tables, pings and commit pushes stay the size the bound allows.
///
/// Epochs fence: a (node, epoch) declared DEAD stays dead; its RPCs are refused with a
/// "fenced:" error. When this node learns it was declared dead it takes a new epoch, rejoins,
/// and stays IsFenced() (its snapshots are stale) until the daemon calls ClearFence().
/// Thread-safe. Owns one probe thread (Start/Stop).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "reft/mutex.h"
#include "reft/peer/gossip_endpoints.h"
#include "reft/peer/node_directory.h"
#include "reft/peer/peer_client.h"
#include "reft/peer/peer_options.h"
#include "reft/thread.h"
#include "reft/v1/peer.pb.h"

namespace reft::coord {

/// \brief How long a member of a table of `members` (this node included) stays SUSPECT before
/// it is declared DEAD: `base` × max(1, log10(members)) (Lifeguard / memberlist). Suspicion
/// spreads in O(log n) gossip rounds, so the time a suspected member has to hear of it and
/// refute grows with log n; a fixed timeout declares live members dead as the table grows.
std::chrono::milliseconds SuspicionTimeout(std::chrono::milliseconds base, size_t members);

/// \brief How many pings carry a changed fact in a table of `members` (this node included):
/// 4 × ⌈log2(members + 1)⌉ (memberlist's retransmit multiplier), enough for an infection-style
/// broadcast to reach every member with high probability.
uint32_t RetransmitLimit(size_t members);

/// \brief The gossip control plane's node directory: SWIM between the daemons, answering the
/// Peer service's Hello, Ping and PingReq through peer::SwimEndpoint.
class SwimMembership final : public peer::NodeDirectory, public peer::SwimEndpoint {
 public:
  using MemberInfo = peer::MemberInfo;
  using MemberState = peer::MemberState;
  /// `client` must outlive the membership, which installs itself as its fenced handler.
  SwimMembership(peer::PeerOptions options, peer::PeerClient* client);
  ~SwimMembership() override;

  void SetAdvertiseAddress(const std::string& address) override;
  /// Starts the probe thread (contacts the seeds first, in the background).
  Status Start() override;
  void Stop() override;

  v1::Caller SelfCaller() const override;
  uint64_t epoch() const override;
  const std::string& node_id() const override { return options_.node_id; }

  std::vector<MemberInfo> Members() const override;
  std::vector<MemberInfo> LiveMembers() const override;
  std::optional<MemberInfo> Find(const std::string& node_id) const override;

  bool IsFenced() const override;
  void ClearFence() override;
  void AddListener(Listener listener) override;

  // --- server side (PeerService) ---
  /// Refuses incompatible protocol versions and fenced callers; records the caller as alive
  /// (a joiner, or a rejoin with a newer epoch).
  Status AdmitCaller(const v1::Caller& caller) override;
  void Merge(const google::protobuf::RepeatedPtrField<v1::MemberUpdate>& updates) override;
  void FillUpdates(google::protobuf::RepeatedPtrField<v1::MemberUpdate>* out) override;
  void FillFullTable(google::protobuf::RepeatedPtrField<v1::MemberUpdate>* out) const override;
  bool PingFor(const std::string& target_address, std::chrono::milliseconds timeout) override;

 private:
  struct Entry {
    MemberInfo info;
    std::chrono::steady_clock::time_point suspect_since;
    uint32_t sends_left = 0;  ///< pings that still carry this entry's latest change
  };
  /// A probe carries the full table once in this many periods.
  static constexpr int64_t kFullTableEvery = 10;
  using Event = std::pair<MemberInfo, MemberState>;

  void Run();
  void ContactSeeds();
  /// Pings the next member; `full_table`: with every fact, not only the recent ones.
  void ProbeOnce(bool full_table);
  /// Pings one DEAD member (round robin) with our view: after a partition heals both sides
  /// hold the other dead and would never probe it again. The exchange fences whichever side
  /// was declared dead; it rejoins with a new epoch and the cluster converges.
  void ReconnectDead();
  bool ProbeIndirect(const MemberInfo& target);
  void MarkSuspectLocked(const std::string& node_id, uint64_t epoch, uint64_t incarnation,
                         std::vector<Event>* events) REFT_REQUIRES(mu_);
  void ExpireSuspectsLocked(std::vector<Event>* events) REFT_REQUIRES(mu_);
  void MergeOneLocked(const MemberInfo& update, std::vector<Event>* events) REFT_REQUIRES(mu_);
  /// Records that `e` changed: it is disseminated afresh.
  void ChangedLocked(Entry* e) const REFT_REQUIRES(mu_);
  /// Fewer live members (this node included) than max_gossip_nodes.
  bool RoomForOneMoreLocked() const REFT_REQUIRES(mu_);
  void OnFenced(const std::string& message);
  void Notify(const std::vector<Event>& events);

  const peer::PeerOptions options_;  // as given (self_.address is the advertised address now)
  peer::PeerClient* client_;
  mutable reft::Mutex mu_;
  std::condition_variable cv_;
  bool running_ REFT_GUARDED_BY(mu_) = false;
  bool fenced_ REFT_GUARDED_BY(mu_) = false;
  MemberInfo self_ REFT_GUARDED_BY(mu_);
  std::map<std::string, Entry> members_ REFT_GUARDED_BY(mu_);  // by node id, self excluded
  std::vector<std::string> probe_order_ REFT_GUARDED_BY(mu_);
  size_t probe_next_ REFT_GUARDED_BY(mu_) = 0;
  size_t dead_next_ REFT_GUARDED_BY(mu_) = 0;  // ReconnectDead's round robin
  std::mt19937_64 rng_ REFT_GUARDED_BY(mu_);
  std::vector<Listener> listeners_ REFT_GUARDED_BY(mu_);
  reft::Thread thread_;
};

}  // namespace reft::coord
