#include "reft/peer/peer_service.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "bulk_wire.h"
#include "reft/peer/fencing.h"
#include "reft/checksum.h"
#include "reft/peer/rank_id.h"
#include "reft/peer/sealed_checksums.h"
#include "reft/proto/grpc_status.h"

namespace reft::peer {

namespace {

// Index of FetchRegion in `service Peer` (declaration order in peer.proto).
constexpr int kFetchRegionMethodIndex = 6;
// How long a caller that was handed a bulk ticket has to connect with it.
constexpr std::chrono::seconds kBulkConnectWait{10};

size_t PutVarint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  p[n++] = static_cast<uint8_t>(v);
  return n;
}

// RegionChunk fields 1..3 plus the tag and length of field 15 (`data`), in protobuf wire format.
size_t EncodeChunkHeader(uint64_t offset, uint64_t length, uint64_t checksum, uint8_t* p) {
  size_t n = 0;
  p[n++] = 0x08;  // field 1, varint
  n += PutVarint(p + n, offset);
  p[n++] = 0x10;  // field 2, varint
  n += PutVarint(p + n, length);
  p[n++] = 0x19;  // field 3, fixed64
  for (int i = 0; i < 8; ++i) p[n++] = static_cast<uint8_t>(checksum >> (8 * i));
  p[n++] = 0x7A;  // field 15, length-delimited
  n += PutVarint(p + n, length);
  return n;
}

void ReleaseSlot(void* holder) { delete static_cast<std::shared_ptr<store::SlotRef>*>(holder); }

// How long a bulk send may take: the caller's deadline when it set one, else the deadline this
// node's own fetches run under (PeerOptions::fetch_deadline). A call without a deadline must not
// hold a handler thread, a slot and a connection for as long as its caller stops reading.
std::chrono::system_clock::time_point BulkDeadline(const grpc::ServerContext& ctx,
                                                   std::chrono::milliseconds fetch_deadline) {
  // gRPC reads "no deadline" as the largest time point.
  if (ctx.deadline() != std::chrono::system_clock::time_point::max()) return ctx.deadline();
  return std::chrono::system_clock::now() + fetch_deadline;
}

}  // namespace

PeerService::PeerService(PeerOptions options, store::SnapshotStore* store, NodeDirectory* nodes,
                         coord::SlotDirectory* slots, GossipEndpoints gossip,
                         const security::Authorizer* authorizer, BulkListener* bulk)
    : options_(std::move(options)),
      store_(store),
      membership_(nodes),
      slots_(slots),
      gossip_(gossip),
      authorizer_(authorizer),
      bulk_(bulk) {
  // Replace the generated (copying) FetchRegion handler by a sync handler on raw ByteBuffers.
  // gRPC marks a "streamed" method bidi internally (the handler reads the request itself); on
  // the wire this is the same server-streaming call: one request message, then the chunks.
  MarkMethodStreamed(
      kFetchRegionMethodIndex,
      new grpc::internal::BidiStreamingHandler<PeerService, grpc::ByteBuffer, grpc::ByteBuffer>(
          [](PeerService* self, grpc::ServerContext* ctx,
             grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream) {
            grpc::ByteBuffer request;
            if (!stream->Read(&request)) {
              return proto::ToGrpc(Status::InvalidArgument("FetchRegion without a request message"),
                                   ctx);
            }
            return self->FetchRegionRaw(ctx, &request, stream);
          },
          this));
}

void PeerService::ConfigureServerBuilder(const PeerOptions& options, grpc::ServerBuilder* b) {
  b->SetMaxReceiveMessageSize(options.max_message_bytes);
  b->SetMaxSendMessageSize(options.max_message_bytes);
}

grpc::Status PeerService::Authorize(grpc::ServerContext* ctx, const char* method,
                                    const v1::Caller& caller) {
  if (authorizer_ == nullptr) return grpc::Status::OK;
  return authorizer_->CheckPeer(ctx, method, caller.node_id());
}

Status PeerService::Admit(const v1::Caller& caller, bool serves_snapshots) {
  REFT_RETURN_NOT_OK(membership_->AdmitCaller(caller));
  if (serves_snapshots && membership_->IsFenced()) {
    return Status::Protocol("stale: node '" + membership_->node_id() +
                            "' was declared dead and its snapshots are stale; use another source");
  }
  return Status::OK();
}

