#pragma once
/// \file tier_impl.h
/// \brief The PersistentTier implementation (internal). One mutex guards the set of steps in
/// flight and the manifest read-modify-write; file I/O runs outside it.

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "reft/mutex.h"
#include "reft/persist/persistent_tier.h"
#include "reft/token_bucket.h"

namespace reft::persist::internal {

class TierImpl final : public PersistentTier {
 public:
  TierImpl(PersistOptions options, dev_t dev, ino_t ino);

  const PersistOptions& options() const override { return options_; }
  Result<RankFileInfo> WriteRank(const store::RankKey& rank, int64_t step,
                                 const std::vector<store::ImageRegion>& regions) override;
  Result<std::string> WriteManifest(
      const std::string& job, int64_t step, const JobLayout& layout,
      const std::vector<RankFileInfo>& files,
      const std::optional<ManifestOwner>& owner = std::nullopt) override;
  Result<PersistReport> PersistStep(
      const std::string& job, int64_t step, const JobLayout& layout,
      const std::vector<RankImage>& ranks,
      const std::optional<ManifestOwner>& owner = std::nullopt) override;
  Result<std::vector<int64_t>> ApplyRetention(const std::string& job,
                                              const JobLayout& layout) override;
  Result<std::vector<std::string>> ListJobs() override;
  Result<std::vector<int64_t>> ListSteps(const std::string& job) override;
  Result<StepStatus> CheckStep(const std::string& job, int64_t step,
                               const JobLayout& layout) override;
  Result<std::vector<int64_t>> CompleteSteps(const std::string& job,
                                             const JobLayout& layout) override;
  Result<std::optional<int64_t>> NewestCompleteStep(const std::string& job,
                                                    const JobLayout& layout) override;
  Result<std::unique_ptr<PersistedRank>> OpenRank(const store::RankKey& rank,
                                                  int64_t step) override;
  Result<std::vector<Manifest>> ReadManifests(const std::string& job, int64_t step) override;
  CleanupReport CleanupStale() override;

 private:
  /// Marks (job, step) as being written for its lifetime: retention skips it.
  class InFlight {
   public:
    InFlight(TierImpl* tier, std::string job, int64_t step);
    ~InFlight();
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    TierImpl* tier_;
    std::pair<std::string, int64_t> key_;
  };

  /// The root still exists, is a directory and is the one Open checked.
  Status CheckRoot() const;
  std::string JobDir(const std::string& job) const;
  std::string StepDir(const std::string& job, int64_t step) const;
  /// "<job dir>/<step dir>" relative to the root, for messages.
  std::string StepRel(const std::string& job, int64_t step) const;
  /// Creates the job and step directories when needed.
  Status EnsureStepDir(const std::string& job, int64_t step);
  uint64_t NextSeq() { return seq_.fetch_add(1); }
  /// Header-level check of one rank file against the rank and step its path names.
  Status CheckRankFile(const store::RankKey& rank, int64_t step);
  /// Existing manifest of this node for the step, if any and readable.
  std::optional<Manifest> ReadOwnManifestLocked(const std::string& job, int64_t step)
      REFT_REQUIRES(manifest_mu_);
  bool StaleScratch(const std::string& path, const std::string& name, std::string* why) const;

  const PersistOptions options_;
  const dev_t root_dev_;
  const ino_t root_ino_;
  std::shared_ptr<TokenBucket> write_bucket_;
  std::shared_ptr<TokenBucket> read_bucket_;
  std::atomic<uint64_t> seq_{0};

  Mutex mu_;
  /// (job, step) -> writers in progress: retention never deletes those steps.
  std::map<std::pair<std::string, int64_t>, int> in_flight_ REFT_GUARDED_BY(mu_);
  Mutex manifest_mu_;  ///< serialises manifest read-modify-write
};

/// \brief Validates PersistOptions (everything but the directory itself).
Status ValidateOptions(const PersistOptions& o);
/// \brief Job id rules of the store (non-empty, <= 64 bytes, no '/', "..", control bytes).
Status ValidateJob(const std::string& job);

}  // namespace reft::persist::internal
