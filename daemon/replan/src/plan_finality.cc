#include "plan_finality.h"

#include <nlohmann/json.hpp>

#include "reft/replan/plan_transfer.h"
#include "json_text.h"

namespace reft::replan {

using nlohmann::json;

namespace {

// Whether the transfer plan published with a decision staged anything on any node.
bool AnyLayerMoved(const std::string& transfer_json) {
  const json progress = StoredProgress(transfer_json);
  if (!progress.is_object()) return false;
  if (progress.value("bytes_staged", uint64_t{0}) > 0) return true;
  for (const json& host : progress.value("hosts", json::array())) {
    if (TextOr(host, "state") == "done" || host.value("bytes_staged", uint64_t{0}) > 0) return true;
  }
  return false;
}

}  // namespace

std::string FinalBecause(const coord::PublishedPlan& published, bool restored_under_it) {
  if (published.state == "confirmed") return "an operator confirmed it";
  if (restored_under_it) return "a trainer restored under it";
  if (AnyLayerMoved(published.transfer_json)) return "its transfer plan moved layers";
  return "";
}

bool DecidesLossOf(const coord::PublishedPlan& published, uint64_t generation, int64_t committed_step) {
  // A growth's basis names the nodes that came ("+n3"); it has its own lifetime (it stands
  // while the job runs in the layout it grows).
  const bool of_a_loss = !published.basis.empty() && published.basis[0] != '+';
  return of_a_loss && published.state != kNoLossState && published.generation == generation &&
         published.step == committed_step;
}

}  // namespace reft::replan
