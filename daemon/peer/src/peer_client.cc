#include "reft/peer/peer_client.h"

#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "bulk_wire.h"
#include "reft/checksum.h"
#include "reft/peer/fencing.h"
#include "reft/peer/rank_id.h"
#include "reft/proto/grpc_status.h"
#include "reft/security/grpc_auth.h"
#include "reft/thread.h"
#include "region_receiver.h"

namespace reft::peer {

namespace {
// Pacing granularity of the link and per-peer token buckets: 1 MiB bursts, whatever the wire
// chunk size, so an emulated link stays as smooth as it was with 1 MiB chunks.
constexpr uint64_t kPacingBurst = 1ull << 20;
// How long a FetchRegion waits to connect to a holder's bulk port before it falls back to the
// gRPC stream (a port a firewall drops packets for never refuses).
constexpr std::chrono::seconds kBulkConnectTimeout{3};
// How long a holder whose bulk port could not be reached is fetched from over gRPC streams.
constexpr std::chrono::seconds kBulkRetryAfter{60};
// Bulk connections closed before their first chunk, in a row, after which a holder is fetched
// from over gRPC streams for kBulkRetryAfter (its listener refuses this node's tickets).
constexpr int kBulkEarlyCloses = 3;
// How long a caller whose bulk connection ended early waits for the holder's verdict on the
// call before it cancels the call.
constexpr std::chrono::seconds kVerdictGrace{1};

// A completion report's fields, into a direct report or one carried in a batch (the two
// messages share them; the server reads both with one ReportOf).
template <typename Message>
void FillReport(const coord::StepCompletionReport& report, Message* m) {
  m->set_job(report.job);
  m->set_step(report.step);
  m->set_generation(report.generation);
  m->set_epoch(report.epoch);
  m->set_layout_revision(report.layout_revision);
  for (const auto& r : report.ranks) ToRankId(r, m->add_ranks());
}

std::chrono::system_clock::time_point DeadlineIn(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}
}  // namespace

PeerClient::PeerClient(PeerOptions options, std::function<v1::Caller()> caller,
                       std::shared_ptr<grpc::ChannelCredentials> credentials, std::string token)
    : options_(std::move(options)),
      link_(options_.link_bandwidth, kPacingBurst),
      caller_(std::move(caller)),
      credentials_(credentials ? std::move(credentials) : grpc::InsecureChannelCredentials()),
      token_(std::move(token)) {}

void PeerClient::Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const {
  ctx->set_deadline(DeadlineIn(timeout));
  security::AttachToken(ctx, token_);
}

void PeerClient::SetFencedHandler(std::function<void(const std::string&)> handler) {
  MutexLock lock(mu_);
  on_fenced_ = std::move(handler);
}

void PeerClient::SetUnreachableHandler(
    std::function<void(const std::string& address, const std::string& what)> handler) {
  MutexLock lock(mu_);
  on_unreachable_ = std::move(handler);
}

std::shared_ptr<PeerClient::Conn> PeerClient::Get(const std::string& address) {
  MutexLock lock(mu_);
  auto& c = conns_[address];
  if (!c) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(options_.max_message_bytes);
    args.SetMaxSendMessageSize(options_.max_message_bytes);
    // Reconnect quickly after a link drop: probes must see a restarted peer within one period.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // A channel per peer (not a shared subchannel pool), so one peer's trouble stays its own.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // Let a region stream keep two 4 MiB chunks in flight (HTTP/2 flow-control window).
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
    c = std::make_shared<Conn>();
    c->channel = grpc::CreateCustomChannel(address, credentials_, args);
    c->stub = v1::Peer::NewStub(c->channel);
    c->bucket = std::make_unique<TokenBucket>(options_.peer_stream_bandwidth, kPacingBurst);
  }
  return c;
}

