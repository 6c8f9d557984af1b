#include "job_failure_reports.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace reft {

JobFailureReports::JobFailureReports(coord::JobTimeline* timeline, coord::SlotDirectory* slots,
                                     peer::NodeDirectory* nodes, Limits limits)
    : timeline_(timeline), slots_(slots), nodes_(nodes), limits_(limits) {}

bool JobFailureReports::Admit(const std::string& job) {
  MutexLock lock(mu_);
  const auto now = Clock::now();
  auto refill = [&](Allowance& a) {
    const double s = std::chrono::duration<double>(now - a.at).count();
    a.tokens = std::min<double>(limits_.burst, a.tokens + s * limits_.per_second);
    a.at = now;
  };
  for (auto it = allowances_.begin(); it != allowances_.end();) {
    refill(it->second);
    it = it->second.tokens >= limits_.burst ? allowances_.erase(it) : std::next(it);
  }
  auto it = allowances_.try_emplace(job, Allowance{static_cast<double>(limits_.burst), now}).first;
  if (it->second.tokens < 1) return false;
  it->second.tokens -= 1;
  return true;
}

Result<std::vector<std::string>> JobFailureReports::NodesOf(const std::string& job,
                                                            std::optional<int64_t> peer_rank) {
  if (!peer_rank) return slots_->JobNodes(job);  // every node but this one
  const auto layout = timeline_->Layout(job);
  if (!layout) {
    return Status::NotFound("job '" + job + "' has no layout on this node yet: report without "
                            "peer_rank, or once its trainers joined");
  }
  if (*peer_rank >= layout->world()) {
    return Status::InvalidArgument("peer_rank " + std::to_string(*peer_rank) + " is outside job '" +
                                   job + "' (" + layout->ToString() + ": ranks 0.." +
                                   std::to_string(layout->world() - 1) + ")");
  }
  const store::RankKey rank(job, layout->CoordOf(*peer_rank));
  auto node = slots_->JoinedNode(rank);
  if (!node) node = slots_->SlotLocation(rank);
  if (!node) {
    return Status::NotFound("no node is known for rank " + std::to_string(*peer_rank) +
                            " of job '" + job + "': report without peer_rank");
  }
  if (*node == nodes_->node_id()) return std::vector<std::string>{};  // this node is alive
  return std::vector<std::string>{*node};
}

Result<std::vector<std::string>> JobFailureReports::Report(const std::string& job,
                                                           const std::string& reason,
                                                           std::optional<int64_t> peer_rank) {
  if (!Admit(job)) {
    return Status::Busy("job '" + job + "' reported failures faster than " +
                        std::to_string(limits_.per_second) + " per second (burst " +
                        std::to_string(limits_.burst) +
                        "): this one is dropped; its earlier reports are being looked into");
  }
  REFT_ASSIGN_OR_RETURN(std::vector<std::string> nodes, NodesOf(job, peer_rank));
  spdlog::info("job {}: failure reported{} ({}): looking into {} node(s)", job,
               peer_rank ? " for rank " + std::to_string(*peer_rank) : "", reason, nodes.size());
  for (const auto& node : nodes) nodes_->Suspect(node, "job " + job + ": " + reason);
  return nodes;
}

}  // namespace reft
