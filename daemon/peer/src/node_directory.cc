#include "reft/peer/node_directory.h"

namespace reft::peer {

const char* MemberStateName(MemberState s) {
  switch (s) {
    case MemberState::kAlive: return "alive";
    case MemberState::kSuspect: return "suspect";
    case MemberState::kDead: return "dead";
  }
  return "unknown";
}

NodeLiveness NodeDirectory::Liveness(const std::string& node_id) const {
  auto m = Find(node_id);
  if (!m) return NodeLiveness::kUnknown;
  return m->state == MemberState::kDead ? NodeLiveness::kDead : NodeLiveness::kAlive;
}

std::vector<NodeStatus> NodeDirectory::Lookup(const std::vector<std::string>& node_ids) const {
  std::vector<NodeStatus> out;
  out.reserve(node_ids.size());
  for (const auto& id : node_ids) out.push_back({Liveness(id), Find(id)});
  return out;
}

}  // namespace reft::peer
