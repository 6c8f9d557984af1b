// Fuzz target: request handling of the Peer service (node <-> node) and the Admin service
// (reftctl), proto/reft/v1/{peer,admin}.proto, in-process against real objects: a real
// SnapshotStore in a temporary directory holding committed, complete, published and corrupted
// slots, a real PeerNode (Membership, GossipJobCoordinator, PeerService) and a real
// app::AdminService. No network: unary handlers are called directly with a grpc::ServerContext;
// the raw FetchRegion handler (not callable directly) is reached through an in-process gRPC
// channel to a server that hosts a second PeerNode on an identical, read-only store.
//
// Input: a sequence of up to 16 requests, each [selector u8][length u16 LE][bytes]; the bytes
// are parsed as the selected request message (bytes protobuf cannot parse are skipped, as gRPC
// would refuse them before any handler runs), except FetchRegion, whose raw bytes go to the
// server as they are. Every input starts from a fresh PeerNode (membership, commit state) and a
// store in its seeded state, so inputs replay deterministically.
//
// Properties:
//  - no handler returns INTERNAL or UNKNOWN (a reft Internal status means a broken invariant);
//  - global commit safety (distributed_commit.h): after the sequence, a job's newest committed
//    step was either claimed committed by a request, reported complete by some rank, or held
//    by a seeded slot: no step nobody completed is ever committed;
//  - FetchRegion streams consecutive chunks starting at the requested offset, each at most one
//    wire chunk long, and any chunk whose checksum matches its data carries exactly the
//    store's bytes (a corrupted chunk is either refused with DATA_LOSS or arrives with a
//    checksum that does not match, never silently); a refusal is one of the documented codes;
//  - GetManifest's checksums are those of the chunk lists it sends.
//  - AttachPlanProfile keeps only a profile that passes the planner's check, and a refused one
//    (with a message) leaves the attached profile as it was.
//  - ShowPlan answers a JSON object for the job it was asked about, whatever profile the
//    requests attached before (the planner decides run-1's loss of a node with it), and
//    ConfirmPlan refuses cleanly: under gossip nothing is published to confirm.
// Not covered: PingReq's probe of the target (the target address is replaced by a unix socket
// path that does not exist, so no packet leaves the process); authentication (empty token);
// the FetchRegion client (PeerClient) parsing a hostile server's stream.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include <google/protobuf/stubs/logging.h>

#include "fuzz_util.h"
#include "reft/coord/gossip_control_plane.h"
#include "gossip_job_coordinator.h"
#include "admin_service.h"
#include "reft/replan/job_planner.h"
#include "reft/replan/plan_profiles.h"
#include "reft/planner/online.h"
#include "reft/checksum.h"
#include "reft/peer/peer_node.h"
#include "reft/store/snapshot_store.h"

using namespace reft;
using reft::fuzz::Bytes;

