#include "reft/peer/peer_client.h"

#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "chunk_table_check.h"
#include "fencing.h"
#include "reft/checksum.h"
#include "reft/peer/rank_id.h"
#include "reft/proto/grpc_status.h"
#include "reft/security/grpc_auth.h"

namespace reft::peer {

namespace {
// Pacing granularity of the link and per-peer token buckets: 1 MiB bursts, whatever the wire
// chunk size, so an emulated link stays as smooth as it was with 1 MiB chunks.
constexpr uint64_t kPacingBurst = 1ull << 20;

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

void PeerClient::Forget(const std::string& address) {
  MutexLock lock(mu_);
  conns_.erase(address);
}

v1::Caller PeerClient::Stamp() { return caller_(); }

Status PeerClient::Check(const grpc::Status& s, const std::string& what,
                         const grpc::ClientContext& ctx) {
  if (s.ok()) return Status::OK();
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
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->Hello(&ctx, req, &resp), "Hello " + address, ctx));
  return resp;
}

Result<v1::PingResponse> PeerClient::Ping(const std::string& address, v1::PingRequest req,
                                          std::chrono::milliseconds timeout) {
  *req.mutable_caller() = Stamp();
  v1::PingResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->Ping(&ctx, req, &resp), "Ping " + address, ctx));
  return resp;
}

Result<v1::PingReqResponse> PeerClient::PingReq(const std::string& address,
                                                v1::PingReqRequest req,
                                                std::chrono::milliseconds timeout) {
  *req.mutable_caller() = Stamp();
  v1::PingReqResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  REFT_RETURN_NOT_OK(
      Check(Get(address)->stub->PingReq(&ctx, req, &resp), "PingReq " + address, ctx));
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
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->ReportComplete(&ctx, req, &resp),
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
  REFT_RETURN_NOT_OK(Check(Get(address)->stub->ExchangeCommitState(&ctx, req, &resp),
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
  REFT_RETURN_NOT_OK(
      Check(Get(address)->stub->GetManifest(&ctx, req, &resp), "GetManifest " + address, ctx));
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
  REFT_RETURN_NOT_OK(
      Check(Get(address)->stub->PersistStep(&ctx, req, &resp), "PersistStep " + address, ctx));
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
  REFT_RETURN_NOT_OK(
      Check(Get(address)->stub->StageLayers(&ctx, req, &resp), "StageLayers " + address, ctx));
  return resp;
}

void PeerClient::Connect(const std::string& address) {
  (void)Get(address)->channel->GetState(/*try_to_connect=*/true);
}

Status PeerClient::ReportStepCompletion(const std::string& address,
                                        const StepCompletionReport& report,
                                        std::chrono::milliseconds timeout) {
  v1::ReportStepCompletionRequest req;
  *req.mutable_caller() = Stamp();
  req.set_job(report.job);
  req.set_step(report.step);
  req.set_generation(report.generation);
  req.set_epoch(report.epoch);
  for (const auto& r : report.ranks) ToRankId(r, req.add_ranks());
  v1::ReportStepCompletionResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout.count() > 0 ? timeout : options_.rpc_deadline);
  return Check(Get(address)->stub->ReportStepCompletion(&ctx, req, &resp),
               "ReportStepCompletion " + address, ctx);
}

namespace {

// A cursor over the slices of one received message.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {}
  bool Byte(uint8_t* out) {
    while (i_ < slices_.size() && pos_ == slices_[i_].size()) { ++i_; pos_ = 0; }
    if (i_ == slices_.size()) return false;
    *out = slices_[i_].begin()[pos_++];
    return true;
  }
  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) { *out = v; return true; }
    }
    return false;
  }
  bool Fixed64(uint64_t* out) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
      uint8_t b;
      if (!Byte(&b)) return false;
      v |= uint64_t{b} << (8 * i);
    }
    *out = v;
    return true;
  }
  /// Copies the next `n` bytes to `dst` and checksums them into `sum` as they land, a cache-sized
  /// block at a time (hashed while still in cache, not read back from memory afterwards);
  /// false if fewer remain.
  bool CopyChecksummed(uint8_t* dst, uint64_t n, ChecksumStream* sum) {
    constexpr uint64_t kBlock = 256 << 10;
    while (n > 0) {
      while (i_ < slices_.size() && pos_ == slices_[i_].size()) { ++i_; pos_ = 0; }
      if (i_ == slices_.size()) return false;
      uint64_t take = std::min<uint64_t>({n, slices_[i_].size() - pos_, kBlock});
      std::memcpy(dst, slices_[i_].begin() + pos_, take);
      sum->Update(dst, take);
      dst += take;
      pos_ += take;
      n -= take;
    }
    return true;
  }
  bool AtEnd() {
    while (i_ < slices_.size() && pos_ == slices_[i_].size()) { ++i_; pos_ = 0; }
    return i_ == slices_.size();
  }

 private:
  const std::vector<grpc::Slice>& slices_;
  size_t i_ = 0;
  size_t pos_ = 0;
};

struct ChunkHeader {
  uint64_t offset = 0, length = 0, checksum = 0, data_size = 0;
  uint64_t received_checksum = 0;  ///< of the data as copied out
};

