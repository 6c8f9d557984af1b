#pragma once
/// \file peer_client.h
/// \brief Client side of the Peer service: one channel per peer address, deadlines on every
/// call, explicit message size limits, and a TokenBucket per peer shared by its FetchRegion
/// streams (PeerOptions::peer_stream_bandwidth). Thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "reft/mutex.h"
#include "reft/coord/agreement.h"
#include "reft/peer/peer_options.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"
#include "reft/token_bucket.h"
#include "reft/v1/peer.grpc.pb.h"

namespace reft::peer {

class RegionReceiver;
struct BulkOffer;

/// \brief Per-call settings of PeerClient::FetchRegion beyond the byte range.
struct FetchOptions {
  /// Serve the region of a slot still being written once its owner published it
  /// (SnapshotStore::Publish); NotFound while it is not published. Default: complete or
  /// committed slots only.
  bool published_only = false;
  /// Non-zero: the region must have exactly this size (InvalidArgument otherwise).
  uint64_t expect_region_size = 0;
  /// Deadline of the whole stream; 0 = PeerOptions::fetch_deadline.
  std::chrono::milliseconds timeout{0};
  /// The region's sealed chunk table as the caller learned it (the holder's manifest): chunk
  /// size and XXH3-64 of every chunk; needs `expect_region_size`. When set, every sealed chunk
  /// the range covers whole must match it too (Corrupted naming the chunk otherwise), checked
  /// in the same hash pass as the wire checksum: a slot replaced between the manifest and the
  /// fetch is caught without hashing the bytes twice. Must outlive the call.
  const std::vector<uint64_t>* expect_chunks = nullptr;
  uint64_t expect_chunk_size = 0;
};

class PeerClient {
 public:
  /// `caller` stamps every request (protocol version, node id, current epoch).
  /// `credentials` null = plain text; `token` ("" = none) goes with every call.
  PeerClient(PeerOptions options, std::function<v1::Caller()> caller,
             std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
             std::string token = "");

  void SetFencedHandler(std::function<void(const std::string& message)> handler);
  /// Called (on the calling thread, no lock held) when a call to a peer ends UNAVAILABLE: the
  /// peer's address and what failed. reftd reports it as a suspicion of the peer
  /// (NodeDirectory::SuspectAddress); null: nobody is told.
  void SetUnreachableHandler(
      std::function<void(const std::string& address, const std::string& what)> handler);

