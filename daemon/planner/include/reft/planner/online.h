#pragma once
/// \file online.h
/// \brief The planner over a running job (docs/planner.md "The online path"): what a node agent
/// knows of a job (its ranks and their nodes, the layers each pipeline stage holds and their
/// bytes, the measured step time, an attached profile) and the decision on node loss — restart
/// on a spare from memory, reroute, reconfigure onto the survivors or restart onto them, scored
/// by Odyssey's score, or exit when fewer units survive than the plan can absorb. Pure
/// functions; the output is a function of the input alone (deterministic JSON).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reft/planner/odyssey.h"
#include "reft/result.h"

namespace reft::planner::online {

/// \brief One rank of the job and the node it runs on ("" = not known on this node).
struct RankPlacement {
  int pp = 0;
  int tp = 0;
  int dp = 0;
  std::string node;
};

/// \brief One layer's state as registered: replicated buffers count as parameters, unique
/// (ZeRO-partitioned) buffers and replicated ones flagged optimizer as optimizer state, each
/// global buffer once.
struct LayerBytes {
  int layer = 0;
  int stage = 0;  ///< pipeline stage (pp) that registered it
  uint64_t param_bytes = 0;
  uint64_t optimizer_bytes = 0;
  uint64_t bytes() const { return param_bytes + optimizer_bytes; }
};

/// \brief What the planner needs to know of a running job.
struct JobModelView {
  std::string job;
  int dp = 1, tp = 1, pp = 1;
  std::vector<RankPlacement> ranks;  ///< every rank of the layout
  std::vector<LayerBytes> layers;    ///< by layer index 0..L-1
  /// Per rank (as `ranks`), the bytes of each layer its slot holds: its own shard or part and
  /// the copies of other members' it keeps. Empty: every rank of a stage holds its layers whole.
  std::vector<std::vector<uint64_t>> held;
  int64_t step = -1;                 ///< the committed step the model was read from
  double step_ms = 0;                ///< measured step time (0 = not measured yet)
  int step_samples = 0;              ///< snapshot intervals the measurement rests on
  /// The most pipeline positions the job has run with (its earlier decisions record it): a job
  /// that lost nodes grows back up to it onto live nodes outside it. 0 = its current size.
  int peak_units = 0;
};

/// \brief The job's nodes and the cluster's: `live` are the members alive now (job nodes and
/// spares), `lost` the job's nodes declared dead or unknown.
struct Membership {
  std::vector<std::string> live;
  std::vector<std::string> lost;
};

/// \brief Validates an attached profile document: {model (required; the `model` schema), cluster?,
/// job?, policy?} with the same field-naming errors as `reftctl plan`. `layers` (> 0) is the
/// job's layer count when known: the model must have exactly that many layers.
Status CheckProfile(const nlohmann::json& doc, int layers = 0);

/// \brief The `policy` object of the planner inputs (restart_ms, snapshot_load_ms,
/// transfer_bytes_per_s, mtbf_hours_per_node) as recovery costs for `live_units` live units.
Result<odyssey::RecoveryCosts> ParseRecoveryCosts(const nlohmann::json& policy, int live_units);

/// \brief The job model, the current layout and — when a node of the job is lost, or when the job
/// runs below its peak and live nodes outside it could raise its throughput (policy "grow") — the
/// decision (schema in docs/planner.md "The online path"). `profile` is the attached document or null;
/// without one the measured step time is spread over the layers (ProfileFromStepTime) and the
/// output says so. InvalidArgument when the model itself is unusable (no layers, stages that do
/// not split the layers 0..L-1 in order).
Result<nlohmann::json> Decide(const JobModelView& model, const nlohmann::json& profile,
                              const Membership& membership);

}  // namespace reft::planner::online