Status PeerService::MayServe(const v1::Caller& caller, const std::string& job) {
  if (access_ == nullptr) return Status::OK();
  Status s = access_->MayServe(caller.node_id(), job);
  if (!s.ok()) refused_jobs_++;
  return s;
}

grpc::Status PeerService::Hello(grpc::ServerContext* ctx, const v1::HelloRequest* req,
                                v1::HelloResponse* resp) {
  if (auto denied = Authorize(ctx, "Peer/Hello", req->caller()); !denied.ok()) {
    return denied;
  }
  Status s = Admit(req->caller(), false);
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  *resp->mutable_server() = membership_->SelfCaller();
  if (gossip_.swim) gossip_.swim->FillFullTable(resp->mutable_members());
  return grpc::Status::OK;
}

// The SWIM and commit-exchange RPCs of the gossip control plane; a node coordinating through
// etcd has no use for them.
grpc::Status PeerService::NoGossip(const char* method) const {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      std::string(method) + ": node '" + membership_->node_id() +
                          "' coordinates through etcd, not by gossip");
}

grpc::Status PeerService::Ping(grpc::ServerContext* ctx, const v1::PingRequest* req,
                               v1::PingResponse* resp) {
  if (auto denied = Authorize(ctx, "Peer/Ping", req->caller()); !denied.ok()) {
    return denied;
  }
  if (!gossip_.swim) return NoGossip("Ping");
  Status s = Admit(req->caller(), false);
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  gossip_.swim->Merge(req->updates());
  gossip_.swim->FillUpdates(resp->mutable_updates());
  return grpc::Status::OK;
}

grpc::Status PeerService::PingReq(grpc::ServerContext* ctx, const v1::PingReqRequest* req,
                                  v1::PingReqResponse* resp) {
  if (auto denied = Authorize(ctx, "Peer/PingReq", req->caller()); !denied.ok()) {
    return denied;
  }
  SwimEndpoint* swim = gossip_.swim;
  if (!swim) return NoGossip("PingReq");
  Status s = Admit(req->caller(), false);
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  swim->Merge(req->updates());
  resp->set_target_acked(
      swim->PingFor(req->target_address(), std::chrono::milliseconds(req->timeout_ms())));
  swim->FillUpdates(resp->mutable_updates());
  return grpc::Status::OK;
}

grpc::Status PeerService::ReportComplete(grpc::ServerContext* ctx,
                                         const v1::ReportCompleteRequest* req,
                                         v1::ReportCompleteResponse* resp) {
  if (auto denied = Authorize(ctx, "Peer/ReportComplete", req->caller()); !denied.ok()) {
    return denied;
  }
  if (!gossip_.commit) return NoGossip("ReportComplete");
  Status s = Admit(req->caller(), false);
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  auto merged = gossip_.commit->MergeRemote(req->state());
  if (!merged.ok()) return proto::ToGrpc(merged.status(), ctx);
  *resp->mutable_state() = std::move(*merged);
  return grpc::Status::OK;
}

grpc::Status PeerService::ExchangeCommitState(grpc::ServerContext* ctx,
                                              const v1::ExchangeCommitStateRequest* req,
                                              v1::ExchangeCommitStateResponse* resp) {
  if (auto denied = Authorize(ctx, "Peer/ExchangeCommitState", req->caller()); !denied.ok()) {
    return denied;
  }
  if (!gossip_.commit) return NoGossip("ExchangeCommitState");
  Status s = Admit(req->caller(), false);
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  Status first;
  for (const auto& j : req->jobs()) {
    auto merged = gossip_.commit->MergeRemote(j);
    if (!merged.ok() && first.ok()) first = merged.status();
  }
  for (auto& j : gossip_.commit->AllStates()) *resp->add_jobs() = std::move(j);
  return proto::ToGrpc(first, ctx);
}