/// Registers a FetchRegion's call (or its bulk connection) with the peer's Conn while it runs,
/// so that Forget can cancel it; one made after Forget is cancelled at once.
class PeerClient::InFlight {
 public:
  InFlight(Conn& conn, grpc::ClientContext* call) : conn_(conn), call_(call) {
    MutexLock lock(conn_.calls_mu);
    if (conn_.forgotten) {
      call_->TryCancel();
    } else {
      conn_.fetches.insert(call_);
    }
  }
  InFlight(Conn& conn, int bulk_fd) : conn_(conn), fd_(bulk_fd) {
    MutexLock lock(conn_.calls_mu);
    if (conn_.forgotten) {
      ::shutdown(fd_, SHUT_RDWR);
    } else {
      conn_.bulk_fds.insert(fd_);
    }
  }
  ~InFlight() {
    MutexLock lock(conn_.calls_mu);
    if (call_ != nullptr) conn_.fetches.erase(call_);
    if (fd_ >= 0) conn_.bulk_fds.erase(fd_);
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  /// Cancels everything in flight to `conn` and whatever registers later.
  static void CancelAll(Conn& conn) {
    MutexLock lock(conn.calls_mu);
    conn.forgotten = true;
    for (grpc::ClientContext* call : conn.fetches) call->TryCancel();
    // A bulk receive waiting in poll() sees the end of the stream at once.
    for (int fd : conn.bulk_fds) ::shutdown(fd, SHUT_RDWR);
  }
  /// Whether `conn` was forgotten (its calls end cancelled: the peer left).
  static bool Forgotten(Conn& conn) {
    MutexLock lock(conn.calls_mu);
    return conn.forgotten;
  }

 private:
  Conn& conn_;
  grpc::ClientContext* call_ = nullptr;
  int fd_ = -1;
};

void PeerClient::Forget(const std::string& address) {
  std::shared_ptr<Conn> conn;
  {
    MutexLock lock(mu_);
    auto it = conns_.find(address);
    if (it == conns_.end()) return;
    conn = std::move(it->second);
    conns_.erase(it);
  }
  InFlight::CancelAll(*conn);
}

v1::Caller PeerClient::Stamp() { return caller_(); }

Status PeerClient::Check(const grpc::Status& s, const std::string& address, const std::string& what,
                         const grpc::ClientContext& ctx) {
  if (s.ok()) return Status::OK();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    std::function<void(const std::string&, const std::string&)> h;
    {
      MutexLock lock(mu_);
      h = on_unreachable_;
    }
    if (h) h(address, what + ": " + s.error_message());
  }
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
      s.error_message().rfind(kFencedPrefix, 0) == 0) {
    std::function<void(const std::string&)> h;
    {
      MutexLock lock(mu_);
      h = on_fenced_;
    }
    if (h) h(s.error_message());
  }
  return proto::FromGrpc(s, what, &ctx);
}

Result<v1::HelloResponse> PeerClient::Hello(const std::string& address) {
  v1::HelloRequest req;
  *req.mutable_caller() = Stamp();
  v1::HelloResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, options_.rpc_deadline);
  REFT_RETURN_NOT_OK(
      Check(Get(address)->stub->Hello(&ctx, req, &resp), address, "Hello " + address, ctx));
  return resp;
}

Result<v1::PingResponse> PeerClient::Ping(const std::string& address, v1::PingRequest req,
                                          std::chrono::milliseconds timeout) {
  *req.mutable_caller() = Stamp();
  v1::PingResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  REFT_RETURN_NOT_OK(
      Check(Get(address)->stub->Ping(&ctx, req, &resp), address, "Ping " + address, ctx));
  return resp;
}

Result<v1::PingReqResponse> PeerClient::PingReq(const std::string& address, v1::PingReqRequest req,
                                                std::chrono::milliseconds timeout) {
  *req.mutable_caller() = Stamp();
  v1::PingReqResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  REFT_RETURN_NOT_OK(
      Check(Get(address)->stub->PingReq(&ctx, req, &resp), address, "PingReq " + address, ctx));
  return resp;
}

Result<v1::ReportCompleteResponse> PeerClient::ReportComplete(const std::string& address,
                                                              const v1::JobCommitState& state) {
  v1::ReportCompleteRequest req;
  *req.mutable_caller() = Stamp();
  *req.mutable_state() = state;
  v1::ReportCompleteResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, options_.rpc_deadline);
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->ReportComplete(&ctx, req, &resp), address,
                           "ReportComplete " + address, ctx));
  return resp;
}

Result<v1::ExchangeCommitStateResponse> PeerClient::ExchangeCommitState(
    const std::string& address, v1::ExchangeCommitStateRequest req,
    std::chrono::milliseconds timeout) {
  *req.mutable_caller() = Stamp();
  v1::ExchangeCommitStateResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout.count() > 0 ? timeout : options_.rpc_deadline);
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->ExchangeCommitState(&ctx, req, &resp), address,
                           "ExchangeCommitState " + address, ctx));
  return resp;
}