namespace {

constexpr int kMaxRequests = 16;
constexpr uint64_t kWireChunk = 16 << 10;  // small wire chunks: streams of several messages
constexpr const char* kNoSuchPeer = "unix:/nonexistent/reft-fuzz-no-such-peer.sock";

enum Method : uint8_t {
  kHello, kPing, kPingReq, kReportComplete, kExchangeCommitState, kGetManifest, kFetchRegion,
  kAdminStatus, kListSnapshots, kVerifySnapshot, kDropSnapshot, kListNodes, kAttachPlanProfile,
  kShowPlan, kConfirmPlan, kMethodCount
};

peer::PeerOptions Options(const std::string& node_id) {
  peer::PeerOptions o;
  o.node_id = node_id;
  o.advertise_address = "127.0.0.1:1";
  o.epoch = 1000;
  o.probe_timeout = std::chrono::milliseconds(5);  // bounds PingReq's probe
  o.rpc_deadline = std::chrono::milliseconds(50);
  o.fetch_deadline = std::chrono::milliseconds(2000);
  o.wire_chunk_bytes = kWireChunk;
  return o;
}

store::RankKey Rank(const std::string& job, int dp) { return store::RankKey{job, 0, 0, dp}; }

uint8_t Pattern(const store::RankKey& r, int64_t step, uint64_t i) {
  return static_cast<uint8_t>(i * 131 + static_cast<uint64_t>(step) * 7 + r.dp * 29);
}

/// The seeded state, the same in both stores: job "run-1" (dp=2) with rank dp0 committed at
/// step 1, complete at step 2 and writing step 3 with "rep/shard" published, rank dp1 committed
/// at step 1; job "run-2" with a committed step 5 whose "rep/shard" was corrupted after sealing.
void Seed(store::SnapshotStore* s) {
  const std::vector<store::RegionSpec> layout = {{"meta", 300}, {"rep/shard", 70000}};
  auto write = [&](const store::RankKey& r, int64_t step, bool seal) {
    auto w = s->BeginWrite(r, step);
    FUZZ_CHECK(w.ok(), "BeginWrite: %s", w.status().ToString().c_str());
    for (size_t i = 0; i < layout.size(); ++i) {
      uint8_t* p = (*w)->region_data(i);
      for (uint64_t k = 0; k < layout[i].size; ++k) p[k] = Pattern(r, step, k + i);
    }
    w->reset();
    if (seal) FUZZ_CHECK(s->Seal(r, step).ok(), "Seal");
  };
  for (int dp = 0; dp < 2; ++dp) {
    FUZZ_CHECK(s->ConfigureRank(Rank("run-1", dp), layout).ok(), "ConfigureRank");
    write(Rank("run-1", dp), 1, true);
    FUZZ_CHECK(s->Commit(Rank("run-1", dp), 1).ok(), "Commit");
  }
  write(Rank("run-1", 0), 2, true);
  write(Rank("run-1", 0), 3, false);
  FUZZ_CHECK(s->Publish(Rank("run-1", 0), 3, {"rep/shard"}).ok(), "Publish");
  FUZZ_CHECK(s->ConfigureRank(Rank("run-2", 0), layout).ok(), "ConfigureRank");
  write(Rank("run-2", 0), 5, true);
  FUZZ_CHECK(s->Commit(Rank("run-2", 0), 5).ok(), "Commit");
  auto ref = s->Get(Rank("run-2", 0), 5);
  FUZZ_CHECK(ref.ok(), "Get");
  (*ref)->region_data(1)[40000] ^= 0x10;  // a bit flipped in memory after the seal
}

std::unique_ptr<store::SnapshotStore> OpenSeeded(const std::string& dir) {
  reft::fuzz::TempDir::RemoveContents(dir);
  store::StoreOptions so;
  so.shm_dir = dir;
  so.prefault = false;
  so.chunk_size = 4096;
  auto s = store::SnapshotStore::Open(so);
  FUZZ_CHECK(s.ok(), "store: %s", s.status().ToString().c_str());
  Seed(s->get());
  return std::move(*s);
}

using Listing = std::vector<std::tuple<std::string, int, int64_t, int>>;
Listing ListOf(store::SnapshotStore* s) {
  Listing out;
  for (const auto& i : s->List()) {
    out.emplace_back(i.rank.ToString(), static_cast<int>(i.index), i.step, static_cast<int>(i.state));
  }
  return out;
}

struct Fixture {
  reft::fuzz::TempDir root{"reft-fuzz-peer"};
  std::string mutable_dir = root.path() + "/shm-a";
  std::unique_ptr<store::SnapshotStore> store;  // behind the directly called handlers
  Listing pristine;
  // FetchRegion: a server on an in-process channel, over a store nothing writes to.
  std::unique_ptr<store::SnapshotStore> fetch_store;
  std::unique_ptr<peer::PeerNode> fetch_node;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;