grpc::Status PeerService::GetManifest(grpc::ServerContext* ctx, const v1::GetManifestRequest* req,
                                      v1::GetManifestResponse* resp) {
  if (auto denied = Authorize(ctx, "Peer/GetManifest", req->caller()); !denied.ok()) {
    return denied;
  }
  Status s = Admit(req->caller(), true);
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  *resp->mutable_server() = membership_->SelfCaller();
  std::optional<std::string> job;
  if (!req->job().empty()) job = req->job();
  for (const auto& r : slots_->JoinedRanks(job)) {
    ToRankId(r, resp->add_joined());
  }
  for (const auto& info : store_->List(job)) {
    if (info.state != store::SlotState::kComplete && info.state != store::SlotState::kCommitted) {
      continue;
    }
    auto ref = store_->Get(info.rank, info.step);
    if (!ref.ok()) continue;  // freed since List (a newer commit): not a source any more
    auto* slot = resp->add_slots();
    ToRankId(info.rank, slot->mutable_rank());
    slot->set_step(info.step);
    slot->set_state(store::SlotStateName((*ref)->info().state));
    for (size_t i = 0; i < (*ref)->info().regions.size(); ++i) {
      auto* region = slot->add_regions();
      region->set_name((*ref)->info().regions[i].name);
      region->set_size((*ref)->region_size(i));
      auto sealed = ReadSealedChecksums(**ref, i);
      if (!sealed.ok()) return proto::ToGrpc(sealed.status(), ctx);
      region->set_chunk_size(sealed->chunk_size);
      for (uint64_t c : sealed->chunks) region->add_chunk_checksums(c);
      region->set_checksum(Checksum64(sealed->chunks.data(), sealed->chunks.size() * 8));
    }
  }
  return grpc::Status::OK;
}

void PeerService::SetPersistHandler(PersistHandler handler) {
  persist_handler_.Set(std::move(handler));
}

namespace {
template <typename Request>
coord::StepCompletionReport ReportOf(const Request& req) {
  coord::StepCompletionReport report;
  report.job = req.job();
  report.step = req.step();
  report.node = req.caller().node_id();
  report.node_epoch = req.caller().epoch();
  report.generation = req.generation();
  report.epoch = req.epoch();
  report.layout_revision = req.layout_revision();
  report.ranks.reserve(static_cast<size_t>(req.ranks_size()));
  for (const auto& id : req.ranks()) report.ranks.push_back(FromRankId(id));
  return report;
}

void SetStatus(const Status& s, v1::ForwardedReportStatus* out) {
  out->set_code(static_cast<v1::ErrorCode>(s.code()));  // common.proto mirrors StatusCode
  out->set_message(s.message());
}
}  // namespace

grpc::Status PeerService::ReportStepCompletion(grpc::ServerContext* ctx,
                                               const v1::ReportStepCompletionRequest* req,
                                               v1::ReportStepCompletionResponse* resp) {
  if (auto denied = Authorize(ctx, "Peer/ReportStepCompletion", req->caller()); !denied.ok()) {
    return denied;
  }
  // No membership lookup (the coordinator takes a report from every node of the job at every
  // step; looking each caller up in etcd would cost etcd more than the report saves): a report
  // is fenced by what it carries instead: the coordinator counts only the job's current
  // generation, restore epoch and layout revision, and its commit compares all three in etcd.
  Status s = CheckCallerProtocol(req->caller(), membership_->node_id());
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  if (req->forwarded_size() > 0) return ReceiveForwarded(ctx, *req, resp);
  NoteReporterEpoch(req->caller());
  // The node is the caller (authenticated): a node reports only its own ranks' completions.
  const coord::StepCompletionReport report = ReportOf(*req);
  const auto handler = completion_handler_.Get();
  if (!handler) {
    return proto::ToGrpc(Status::Unsupported("node '" + membership_->node_id() +
                                             "' takes no completion reports"),
                         ctx);
  }
  s = (*handler)(report);
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  if (const auto route = route_handler_.Get()) {
    if (auto r = (*route)(report.job, report.node)) {
      resp->set_aggregator_node_id(r->node);
      resp->set_aggregator_address(r->address);
    }
  }
  return grpc::Status::OK;
}