Result<v1::GetManifestResponse> PeerClient::GetManifest(const std::string& address,
                                                        const std::string& job,
                                                        std::chrono::milliseconds timeout) {
  v1::GetManifestRequest req;
  *req.mutable_caller() = Stamp();
  req.set_job(job);
  v1::GetManifestResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout.count() > 0 ? timeout : options_.rpc_deadline);
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->GetManifest(&ctx, req, &resp), address,
                           "GetManifest " + address, ctx));
  return resp;
}

Result<v1::PersistStepResponse> PeerClient::PersistStep(const std::string& address,
                                                        const std::string& job, int64_t step,
                                                        std::chrono::milliseconds timeout,
                                                        std::chrono::milliseconds wait_commit) {
  v1::PersistStepRequest req;
  *req.mutable_caller() = Stamp();
  req.set_job(job);
  req.set_step(step);
  req.set_wait_commit_ms(static_cast<uint32_t>(wait_commit.count()));
  v1::PersistStepResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout + wait_commit);
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->PersistStep(&ctx, req, &resp), address,
                           "PersistStep " + address, ctx));
  return resp;
}

Result<v1::StageLayersResponse> PeerClient::StageLayers(const std::string& address,
                                                        const std::string& job, int64_t step,
                                                        const std::vector<int>& layers,
                                                        std::chrono::milliseconds timeout) {
  v1::StageLayersRequest req;
  *req.mutable_caller() = Stamp();
  req.set_job(job);
  req.set_step(step);
  for (int l : layers) req.add_layers(l);
  v1::StageLayersResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->StageLayers(&ctx, req, &resp), address,
                           "StageLayers " + address, ctx));
  return resp;
}

void PeerClient::Connect(const std::string& address) {
  (void)Get(address)->channel->GetState(/*try_to_connect=*/true);
}

Status PeerClient::ReportStepCompletion(const std::string& address,
                                        const coord::StepCompletionReport& report,
                                        std::chrono::milliseconds timeout, coord::ReportRoute* route) {
  v1::ReportStepCompletionRequest req;
  *req.mutable_caller() = Stamp();
  FillReport(report, &req);
  v1::ReportStepCompletionResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout.count() > 0 ? timeout : options_.rpc_deadline);
  Status s = Check(Get(address)->stub->ReportStepCompletion(&ctx, req, &resp), address,
                   "ReportStepCompletion " + address, ctx);
  if (s.ok() && route != nullptr) {
    route->node = resp.aggregator_node_id();
    route->address = resp.aggregator_address();
  }
  return s;
}

Result<std::vector<Status>> PeerClient::ForwardStepCompletions(
    const std::string& address, const std::vector<coord::StepCompletionReport>& reports,
    std::chrono::milliseconds timeout) {
  v1::ReportStepCompletionRequest req;
  *req.mutable_caller() = Stamp();
  const v1::Caller self = req.caller();
  for (const auto& report : reports) {
    v1::ForwardedReport* f = req.add_forwarded();
    f->mutable_caller()->set_protocol_version(self.protocol_version());
    f->mutable_caller()->set_node_id(report.node);
    f->mutable_caller()->set_epoch(report.node_epoch);
    FillReport(report, f);
  }
  v1::ReportStepCompletionResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout.count() > 0 ? timeout : options_.rpc_deadline);
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->ReportStepCompletion(&ctx, req, &resp), address,
                           "ReportStepCompletion (forwarded) " + address, ctx));
  if (resp.forwarded_size() != static_cast<int>(reports.size())) {
    return Status::Protocol("ReportStepCompletion " + address + " answered " +
                            std::to_string(resp.forwarded_size()) + " of " +
                            std::to_string(reports.size()) + " forwarded reports");
  }
  std::vector<Status> out;
  out.reserve(reports.size());
  for (const auto& a : resp.forwarded()) {
    out.push_back(a.code() == v1::OK ? Status::OK()
                                     : Status(static_cast<StatusCode>(a.code()), a.message()));
  }
  return out;
}

Status PeerClient::FetchRegion(const std::string& address, const store::RankKey& rank, int64_t step,
                               const std::string& region, uint8_t* dst, uint64_t dst_size,
                               uint64_t offset) {
  return FetchRegion(address, rank, step, region, dst, dst_size, offset, FetchOptions{});
}

