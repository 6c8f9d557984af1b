#pragma once
/// \file gossip_endpoints.h
/// \brief What the Peer service hands to the gossip control plane when a node runs one.
///
/// The gossip control plane (daemon/coord: SWIM membership and the completion-set exchange)
/// talks between the daemons over the Peer service: Hello carries the member table, Ping and
/// PingReq are SWIM's probes, ReportComplete and ExchangeCommitState its commit exchange. The
/// service carries those calls — authorization, admission, the wire — and the control plane
/// answers them through these two seams, so daemon/peer holds no membership or commit logic.
/// A node coordinating through etcd registers neither, and the calls answer UNIMPLEMENTED.

#include <chrono>
#include <string>
#include <vector>

#include "reft/result.h"
#include "reft/v1/peer.pb.h"

namespace reft::peer {

/// \brief SWIM's side of Hello, Ping and PingReq. Thread-safe (called on gRPC threads).
class SwimEndpoint {
 public:
  virtual ~SwimEndpoint() = default;
  /// Merges gossip; refutes suspicion of this node; fences this node if it was declared dead.
  virtual void Merge(const google::protobuf::RepeatedPtrField<v1::MemberUpdate>& updates) = 0;
  /// This node and the facts still being disseminated (each use counts as one transmission).
  virtual void FillUpdates(google::protobuf::RepeatedPtrField<v1::MemberUpdate>* out) = 0;
  /// This node and every member: for a joiner's Hello and for anti-entropy.
  virtual void FillFullTable(google::protobuf::RepeatedPtrField<v1::MemberUpdate>* out) const = 0;
  /// PingReq: pings `target_address` for a member that could not reach it, waiting at most
  /// `timeout` (capped by this node's own probe timeout); true when the target acked.
  virtual bool PingFor(const std::string& target_address, std::chrono::milliseconds timeout) = 0;
};

/// \brief The commit exchange's side of ReportComplete and ExchangeCommitState. Thread-safe.
class CommitExchangeEndpoint {
 public:
  virtual ~CommitExchangeEndpoint() = default;
  /// Merges a peer's completion set of one job; answers this node's merged set.
  virtual Result<v1::JobCommitState> MergeRemote(const v1::JobCommitState& state) = 0;
  /// This node's completion sets of every job it follows (anti-entropy).
  virtual std::vector<v1::JobCommitState> AllStates() = 0;
};

/// \brief Both seams; both null when the node coordinates through etcd.
struct GossipEndpoints {
  SwimEndpoint* swim = nullptr;
  CommitExchangeEndpoint* commit = nullptr;
};

}  // namespace reft::peer