// A batch: the aggregator vouches for other nodes' reports (docs/coordination.md "Reports
// aggregate on the way"). Each report's own node is fenced as if it had called (a node declared
// dead and registered again under a newer epoch is not believed); a refused report is answered
// alone and the others go on.
grpc::Status PeerService::ReceiveForwarded(grpc::ServerContext* ctx,
                                           const v1::ReportStepCompletionRequest& req,
                                           v1::ReportStepCompletionResponse* resp) {
  const auto handler = forwarded_handler_.Get();
  if (!handler) {
    return proto::ToGrpc(Status::Unsupported("node '" + membership_->node_id() +
                                             "' takes no forwarded completion reports"),
                         ctx);
  }
  std::vector<Status> answers(static_cast<size_t>(req.forwarded_size()));
  std::vector<coord::StepCompletionReport> admitted;
  std::vector<size_t> index;  // admitted[i] answers answers[index[i]]
  for (int i = 0; i < req.forwarded_size(); ++i) {
    const v1::ForwardedReport& f = req.forwarded(i);
    Status ok = AdmitForwarded(f.caller());
    if (!ok.ok()) {
      answers[static_cast<size_t>(i)] = ok;
      continue;
    }
    admitted.push_back(ReportOf(f));
    index.push_back(static_cast<size_t>(i));
  }
  if (!admitted.empty()) {
    std::vector<Status> taken = (*handler)(admitted);
    for (size_t i = 0; i < index.size(); ++i) {
      answers[index[i]] = i < taken.size() ? taken[i] : Status::Internal("no answer");
    }
  }
  for (const Status& a : answers) SetStatus(a, resp->add_forwarded());
  return grpc::Status::OK;
}

void PeerService::NoteReporterEpoch(const v1::Caller& caller) {
  if (caller.epoch() == 0) return;
  MutexLock lock(reporter_epochs_mu_);
  uint64_t& newest = reporter_epochs_[caller.node_id()];
  newest = std::max(newest, caller.epoch());
}

// A forwarded report is fenced like a caller (AdmitCaller), but AdmitCaller reads the node's
// record from etcd every few seconds per node, which for every node's report at every step
// would cost etcd more than aggregation saves: the node is admitted once, and from then on a
// report under an older epoch than the newest one this node saw it use is refused (a node
// declared dead registers again under a newer epoch, and reports under it).
Status PeerService::AdmitForwarded(const v1::Caller& caller) {
  {
    MutexLock lock(reporter_epochs_mu_);
    auto it = reporter_epochs_.find(caller.node_id());
    if (it != reporter_epochs_.end()) {
      if (caller.epoch() != 0 && caller.epoch() < it->second) {
        return Status::Protocol("fenced: node '" + caller.node_id() + "' epoch " +
                                std::to_string(caller.epoch()) + " was replaced by epoch " +
                                std::to_string(it->second));
      }
      it->second = std::max(it->second, caller.epoch());
      return CheckCallerProtocol(caller, membership_->node_id());
    }
  }
  REFT_RETURN_NOT_OK(membership_->AdmitCaller(caller));
  NoteReporterEpoch(caller);
  return Status::OK();
}

void PeerService::SetCompletionHandler(CompletionHandler handler) {
  completion_handler_.Set(std::move(handler));
}

void PeerService::SetForwardedHandler(ForwardedHandler handler) {
  forwarded_handler_.Set(std::move(handler));
}

void PeerService::SetRouteHandler(RouteHandler handler) { route_handler_.Set(std::move(handler)); }

grpc::Status PeerService::PersistStep(grpc::ServerContext* ctx, const v1::PersistStepRequest* req,
                                      v1::PersistStepResponse* resp) {
  if (auto denied = Authorize(ctx, "Peer/PersistStep", req->caller()); !denied.ok()) {
    return denied;
  }
  Status s = Admit(req->caller(), false);
  if (s.ok()) s = MayServe(req->caller(), req->job());
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  const auto handler = persist_handler_.Get();
  if (!handler) {
    resp->set_node_id(membership_->node_id());
    resp->set_job(req->job());
    resp->set_step(req->step());
    resp->set_code(v1::UNSUPPORTED);
    resp->set_message("no persistent tier on node '" + membership_->node_id() + "'");
    return grpc::Status::OK;
  }
  *resp = (*handler)(*req);
  return grpc::Status::OK;
}

void PeerService::SetStageHandler(StageHandler handler) {
  stage_handler_.Set(std::move(handler));
}

