#include "report_tree.h"

#include <cmath>
#include <vector>

namespace reft::coord {

std::map<std::string, std::string> AssignAggregators(const std::set<std::string>& nodes,
                                                     const std::set<std::string>& joined,
                                                     const std::string& coordinator,
                                                     size_t aggregate_from_nodes) {
  std::map<std::string, std::string> out;
  if (aggregate_from_nodes == 0 || nodes.size() < aggregate_from_nodes) return out;
  const auto group = static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(nodes.size()))));
  const std::vector<std::string> ordered(nodes.begin(), nodes.end());  // std::set: by id
  for (size_t first = 0; first < ordered.size(); first += group) {
    const size_t end = std::min(first + group, ordered.size());
    std::string aggregator;
    bool has_coordinator = false;
    for (size_t i = first; i < end; ++i) {
      if (ordered[i] == coordinator) has_coordinator = true;
      if (aggregator.empty() && joined.count(ordered[i]) > 0) aggregator = ordered[i];
    }
    if (has_coordinator || aggregator.empty()) continue;
    for (size_t i = first; i < end; ++i) {
      if (ordered[i] != aggregator) out[ordered[i]] = aggregator;
    }
  }
  return out;
}

}  // namespace reft::coord