// Parses a RegionChunk whose `data` field comes last (as PeerService writes it) and copies the
// data straight from the received slices to `dst_for(offset)`, without a protobuf string.
// Returns false on anything else (the caller falls back to a full protobuf parse).
bool ParseChunkInto(const std::vector<grpc::Slice>& slices, ChunkHeader* h, uint8_t* dst_base,
                    uint64_t range_begin, uint64_t range_size) {
  SliceCursor c(slices);
  while (true) {
    uint64_t tag;
    if (!c.Varint(&tag)) return false;
    switch (tag) {
      case 0x08: if (!c.Varint(&h->offset)) return false; break;
      case 0x10: if (!c.Varint(&h->length)) return false; break;
      case 0x19: if (!c.Fixed64(&h->checksum)) return false; break;
      case 0x7A: {
        if (!c.Varint(&h->data_size)) return false;
        if (h->offset < range_begin || h->data_size > range_size ||
            h->offset - range_begin > range_size - h->data_size) {
          return false;
        }
        ChecksumStream sum;
        if (!c.CopyChecksummed(dst_base + (h->offset - range_begin), h->data_size, &sum)) {
          return false;
        }
        h->received_checksum = sum.Digest();
        return c.AtEnd();
      }
      default: return false;
    }
  }
}

}  // namespace

Status PeerClient::FetchRegion(const std::string& address, const store::RankKey& rank,
                               int64_t step, const std::string& region, uint8_t* dst,
                               uint64_t dst_size, uint64_t offset) {
  return FetchRegion(address, rank, step, region, dst, dst_size, offset, FetchOptions{});
}

Status PeerClient::FetchRegion(const std::string& address, const store::RankKey& rank,
                               int64_t step, const std::string& region, uint8_t* dst,
                               uint64_t dst_size, uint64_t offset, const FetchOptions& fo) {
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
  grpc::ClientContext ctx;
  Prepare(&ctx, fo.timeout.count() > 0 ? fo.timeout : options_.fetch_deadline);
  // Raw stream: chunks arrive as ByteBuffers and their data is copied once, from gRPC's
  // receive slices straight into `dst` (no intermediate protobuf string).
  grpc::Slice req_slice(req.SerializeAsString());
  grpc::ByteBuffer req_buf(&req_slice, 1);
  static const char* kMethod = "/reft.v1.Peer/FetchRegion";
  grpc::internal::RpcMethod method(kMethod, grpc::internal::RpcMethod::SERVER_STREAMING,
                                   conn->channel);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(conn->channel.get(), method,
                                                                    &ctx, req_buf));
  std::optional<ChunkTableCheck> table;
  if (fo.expect_chunks != nullptr && fo.expect_chunk_size > 0 && fo.expect_region_size > 0) {
    table.emplace(fo.expect_chunks, fo.expect_chunk_size, fo.expect_region_size);
  }
  grpc::ByteBuffer msg;
  std::vector<grpc::Slice> slices;
  uint64_t expect = offset;
  uint64_t chunk_no = 0;
  Status failure;
  while (reader->Read(&msg)) {
    slices.clear();
    ChunkHeader h;
    bool parsed = msg.Dump(&slices).ok() && ParseChunkInto(slices, &h, dst, offset, dst_size);
    if (!parsed) {
      // Not the layout PeerService writes: parse it as a protobuf message.
      std::string bytes;
      for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
      v1::RegionChunk chunk;
      if (chunk.ParseFromString(bytes) && chunk.offset() >= offset &&
          chunk.data().size() <= dst_size && chunk.offset() - offset <= dst_size - chunk.data().size()) {
        h.offset = chunk.offset();
        h.length = chunk.length();
        h.checksum = chunk.checksum();
        h.data_size = chunk.data().size();
        std::memcpy(dst + (h.offset - offset), chunk.data().data(), h.data_size);
        h.received_checksum = Checksum64(dst + (h.offset - offset), h.data_size);
        parsed = true;
      }
    }
    if (!parsed || h.offset != expect || h.length != h.data_size ||
        h.length > options_.wire_chunk_bytes) {
      failure = Status::Protocol(what + ": chunk " + std::to_string(chunk_no) + " at offset " +
                                 std::to_string(h.offset) + " with length " +
                                 std::to_string(h.length) + " is malformed or out of sequence");
      break;
    }
    if (h.received_checksum != h.checksum) {
      failure = Status::Corrupted(what + ": chunk " + std::to_string(chunk_no) + " (region bytes " +
                                  std::to_string(h.offset) + ".." +
                                  std::to_string(h.offset + h.length) + ") fails its checksum");
      break;
    }
    uint64_t sealed = 0;
    if (table) {
      switch (table->Add(h.offset, dst + (h.offset - offset), h.data_size, h.checksum, &sealed)) {
        case ChunkTableCheck::Result::kOk:
          break;
        case ChunkTableCheck::Result::kMismatch:
          failure = Status::Corrupted(what + ": sealed chunk " + std::to_string(sealed) +
                                      " differs from the checksum in the holder's manifest");
          break;
        case ChunkTableCheck::Result::kStraddles:
          failure = Status::Protocol(what + ": chunk " + std::to_string(chunk_no) +
                                     " crosses the end of sealed chunk " + std::to_string(sealed));
          break;
      }
      if (!failure.ok()) break;
    }
    // Pace after receipt: gRPC's flow-control window is bounded, so the sender is held back too.
    conn->bucket->Acquire(h.data_size);
    link_.Acquire(h.data_size);
    expect += h.data_size;
    ++chunk_no;
  }
  if (!failure.ok()) {
    ctx.TryCancel();
    // The call now ends CANCELLED, by our own doing: `failure` is what went wrong.
    (void)reader->Finish();
    return failure;
  }
  REFT_RETURN_NOT_OK(Check(reader->Finish(), what, ctx));
  if (expect - offset != dst_size) {
    return Status::Protocol(what + ": stream ended after " + std::to_string(expect - offset) +
                            " of " + std::to_string(dst_size) + " bytes");
  }
  return Status::OK();
}

}  // namespace reft::peer
