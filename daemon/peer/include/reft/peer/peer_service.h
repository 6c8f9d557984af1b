#pragma once
/// \file peer_service.h
/// \brief Server side of the Peer service (proto/reft/v1/peer.proto). FetchRegion is served
/// raw: each chunk is a grpc::ByteBuffer made of a small header slice (the RegionChunk fields in
/// protobuf wire format) and a slice that references the mapped shared-memory slot, so the
/// payload is never copied into a protobuf field; the slice keeps the SlotRef alive until gRPC
/// releases it. Before a chunk is sent its bytes are checked against the checksums sealed in the
/// slot (a byte flipped in memory after sealing fails the stream with DATA_LOSS naming the chunk,
/// or, when wire chunks coincide with sealed chunks, reaches the client with the sealed checksum
/// and is reported by it). Every handler first asks the security::Authorizer (when one is
/// given) whether the call may proceed, with the node id its Caller claims: token, certificate
/// identity under mutual TLS (docs/security.md). Handlers are thread-safe (gRPC sync server
/// threads).

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include <grpcpp/grpcpp.h>

#include "reft/mutex.h"
#include "reft/peer/bulk_listener.h"
#include "reft/peer/gossip_endpoints.h"
#include "reft/peer/handler_slot.h"
#include "reft/peer/job_access.h"
#include "reft/coord/agreement.h"
#include "reft/coord/roles.h"
#include "reft/peer/node_directory.h"
#include "reft/peer/peer_options.h"
#include "reft/peer/sealed_checksums.h"
#include "reft/security/authorizer.h"
#include "reft/store/snapshot_store.h"
#include "reft/v1/peer.grpc.pb.h"

namespace reft::peer {

class PeerService final : public v1::Peer::Service {
 public:
  /// `authorizer` null = every call is admitted (tests and benchmarks in one process).
  /// `bulk` (null = none; must outlive the service) serves FetchRegion calls that ask for the
  /// bulk transport.
  PeerService(PeerOptions options, store::SnapshotStore* store, NodeDirectory* nodes,
              coord::SlotDirectory* slots, GossipEndpoints gossip,
              const security::Authorizer* authorizer = nullptr, BulkListener* bulk = nullptr);

  grpc::Status Hello(grpc::ServerContext*, const v1::HelloRequest*, v1::HelloResponse*) override;
  grpc::Status Ping(grpc::ServerContext*, const v1::PingRequest*, v1::PingResponse*) override;
  grpc::Status PingReq(grpc::ServerContext*, const v1::PingReqRequest*,
                       v1::PingReqResponse*) override;
  grpc::Status ReportComplete(grpc::ServerContext*, const v1::ReportCompleteRequest*,
                              v1::ReportCompleteResponse*) override;
  grpc::Status ExchangeCommitState(grpc::ServerContext*, const v1::ExchangeCommitStateRequest*,
                                   v1::ExchangeCommitStateResponse*) override;
  grpc::Status GetManifest(grpc::ServerContext*, const v1::GetManifestRequest*,
                           v1::GetManifestResponse*) override;
  grpc::Status PersistStep(grpc::ServerContext*, const v1::PersistStepRequest*,
                           v1::PersistStepResponse*) override;
  grpc::Status ReportStepCompletion(grpc::ServerContext*, const v1::ReportStepCompletionRequest*,
                                    v1::ReportStepCompletionResponse*) override;
  grpc::Status StageLayers(grpc::ServerContext*, const v1::StageLayersRequest*,
                           v1::StageLayersResponse*) override;

  /// Persists this node's ranks of a step (daemon/persister's Persister); runs on a gRPC thread
  /// and may block for size / bandwidth seconds. Without a handler PersistStep answers
  /// code UNSUPPORTED ("no persistent tier on node X").
  using PersistHandler = std::function<v1::PersistStepResponse(const v1::PersistStepRequest&)>;
  void SetPersistHandler(PersistHandler handler);

  /// Stages layers of a committed step on this node (the planner's transfer plan; daemon/
  /// recovery's ReftLoad::StageLayers); runs on a gRPC thread and blocks while the bytes are
  /// fetched. Without a handler StageLayers answers UNIMPLEMENTED.
  using StageHandler = std::function<Result<v1::StageLayersResponse>(const v1::StageLayersRequest&)>;
  void SetStageHandler(StageHandler handler);

