#pragma once
/// \file naming.h
/// \brief Validation of job ids and rank keys, and the segment file naming scheme.
///
/// File names are `<escaped job>.pp<P>-tp<T>-dp<D>.s<slot>.seg`. The job id is validated
/// (no '/', no "..", no control characters, at most 64 bytes) and every byte outside
/// [A-Za-z0-9_-] is written as %XX, so the name is unambiguous and never leaves shm_dir.
/// The header repeats job, rank and slot; adoption checks that the two agree.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/status.h"
#include "reft/store/snapshot_store.h"

namespace reft::store::internal {

/// \brief OK if `job` is a usable job id; InvalidArgument naming the problem otherwise.
Status ValidateJobName(const std::string& job);
/// \brief Job id valid and coordinates non-negative.
Status ValidateRankKey(const RankKey& rank);
/// \brief Region names non-empty, unique, <= 127 bytes, no NUL; at least one region.
Status ValidateLayout(const std::vector<RegionSpec>& layout);
/// \brief The file name (no directory) of slot `slot` of `rank`.
std::string SegmentFileName(const RankKey& rank, uint32_t slot);
/// \brief True for names this store creates (suffix ".seg").
bool LooksLikeSegmentName(const std::string& name);

}  // namespace reft::store::internal
