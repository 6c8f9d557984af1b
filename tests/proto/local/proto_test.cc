// Local-channel codec: round trips, and every malformed input rejected with Protocol.
#include <catch2/catch.hpp>

#include <optional>
#include <random>

#include "reft/local_proto/codec.h"
#include "reft/local_proto/messages.h"

using namespace reft;
using namespace reft::local_proto;

namespace {
std::vector<uint8_t> Framed(const FrameHeader& h, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out(kFrameHeaderSize);
  EncodeHeader(h, out.data());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}
}  // namespace

TEST_CASE("messages round-trip through the codec") {
  Limits l;
  Hello h;
  h.job = "run-1";
  h.coord = {1, 2, 3};
  h.layout = {4, 3, 2, 1};
  h.protection = "arc1+aec";
  h.client_version = "v";
  Hello h2;
  REQUIRE(Decode(Encode(h), l, &h2).ok());
  CHECK(h2.job == "run-1");
  CHECK(h2.coord.dp == 3);
  CHECK(h2.layout.dp == 4);
  CHECK(h2.layout.zero == 1);
  CHECK(h2.protection == "arc1+aec");

  Register r;
  r.name = "params";
  r.kind = BufferKind::kUnique;
  r.dtype = "float32";
  r.layer = 7;
  r.size = 12345;
  r.memory.memory_kind = 1;
  r.memory.ipc_handle = std::string(64, '\x7f');
  r.memory.allocation_id = 99;
  r.memory.allocation_size = 1 << 20;
  r.memory.offset = 4096;
  r.memory.has_fd = true;
  Register r2;
  REQUIRE(Decode(Encode(r), l, &r2).ok());
  CHECK(r2.name == "params");
  CHECK(r2.kind == BufferKind::kUnique);
  CHECK(r2.layer == 7);
  CHECK(r2.memory.ipc_handle == r.memory.ipc_handle);
  CHECK(r2.memory.offset == 4096);
  CHECK(r2.memory.has_fd);
  CHECK(r2.shard_total == 0);
  // A sharded buffer: the shard trailer follows the (then empty) gradient field.
  r.shard_offset = 334;
  r.shard_total = 1000;
  REQUIRE(Decode(Encode(r), l, &r2).ok());
  CHECK(r2.gradient.empty());
  CHECK(r2.shard_offset == 334);
  CHECK(r2.shard_total == 1000);
  r.gradient = "grad";
  REQUIRE(Decode(Encode(r), l, &r2).ok());
  CHECK(r2.gradient == "grad");
  CHECK(r2.shard_total == 1000);
  r.gradient.clear();
  r.shard_offset = r.shard_total = 0;

  SlotReply s;
  s.step = 5;
  s.file_size = 1 << 20;
  s.staged = {{0, 4096, 100}, {2, 8192, 1}};
  SlotReply s2;
  REQUIRE(Decode(Encode(s), l, &s2).ok());
  REQUIRE(s2.staged.size() == 2);
  CHECK(s2.staged[1].buffer_index == 2);
  CHECK(s2.staged[1].file_offset == 8192);

  RestoreReply rr;
  rr.slot = s;
  rr.report = {"tier", 2500, 90000, "followed node1's decision", "tier step 5"};
  RestoreReply rr2;
  REQUIRE(Decode(Encode(rr), l, &rr2).ok());
  CHECK(rr2.slot.staged.size() == 2);
  CHECK(rr2.report.source == "tier");
  CHECK(rr2.report.agreement_ns == 2500);
  CHECK(rr2.report.daemon_ns == 90000);
  CHECK(rr2.report.agreement == "followed node1's decision");
  CHECK(rr2.report.detail == "tier step 5");
  CHECK(!rr2.report.reshaped);

  // The reshape trailer: only when reshaped, so older clients never see it.
  rr.report.reshaped = true;
  rr.report.from_layout = "dp=4,tp=1,pp=1,zero=1";
  rr.report.filled = {"layers.0.weight", "optim.layers.0"};
  rr.report.untouched = {"rng"};
  REQUIRE(Decode(Encode(rr), l, &rr2).ok());
  CHECK(rr2.report.reshaped);
  CHECK(rr2.report.from_layout == "dp=4,tp=1,pp=1,zero=1");
  CHECK(rr2.report.filled == rr.report.filled);
  CHECK(rr2.report.untouched == rr.report.untouched);
  rr.report.reshaped = false;
  // A probe trailer (2) must name the saved layout: without it Encode writes no trailer, so
  // accepting one would give the message two encodings (found by local_frame_fuzzer).
  {
    rr.report.from_layout.clear();
    std::vector<uint8_t> bytes = Encode(rr);
    const size_t plain = bytes.size();
    bytes.push_back(2);
    bytes.resize(plain + 1 + 4 + 4 + 4, 0);  // empty layout, no filled, no untouched
    Status s = Decode(bytes, l, &rr2);
    CHECK(s.code() == StatusCode::kProtocol);
    CHECK(s.message().find("probe trailer without the saved layout") != std::string::npos);
    rr.report.from_layout = "dp=4,tp=1,pp=1,zero=1";  // a real probe round-trips
    REQUIRE(Decode(Encode(rr), l, &rr2).ok());
    CHECK(!rr2.report.reshaped);
    CHECK(rr2.report.from_layout == rr.report.from_layout);
  }

  // The phases trailer (3): only when there are phases, after the reshape trailer or alone.
  {
    const std::vector<uint8_t> before = Encode(rr);
    rr.report.phases = {{"declared_at", 1700000000123, "node2"}, {"restore_ended_at", 1700000000456, "node1"}};
    REQUIRE(Decode(Encode(rr), l, &rr2).ok());
    CHECK(rr2.report.from_layout == rr.report.from_layout);
    REQUIRE(rr2.report.phases.size() == 2);
    CHECK(rr2.report.phases[0].phase == "declared_at");
    CHECK(rr2.report.phases[0].at_ms == 1700000000123);
    CHECK(rr2.report.phases[1].node == "node1");
    rr.report.from_layout.clear();  // no reshape trailer: the phases alone
    REQUIRE(Decode(Encode(rr), l, &rr2).ok());
    CHECK(rr2.report.from_layout.empty());
    CHECK(rr2.report.phases.size() == 2);
    rr.report.phases.clear();
    rr.report.from_layout = "dp=4,tp=1,pp=1,zero=1";
    CHECK(Encode(rr) == before);  // a reply without phases is byte for byte what it was before them
    rr.report.from_layout.clear();
    std::vector<uint8_t> bytes = Encode(rr);
    bytes.push_back(3);             // a phases trailer must carry some
    bytes.resize(bytes.size() + 4, 0);
    CHECK(Decode(bytes, l, &rr2).code() == StatusCode::kProtocol);
    bytes = Encode(rr);
    bytes.push_back(0);  // no such trailer
    CHECK(Decode(bytes, l, &rr2).code() == StatusCode::kProtocol);
    rr.report.from_layout = "dp=4,tp=1,pp=1,zero=1";
  }

  // A restore request: empty = no reshape (what older clients send); one byte otherwise.
  RestoreRequest req, req2;
  CHECK(Encode(req).empty());
  REQUIRE(Decode(Encode(req), l, &req2).ok());
  CHECK(!req2.reshape);
  req.reshape = true;
  REQUIRE(Decode(Encode(req), l, &req2).ok());
  CHECK(req2.reshape);
  CHECK(!req2.probe);
  CHECK(!Decode(std::vector<uint8_t>{32}, l, &req2).ok());  // an unknown flag (16 = reads)
  CHECK(!Decode(std::vector<uint8_t>{1, 0}, l, &req2).ok());
  RestoreRequest probe;
  probe.reshape = probe.probe = true;
  REQUIRE(Decode(Encode(probe), l, &req2).ok());
  CHECK((req2.reshape && req2.probe && req2.remap.empty()));

  // A remap: the layout it was computed for, then per buffer its segments.
  req.remap_layout = "dp=4,tp=1,pp=1,zero=1";
  req.remap = {{"optim/float32/cpu", {{96, 0, 32}, {0, 32, 8}}}, {"optim/present", {}}};
  REQUIRE(Decode(Encode(req), l, &req2).ok());
  CHECK(req2.remap_layout == req.remap_layout);
  REQUIRE(req2.remap.size() == 2);
  CHECK(req2.remap[0].name == "optim/float32/cpu");
  REQUIRE(req2.remap[0].segments.size() == 2);
  CHECK((req2.remap[0].segments[0].src == 96 && req2.remap[0].segments[0].dst == 0 &&
         req2.remap[0].segments[0].length == 32));
  CHECK((req2.remap[0].segments[1].src == 0 && req2.remap[0].segments[1].dst == 32));
  CHECK((req2.remap[1].name == "optim/present" && req2.remap[1].segments.empty()));
  // A remap whose segment count promises more bytes than the message has is refused before
  // anything is allocated, and so is a truncated segment.
  auto bytes = Encode(req);
  auto lying = bytes;
  const size_t count_at = 1 + 4 + req.remap_layout.size() + 4 + 4 + req.remap[0].name.size();
  lying[count_at + 3] = 0x7f;  // u32 little-endian: ~2^31 segments
  CHECK(Decode(lying, l, &req2).code() == StatusCode::kProtocol);
  bytes.pop_back();
  CHECK(Decode(bytes, l, &req2).code() == StatusCode::kProtocol);
  std::vector<uint8_t> empty_trailer = {4, 0, 0, 0, 0, 0, 0, 0, 0};  // layout "", 0 buffers
  CHECK(Decode(empty_trailer, l, &req2).code() == StatusCode::kProtocol);

  // Reads: the step they were located in, then each range by name and group, after the remap.
  RestoreRequest read;
  read.reshape = true;
  read.read_step = 41;
  read.reads = {{"dcp/head", 0, 3, 0, 256}, {"dcp/state.1", 2, 0, 4096, 1 << 20}};
  REQUIRE(Decode(Encode(read), l, &req2).ok());
  CHECK((req2.reshape && !req2.probe && req2.remap.empty() && req2.read_step == 41));
  REQUIRE(req2.reads.size() == 2);
  CHECK((req2.reads[0].name == "dcp/head" && req2.reads[0].tp == 3 && req2.reads[0].end == 256));
  CHECK((req2.reads[1].pp == 2 && req2.reads[1].begin == 4096 && req2.reads[1].end == 1 << 20));
  read.remap = req.remap;
  read.remap_layout = req.remap_layout;
  REQUIRE(Decode(Encode(read), l, &req2).ok());
  CHECK((req2.remap.size() == 2 && req2.reads.size() == 2));
  read.remap.clear();
  read.reads[0].end = 0;
  read.reads[0].begin = 8;  // a range that ends before it begins
  CHECK(Decode(Encode(read), l, &req2).code() == StatusCode::kProtocol);
  auto cut = Encode(read);
  cut.pop_back();
  CHECK(Decode(cut, l, &req2).code() == StatusCode::kProtocol);

  // A restore reply is not a slot reply with a trailer: each decoder refuses the other.
  CHECK(!Decode(Encode(rr), l, &s2).ok());
  rr.report.detail = std::string(RestoreReport::kMaxText + 1, 'x');
  CHECK(Decode(Encode(rr), l, &rr2).code() == StatusCode::kProtocol);

  ErrorReply e;
  REQUIRE(Decode(EncodeError(Status::Corrupted("bad chunk")), l, &e).ok());
  CHECK(ToStatus(e).code() == StatusCode::kCorrupted);
  CHECK(ToStatus(e).message() == "bad chunk");
}

