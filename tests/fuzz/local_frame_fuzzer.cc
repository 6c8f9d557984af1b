// Fuzz target: local-channel frames (proto/local). A trainer fully controls the bytes it sends
// to reftd, and reftd the bytes of its replies, so every decoder sees hostile input.
//
// The input is one datagram exactly as it arrives on the SOCK_SEQPACKET socket: the 24-byte
// frame header followed by the payload. Per input:
//  1. DecodeHeader on it; when accepted, the header must re-encode to the same 24 bytes.
//  2. The payload (bytes after the header) through every Decode() of messages.h. Each decode
//     that succeeds must round-trip: Encode() gives back exactly the input payload (the codec is
//     canonical; QueryCommittedReply's bool is the one documented lenient field, any non-zero is
//     true), and decoding that again succeeds and re-encodes identically. Decoded strings and
//     counts must respect Limits. A failed decode must be a Protocol status with a message.
//  3. The datagram sent through a real socketpair into RecvFrame, with (request_id % 8) fds
//     attached via SCM_RIGHTS (the daemon accepts at most 4): the result must agree with
//     DecodeHeader, carry exactly the attached fds when accepted, and leak none when refused.
//     Once more with a small payload limit (64 bytes) for the oversize path.
#include <sys/socket.h>

#include <cstring>

#include "fuzz_util.h"
#include "reft/local_proto/codec.h"
#include "reft/local_proto/frame.h"
#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"

using namespace reft;
using namespace reft::local_proto;
using reft::fuzz::Bytes;