Status PeerClient::FetchRegion(const std::string& address, const store::RankKey& rank, int64_t step,
                               const std::string& region, uint8_t* dst, uint64_t dst_size,
                               uint64_t offset, const FetchOptions& fo) {
  const std::string what = "FetchRegion " + rank.ToString() + " step " + std::to_string(step) +
                           " region '" + region + "'" + (fo.published_only ? " (published)" : "") +
                           " from " + address;
  if (dst_size == 0) return Status::OK();
  auto conn = Get(address);
  v1::FetchRegionRequest req;
  *req.mutable_caller() = Stamp();
  ToRankId(rank, req.mutable_rank());
  req.set_step(step);
  req.set_region(region);
  req.set_offset(offset);
  req.set_length(dst_size);
  req.set_published_only(fo.published_only);
  req.set_expect_region_size(fo.expect_region_size);
  req.set_max_chunk_bytes(static_cast<uint32_t>(options_.wire_chunk_bytes));
  const auto timeout = fo.timeout.count() > 0 ? fo.timeout : options_.fetch_deadline;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int64_t now_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  if (options_.bulk_fetch && now_ns >= conn->bulk_retry_ns.load()) {
    req.set_bulk(true);
    RegionReceiver rx(what, dst, offset, dst_size, options_.wire_chunk_bytes, fo,
                      {conn->bucket.get(), &link_});
    BulkFallback fallback = BulkFallback::kNone;
    Status st = ReceiveRange(*conn, address, req, deadline, &rx, &fallback);
    if (fallback == BulkFallback::kNone) {
      conn->bulk_early_closes = 0;
      return st;
    }
    // A holder that keeps closing before the first chunk refuses this node's tickets (its
    // connections come from another address than its calls): stop asking for a while.
    if (fallback == BulkFallback::kThisCall && ++conn->bulk_early_closes >= kBulkEarlyCloses) {
      fallback = BulkFallback::kForAWhile;
    }
    if (fallback == BulkFallback::kForAWhile) {
      conn->bulk_early_closes = 0;
      // A holder whose bulk port cannot be reached (a firewall that lets only the gRPC port
      // through, a holder gone between its offer and the connection) is asked for gRPC
      // streams for a while, then for the bulk transport again.
      conn->bulk_retry_ns = now_ns + std::chrono::nanoseconds(kBulkRetryAfter).count();
      spdlog::warn("{}: {}; fetching from {} over gRPC streams for the next {} s", what,
                   st.message(), address, kBulkRetryAfter.count());
    }
    req.set_bulk(false);
  }
  RegionReceiver rx(what, dst, offset, dst_size, options_.wire_chunk_bytes, fo,
                    {conn->bucket.get(), &link_});
  BulkFallback none = BulkFallback::kNone;
  return ReceiveRange(*conn, address, req, deadline, &rx, &none);
}