grpc::Status PeerService::StageLayers(grpc::ServerContext* ctx, const v1::StageLayersRequest* req,
                                      v1::StageLayersResponse* resp) {
  if (auto denied = Authorize(ctx, "Peer/StageLayers", req->caller()); !denied.ok()) {
    return denied;
  }
  Status s = Admit(req->caller(), false);
  if (s.ok()) s = MayServe(req->caller(), req->job());
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  const auto handler = stage_handler_.Get();
  if (!handler) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "node '" + membership_->node_id() + "' does not stage layers");
  }
  auto r = (*handler)(*req);
  if (!r.ok()) return proto::ToGrpc(r.status(), ctx);
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status PeerService::FetchRegionRaw(grpc::ServerContext* ctx, const grpc::ByteBuffer* raw,
                                         grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* writer) {
  v1::FetchRegionRequest req;
  {
    std::vector<grpc::Slice> slices;
    if (!raw->Dump(&slices).ok()) {
      return proto::ToGrpc(Status::InvalidArgument("unreadable FetchRegion request"), ctx);
    }
    std::string bytes;
    for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    if (!req.ParseFromString(bytes)) {
      return proto::ToGrpc(Status::InvalidArgument("malformed FetchRegionRequest"), ctx);
    }
  }
  if (auto denied = Authorize(ctx, "Peer/FetchRegion", req.caller()); !denied.ok()) {
    return denied;
  }
  store::RankKey rank = FromRankId(req.rank());
  Status s = Admit(req.caller(), true);
  // Before a ticket or a byte goes out; regions without training state to every member.
  const auto& free = options_.job_free_regions;
  if (s.ok() && std::find(free.begin(), free.end(), req.region()) == free.end()) {
    s = MayServe(req.caller(), rank.job);
  }
  if (!s.ok()) return proto::ToGrpc(s, ctx);
  const std::string what = rank.ToString() + " step " + std::to_string(req.step()) +
                           " region '" + req.region() + "'";
  // published_only: a writing slot's region its owner published for peer copies (the chunk
  // table entries were filled by Publish, so the checks below work unchanged).
  auto ref = req.published_only() ? store_->GetPublished(rank, req.step(), req.region())
                                   : store_->Get(rank, req.step());
  if (!ref.ok()) return proto::ToGrpc(ref.status(), ctx);
  auto slot = std::move(*ref);
  auto idx = slot->FindRegion(req.region());
  if (!idx.ok()) return proto::ToGrpc(idx.status().WithContext(what), ctx);
  const uint64_t size = slot->region_size(*idx);
  if (req.expect_region_size() != 0 && req.expect_region_size() != size) {
    return proto::ToGrpc(Status::InvalidArgument(what + " has " + std::to_string(size) +
                                                 " bytes, the caller expects " +
                                                 std::to_string(req.expect_region_size())),
                         ctx);
  }
  if (req.max_chunk_bytes() != 0 && req.max_chunk_bytes() < kMinWireChunk) {
    return proto::ToGrpc(Status::InvalidArgument(
                             what + ": the caller takes chunks of at most " +
                             std::to_string(req.max_chunk_bytes()) + " bytes, below the " +
                             std::to_string(kMinWireChunk) + " every node must take"),
                         ctx);
  }
  const uint64_t begin = req.offset();
  const uint64_t length = req.length() ? req.length() : (begin <= size ? size - begin : 0);
  if (begin > size || length > size - begin) {
    return proto::ToGrpc(Status::InvalidArgument(what + ": bytes " + std::to_string(begin) + "+" +
                                                 std::to_string(length) +
                                                 " exceed the region size " + std::to_string(size)),
                         ctx);
  }
  auto sealed = ReadSealedChecksums(*slot, *idx);
  if (!sealed.ok()) return proto::ToGrpc(sealed.status(), ctx);
  WireChunks chunks{slot.get(), *idx, &*sealed, begin, begin + length, req.max_chunk_bytes(), what};
  // A caller whose IP address cannot be read (a Unix socket, a peer string gRPC wrote in a form
  // PeerIpOf does not know) gets no ticket: one bound to no address could be presented from
  // anywhere. Its bytes stay on this authenticated stream.
  if (req.bulk() && bulk_ != nullptr && !PeerIpOf(ctx->peer()).empty()) {
    return proto::ToGrpc(SendBulk(ctx, writer, chunks), ctx);
  }

  uint8_t* base = slot->region_data(*idx);
  Status sent = ForEachWireChunk(chunks, [&](uint64_t pos, uint64_t n, uint64_t checksum) {
    if (ctx->IsCancelled()) return Status::Cancelled("client cancelled");
    uint8_t header[40];
    size_t hn = EncodeChunkHeader(pos, n, checksum, header);
    grpc::Slice parts[2] = {
        grpc::Slice(header, hn),
        grpc::Slice(base + pos, n, ReleaseSlot, new std::shared_ptr<store::SlotRef>(slot))};
    grpc::ByteBuffer msg(parts, 2);
    if (!writer->Write(msg)) return Status::Cancelled(what + ": client went away");
    return Status::OK();
  });
  return proto::ToGrpc(sent, ctx);
}

