#include "reft/coord/etcd_probe.h"

#include <algorithm>

#include "etcd/rpc.grpc.pb.h"
#include "reft/coord/etcd_client.h"
#include "keys.h"
#include "reft/coord/records.h"

namespace reft::coord {

namespace pb = etcdserverpb;

namespace {

// Gets per transaction (etcd refuses more than 128 operations by default).
constexpr size_t kKeysPerTxn = 100;
// The members' share of the budget; the rest is for reading the coordinator keys.
constexpr int kMemberSharePercent = 60;

std::string CallError(const grpc::Status& s, std::chrono::milliseconds waited) {
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return "no answer within " + std::to_string(waited.count()) + " ms";
  }
  return s.error_message().empty() ? "gRPC code " + std::to_string(s.error_code())
                                   : s.error_message();
}

}  // namespace

struct EtcdProbe::Member {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Maintenance::Stub> maintenance;
  std::unique_ptr<pb::KV::Stub> kv;
};

EtcdProbe::EtcdProbe(std::vector<std::string> endpoints,
                     std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto creds = credentials ? credentials : grpc::InsecureChannelCredentials();
  for (auto& address : endpoints) {
    grpc::ChannelArguments args;
    // A call on a channel waiting to reconnect fails at once: keep that wait short, so a member
    // that came back is seen by the next status.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Connections of its own: the control plane's connection state is not what is probed.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto m = std::make_unique<Member>();
    m->address = std::move(address);
    m->channel = grpc::CreateCustomChannel(m->address, creds, args);
    m->maintenance = pb::Maintenance::NewStub(m->channel);
    m->kv = pb::KV::NewStub(m->channel);
    members_.push_back(std::move(m));
  }
}

EtcdProbe::~EtcdProbe() = default;

EtcdHealth EtcdProbe::Probe(const std::vector<std::string>& jobs,
                            std::chrono::milliseconds budget) const {
  const auto start = std::chrono::system_clock::now();
  const auto member_wait = budget * kMemberSharePercent / 100;
  const auto deadline = start + budget;

  // Every member at once: one that does not answer costs its share of the budget, not more.
  struct Call {
    grpc::ClientContext ctx;
    pb::StatusResponse resp;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<pb::StatusResponse>> rpc;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Call>> calls;
  const pb::StatusRequest req;
  for (size_t i = 0; i < members_.size(); ++i) {
    auto c = std::make_unique<Call>();
    c->ctx.set_deadline(start + member_wait);
    c->rpc = members_[i]->maintenance->AsyncStatus(&c->ctx, req, &cq);
    c->rpc->Finish(&c->resp, &c->status, c.get());
    calls.push_back(std::move(c));
  }
  void* tag = nullptr;
  bool ok = false;
  for (size_t done = 0; done < calls.size() && cq.Next(&tag, &ok); ++done) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }

  EtcdHealth out;
  const Member* read_from = nullptr;
  size_t unhealthy = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = *calls[i];
    EtcdMemberHealth h;
    h.address = members_[i]->address;
    if (!c.status.ok()) {
      h.error = CallError(c.status, member_wait);
    } else if (c.resp.leader() == 0) {
      h.error = "follows no leader (the etcd cluster has no quorum)";
    } else if (c.resp.errors_size() > 0) {
      h.error = "alarm: " + c.resp.errors(0);
    } else {
      h.healthy = true;
      h.leader = c.resp.leader() == c.resp.header().member_id();
      if (read_from == nullptr || h.leader) read_from = members_[i].get();
    }
    if (!h.healthy) ++unhealthy;
    out.members.push_back(std::move(h));
  }
  if (read_from == nullptr) {
    out.error =
        "no etcd member is healthy: commits and restore decisions wait until etcd "
        "answers; check that etcd runs at the configured endpoints ([etcd] endpoints, "
        "--etcd)";
    return out;
  }
  if (unhealthy > 0) {
    out.error = std::to_string(unhealthy) + " of " + std::to_string(members_.size()) +
                " etcd members not healthy";
  }
  if (auto err = ReadCoordinators(*read_from, jobs, deadline, &out); !err.empty()) {
    out.error += (out.error.empty() ? "" : "; ") + err;
  }
  return out;
}

std::string EtcdProbe::ReadCoordinators(const Member& m, const std::vector<std::string>& jobs,
                                        std::chrono::system_clock::time_point deadline,
                                        EtcdHealth* out) const {
  for (size_t from = 0; from < jobs.size(); from += kKeysPerTxn) {
    const size_t to = std::min(jobs.size(), from + kKeysPerTxn);
    Txn t;
    for (size_t i = from; i < to; ++i) t.ThenGet(keys::Coordinator(jobs[i]));
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    pb::TxnResponse resp;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::system_clock::now());
    if (auto s = m.kv->Txn(&ctx, t.request(), &resp); !s.ok()) {
      return "cannot read the jobs' coordinators from " + m.address + ": " +
             CallError(s, std::max(left, std::chrono::milliseconds(0)));
    }
    for (const auto& r : resp.responses()) {
      if (!r.has_response_range() || r.response_range().kvs_size() == 0) continue;
      const auto& kv = r.response_range().kvs(0);
      auto ref = DecodeNodeRef(kv.key(), kv.value());
      if (ref.ok()) out->coordinators[keys::JobOf(kv.key())] = ref->node;
    }
  }
  return "";
}

}  // namespace reft::coord
