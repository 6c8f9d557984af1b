#include "reft/peer/peer_node.h"

#include <spdlog/spdlog.h>

namespace reft::peer {

Result<std::unique_ptr<PeerNode>> PeerNode::Create(
    PeerOptions options, store::SnapshotStore* store, PeerSecurity security,
    const ControlPlaneFactory& control_plane) {
  PeerOptions check = options;
  if (check.advertise_address.empty()) check.advertise_address = "pending:0";
  std::string bad = PeerOptionsCheck::Validate(check);
  if (!bad.empty()) return Status::InvalidArgument(bad);
  if (options.epoch == 0) options.epoch = NewEpoch();
  std::unique_ptr<PeerNode> n(new PeerNode());
  n->options_ = options;
  PeerNode* raw = n.get();
  n->client_ = std::make_unique<PeerClient>(
      options, [raw] { return raw->nodes_->SelfCaller(); }, std::move(security.credentials),
      std::move(security.token));
  if (!control_plane) return Status::InvalidArgument("no control plane for the peer node");
  REFT_ASSIGN_OR_RETURN(ControlPlane cp, control_plane(options, store, n->client_.get()));
  if (!cp.nodes || !cp.jobs) return Status::Internal("control plane factory returned nothing");
  n->nodes_ = std::move(cp.nodes);
  n->jobs_ = std::move(cp.jobs);
  n->owners_ = std::move(cp.owners);
  n->access_ = std::move(cp.access);
  n->records_ = std::move(cp.records);
  // A peer that cannot be reached is suspected (never declared dead by this alone: the node
  // directory knocks at its port first). Cleared in Stop, before the directory goes.
  n->client_->SetUnreachableHandler([raw](const std::string& address, const std::string& what) {
    raw->nodes_->SuspectAddress(address, "unreachable: " + what);
  });
  if (!options.bulk_listen.empty()) {
    REFT_ASSIGN_OR_RETURN(n->bulk_, BulkListener::Listen(options.bulk_listen));
  }
  n->service_ = std::make_unique<PeerService>(options, store, n->nodes_.get(), n->jobs_.get(),
                                              cp.gossip, security.authorizer, n->bulk_.get());
  n->service_->SetJobAccess(n->access_.get());
  // The commit coordinator's RPC: the Peer service carries it, the control plane answers it.
  coord::CompletionInbox* inbox = n->jobs_.get();
  n->service_->SetCompletionHandler(
      [inbox](const coord::StepCompletionReport& report) { return inbox->ReceiveCompletion(report); });
  n->service_->SetForwardedHandler(
      [inbox](const std::vector<coord::StepCompletionReport>& reports) {
        return inbox->ReceiveForwarded(reports);
      });
  n->service_->SetRouteHandler([inbox](const std::string& job, const std::string& node) {
    return inbox->RouteFor(job, node);
  });
  return n;
}

PeerNode::~PeerNode() { Stop(); }

void PeerNode::Register(grpc::ServerBuilder* builder) { builder->RegisterService(service_.get()); }

namespace {
class ForwardingCoordinator final : public local::CommitCoordinator {
 public:
  explicit ForwardingCoordinator(local::CommitCoordinator* inner) : inner_(inner) {}
  using local::CommitCoordinator::Join;
  Status Join(const store::RankKey& r, const JobLayout& l, const local::Joiner& who) override {
    return inner_->Join(r, l, who);
  }
  void Leave(const store::RankKey& r) override { inner_->Leave(r); }
  Status Complete(const store::RankKey& r, int64_t step, int64_t epoch) override {
    return inner_->Complete(r, step, epoch);
  }
  int64_t RestoreEpoch(const std::string& job) override { return inner_->RestoreEpoch(job); }
  std::optional<int64_t> NewestCommitted(const std::string& job) override {
    return inner_->NewestCommitted(job);
  }
  bool WaitCommitted(const std::string& job, int64_t step,
                     std::chrono::milliseconds timeout) override {
    return inner_->WaitCommitted(job, step, timeout);
  }
  Status DeclareReplicated(const store::RankKey& r, const local::ReplicatedBuffers& b) override {
    return inner_->DeclareReplicated(r, b);
  }

 private:
  local::CommitCoordinator* inner_;
};
}  // namespace

std::unique_ptr<local::CommitCoordinator> PeerNode::CoordinatorHandle() {
  return std::make_unique<ForwardingCoordinator>(jobs_.get());
}

Status PeerNode::Start(const std::string& advertise_address) {
  if (!advertise_address.empty()) {
    options_.advertise_address = advertise_address;
    nodes_->SetAdvertiseAddress(advertise_address);
  }
  if (options_.advertise_address.empty()) {
    return Status::InvalidArgument("peer.advertise_address must not be empty");
  }
  REFT_RETURN_NOT_OK(nodes_->Start());
  REFT_RETURN_NOT_OK(jobs_->Start());
  return records_ ? records_->Start() : Status::OK();
}

void PeerNode::Stop() {
  if (client_) client_->SetUnreachableHandler(nullptr);
  if (records_) records_->Stop();
  if (jobs_) jobs_->Stop();
  if (nodes_) nodes_->Stop();
}

Result<std::string> PeerNode::AddressOf(const std::string& node_id) const {
  // Only a node that fetches has fetches to cancel: the coordinator-only paths (and the
  // control-plane bench's thousands of members) add no departure watch.
  std::call_once(follow_departures_, [this] {
    nodes_->AddDepartureListener([this](const std::string& node) { OnDeparture(node); });
  });
  auto m = nodes_->Find(node_id);
  if (!m) return Status::NotFound("node '" + node_id + "' is not a known member");
  if (m->state == MemberState::kDead) {
    return Status::Unavailable("node '" + node_id + "' was declared dead");
  }
  MutexLock lock(addresses_mu_);
  addresses_[node_id] = m->address;
  return m->address;
}

void PeerNode::OnDeparture(const std::string& node_id) const {
  std::string address;
  {
    MutexLock lock(addresses_mu_);
    auto it = addresses_.find(node_id);
    if (it == addresses_.end()) return;  // "" (re-check) or never fetched from
    address = std::move(it->second);
    addresses_.erase(it);
  }
  spdlog::info("node {} left the cluster: cancelling fetches in flight to {}", node_id, address);
  client_->Forget(address);
}

Status PeerNode::FetchRegion(const std::string& node_id, const store::RankKey& rank, int64_t step,
                             const std::string& region, uint8_t* dst, uint64_t dst_size,
                             uint64_t offset) {
  REFT_ASSIGN_OR_RETURN(std::string address, AddressOf(node_id));
  return client_->FetchRegion(address, rank, step, region, dst, dst_size, offset);
}

}  // namespace reft::peer
