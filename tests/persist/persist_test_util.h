#pragma once
/// \file persist_test_util.h
/// \brief Helpers for the persistent-tier tests: deterministic rank contents, options, and
/// raw file surgery (flip a byte, truncate, find a region's offset in a rank file).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reft/persist/persistent_tier.h"

namespace reft::persist::testing {

/// \brief "meta" 37 B, "rep/shard" 3 chunks + 123 B, "unique/optim" exactly one chunk,
/// "unique/rng" 1 B, "unique/empty" 0 B (with 4 KiB chunks).
std::vector<store::RegionSpec> DefaultRegions();

/// \brief The bytes of one rank at one step, derived from (rank, step, region index): two
/// different steps or ranks never hold the same bytes.
class RankData {
 public:
  RankData(store::RankKey rank, int64_t step,
           const std::vector<store::RegionSpec>& layout = DefaultRegions());
  const store::RankKey& rank() const { return rank_; }
  int64_t step() const { return step_; }
  RankImage image() const;
  const std::vector<uint8_t>& bytes(size_t region) const { return bytes_[region]; }
  const std::vector<store::RegionSpec>& layout() const { return layout_; }

 private:
  store::RankKey rank_;
  int64_t step_;
  std::vector<store::RegionSpec> layout_;
  std::vector<std::vector<uint8_t>> bytes_;
};

/// \brief Every rank of `layout` at `step`.
std::vector<RankData> AllRanks(const std::string& job, const JobLayout& layout, int64_t step,
                               const std::vector<store::RegionSpec>& regions = DefaultRegions());
std::vector<RankImage> Images(const std::vector<RankData>& ranks);

/// \brief Options for a tier in `dir`: node "node-a", 4 KiB chunks, keep 0 (tests opt in).
PersistOptions TestOptions(const std::string& dir, const std::string& node = "node-a");

/// \brief Opens a tier and REQUIREs success.
std::unique_ptr<PersistentTier> OpenTier(const PersistOptions& o, CleanupReport* report = nullptr);

/// \brief True when every region of the file of data.rank() at data.step() reads back equal
/// (whole-region reads); INFO says what differed.
bool ReadsBack(PersistentTier& tier, const RankData& data);

/// \brief Path of a rank file: <dir>/<job dir>/step-<step>/pp..-tp..-dp...reft.
std::string RankPath(const std::string& dir, const store::RankKey& rank, int64_t step);
std::string StepPath(const std::string& dir, const std::string& job, int64_t step);

/// \brief Absolute file offset of region `name` in the rank file at `path` (from its header).
uint64_t RegionOffset(const std::string& path, const std::string& name);
/// \brief Chunk table offset of the rank file at `path`.
uint64_t ChunkTableOffset(const std::string& path);

void FlipByte(const std::string& path, uint64_t offset);
void Truncate(const std::string& path, uint64_t size);
uint64_t FileSize(const std::string& path);
/// \brief Names in a directory (without . and ..), sorted; empty if it does not exist.
std::vector<std::string> ListDir(const std::string& dir);
/// \brief Names in `dir` that start with ".tmp~".
std::vector<std::string> TempFiles(const std::string& dir);
bool Contains(const std::string& haystack, const std::string& needle);
/// \brief Case-insensitive Contains.
bool ContainsNoCase(const std::string& haystack, const std::string& needle);

}  // namespace reft::persist::testing
