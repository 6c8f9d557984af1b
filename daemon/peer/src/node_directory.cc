#include "reft/peer/node_directory.h"

#include "reft/peer/peer_options.h"

namespace reft::peer {

const char* MemberStateName(MemberState s) {
  switch (s) {
    case MemberState::kAlive: return "alive";
    case MemberState::kSuspect: return "suspect";
    case MemberState::kDead: return "dead";
  }
  return "unknown";
}

Status CheckCallerProtocol(const v1::Caller& c, const std::string& self_node_id) {
  if (c.protocol_version() != kProtocolVersion) {
    return Status::Protocol("protocol version " + std::to_string(c.protocol_version()) +
                            " of node '" + c.node_id() + "' is not supported; node '" +
                            self_node_id + "' speaks protocol version " +
                            std::to_string(kProtocolVersion));
  }
  if (c.node_id().empty()) return Status::InvalidArgument("caller.node_id is empty");
  return Status::OK();
}

void NodeDirectory::AddDepartureListener(DepartureListener listener) {
  AddListener([listener = std::move(listener)](const MemberInfo& member, MemberState) {
    if (!member.self && member.state == MemberState::kDead) listener(member.node_id);
  });
}

void NodeDirectory::AddArrivalListener(ArrivalListener listener) {
  AddListener([listener = std::move(listener)](const MemberInfo& member, MemberState previous) {
    if (!member.self && member.state != MemberState::kDead && previous == MemberState::kDead) {
      listener(member.node_id);
    }
  });
}

NodeLiveness NodeDirectory::Liveness(const std::string& node_id) const {
  auto m = Find(node_id);
  if (!m) return NodeLiveness::kUnknown;
  return m->state == MemberState::kDead ? NodeLiveness::kDead : NodeLiveness::kAlive;
}

bool NodeDirectory::HeardDead(const std::string& node_id) const {
  auto m = Find(node_id);
  return m && m->state == MemberState::kDead;
}

std::vector<NodeStatus> NodeDirectory::Lookup(const std::vector<std::string>& node_ids) const {
  std::vector<NodeStatus> out;
  out.reserve(node_ids.size());
  for (const auto& id : node_ids) out.push_back({Liveness(id), Find(id)});
  return out;
}

}  // namespace reft::peer