  Fixture() {
    ::mkdir(mutable_dir.c_str(), 0700);
    store = OpenSeeded(mutable_dir);
    pristine = ListOf(store.get());
    const std::string fetch_dir = root.path() + "/shm-b";
    ::mkdir(fetch_dir.c_str(), 0700);
    fetch_store = OpenSeeded(fetch_dir);
    auto node = peer::PeerNode::Create(Options("fetch-server"), fetch_store.get(), {},
                                       coord::MakeGossipControlPlane());
    FUZZ_CHECK(node.ok(), "PeerNode: %s", node.status().ToString().c_str());
    fetch_node = std::move(*node);
    grpc::ServerBuilder b;
    fetch_node->Register(&b);
    peer::PeerService::ConfigureServerBuilder(Options("fetch-server"), &b);
    server = b.BuildAndStart();
    FUZZ_CHECK(server != nullptr, "in-process server");
    channel = server->InProcessChannel(grpc::ChannelArguments());
  }
  ~Fixture() {
    fetch_node->Stop();
    server->Shutdown();
  }
  void Restore() {
    if (ListOf(store.get()) == pristine) return;
    store.reset();
    store = OpenSeeded(mutable_dir);
  }
};

Fixture& F() {
  // Never destroyed (gRPC threads may still run at exit); its directory is removed at exit.
  static Fixture* f = [] {
    auto* fixture = new Fixture();
    std::atexit([] {
      reft::fuzz::TempDir::RemoveContents(F().root.path());
      ::rmdir(F().root.path().c_str());
    });
    return fixture;
  }();
  return *f;
}

void CheckStatus(const grpc::Status& s, const char* method) {
  FUZZ_CHECK(s.error_code() != grpc::StatusCode::INTERNAL &&
                 s.error_code() != grpc::StatusCode::UNKNOWN,
             "%s returned %d: %s", method, static_cast<int>(s.error_code()),
             s.error_message().c_str());
}

/// What the requests of one input said about commits, per job.
struct CommitFacts {
  std::map<std::string, int64_t> claimed;                // newest step claimed committed
  std::map<std::string, std::set<int64_t>> completed;    // steps some rank reported complete
  void Claim(const std::string& job, int64_t step) {
    auto [it, fresh] = claimed.emplace(job, step);
    if (!fresh) it->second = std::max(it->second, step);
  }
  void Add(const v1::JobCommitState& s) {
    if (s.has_committed()) Claim(s.job(), s.newest_committed());
    // A restore fallback (a newer job generation) restarts the job from its base step; read
    // through reflection so the target builds with and without those fields.
    const auto* d = s.GetDescriptor();
    const auto* has_base = d->FindFieldByName("has_base");
    const auto* base = d->FindFieldByName("base_step");
    if (has_base && base && s.GetReflection()->GetBool(s, has_base)) {
      Claim(s.job(), s.GetReflection()->GetInt64(s, base));
    }
    for (const auto& c : s.completed()) {
      for (const auto& r : c.ranks()) {
        if (r.job() == s.job()) completed[s.job()].insert(c.step());
      }
    }
  }
};

void CheckCommits(const CommitFacts& facts, coord::GossipJobCoordinator* coordinator) {
  for (const auto& st : coordinator->AllStates()) {
    if (!st.has_committed()) continue;
    const int64_t s = st.newest_committed();
    const std::string& job = st.job();
    bool ok = (job == "run-1" && s <= 2) || (job == "run-2" && s <= 5);  // seeded slots
    auto c = facts.claimed.find(job);
    ok = ok || (c != facts.claimed.end() && s <= c->second);
    auto done = facts.completed.find(job);
    ok = ok || (done != facts.completed.end() && done->second.count(s));
    FUZZ_CHECK(ok, "job '%s' committed step %ld although no rank reported it complete and no "
                   "peer claimed it committed", job.c_str(), static_cast<long>(s));
  }
}

void FetchRegion(const Bytes& body) {
  Fixture& f = F();
  v1::FetchRegionRequest req;
  const bool parses = req.ParseFromArray(body.data(), static_cast<int>(body.size()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice slice(body.data(), body.size());
  grpc::ByteBuffer request(&slice, 1);
  grpc::internal::RpcMethod method("/reft.v1.Peer/FetchRegion",
                                   grpc::internal::RpcMethod::SERVER_STREAMING, f.channel);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(f.channel.get(), method, &ctx,
                                                                    request));
  // Where the bytes should come from, as the server looks them up.
  std::shared_ptr<store::SlotRef> slot;
  size_t region = 0;
  if (parses) {
    store::RankKey rank{req.rank().job(), req.rank().pp(), req.rank().tp(), req.rank().dp()};
    auto ref = req.published_only()
                   ? f.fetch_store->GetPublished(rank, req.step(), req.region())
                   : f.fetch_store->Get(rank, req.step());
    if (ref.ok()) {
      auto idx = (*ref)->FindRegion(req.region());
      if (idx.ok()) {
        slot = *ref;
        region = *idx;
      }
    }
  }
  uint64_t expect = parses ? req.offset() : 0;
  grpc::ByteBuffer msg;
  int chunks = 0;
  while (reader->Read(&msg)) {
    FUZZ_CHECK(parses && slot != nullptr, "FetchRegion streamed data for a request it cannot serve");
    std::vector<grpc::Slice> slices;
    FUZZ_CHECK(msg.Dump(&slices).ok(), "chunk Dump");
    std::string bytes;
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    v1::RegionChunk chunk;
    FUZZ_CHECK(chunk.ParseFromString(bytes), "chunk %d is not a RegionChunk", chunks);
    FUZZ_CHECK(chunk.offset() == expect && chunk.length() == chunk.data().size() &&
                   chunk.length() > 0 && chunk.length() <= kWireChunk,
               "chunk %d: offset %lu (expected %lu), length %lu, %zu data bytes", chunks,
               (unsigned long)chunk.offset(), (unsigned long)expect,
               (unsigned long)chunk.length(), chunk.data().size());
    const uint64_t size = slot->region_size(region);
    FUZZ_CHECK(chunk.offset() <= size && chunk.length() <= size - chunk.offset(),
               "chunk %d lies outside the region", chunks);
    const bool same = std::memcmp(chunk.data().data(), slot->region_data(region) + chunk.offset(),
                                  chunk.length()) == 0;
    const bool sum_ok = Checksum64(chunk.data().data(), chunk.data().size()) == chunk.checksum();
    FUZZ_CHECK(same || !sum_ok, "chunk %d carries bytes that are not the store's under a "
                                "matching checksum", chunks);
    FUZZ_CHECK(sum_ok || req.rank().job() == "run-2",
               "chunk %d of an intact slot has a wrong checksum", chunks);
    expect += chunk.length();
    ++chunks;
  }
  grpc::Status s = reader->Finish();
  CheckStatus(s, "FetchRegion");
  using G = grpc::StatusCode;
  const G c = s.error_code();
  // UNIMPLEMENTED (`unsupported`): the caller names a node the gossip membership has no room
  // for (it is bounded; every fuzzed node id is a new caller, so the bound is reached quickly).
  FUZZ_CHECK(c == G::OK || c == G::NOT_FOUND || c == G::OUT_OF_RANGE || c == G::INVALID_ARGUMENT ||
                 c == G::DATA_LOSS || c == G::FAILED_PRECONDITION || c == G::UNIMPLEMENTED,
             "FetchRegion failed with undocumented code %d: %s", static_cast<int>(c),
             s.error_message().c_str());
  if (s.ok()) {
    FUZZ_CHECK(parses && slot != nullptr, "FetchRegion succeeded for a request it cannot serve");
    const uint64_t size = slot->region_size(region);
    const uint64_t want = req.length() ? req.length() : size - req.offset();
    FUZZ_CHECK(expect - req.offset() == want, "stream ended after %lu of %lu bytes",
               (unsigned long)(expect - req.offset()), (unsigned long)want);
  }
}

template <typename Req>
bool Parse(const Bytes& body, Req* req) {
  return req->ParseFromArray(body.data(), static_cast<int>(body.size()));
}

void RunOne(uint8_t selector, const Bytes& body, peer::PeerNode* node, app::AdminService* admin,
            const replan::PlanProfiles* profiles, CommitFacts* facts) {
  peer::PeerService* svc = node->service();
  grpc::ServerContext ctx;
  switch (static_cast<Method>(selector % kMethodCount)) {
    case kHello: {
      v1::HelloRequest req;
      v1::HelloResponse resp;
      if (Parse(body, &req)) CheckStatus(svc->Hello(&ctx, &req, &resp), "Hello");
      break;
    }
    case kPing: {
      v1::PingRequest req;
      v1::PingResponse resp;
      if (Parse(body, &req)) CheckStatus(svc->Ping(&ctx, &req, &resp), "Ping");
      break;
    }
    case kPingReq: {
      v1::PingReqRequest req;
      v1::PingReqResponse resp;
      if (!Parse(body, &req)) break;
      req.set_target_address(kNoSuchPeer);  // never probe a real address (see the top)
      CheckStatus(svc->PingReq(&ctx, &req, &resp), "PingReq");
      FUZZ_CHECK(!resp.target_acked(), "a probe of a nonexistent peer was acked");
      break;
    }
    case kReportComplete: {
      v1::ReportCompleteRequest req;
      v1::ReportCompleteResponse resp;
      if (!Parse(body, &req)) break;
      facts->Add(req.state());
      CheckStatus(svc->ReportComplete(&ctx, &req, &resp), "ReportComplete");
      break;
    }
    case kExchangeCommitState: {
      v1::ExchangeCommitStateRequest req;
      v1::ExchangeCommitStateResponse resp;
      if (!Parse(body, &req)) break;
      for (const auto& j : req.jobs()) facts->Add(j);
      CheckStatus(svc->ExchangeCommitState(&ctx, &req, &resp), "ExchangeCommitState");
      break;
    }
    case kGetManifest: {
      v1::GetManifestRequest req;
      v1::GetManifestResponse resp;
      if (!Parse(body, &req)) break;
      grpc::Status s = svc->GetManifest(&ctx, &req, &resp);
      CheckStatus(s, "GetManifest");
      for (const auto& slot : resp.slots()) {
        for (const auto& r : slot.regions()) {
          FUZZ_CHECK(r.chunk_size() > 0 && static_cast<uint64_t>(r.chunk_checksums_size()) ==
                                               (r.size() + r.chunk_size() - 1) / r.chunk_size(),
                     "manifest region '%s': %d checksums for %lu bytes", r.name().c_str(),
                     r.chunk_checksums_size(), (unsigned long)r.size());
          FUZZ_CHECK(r.checksum() == Checksum64(r.chunk_checksums().data(),
                                                r.chunk_checksums_size() * 8),
                     "manifest region '%s': list checksum mismatch", r.name().c_str());
        }
      }
      break;
    }
    case kFetchRegion:
      FetchRegion(body);
      break;
    case kAdminStatus: {
      v1::StatusRequest req;
      v1::StatusResponse resp;
      if (Parse(body, &req)) CheckStatus(admin->Status(&ctx, &req, &resp), "Admin/Status");
      break;
    }
    case kListSnapshots: {
      v1::ListSnapshotsRequest req;
      v1::ListSnapshotsResponse resp;
      if (Parse(body, &req)) CheckStatus(admin->ListSnapshots(&ctx, &req, &resp), "ListSnapshots");
      break;
    }
    case kVerifySnapshot: {
      v1::VerifySnapshotRequest req;
      v1::VerifySnapshotResponse resp;
      if (!Parse(body, &req)) break;
      grpc::Status s = admin->VerifySnapshot(&ctx, &req, &resp);
      CheckStatus(s, "VerifySnapshot");
      if (s.ok() && req.job() == "run-1") FUZZ_CHECK(resp.ok(), "intact job run-1 fails verify");
      if (s.ok() && req.job() == "run-2" && resp.step() == 5) {
        FUZZ_CHECK(!resp.ok() && resp.bad_size() == 1, "corrupted step 5 of run-2 verifies");
      }
      break;
    }
    case kDropSnapshot: {
      v1::DropSnapshotRequest req;
      v1::DropSnapshotResponse resp;
      if (Parse(body, &req)) CheckStatus(admin->DropSnapshot(&ctx, &req, &resp), "DropSnapshot");
      break;
    }
    case kListNodes: {
      v1::ListNodesRequest req;
      v1::ListNodesResponse resp;
      if (Parse(body, &req)) CheckStatus(admin->ListNodes(&ctx, &req, &resp), "ListNodes");
      break;
    }
    case kAttachPlanProfile: {
      // A planner profile (JSON text) from the operator: validated before it is kept; a
      // refused one leaves the previous profile in place.
      v1::AttachPlanProfileRequest req;
      v1::AttachPlanProfileResponse resp;
      if (!Parse(body, &req)) break;
      const nlohmann::json before = profiles->Get(req.job());
      grpc::Status s = admin->AttachPlanProfile(&ctx, &req, &resp);
      CheckStatus(s, "AttachPlanProfile");
      const nlohmann::json after = profiles->Get(req.job());
      if (s.ok()) {
        FUZZ_CHECK(after.is_object() && planner::online::CheckProfile(after).ok(),
                   "an attached profile does not pass its own check");
      } else {
        FUZZ_CHECK(!s.error_message().empty(), "a refused profile without a message");
        FUZZ_CHECK(after == before, "a refused profile replaced the attached one");
      }
      break;
    }
    case kShowPlan: {
      v1::ShowPlanRequest req;
      v1::ShowPlanResponse resp;
      if (!Parse(body, &req)) break;
      grpc::Status s = admin->ShowPlan(&ctx, &req, &resp);
      CheckStatus(s, "ShowPlan");
      if (s.ok()) {
        const auto plan = nlohmann::json::parse(resp.plan_json(), nullptr, false);
        FUZZ_CHECK(plan.is_object(), "ShowPlan answered something that is not a JSON object");
        FUZZ_CHECK(resp.job() == req.job(), "ShowPlan answered for another job");
      }
      break;
    }
    case kConfirmPlan: {
      v1::ConfirmPlanRequest req;
      v1::ConfirmPlanResponse resp;
      if (!Parse(body, &req)) break;
      grpc::Status s = admin->ConfirmPlan(&ctx, &req, &resp);
      CheckStatus(s, "ConfirmPlan");
      FUZZ_CHECK(!s.ok(), "ConfirmPlan confirmed a decision nothing published");
      break;
    }
    case kMethodCount:
      break;
  }
}

// run-1 as the planner sees it: dp = 2 over this node and one that is gone, four layers.
Result<planner::online::JobModelView> FuzzJobModel(const std::string& job) {
  if (job != "run-1") return Status::NotFound("no job '" + job + "' here");
  planner::online::JobModelView m;
  m.job = job;
  m.dp = 2;
  m.ranks = {{0, 0, 0, "fuzz-node"}, {0, 0, 1, "gone-node"}};
  for (int l = 0; l < 4; ++l) m.layers.push_back({l, 0, 1 << 20, 2 << 20});
  m.step = 2;
  return m;
}

// ---- seeds: one valid request of every method (and a few sequences) ----

void Put(Bytes* out, Method m, const google::protobuf::Message& msg) {
  const std::string s = msg.SerializeAsString();
  out->push_back(m);
  reft::fuzz::PutLe(out, s.size(), 2);
  out->insert(out->end(), s.begin(), s.end());
}

v1::Caller Caller() {
  v1::Caller c;
  c.set_protocol_version(peer::kProtocolVersion);
  c.set_node_id("peer-b");
  c.set_epoch(5);
  c.set_address("127.0.0.1:2");
  return c;
}

void SetRank(v1::RankId* r, const std::string& job, int dp) {
  r->set_job(job);
  r->set_dp(dp);
}

void WriteSeeds(const reft::fuzz::SeedSink& sink) {
  auto one = [&](const std::string& name, Method m, const google::protobuf::Message& msg) {
    Bytes b;
    Put(&b, m, msg);
    sink(name, b);
  };
  v1::HelloRequest hello;
  *hello.mutable_caller() = Caller();
  one("hello", kHello, hello);
  v1::PingRequest ping;
  *ping.mutable_caller() = Caller();
  auto* u = ping.add_updates();
  u->set_node_id("peer-c");
  u->set_address("127.0.0.1:3");
  u->set_epoch(9);
  u->set_state(v1::SUSPECT);
  auto* self_dead = ping.add_updates();  // declares the server dead: it fences itself
  self_dead->set_node_id("fuzz-node");
  self_dead->set_epoch(1000);
  self_dead->set_state(v1::DEAD);
  one("ping_fences_server", kPing, ping);
  v1::PingReqRequest pingreq;
  *pingreq.mutable_caller() = Caller();
  pingreq.set_target_node_id("peer-c");
  pingreq.set_timeout_ms(3);
  one("pingreq", kPingReq, pingreq);
  v1::ReportCompleteRequest report;
  *report.mutable_caller() = Caller();
  auto* st = report.mutable_state();
  st->set_job("run-1");
  st->set_dp(2);
  st->set_tp(1);
  st->set_pp(1);
  auto* c = st->add_completed();
  c->set_step(2);
  SetRank(c->add_ranks(), "run-1", 1);  // with dp0's complete slot: step 2 commits
  one("report_complete_commits", kReportComplete, report);
  v1::ExchangeCommitStateRequest ex;
  *ex.mutable_caller() = Caller();
  auto* j = ex.add_jobs();
  j->set_job("run-9");
  j->set_dp(3);
  j->set_tp(1);
  j->set_pp(1);
  j->set_has_committed(true);
  j->set_newest_committed(11);
  *ex.add_jobs() = *st;
  one("exchange", kExchangeCommitState, ex);
  v1::GetManifestRequest manifest;
  *manifest.mutable_caller() = Caller();
  one("manifest_all", kGetManifest, manifest);
  manifest.set_job("run-1");
  one("manifest_job", kGetManifest, manifest);
  v1::FetchRegionRequest fetch;
  *fetch.mutable_caller() = Caller();
  SetRank(fetch.mutable_rank(), "run-1", 0);
  fetch.set_step(1);
  fetch.set_region("rep/shard");
  one("fetch_whole", kFetchRegion, fetch);
  fetch.set_offset(5000);
  fetch.set_length(20000);
  fetch.set_expect_region_size(70000);
  one("fetch_range", kFetchRegion, fetch);
  fetch.set_step(3);
  fetch.set_published_only(true);
  fetch.clear_expect_region_size();
  one("fetch_published", kFetchRegion, fetch);
  fetch.set_published_only(false);
  SetRank(fetch.mutable_rank(), "run-2", 0);
  fetch.set_step(5);
  fetch.set_offset(0);
  fetch.set_length(0);
  one("fetch_corrupted", kFetchRegion, fetch);
  one("admin_status", kAdminStatus, v1::StatusRequest());
  v1::ListSnapshotsRequest list;
  list.set_job("run-1");
  one("list_snapshots", kListSnapshots, list);
  v1::VerifySnapshotRequest verify;
  verify.set_job("run-2");
  one("verify_corrupted", kVerifySnapshot, verify);
  verify.set_job("run-1");
  verify.set_step(2);
  verify.set_has_step(true);
  one("verify_step", kVerifySnapshot, verify);
  v1::DropSnapshotRequest drop;
  drop.set_job("run-1");
  drop.set_step(2);
  one("drop", kDropSnapshot, drop);
  one("list_nodes", kListNodes, v1::ListNodesRequest());
  v1::AttachPlanProfileRequest attach;
  attach.set_job("run-1");
  attach.set_profile_json(
      R"({"model": {"num_layers": 4, "layer": {"forward_ms": 1.5, "backward_ms": 3.0,)"
      R"( "param_bytes": 1048576}}, "cluster": {"device_memory": 8000000000},)"
      R"( "policy": {"restart_ms": 1000, "assignment": "positional"}})");
  one("attach_plan_profile", kAttachPlanProfile, attach);
  const v1::AttachPlanProfileRequest attach_ok = attach;
  attach.set_profile_json(R"({"policy": {"assignment": "sideways"}})");
  one("attach_plan_profile_refused", kAttachPlanProfile, attach);
  v1::ShowPlanRequest show;
  show.set_job("run-1");
  one("show_plan", kShowPlan, show);
  v1::ConfirmPlanRequest confirm;
  confirm.set_job("run-1");
  one("confirm_plan", kConfirmPlan, confirm);
  Bytes planned;  // the operator attaches a profile, then looks at the decision
  Put(&planned, kAttachPlanProfile, attach_ok);
  Put(&planned, kShowPlan, show);
  Put(&planned, kConfirmPlan, confirm);
  sink("plan_with_profile", planned);
  // A sequence: a peer joins, reports, and the operator looks.
  Bytes seq;
  Put(&seq, kHello, hello);
  Put(&seq, kReportComplete, report);
  Put(&seq, kGetManifest, manifest);
  Put(&seq, kListNodes, v1::ListNodesRequest());
  Put(&seq, kAdminStatus, v1::StatusRequest());
  sink("sequence", seq);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  reft::fuzz::MaybeWriteSeeds(WriteSeeds);
  // Protobuf logs every invalid UTF-8 string it parses; the fuzzer makes plenty.
  google::protobuf::SetLogHandler(nullptr);
  F();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = F();
  auto node = peer::PeerNode::Create(Options("fuzz-node"), f.store.get(), {},
                                     coord::MakeGossipControlPlane());
  FUZZ_CHECK(node.ok(), "PeerNode: %s", node.status().ToString().c_str());
  // A trainer of run-1 dp0 is connected here (GetManifest's "joined"; the job's layout).
  JobLayout layout;
  layout.dp = 2;
  FUZZ_CHECK((*node)->coordinator()->Join(Rank("run-1", 0), layout).ok(), "Join");
  app::DaemonConfig config;
  config.node_id = "fuzz-node";
  security::Authorizer auth("", false);  // no token, no TLS: every call admitted
  replan::PlanProfiles profiles("");  // in memory: every input starts without profiles
  replan::JobPlannerOptions jpo;
  jpo.mode = replan::PlannerMode::kConfirm;
  jpo.spare_wait = std::chrono::milliseconds(0);
  // Not started: no thread; ShowPlan decides from this node's view on demand.
  replan::JobPlanner planner("fuzz-node", jpo, &(*node)->membership(),
                             replan::PlannerAgreement::Of((*node)->coordinator()),
                             &profiles, FuzzJobModel);
  app::AdminRecovery recovery;
  recovery.profiles = &profiles;
  recovery.planner = &planner;
  app::AdminService admin(
      config, f.store.get(),
      [] {
        v1::SessionInfo s;
        s.mutable_rank()->set_job("run-1");
        s.set_pid(4242);
        return std::vector<v1::SessionInfo>{s};
      },
      &auth, &(*node)->membership(), recovery);

  CommitFacts facts;
  reft::fuzz::Params in(data, size);
  for (int i = 0; i < kMaxRequests && in.left() > 0; ++i) {
    const uint8_t selector = in.U8();
    const size_t len = static_cast<size_t>(in.Le(2));
    RunOne(selector, in.Take(len), node->get(), &admin, &profiles, &facts);
  }
  CheckCommits(facts, dynamic_cast<coord::GossipJobCoordinator*>((*node)->coordinator()));
  node->reset();
  f.Restore();
  return 0;
}