TEST_CASE("AOR status reply round-trips, an old reftd refuses the request type") {
  Limits l;
  AorStatusReply a;
  a.state = "'opt': on; 'opt2': off: mismatch at step 7";
  a.replays = 11;
  a.copies = 3;
  a.verified = 5;
  a.mismatches = 1;
  AorStatusReply b;
  REQUIRE(Decode(Encode(a), l, &b).ok());
  CHECK(b.state == a.state);
  CHECK(b.replays == 11);
  CHECK(b.copies == 3);
  CHECK(b.verified == 5);
  CHECK(b.mismatches == 1);
  auto bytes = Encode(a);
  bytes.push_back(0);
  CHECK(Decode(bytes, l, &b).code() == StatusCode::kProtocol);
  a.state = std::string(AorStatusReply::kMaxText + 10, 'x');  // cut when encoded
  REQUIRE(Decode(Encode(a), l, &b).ok());
  CHECK(b.state.size() == AorStatusReply::kMaxText);
  CHECK(std::string(MessageTypeName(MessageType::kAorStatus)) == "aor_status");
  CHECK(std::string(MessageTypeName(MessageType::kAorStatusReply)) == "aor_status_reply");
}

TEST_CASE("failure reports round-trip; a negative rank or an odd flag is refused") {
  Limits l;
  FailureReport a;
  a.job = "run-1";
  a.reason = "allreduce timed out after 600 s";
  a.peer_rank = 5;
  FailureReport b;
  REQUIRE(Decode(Encode(a), l, &b).ok());
  CHECK(b.job == "run-1");
  CHECK(b.reason == a.reason);
  CHECK(b.peer_rank == std::optional<int64_t>(5));
  a.peer_rank.reset();
  REQUIRE(Decode(Encode(a), l, &b).ok());
  CHECK_FALSE(b.peer_rank.has_value());
  a.reason = std::string(FailureReport::kMaxReason + 10, 'r');  // cut when encoded
  REQUIRE(Decode(Encode(a), l, &b).ok());
  CHECK(b.reason.size() == FailureReport::kMaxReason);
  a.peer_rank = -2;  // libreft refuses it before sending: on the wire it is a malformed frame
  CHECK(Decode(Encode(a), l, &b).code() == StatusCode::kProtocol);
  auto bytes = Encode(FailureReport{"run-1", "x", std::nullopt});
  bytes[bytes.size() - 9] = 2;  // has_peer_rank is neither 0 nor 1
  CHECK(Decode(bytes, l, &b).code() == StatusCode::kProtocol);

  FailureReportReply r;
  r.nodes = {"node-1", "node-7"};
  FailureReportReply r2;
  REQUIRE(Decode(Encode(r), l, &r2).ok());
  CHECK(r2.nodes == r.nodes);
  CHECK(std::string(MessageTypeName(MessageType::kFailureReport)) == "failure_report");
}

