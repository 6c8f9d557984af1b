#pragma once
/// \file report_tree.h
/// \brief Who aggregates whose completion reports (docs/coordination.md "Reports aggregate on
/// the way"): the job's nodes ordered by id, in groups of ceil(sqrt(n)); a group's aggregator is
/// its lowest-id node that is joined now; the coordinator's own group, and every node of a job
/// with fewer than `aggregate_from_nodes` nodes, report straight to the coordinator. The
/// coordinator then takes O(sqrt(n)) messages per step instead of n - 1.

#include <cstddef>
#include <map>
#include <set>
#include <string>

namespace reft::coord {

/// \brief The aggregator of every node that has one (a node absent reports directly): `nodes`
/// are the job's nodes (those its ranks are joined or recorded on), `joined` those of them with
/// a rank joined now.
std::map<std::string, std::string> AssignAggregators(const std::set<std::string>& nodes,
                                                     const std::set<std::string>& joined,
                                                     const std::string& coordinator,
                                                     size_t aggregate_from_nodes);

}  // namespace reft::coord