  Result<v1::HelloResponse> Hello(const std::string& address);
  Result<v1::PingResponse> Ping(const std::string& address, v1::PingRequest request,
                                std::chrono::milliseconds timeout);
  Result<v1::PingReqResponse> PingReq(const std::string& address, v1::PingReqRequest request,
                                      std::chrono::milliseconds timeout);
  Result<v1::ReportCompleteResponse> ReportComplete(const std::string& address,
                                                    const v1::JobCommitState& state);
  /// `timeout` 0 = PeerOptions::rpc_deadline.
  Result<v1::ExchangeCommitStateResponse> ExchangeCommitState(
      const std::string& address, v1::ExchangeCommitStateRequest request,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  /// Manifest of the peer's complete/committed slots and joined ranks (`job` empty = all jobs).
  /// `timeout` 0 = PeerOptions::rpc_deadline.
  Result<v1::GetManifestResponse> GetManifest(
      const std::string& address, const std::string& job,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  /// \brief Asks the peer to persist its ranks of (job, step) (Peer.PersistStep); the peer's
  /// own outcome is in the response (`code`, `message`). Unavailable / Timeout on transport
  /// problems, Unsupported when the peer predates the RPC. `wait_commit` > 0: the step may
  /// commit later; the peer waits up to that long and persists it as it commits (the RPC's
  /// deadline is `timeout` + `wait_commit`).
  Result<v1::PersistStepResponse> PersistStep(
      const std::string& address, const std::string& job, int64_t step,
      std::chrono::milliseconds timeout,
      std::chrono::milliseconds wait_commit = std::chrono::milliseconds(0));

  /// \brief Asks the peer to stage `layers` of committed step `step` of `job` on itself
  /// (Peer.StageLayers, a move of the planner's transfer plan). The peer's errors come back as
  /// they are (Busy: the step is not its newest committed one); Unavailable /
  /// Timeout on transport problems, Unsupported from a peer that predates the RPC.
  Result<v1::StageLayersResponse> StageLayers(const std::string& address, const std::string& job,
                                              int64_t step, const std::vector<int>& layers,
                                              std::chrono::milliseconds timeout);

  /// \brief Fetches bytes [offset, offset + dst_size) of `region` of `rank`'s slot of `step`
  /// from the peer at `address` into `dst`, verifying every chunk's checksum.
  /// Corrupted names the chunk (transit or server-side sealed-checksum failure); Unavailable
  /// when the peer cannot be reached; Timeout when fetch_deadline passes (a hung peer);
  /// NotFound when the peer lacks the slot/region; Protocol on a malformed stream.
  Status FetchRegion(const std::string& address, const store::RankKey& rank, int64_t step,
                     const std::string& region, uint8_t* dst, uint64_t dst_size,
                     uint64_t offset = 0);
  /// \brief The same with per-call options (published regions, expected size, deadline);
  /// NotFound with `published_only` also means "not published yet".
  Status FetchRegion(const std::string& address, const store::RankKey& rank, int64_t step,
                     const std::string& region, uint8_t* dst, uint64_t dst_size, uint64_t offset,
                     const FetchOptions& options);

  /// \brief Sends one node's completion of a step to the job's coordinator at `address`
  /// (Peer.ReportStepCompletion; `report.node` is ignored: the server takes the caller).
  /// Protocol when that node does not coordinate the job; Unavailable / Timeout on transport
  /// problems. `timeout` 0 = PeerOptions::rpc_deadline.
  /// `route`, when given, receives the aggregator the coordinator names for the sender's next
  /// reports (empty: none).
  Status ReportStepCompletion(const std::string& address, const coord::StepCompletionReport& report,
                              std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                              coord::ReportRoute* route = nullptr);
  /// \brief Carries other nodes' reports to the job's coordinator at `address` in one call (an
  /// aggregator's batch; each report's `node` and `node_epoch` go as its own Caller). The
  /// coordinator's answer to each, in order; an error when the call itself failed.
  Result<std::vector<Status>> ForwardStepCompletions(
      const std::string& address, const std::vector<coord::StepCompletionReport>& reports,
      std::chrono::milliseconds timeout);

  /// Starts connecting to `address` in the background (no call, no wait), so that a first call
  /// later does not pay for the connection under its deadline.
  void Connect(const std::string& address);

  /// Drops the cached channel of `address` and cancels every FetchRegion in flight to it: they
  /// end Unavailable at once instead of at their deadline (the peer was declared dead; a
  /// stopped process never answers, and a fetch from it would hold its caller — a snapshot's
  /// peer copy, a restore — for the whole fetch deadline).
  void Forget(const std::string& address);

 private:
  struct Conn {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Peer::Stub> stub;
    std::unique_ptr<TokenBucket> bucket;
    /// steady_clock nanoseconds before which FetchRegion does not ask for the bulk transport
    /// (set when the holder's bulk port could not be connected to, or refused several in a row)
    std::atomic<int64_t> bulk_retry_ns{0};
    std::atomic<int> bulk_early_closes{0};  ///< bulk connections closed unused, in a row
    /// FetchRegion calls in flight to this peer and their bulk connections, cancelled by Forget
    /// (a call registered after it is cancelled at once).
    Mutex calls_mu;
    std::set<grpc::ClientContext*> fetches REFT_GUARDED_BY(calls_mu);
    std::set<int> bulk_fds REFT_GUARDED_BY(calls_mu);
    bool forgotten REFT_GUARDED_BY(calls_mu) = false;
  };
  class InFlight;  // registers one call or bulk connection with its Conn while it runs
  std::shared_ptr<Conn> Get(const std::string& address);
  v1::Caller Stamp();
  /// Deadline `timeout` from now and the shared token, for every call.
  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const;
  /// When a bulk offer could not be used: ask this holder for a gRPC stream now (kThisCall),
  /// and also for the next while (kForAWhile: its bulk port cannot be reached).
  enum class BulkFallback { kNone, kThisCall, kForAWhile };
  /// One FetchRegion call: chunks from the stream, or from the bulk connection it offers;
  /// `*fallback` says whether the call is to be made again over a gRPC stream.
  Status ReceiveRange(Conn& conn, const std::string& address, const v1::FetchRegionRequest& req,
                      std::chrono::steady_clock::time_point deadline, RegionReceiver* rx,
                      BulkFallback* fallback);
  /// The range on the bulk connection `offer` names, to its port on `host` (an IP when the
  /// call went over TCP: the one it reached).
  Status ReceiveBulk(Conn& conn, const std::string& host, const BulkOffer& offer,
                     std::chrono::steady_clock::time_point deadline, RegionReceiver* rx,
                     BulkFallback* fallback);
  /// The reft status of a finished call (proto::FromGrpc); a fenced refusal also notifies.
  /// The call to `address` ended with `s`: OK, or the error naming `what` (and the handlers told).
  Status Check(const grpc::Status& s, const std::string& address, const std::string& what,
               const grpc::ClientContext& ctx);

  PeerOptions options_;
  TokenBucket link_;  ///< every stream from every peer (PeerOptions::link_bandwidth)
  std::function<v1::Caller()> caller_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const std::string token_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Conn>> conns_ REFT_GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_fenced_ REFT_GUARDED_BY(mu_);
  std::function<void(const std::string&, const std::string&)> on_unreachable_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::peer