TEST_CASE("truncated and trailing payloads are rejected") {
  Limits l;
  Hello h;
  h.job = "job";
  auto bytes = Encode(h);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::vector<uint8_t> t(bytes.begin(), bytes.begin() + cut);
    Hello out;
    Status st = Decode(t, l, &out);
    REQUIRE(st.code() == StatusCode::kProtocol);
  }
  bytes.push_back(0);
  Hello out;
  CHECK(Decode(bytes, l, &out).code() == StatusCode::kProtocol);
}

TEST_CASE("oversized strings and counts are rejected before allocating") {
  Limits l;
  Register r;
  r.name = std::string(l.max_name_bytes + 1, 'x');
  Register out;
  Status st = Decode(Encode(r), l, &out);
  CHECK(st.code() == StatusCode::kProtocol);
  CHECK(st.message().find("name") != std::string::npos);

  // A slot reply that claims 1000 placements but carries none.
  Writer w;
  w.I64(1);
  w.U64(100);
  w.U32(1000);
  SlotReply s;
  CHECK(Decode(w.Take(), l, &s).code() == StatusCode::kProtocol);
  // A count over the limit.
  Writer w2;
  w2.I64(1);
  w2.U64(100);
  w2.U32(l.max_buffers + 1);
  CHECK(Decode(w2.Take(), l, &s).code() == StatusCode::kProtocol);
  // A placement outside the file (offset + size overflows).
  SlotReply bad;
  bad.file_size = 100;
  bad.staged = {{0, 50, ~0ull}};
  CHECK(Decode(Encode(bad), l, &s).code() == StatusCode::kProtocol);
}

