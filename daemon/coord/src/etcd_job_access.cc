#include "etcd_job_access.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "keys.h"
#include "reft/coord/records.h"

namespace reft::coord {
namespace {

// Every node a published plan names: the hosts of its new layout and the ends of its transfer
// moves (values of "node", "from_node" and "to_node" anywhere in the document).
void CollectPlanNodes(const nlohmann::json& j, std::set<std::string>* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (v.is_string() && (k == "node" || k == "from_node" || k == "to_node")) {
        out->insert(v.get<std::string>());
      } else {
        CollectPlanNodes(v, out);
      }
    }
  } else if (j.is_array()) {
    for (const auto& v : j) CollectPlanNodes(v, out);
  }
}

}  // namespace

Result<std::set<std::string>> EtcdJobAccess::TiedNodes(const std::string& job) {
  Txn read;
  read.ThenGetPrefix(keys::JoinedPrefix(job))
      .ThenGetPrefix(keys::OperatorPrefix(job))
      .ThenGet(keys::Coordinator(job))
      .ThenGetPrefix(keys::LocationsPrefix(job))
      .ThenGet(keys::Plan(job));
  REFT_ASSIGN_OR_RETURN(TxnResult r, etcd_->Commit(read));
  if (r.gets.size() != 5) return Status::Internal("etcd answered a 5-read txn with fewer reads");
  std::set<std::string> nodes;
  for (size_t i = 0; i < 4; ++i) {
    for (const auto& kv : r.gets[i].kvs) {
      auto ref = DecodeNodeRef(kv.key, kv.value);
      if (ref.ok()) nodes.insert(ref->node);
    }
  }
  for (const auto& kv : r.gets[4].kvs) {
    auto plan = DecodePlan(kv.key, kv.value);
    if (!plan.ok()) continue;
    CollectPlanNodes(nlohmann::json::parse(plan->plan_json, nullptr, false), &nodes);
    CollectPlanNodes(nlohmann::json::parse(plan->transfer_json, nullptr, false), &nodes);
  }
  return nodes;
}

Status EtcdJobAccess::MayServe(const std::string& node, const std::string& job) {
  const auto now = Clock::now();
  const auto key = std::make_pair(job, node);
  {
    reft::MutexLock lock(mu_);
    auto it = allowed_.find(key);
    if (it != allowed_.end() && it->second > now) return Status::OK();
  }
  auto tied = TiedNodes(job);
  if (!tied.ok()) {
    return Status::Unavailable("cannot tell from etcd whether node '" + node +
                               "' takes part in job '" + job + "': " + tied.status().message());
  }
  if (tied->count(node) == 0) {
    return Status::PermissionDenied("node '" + node + "' has no part in job '" + job +
                                    "' (no rank of it joined there, no slot of it recorded "
                                    "there, not a target of its plan, no operator's command on "
                                    "it there, not its coordinator)");
  }
  reft::MutexLock lock(mu_);
  if (allowed_.size() >= 4096) {  // bounded: expired answers go first, then all
    for (auto it = allowed_.begin(); it != allowed_.end();) {
      it = it->second <= now ? allowed_.erase(it) : std::next(it);
    }
    if (allowed_.size() >= 4096) allowed_.clear();
  }
  allowed_[key] = now + positive_ttl_;
  return Status::OK();
}

Status EtcdJobAccess::BeginOperatorCommand(const std::string& job) {
  const int64_t lease = nodes_->lease();
  if (lease == 0) {
    return Status::Unavailable("this node is not registered in etcd (yet): its peers would not "
                               "serve it the bytes of job '" + job + "'");
  }
  auto put = etcd_->Put(keys::Operator(job, nodes_->node_id()),
                        Encode(NodeRef{nodes_->node_id(), -1}), lease);
  if (!put.ok()) return put.status().WithContext("recording the rebuild of job '" + job + "'");
  return Status::OK();
}

void EtcdJobAccess::EndOperatorCommand(const std::string& job) {
  auto del = etcd_->Delete(keys::Operator(job, nodes_->node_id()));
  if (!del.ok()) {
    spdlog::warn("job {}: this node's operator mark stays until its lease ends: {}", job,
                 del.status().ToString());
  }
}

}  // namespace reft::coord