Status PeerClient::ReceiveRange(Conn& conn, const std::string& address,
                                const v1::FetchRegionRequest& req,
                                std::chrono::steady_clock::time_point deadline, RegionReceiver* rx,
                                BulkFallback* fallback) {
  grpc::ClientContext ctx;
  InFlight in_flight(conn, &ctx);
  Prepare(&ctx, std::max(std::chrono::milliseconds(1),
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now())));
  // Raw stream: chunks arrive as ByteBuffers and their data is copied once, from gRPC's
  // receive slices straight into place (no intermediate protobuf string).
  grpc::Slice req_slice(req.SerializeAsString());
  grpc::ByteBuffer req_buf(&req_slice, 1);
  static const char* kMethod = "/reft.v1.Peer/FetchRegion";
  grpc::internal::RpcMethod method(kMethod, grpc::internal::RpcMethod::SERVER_STREAMING,
                                   conn.channel);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(conn.channel.get(), method,
                                                                    &ctx, req_buf));
  grpc::ByteBuffer msg;
  std::vector<grpc::Slice> slices;
  Status failure;
  bool holder_closed = false;  // the bulk connection ended early: the call says why
  while (failure.ok() && reader->Read(&msg)) {
    slices.clear();
    if (!msg.Dump(&slices).ok()) {
      failure = Status::Protocol(rx->what() + ": unreadable message");
      break;
    }
    std::optional<BulkOffer> offer;
    failure = rx->ReceiveMessage(slices, req.bulk() ? &offer : nullptr);
    if (failure.ok() && offer) {
      // The IP the call reached: no name to look up per fetch, and the IP version the holder
      // saw the call come from, which its ticket is bound to. A target without one (a unix
      // socket) keeps its host.
      std::string host = PeerIpOf(ctx.peer());
      if (host.empty()) host = HostOfTarget(address);
      failure = ReceiveBulk(conn, host, *offer, deadline, rx, fallback);
      holder_closed =
          failure.code() == StatusCode::kUnavailable && *fallback == BulkFallback::kNone;
    }
  }
  if (!rx->done() && InFlight::Forgotten(conn)) {
    ctx.TryCancel();
    (void)reader->Finish();
    return Status::Unavailable(rx->what() + ": cancelled: the peer left the cluster");
  }
  if (!failure.ok()) {
    grpc::Status fin;
    if (holder_closed) {
      // The holder's own verdict, which cut the connection short, follows at once; a
      // connection cut by something in between leaves the holder sending into it, so the call
      // is cancelled if no verdict came within a grace period.
      Mutex mu;
      std::condition_variable finished;
      bool done = false;
      reft::Thread guard("reft-verdict", [&] {
        MutexLock lock(mu);
        if (!lock.WaitFor(finished, kVerdictGrace, [&]() REFT_REQUIRES(mu) { return done; })) {
          ctx.TryCancel();
        }
      });
      fin = reader->Finish();
      {
        MutexLock lock(mu);
        done = true;
      }
      finished.notify_all();
      guard.join();
      if (!fin.ok() && fin.error_code() != grpc::StatusCode::CANCELLED) {
        return Check(fin, address, rx->what(), ctx);
      }
    } else {
      ctx.TryCancel();
      // The call now ends CANCELLED, by our own doing: `failure` is what went wrong.
      (void)reader->Finish();
    }
    return failure;
  }
  REFT_RETURN_NOT_OK(Check(reader->Finish(), address, rx->what(), ctx));
  return rx->done() ? Status::OK() : rx->Incomplete();
}

Status PeerClient::ReceiveBulk(Conn& conn, const std::string& host, const BulkOffer& offer,
                               std::chrono::steady_clock::time_point deadline, RegionReceiver* rx,
                               BulkFallback* fallback) {
  auto fd = ConnectBulk(host, offer.port,
                        std::min(deadline, std::chrono::steady_clock::now() + kBulkConnectTimeout));
  if (!fd.ok()) {
    // The call's own deadline says nothing about the port: only a refusal, or a connection
    // that did not come about while the call still had time, makes the port unreachable.
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Timeout(rx->what() + ": the deadline passed while connecting to bulk port " +
                             std::to_string(offer.port));
    }
    *fallback = BulkFallback::kForAWhile;
    return fd.status();
  }
  InFlight in_flight(conn, fd->get());
  BulkListener::Ticket ticket = offer.ticket;
  iovec iov{ticket.data(), ticket.size()};
  if (Status sent = SendAll(fd->get(), &iov, 1, deadline, [] { return false; }); !sent.ok()) {
    // Nothing arrived on it: the holder may be waiting for this connection.
    if (sent.code() == StatusCode::kUnavailable) *fallback = BulkFallback::kThisCall;
    return sent;
  }
  for (bool first = true; !rx->done(); first = false) {
    uint8_t header[kBulkChunkHeaderBytes];
    Status got = RecvAll(fd->get(), header, sizeof header, deadline, nullptr);
    if (first && got.code() == StatusCode::kUnavailable) {
      // Closed before anything was sent: the listener refused the ticket (the connection came
      // from another address than the call, behind NAT or over the other IP version of a host
      // name), or the holder's end of the call is over (its deadline, an error). A gRPC stream
      // gets the same bytes, or the holder's own error, within this call's deadline.
      *fallback = BulkFallback::kThisCall;
      return Status::Unavailable("the holder closed its bulk connection before the first chunk");
    }
    REFT_RETURN_NOT_OK(got);
    const BulkChunkHeader h = DecodeBulkChunkHeader(header);
    REFT_ASSIGN_OR_RETURN(uint8_t * p, rx->Place(h.offset, h.length));
    ChecksumStream sum;
    REFT_RETURN_NOT_OK(RecvAll(fd->get(), p, h.length, deadline, &sum));
    REFT_RETURN_NOT_OK(rx->Accept(h.offset, h.length, h.checksum, sum.Digest()));
  }
  return Status::OK();
}

}  // namespace reft::peer
