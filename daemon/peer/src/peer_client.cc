#include "reft/peer/peer_client.h"

#include <cstring>

#include "grpc_status.h"
#include "reft/checksum.h"

namespace reft::peer {

namespace {
std::chrono::system_clock::time_point DeadlineIn(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}
void ToRankId(const store::RankKey& r, v1::RankId* out) {
  out->set_job(r.job);
  out->set_pp(r.pp);
  out->set_tp(r.tp);
  out->set_dp(r.dp);
}
}  // namespace

PeerClient::PeerClient(PeerOptions options, std::function<v1::Caller()> caller,
                       std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(std::move(options)),
      caller_(std::move(caller)),
      credentials_(credentials ? std::move(credentials) : grpc::InsecureChannelCredentials()) {}

void PeerClient::SetFencedHandler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(mu_);
  on_fenced_ = std::move(handler);
}

std::shared_ptr<PeerClient::Conn> PeerClient::Get(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
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
    c = std::make_shared<Conn>();
    c->channel = grpc::CreateCustomChannel(address, credentials_, args);
    c->stub = v1::Peer::NewStub(c->channel);
    c->bucket = std::make_unique<TokenBucket>(options_.peer_stream_bandwidth,
                                              options_.wire_chunk_bytes);
  }
  return c;
}

void PeerClient::Forget(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  conns_.erase(address);
}

v1::Caller PeerClient::Stamp() { return caller_(); }

Status PeerClient::Check(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
      s.error_message().rfind(kFencedPrefix, 0) == 0) {
    std::function<void(const std::string&)> h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      h = on_fenced_;
    }
    if (h) h(s.error_message());
  }
  return FromGrpc(s, what);
}

Result<v1::HelloResponse> PeerClient::Hello(const std::string& address) {
  v1::HelloRequest req;
  *req.mutable_caller() = Stamp();
  v1::HelloResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(options_.rpc_deadline));
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->Hello(&ctx, req, &resp), "Hello " + address));
  return resp;
}

Result<v1::PingResponse> PeerClient::Ping(const std::string& address, v1::PingRequest req,
                                          std::chrono::milliseconds timeout) {
  *req.mutable_caller() = Stamp();
  v1::PingResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(timeout));
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->Ping(&ctx, req, &resp), "Ping " + address));
  return resp;
}

Result<v1::PingReqResponse> PeerClient::PingReq(const std::string& address,
                                                v1::PingReqRequest req,
                                                std::chrono::milliseconds timeout) {
  *req.mutable_caller() = Stamp();
  v1::PingReqResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(timeout));
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->PingReq(&ctx, req, &resp), "PingReq " + address));
  return resp;
}

Result<v1::ReportCompleteResponse> PeerClient::ReportComplete(const std::string& address,
                                                              const v1::JobCommitState& state) {
  v1::ReportCompleteRequest req;
  *req.mutable_caller() = Stamp();
  *req.mutable_state() = state;
  v1::ReportCompleteResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(options_.rpc_deadline));
  REFT_RETURN_NOT_OK(
      Check(Get(address)->stub->ReportComplete(&ctx, req, &resp), "ReportComplete " + address));
  return resp;
}

Result<v1::ExchangeCommitStateResponse> PeerClient::ExchangeCommitState(
    const std::string& address, v1::ExchangeCommitStateRequest req) {
  *req.mutable_caller() = Stamp();
  v1::ExchangeCommitStateResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(options_.rpc_deadline));
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->ExchangeCommitState(&ctx, req, &resp),
                           "ExchangeCommitState " + address));
  return resp;
}

Result<v1::GetManifestResponse> PeerClient::GetManifest(const std::string& address,
                                                        const std::string& job) {
  v1::GetManifestRequest req;
  *req.mutable_caller() = Stamp();
  req.set_job(job);
  v1::GetManifestResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(options_.rpc_deadline));
  REFT_RETURN_NOT_OK(
      Check(Get(address)->stub->GetManifest(&ctx, req, &resp), "GetManifest " + address));
  return resp;
}

Status PeerClient::FetchRegion(const std::string& address, const store::RankKey& rank,
                               int64_t step, const std::string& region, uint8_t* dst,
                               uint64_t dst_size, uint64_t offset) {
  const std::string what = "FetchRegion " + rank.ToString() + " step " + std::to_string(step) +
                           " region '" + region + "' from " + address;
  if (dst_size == 0) return Status::OK();
  auto conn = Get(address);
  v1::FetchRegionRequest req;
  *req.mutable_caller() = Stamp();
  ToRankId(rank, req.mutable_rank());
  req.set_step(step);
  req.set_region(region);
  req.set_offset(offset);
  req.set_length(dst_size);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(options_.fetch_deadline));
  auto reader = conn->stub->FetchRegion(&ctx, req);
  v1::RegionChunk chunk;
  uint64_t expect = offset;
  uint64_t chunk_no = 0;
  Status failure;
  while (reader->Read(&chunk)) {
    const std::string& data = chunk.data();
    if (chunk.offset() != expect || chunk.length() != data.size() ||
        chunk.length() > options_.wire_chunk_bytes || expect - offset + data.size() > dst_size) {
      failure = Status::Protocol(what + ": chunk " + std::to_string(chunk_no) + " at offset " +
                                 std::to_string(chunk.offset()) + " with length " +
                                 std::to_string(chunk.length()) + " is out of sequence");
      break;
    }
    if (Checksum64(data.data(), data.size()) != chunk.checksum()) {
      failure = Status::Corrupted(what + ": chunk " + std::to_string(chunk_no) + " (region bytes " +
                                  std::to_string(chunk.offset()) + ".." +
                                  std::to_string(chunk.offset() + chunk.length()) +
                                  ") fails its checksum");
      break;
    }
    // Pace after receipt: the window gRPC buffers is bounded, so the sender is held back too.
    conn->bucket->Acquire(data.size());
    std::memcpy(dst + (expect - offset), data.data(), data.size());
    expect += data.size();
    ++chunk_no;
  }
  if (!failure.ok()) {
    ctx.TryCancel();
    (void)reader->Finish();
    return failure;
  }
  REFT_RETURN_NOT_OK(Check(reader->Finish(), what));
  if (expect - offset != dst_size) {
    return Status::Protocol(what + ": stream ended after " + std::to_string(expect - offset) +
                            " of " + std::to_string(dst_size) + " bytes");
  }
  return Status::OK();
}

}  // namespace reft::peer