Status PeerService::ForEachWireChunk(const WireChunks& c, const WireChunkSink& sink) const {
  const uint64_t C = c.sealed->chunk_size;
  uint64_t W = std::min<uint64_t>(options_.wire_chunk_bytes, C);
  if (c.max_chunk != 0) W = std::min(W, c.max_chunk);
  const uint64_t size = c.slot->region_size(c.region);
  const uint8_t* base = c.slot->region_data(c.region);
  uint64_t verified = UINT64_MAX;  // last sealed chunk checked against its checksum
  for (uint64_t pos = c.begin; pos < c.end;) {
    // Wire chunks never straddle a sealed chunk: [pos, next) lies inside sealed chunk pos / C.
    const uint64_t sc = pos / C;
    const uint64_t sc_end = std::min(size, (sc + 1) * C);
    const uint64_t next = std::min({c.end, pos + W, sc_end});
    const uint64_t n = next - pos;
    uint64_t checksum;
    if (pos == sc * C && next == sc_end) {
      // The wire chunk is exactly a sealed chunk: send the sealed checksum (end to end: a byte
      // changed in memory after Seal() is caught by the client, naming this chunk).
      checksum = c.sealed->chunks[sc];
    } else {
      if (verified != sc) {
        uint64_t actual = Checksum64(base + sc * C, sc_end - sc * C);
        if (actual != c.sealed->chunks[sc]) {
          return Status::Corrupted(c.what + ": sealed chunk " + std::to_string(sc) +
                                   " (region bytes " + std::to_string(sc * C) + ".." +
                                   std::to_string(sc_end) + ") fails its checksum on node '" +
                                   membership_->node_id() + "'");
        }
        verified = sc;
      }
      checksum = Checksum64(base + pos, n);
    }
    REFT_RETURN_NOT_OK(sink(pos, n, checksum));
    pos = next;
  }
  return Status::OK();
}

// The bulk transport (BulkListener): a ticket on the gRPC stream, the same chunks on the
// caller's own TCP connection, the outcome as the call's status.
Status PeerService::SendBulk(grpc::ServerContext* ctx,
                             grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* writer,
                             const WireChunks& chunks) {
  const auto deadline = BulkDeadline(*ctx, options_.fetch_deadline);
  const auto steady_deadline =
      std::chrono::steady_clock::now() + (deadline - std::chrono::system_clock::now());
  REFT_ASSIGN_OR_RETURN(const auto ticket, bulk_->Expect(PeerIpOf(ctx->peer())));
  v1::RegionChunk offer;
  offer.set_bulk_ticket(ticket.data(), ticket.size());
  offer.set_bulk_port(bulk_->port());
  grpc::Slice offer_slice(offer.SerializeAsString());
  const auto cancelled = [ctx] { return ctx->IsCancelled(); };
  if (!writer->Write(grpc::ByteBuffer(&offer_slice, 1))) {
    (void)bulk_->Claim(ticket, std::chrono::steady_clock::now(), cancelled);  // spends it
    return Status::Cancelled(chunks.what + ": client went away");
  }
  REFT_ASSIGN_OR_RETURN(
      UniqueFd fd,
      bulk_->Claim(ticket,
                   std::min(steady_deadline, std::chrono::steady_clock::now() + kBulkConnectWait),
                   cancelled));
  const uint8_t* base = chunks.slot->region_data(chunks.region);
  return ForEachWireChunk(chunks, [&](uint64_t pos, uint64_t n, uint64_t checksum) {
    uint8_t header[kBulkChunkHeaderBytes];
    EncodeBulkChunkHeader({pos, n, checksum}, header);
    iovec iov[2] = {{header, sizeof header}, {const_cast<uint8_t*>(base + pos), n}};
    return SendAll(fd.get(), iov, 2, steady_deadline, cancelled).WithContext(chunks.what);
  });
}

}  // namespace reft::peer
