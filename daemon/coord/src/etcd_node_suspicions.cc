// EtcdNodeDirectory's side of suspicions (NodeDirectory::Suspect): the judge reads a suspected
// node's registration from etcd, knocks at its port and revokes its lease (suspected_nodes.h).
#include "control_plane_suspicion.h"
#include "keys.h"
#include "reft/coord/etcd_node_directory.h"
#include "reft/coord/records.h"
#include "suspected_nodes.h"

namespace reft::coord {

namespace {
// A knock waits this long for the port: long enough for a busy host's kernel to answer, short
// enough that a cut-off node does not hold up the suspicions queued behind it.
constexpr std::chrono::milliseconds kKnockTimeout{500};
}  // namespace

std::unique_ptr<SuspectedNodes> EtcdNodeDirectory::MakeSuspectedNodes() {
  SuspectedNodes::Hooks hooks;
  hooks.registration =
      [this](const std::string& node) -> std::optional<SuspectedNodes::Registration> {
    auto kv = etcd_->Get(keys::Node(node));
    if (!kv.ok() || !kv->has_value()) return std::nullopt;
    auto rec = DecodeNode((*kv)->key, (*kv)->value);
    if (!rec.ok() || (*kv)->lease == 0) return std::nullopt;
    return SuspectedNodes::Registration{rec->address, (*kv)->lease};
  };
  hooks.knock = [](const std::string& address) { return peer::Knock(address, kKnockTimeout); };
  hooks.revoke = [this](int64_t lease) { return etcd_->RevokeLease(lease); };
  return std::make_unique<SuspectedNodes>(SuspectedNodesOptions{}, std::move(hooks));
}

void EtcdNodeDirectory::Suspect(const std::string& node, const std::string& reason) {
  if (node.empty() || node == node_id_) return;
  // A held node is probed already; and while etcd is suspect (overloaded, perhaps) a look
  // would add a read per suspected node to it — the held deaths' probes settle those.
  if (IsHeld(node)) return;
  if (suspicion_ && suspicion_->Current(std::chrono::steady_clock::now())) return;
  suspected_->Suspect(node, reason);
}

void EtcdNodeDirectory::SuspectAddress(const std::string& address, const std::string& reason) {
  std::string node;
  {
    reft::MutexLock lock(mu_);
    for (const auto& [id, c] : cache_) {
      if (c.info && c.info->address == address) {
        node = id;
        break;
      }
    }
  }
  Suspect(node, reason);
}

}  // namespace reft::coord