TEST_CASE("AOR fields: optional trailers, byte-compatible when unused") {
  Limits l;
  // snapshot_begin without optimizer records is a plain step message (old daemons accept it).
  SnapshotBegin b;
  b.step = 42;
  CHECK(Encode(b) == Encode(StepMessage{42}));
  SnapshotBegin b2;
  REQUIRE(Decode(Encode(StepMessage{7}), l, &b2).ok());
  CHECK(b2.step == 7);
  CHECK(b2.optimizer.empty());
  b.optimizer.resize(2);
  b.optimizer[0].buffer_index = 3;
  b.optimizer[1].buffer_index = 9;
  for (size_t i = 0; i < kOptimizerHyperBytes; ++i) {
    b.optimizer[0].record[i] = static_cast<uint8_t>(i);
    b.optimizer[1].record[i] = static_cast<uint8_t>(255 - i);
  }
  auto bytes = Encode(b);
  CHECK(bytes.size() == 8 + 4 + 2 * (4 + kOptimizerHyperBytes));
  REQUIRE(Decode(bytes, l, &b2).ok());
  REQUIRE(b2.optimizer.size() == 2);
  CHECK(b2.optimizer[1].buffer_index == 9);
  CHECK(b2.optimizer[0].record == b.optimizer[0].record);
  CHECK(b2.optimizer[1].record == b.optimizer[1].record);
  for (size_t cut = 9; cut < bytes.size(); ++cut) {  // any truncated trailer
    std::vector<uint8_t> t(bytes.begin(), bytes.begin() + cut);
    CHECK(Decode(t, l, &b2).code() == StatusCode::kProtocol);
  }
  bytes.push_back(0);
  CHECK(Decode(bytes, l, &b2).code() == StatusCode::kProtocol);
  Writer zero;  // an encoded but empty trailer is not canonical
  zero.I64(1);
  zero.U32(0);
  CHECK(Decode(zero.Take(), l, &b2).code() == StatusCode::kProtocol);
  Writer many;
  many.I64(1);
  many.U32(l.max_buffers + 1);
  CHECK(Decode(many.Take(), l, &b2).code() == StatusCode::kProtocol);

  // register: kind 2 (gradient), the optional gradient name.
  Register r;
  r.name = "opt";
  r.kind = BufferKind::kUnique;
  r.dtype = "float32";
  r.size = 12;
  r.optimizer = true;
  const auto plain = Encode(r);
  r.gradient = "grad.decay";
  Register r2;
  REQUIRE(Decode(Encode(r), l, &r2).ok());
  CHECK(r2.gradient == "grad.decay");
  REQUIRE(Decode(plain, l, &r2).ok());
  CHECK(r2.gradient.empty());
  r.kind = BufferKind::kGradient;
  r.gradient.clear();
  REQUIRE(Decode(Encode(r), l, &r2).ok());
  CHECK(r2.kind == BufferKind::kGradient);
  auto k3 = Encode(r);
  k3[4 + r.name.size()] = 3;  // the kind byte
  CHECK(Decode(k3, l, &r2).code() == StatusCode::kProtocol);

  // register: the device identity after the (possibly empty) gradient name.
  r.kind = BufferKind::kReplicated;
  r.memory.device = 1;
  r.memory.device_uuid = "GPU-0a1b2c3d-0000-1111-2222-333344445555";
  r.memory.pci_bus_id = "0000:3b:00.0";
  REQUIRE(Decode(Encode(r), l, &r2).ok());
  CHECK(r2.gradient.empty());
  CHECK(r2.memory.device == 1);
  CHECK(r2.memory.device_uuid == r.memory.device_uuid);
  CHECK(r2.memory.pci_bus_id == "0000:3b:00.0");
  r.gradient = "g";
  REQUIRE(Decode(Encode(r), l, &r2).ok());
  CHECK(r2.gradient == "g");
  CHECK(r2.memory.device_uuid == r.memory.device_uuid);
  Writer empty_identity;  // an encoded but empty identity is not canonical
  const auto head = Encode(Register{});
  empty_identity.Fixed(head.data(), head.size());
  empty_identity.Bytes("");
  empty_identity.Bytes("");
  empty_identity.Bytes("");
  CHECK(Decode(empty_identity.Take(), l, &r2).code() == StatusCode::kProtocol);
  REQUIRE(Decode(head, l, &r2).ok());
  CHECK(r2.memory.device_uuid.empty());

  // hello: the optional owner group.
  Hello h;
  h.job = "j";
  h.layout = {1, 1, 1, 0};
  const auto no_group = Encode(h);
  Hello h2;
  REQUIRE(Decode(no_group, l, &h2).ok());
  CHECK(h2.owner_group.empty());
  h.owner_group = "team-a";
  const auto with_group = Encode(h);
  CHECK(with_group.size() == no_group.size() + 4 + 6);
  REQUIRE(Decode(with_group, l, &h2).ok());
  CHECK(h2.owner_group == "team-a");
  auto empty_group = no_group;
  empty_group.insert(empty_group.end(), 4, 0);
  CHECK(Decode(empty_group, l, &h2).code() == StatusCode::kProtocol);

  // slot reply: the gradient staging trailer.
  SlotReply s;
  s.step = 3;
  s.file_size = 4096;
  s.regions = {{"meta", 0, 100}};
  const auto no_trailer = Encode(s);
  s.gradient_file_size = 1024;
  s.gradients = {{"opt", 0, 400}, {"opt2", 448, 576}};
  SlotReply s2;
  REQUIRE(Decode(Encode(s), l, &s2).ok());
  CHECK(s2.gradient_file_size == 1024);
  REQUIRE(s2.gradients.size() == 2);
  CHECK(s2.gradients[1].name == "opt2");
  CHECK(s2.gradients[1].file_offset == 448);
  REQUIRE(Decode(no_trailer, l, &s2).ok());
  CHECK(s2.gradients.empty());
  s.gradients[1].size = 577;  // one byte past the staging file
  CHECK(Decode(Encode(s), l, &s2).code() == StatusCode::kProtocol);
}

