#pragma once
/// \file plan_profiles.h
/// \brief Per-job time profiles attached by `reftctl plan attach` (docs/planner.md "The online
/// path"): kept in memory and in <dir>/<job>.json (written to a temp file and renamed, so a
/// crash leaves the old profile or the new one, never a torn one), so a restarted reftd still
/// has them. A profile is validated before it is attached (planner::online::CheckProfile);
/// attaching replaces the previous one only once the new one is stored. Thread-safe.

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "reft/mutex.h"
#include "reft/result.h"

namespace reft::replan {

class PlanProfiles {
 public:
  /// `dir` = "" keeps profiles in memory only.
  explicit PlanProfiles(std::string dir) : dir_(std::move(dir)) {}

  /// \brief Stores `profile` for `job` (already validated), replacing the previous one.
  Status Attach(const std::string& job, const nlohmann::json& profile);
  /// \brief The attached profile of `job`, or null.
  nlohmann::json Get(const std::string& job) const;

 private:
  std::string Path(const std::string& job) const;
  const std::string dir_;
  mutable Mutex mu_;
  mutable std::map<std::string, nlohmann::json> cache_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::replan