namespace {

void CheckFailure(const Status& s, const char* what) {
  FUZZ_CHECK(s.code() == StatusCode::kProtocol, "%s: decode failed with %s, expected Protocol",
             what, s.ToString().c_str());
  FUZZ_CHECK(!s.message().empty(), "%s: failure without a message", what);
}

template <typename M>
void RoundTrip(const Bytes& payload, const Limits& limits, const char* what, bool canonical = true) {
  M m;
  Status s = Decode(payload, limits, &m);
  if (!s.ok()) {
    CheckFailure(s, what);
    return;
  }
  const Bytes e1 = Encode(m);
  if (canonical) {
    FUZZ_CHECK(e1 == payload, "%s: decoded %zu bytes but re-encodes to %zu different bytes", what,
               payload.size(), e1.size());
  }
  M m2;
  Status s2 = Decode(e1, limits, &m2);
  FUZZ_CHECK(s2.ok(), "%s: re-encoded message does not decode: %s", what, s2.ToString().c_str());
  FUZZ_CHECK(Encode(m2) == e1, "%s: encode(decode(encode(m))) != encode(m)", what);
}

void CheckString(const std::string& s, size_t max, const char* what) {
  FUZZ_CHECK(s.size() <= max, "%s: %zu bytes accepted, limit %zu", what, s.size(), max);
}

void DecodeAll(const Bytes& payload, const Limits& l) {
  RoundTrip<Hello>(payload, l, "hello");
  RoundTrip<HelloReply>(payload, l, "hello_reply");
  RoundTrip<Register>(payload, l, "register");
  RoundTrip<RegisterReply>(payload, l, "register_reply");
  RoundTrip<StepMessage>(payload, l, "step message");
  RoundTrip<SlotReply>(payload, l, "slot reply");
  RoundTrip<RestoreReply>(payload, l, "restore reply");
  RoundTrip<QueryCommittedReply>(payload, l, "query_committed_reply", /*canonical=*/false);
  RoundTrip<SnapshotStaged>(payload, l, "snapshot_staged");
  RoundTrip<ErrorReply>(payload, l, "error");
  RoundTrip<PlanQuery>(payload, l, "plan_query");
  RoundTrip<PlanReply>(payload, l, "plan_reply");
  RoundTrip<AorStatusReply>(payload, l, "aor_status_reply");
  RoundTrip<FailureReport>(payload, l, "failure_report");
  RoundTrip<FailureReportReply>(payload, l, "failure_report_reply");

  // Limits the decoders promise (messages.h: "checks every string/count against Limits").
  Hello h;
  if (Decode(payload, l, &h).ok()) {
    CheckString(h.job, l.max_string_bytes, "hello.job");
    CheckString(h.protection, l.max_string_bytes, "hello.protection");
    CheckString(h.client_version, l.max_string_bytes, "hello.client_version");
  }
  Register r;
  if (Decode(payload, l, &r).ok()) {
    CheckString(r.name, l.max_name_bytes, "register.name");
    CheckString(r.dtype, l.max_string_bytes, "register.dtype");
    CheckString(r.memory.ipc_handle, l.max_handle_bytes, "register.ipc_handle");
  }
  SlotReply sr;
  if (Decode(payload, l, &sr).ok()) {
    FUZZ_CHECK(sr.staged.size() <= l.max_buffers, "slot reply: %zu placements", sr.staged.size());
    for (const auto& p : sr.staged) {
      FUZZ_CHECK(p.file_offset <= sr.file_size && p.size <= sr.file_size - p.file_offset,
                 "slot reply: placement outside the file accepted");
    }
  }
  SnapshotStaged st;
  if (Decode(payload, l, &st).ok()) {
    FUZZ_CHECK(st.events.size() <= l.max_fds_per_frame, "snapshot_staged: %zu events",
               st.events.size());
  }
  ErrorReply e;
  if (Decode(payload, l, &e).ok()) {
    Status as = ToStatus(e);
    FUZZ_CHECK(!as.ok(), "an error reply converted to OK (code %u)", e.code);
    // The daemon's own error replies decode back to the same status.
    ErrorReply back;
    FUZZ_CHECK(Decode(EncodeError(as), l, &back).ok(), "EncodeError output does not decode");
  }
}

struct SocketPair {
  int fds[2] = {-1, -1};
  SocketPair() {
    FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
    // Large enough for any input libFuzzer makes with the -max_len used here.
    int sz = 4 << 20;
    ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    ::setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  }
};

/// Sends `data` as one datagram with `nfds` extra descriptors; false if the kernel refused.
bool SendRaw(int sock, const uint8_t* data, size_t size, int nfds) {
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  FUZZ_CHECK(devnull >= 0, "open /dev/null");
  iovec iov{const_cast<uint8_t*>(data), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (nfds > 0) {
    control.assign(CMSG_SPACE(sizeof(int) * nfds), 0);
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    for (int i = 0; i < nfds; ++i) std::memcpy(CMSG_DATA(c) + i * sizeof(int), &devnull, sizeof(int));
  }
  ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(devnull);
  return n == static_cast<ssize_t>(size);
}

void CheckRecv(const uint8_t* data, size_t size, const Limits& limits) {
  static SocketPair pair;
  // A zero-length datagram reads as "peer hung up" (Unavailable) unless it carries fds.
  const int nfds = size >= kFrameHeaderSize ? data[12] % 8 : 0;
  const int free_before = reft::fuzz::LowestFreeFd();
  if (!SendRaw(pair.fds[0], data, size, nfds)) return;
  auto frame = RecvFrame(pair.fds[1], limits, /*timeout_ms=*/1000);
  const size_t payload = size >= kFrameHeaderSize ? size - kFrameHeaderSize : 0;
  auto header = DecodeHeader(data, size, payload, limits);
  if (frame.ok()) {
    FUZZ_CHECK(header.ok(), "RecvFrame accepted a frame DecodeHeader refuses: %s",
               header.status().ToString().c_str());
    FUZZ_CHECK(nfds <= static_cast<int>(limits.max_fds_per_frame),
               "RecvFrame accepted %d fds, limit %u", nfds, limits.max_fds_per_frame);
    FUZZ_CHECK(frame->fds.size() == static_cast<size_t>(nfds), "%zu fds received, %d sent",
               frame->fds.size(), nfds);
    FUZZ_CHECK(frame->payload == Bytes(data + kFrameHeaderSize, data + size),
               "RecvFrame payload differs from the datagram");
    FUZZ_CHECK(frame->header.type == header->type &&
                   frame->header.request_id == header->request_id,
               "RecvFrame header differs from DecodeHeader");
  } else {
    FUZZ_CHECK(frame.status().code() == StatusCode::kProtocol ||
                   (size == 0 && nfds == 0 && frame.status().code() == StatusCode::kUnavailable),
               "RecvFrame failed with %s", frame.status().ToString().c_str());
    if (header.ok() && nfds <= static_cast<int>(limits.max_fds_per_frame)) {
      FUZZ_CHECK(false, "RecvFrame refused a valid frame: %s", frame.status().ToString().c_str());
    }
  }
  frame = Status::Cancelled("drop");  // closes received fds
  FUZZ_CHECK(reft::fuzz::LowestFreeFd() == free_before, "RecvFrame leaked an fd");
}

// ---------------------------------------------------------------------------------------------
// Seeds: one valid frame of every message type, made with the real encoders.

Bytes FrameOf(MessageType type, uint32_t request_id, const Bytes& payload) {
  Bytes out(kFrameHeaderSize);
  FrameHeader h;
  h.type = type;
  h.request_id = request_id;
  h.payload_length = static_cast<uint32_t>(payload.size());
  EncodeHeader(h, out.data());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void WriteSeeds(const reft::fuzz::SeedSink& sink) {
  Hello hello;
  hello.job = "run-1";
  hello.coord.dp = 1;
  hello.layout.dp = 4;
  hello.protection = "arc1+aec";
  hello.client_version = "0.1.0";
  sink("hello", FrameOf(MessageType::kHello, 1, Encode(hello)));
  HelloReply hr;
  hr.session_id = 7;
  hr.daemon_version = "0.1.0";
  sink("hello_reply", FrameOf(MessageType::kHelloReply, 1, Encode(hr)));
  Register reg;
  reg.name = "params";
  reg.kind = BufferKind::kUnique;
  reg.dtype = "fp32";
  reg.layer = 3;
  reg.size = 4096;
  reg.memory.memory_kind = 1;
  reg.memory.ipc_handle = "handle";
  reg.memory.allocation_size = 8192;
  reg.memory.has_fd = true;
  sink("register_with_fd", FrameOf(MessageType::kRegister, 2 * 8 + 1, Encode(reg)));
  sink("register_reply", FrameOf(MessageType::kRegisterReply, 2, Encode(RegisterReply{5})));
  StepMessage step;
  step.step = 42;
  sink("snapshot_begin", FrameOf(MessageType::kSnapshotBegin, 3, Encode(step)));
  sink("snapshot_done", FrameOf(MessageType::kSnapshotDone, 4, Encode(step)));
  sink("query_committed", FrameOf(MessageType::kQueryCommitted, 5, Encode(step)));
  sink("restore", FrameOf(MessageType::kRestore, 6, Bytes{}));
  sink("restore_done", FrameOf(MessageType::kRestoreDone, 6, Bytes{}));
  sink("snapshot_abort", FrameOf(MessageType::kSnapshotAbort, 6, Encode(step)));
  SlotReply slot;
  slot.step = 42;
  slot.file_size = 1 << 20;
  slot.staged = {{0, 4096, 8192}, {1, 12288, 100}};
  sink("snapshot_begin_reply", FrameOf(MessageType::kSnapshotBeginReply, 3, Encode(slot)));
  RestoreRequest streamed;
  streamed.stream = true;
  sink("restore_streamed", FrameOf(MessageType::kRestore, 6, Encode(streamed)));
  SlotReply stream_placements = slot;
  stream_placements.step = -1;
  sink("restore_stream", FrameOf(MessageType::kRestoreStream, 6 * 8 + 1, Encode(stream_placements)));
  RestoreReply restored;
  restored.slot = slot;
  restored.report = {"memory", 1500000, 90000000, "node2 alive but silent (waited 1 ms)",
                     "pp0-tp0: shards from node0, node1"};
  sink("restore_reply", FrameOf(MessageType::kRestoreReply, 6, Encode(restored)));
  SnapshotStaged staged;
  staged.step = 42;
  staged.events.push_back({2, 0, std::string(64, 'e'), false});
  staged.events.push_back({1, 0, "", true});
  sink("snapshot_staged", FrameOf(MessageType::kSnapshotStaged, 7 * 8 + 1, Encode(staged)));
  QueryCommittedReply q;
  q.committed = true;
  q.newest_committed = 41;
  sink("query_committed_reply", FrameOf(MessageType::kQueryCommittedReply, 5, Encode(q)));
  sink("ack", FrameOf(MessageType::kAck, 9, Bytes{}));
  sink("error", FrameOf(MessageType::kError, 9,
                        EncodeError(Status::OutOfMemory("memory limit reached"))));
  sink("has_attach_fd", FrameOf(MessageType::kHasAttach, 10 * 8 + 1, Bytes{}));
  sink("plan_query", FrameOf(MessageType::kPlanQuery, 11, Encode(PlanQuery{"run-1"})));
  PlanReply inline_plan;
  inline_plan.json = "{\"job\": \"run-1\", \"decision\": {\"needed\": false}}";
  sink("plan_reply", FrameOf(MessageType::kPlanReply, 11, Encode(inline_plan)));
  PlanReply file_plan;
  file_plan.file_bytes = 200000;
  sink("plan_reply_file", FrameOf(MessageType::kPlanReply, 11 * 8 + 1, Encode(file_plan)));
  sink("aor_status", FrameOf(MessageType::kAorStatus, 12, Bytes{}));
  AorStatusReply aor;
  aor.state = "off: mismatch at step 7";
  aor.replays = 6;
  aor.copies = 2;
  aor.verified = 4;
  aor.mismatches = 1;
  sink("aor_status_reply", FrameOf(MessageType::kAorStatusReply, 12, Encode(aor)));
  FailureReport report;
  report.job = "run-1";
  report.reason = "allreduce timed out";
  report.peer_rank = 3;
  sink("failure_report", FrameOf(MessageType::kFailureReport, 13, Encode(report)));
  FailureReportReply suspected;
  suspected.nodes = {"node-2", "node-3"};
  sink("failure_report_reply", FrameOf(MessageType::kFailureReportReply, 13, Encode(suspected)));
  // Refused: too many fds (5 > 4) on an otherwise valid frame.
  sink("too_many_fds", FrameOf(MessageType::kHello, 5, Encode(hello)));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  reft::fuzz::MaybeWriteSeeds(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Limits limits;  // what the daemon enforces
  const size_t payload_size = size >= kFrameHeaderSize ? size - kFrameHeaderSize : 0;
  auto header = DecodeHeader(data, size, payload_size, limits);
  if (header.ok()) {
    uint8_t again[kFrameHeaderSize];
    EncodeHeader(*header, again);
    FUZZ_CHECK(std::memcmp(again, data, kFrameHeaderSize) == 0,
               "accepted header does not re-encode to the same bytes");
    FUZZ_CHECK(header->payload_length == payload_size &&
                   header->payload_length <= limits.max_payload_bytes,
               "accepted payload_length %u", header->payload_length);
    FUZZ_CHECK(std::string(MessageTypeName(header->type)) != "unknown", "unknown type accepted");
  } else {
    CheckFailure(header.status(), "header");
  }
  const Bytes payload(data + (size - payload_size), data + size);
  if (payload.size() <= limits.max_payload_bytes) DecodeAll(payload, limits);

  CheckRecv(data, size, limits);
  Limits small;
  small.max_payload_bytes = 64;
  CheckRecv(data, size, small);
  return 0;
}