TEST_CASE("frame headers are validated") {
  Limits l;
  FrameHeader h;
  h.type = MessageType::kHello;
  h.payload_length = 3;
  auto ok = Framed(h, {1, 2, 3});
  REQUIRE(DecodeHeader(ok.data(), ok.size(), 3, l).ok());

  auto bad = ok;
  bad[0] ^= 1;
  CHECK(DecodeHeader(bad.data(), bad.size(), 3, l).status().message().find("magic") !=
        std::string::npos);
  FrameHeader v = h;
  v.version = kProtocolVersion + 1;
  auto vb = Framed(v, {1, 2, 3});
  CHECK(DecodeHeader(vb.data(), vb.size(), 3, l).status().message().find("version") !=
        std::string::npos);
  FrameHeader t = h;
  t.type = static_cast<MessageType>(999);
  auto tb = Framed(t, {1, 2, 3});
  CHECK(DecodeHeader(tb.data(), tb.size(), 3, l).status().code() == StatusCode::kProtocol);
  FrameHeader f = h;
  f.flags = 1;
  auto fb = Framed(f, {1, 2, 3});
  CHECK(DecodeHeader(fb.data(), fb.size(), 3, l).status().code() == StatusCode::kProtocol);
  CHECK(DecodeHeader(ok.data(), 10, 0, l).status().message().find("truncated") !=
        std::string::npos);
  CHECK(DecodeHeader(ok.data(), ok.size(), 2, l).status().code() == StatusCode::kProtocol);
  FrameHeader big = h;
  big.payload_length = l.max_payload_bytes + 1;
  auto bb = Framed(big, {});
  CHECK(DecodeHeader(bb.data(), bb.size(), big.payload_length, l).status().message().find(
            "exceeds") != std::string::npos);
}

TEST_CASE("random bytes never crash any decoder") {
  std::mt19937_64 rng(12345);
  Limits l;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> p(rng() % 64);
    for (auto& b : p) b = static_cast<uint8_t>(rng());
    Hello a;
    Register b;
    SlotReply c;
    ErrorReply d;
    QueryCommittedReply e;
    SnapshotBegin f;
    (void)Decode(p, l, &f);
    (void)Decode(p, l, &a);
    (void)Decode(p, l, &b);
    (void)Decode(p, l, &c);
    (void)Decode(p, l, &d);
    (void)Decode(p, l, &e);
    (void)DecodeHeader(p.data(), p.size(), 0, l);
  }
  SUCCEED();
}