  /// Takes another node's completion report for a job this node coordinates (the control
  /// plane's coord::CompletionInbox, registered by PeerNode); runs on a gRPC thread. The
  /// report's node is the authenticated caller. Without a handler ReportStepCompletion answers
  /// UNSUPPORTED (the sender records its completion in the control plane instead).
  using CompletionHandler = std::function<Status(const coord::StepCompletionReport&)>;
  void SetCompletionHandler(CompletionHandler handler);
  /// Takes a batch an aggregator forwards (coord::CompletionInbox::ReceiveForwarded), after the
  /// service fenced each report's own caller (AdmitCaller); one answer per report, in order.
  using ForwardedHandler =
      std::function<std::vector<Status>(const std::vector<coord::StepCompletionReport>&)>;
  void SetForwardedHandler(ForwardedHandler handler);
  /// Names the aggregator a direct reporter sends its next reports to
  /// (coord::CompletionInbox::RouteFor), in the answer to an accepted direct report.
  using RouteHandler = std::function<std::optional<coord::ReportRoute>(const std::string& job,
                                                                       const std::string& node)>;
  void SetRouteHandler(RouteHandler handler);

  /// Holders serve a job's bytes (FetchRegion, StageLayers, PersistStep) only to the nodes
  /// `access` ties to the job (job_access.h); null (the default, gossip) = to every admitted
  /// member. Set before the server serves; `access` outlives the service.
  void SetJobAccess(JobAccess* access) { access_ = access; }
  /// Calls refused because the caller has no part in the job.
  uint64_t refused_jobs() const { return refused_jobs_.load(); }

  /// Sets the server-wide limits this service needs (max send/receive message sizes).
  static void ConfigureServerBuilder(const PeerOptions& options, grpc::ServerBuilder* builder);

 private:
  /// The wire chunks of bytes [begin, end) of one region of a slot.
  struct WireChunks {
    const store::SlotRef* slot;
    size_t region;
    const SealedChecksums* sealed;
    uint64_t begin;
    uint64_t end;
    uint64_t max_chunk;  ///< the caller's largest chunk (0: no limit beyond this node's own)
    std::string what;    ///< "rank step region", for messages
  };
  /// Receives each wire chunk: region offset, length, checksum; a non-OK status stops.
  using WireChunkSink = std::function<Status(uint64_t, uint64_t, uint64_t)>;

  grpc::Status FetchRegionRaw(grpc::ServerContext* ctx, const grpc::ByteBuffer* request,
                              grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* writer);
  /// Cuts the range into wire chunks that never straddle a sealed chunk: a chunk that is a
  /// whole sealed chunk carries its sealed checksum; a part of one is sent only after the whole
  /// sealed chunk was checked here (Corrupted otherwise), with a checksum of its own.
  Status ForEachWireChunk(const WireChunks& chunks, const WireChunkSink& sink) const;
  Status SendBulk(grpc::ServerContext* ctx,
                  grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* writer,
                  const WireChunks& chunks);
  Status Admit(const v1::Caller& caller, bool serves_snapshots);
  /// JobAccess::MayServe for the caller's node (OK without an access check).
  Status MayServe(const v1::Caller& caller, const std::string& job);
  grpc::Status NoGossip(const char* method) const;
  /// ReportStepCompletion carrying an aggregator's batch (`forwarded`).
  grpc::Status ReceiveForwarded(grpc::ServerContext* ctx, const v1::ReportStepCompletionRequest& req,
                                v1::ReportStepCompletionResponse* resp);
  /// The Authorizer's verdict on one call (OK without an authorizer).
  grpc::Status Authorize(grpc::ServerContext* ctx, const char* method, const v1::Caller& caller);

  PeerOptions options_;
  store::SnapshotStore* store_;
  NodeDirectory* membership_;
  coord::SlotDirectory* slots_;
  GossipEndpoints gossip_;  ///< the gossip control plane's answers (both null with etcd)
  const security::Authorizer* authorizer_;
  BulkListener* bulk_;
  JobAccess* access_ = nullptr;
  std::atomic<uint64_t> refused_jobs_{0};
  HandlerSlot<PersistHandler> persist_handler_;
  HandlerSlot<StageHandler> stage_handler_;
  HandlerSlot<CompletionHandler> completion_handler_;
  HandlerSlot<ForwardedHandler> forwarded_handler_;
  HandlerSlot<RouteHandler> route_handler_;
  /// Fencing of the reports an aggregator forwards without an etcd read per report: the newest
  /// epoch each reporting node was seen calling or forwarded under (one entry per node of the
  /// cluster); a node seen for the first time is admitted as a caller (AdmitCaller) once.
  Status AdmitForwarded(const v1::Caller& caller);
  void NoteReporterEpoch(const v1::Caller& caller);
  Mutex reporter_epochs_mu_;
  std::map<std::string, uint64_t> reporter_epochs_ REFT_GUARDED_BY(reporter_epochs_mu_);
};

}  // namespace reft::peer
