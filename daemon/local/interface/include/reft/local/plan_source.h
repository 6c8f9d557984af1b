#pragma once
/// \file plan_source.h
/// \brief The planner's view of a running job, as the local channel serves it to trainers
/// (docs/planner.md "The online path"; `reft.plan`, `reft.elastic.coordinates`).
///
/// The planner lives in daemon/app, above the local server; this seam lets a session answer a
/// plan query without depending on it (reftd wires its JobPlanner in). The session checks that
/// the caller owns the job before it asks (JobOwnership::Check), so an implementation answers
/// for any job. Header only.

#include <string>

#include "reft/result.h"

namespace reft::local {

class PlanSource {
 public:
  virtual ~PlanSource() = default;
  /// \brief The document `reftctl plan show --job <job> -o json` prints, without its "schema"
  /// member: the job's model, the planner's decision and its publication. NotFound when the
  /// job has no committed step (nothing to plan from). May take as long as the planner does
  /// (it reads the control plane); thread-safe.
  virtual Result<std::string> PlanJson(const std::string& job) = 0;
};

}  // namespace reft::local
