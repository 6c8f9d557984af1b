/// \file reshape_tier.cc
/// \brief Reshape from the persistent tier: a persisted step saved under another layout, read
/// by global names from its rank files (every chunk verified as it is read).

#include "reshape_tier.h"

#include <algorithm>
#include <map>
#include <memory>

#include "reft/coord/restore_source.h"
#include "reft/recovery/snapshot_meta.h"

namespace reft::recovery {

namespace {

std::string GroupName(int pp, int tp) {
  return "pp" + std::to_string(pp) + "-tp" + std::to_string(tp);
}

// Rank files of one persisted step, opened once each.
class RankFiles {
 public:
  RankFiles(persist::PersistentTier* tier, std::string job, int64_t step)
      : tier_(tier), job_(std::move(job)), step_(step) {}

  Result<const persist::PersistedRank*> Get(int pp, int tp, int dp) {
    auto& f = files_[{pp, tp, dp}];
    if (!f) {
      auto opened = tier_->OpenRank({job_, pp, tp, dp}, step_);
      if (!opened.ok()) {
        const StatusCode code = opened.status().code() == StatusCode::kNotFound
                                    ? StatusCode::kLost
                                    : opened.status().code();
        return Status(code, "persisted step " + std::to_string(step_) + " of job '" + job_ +
                                "': rank file of " + GroupName(pp, tp) + "-dp" +
                                std::to_string(dp) + ": " + opened.status().message());
      }
      f = std::move(*opened);
    }
    return f.get();
  }

 private:
  persist::PersistentTier* tier_;
  std::string job_;
  int64_t step_;
  std::map<std::tuple<int, int, int>, std::unique_ptr<persist::PersistedRank>> files_;
};

}  // namespace

Result<JobLayout> PersistedLayout(persist::PersistentTier* tier, const std::string& job,
                                  int64_t step) {
  REFT_ASSIGN_OR_RETURN(auto manifests, tier->ReadManifests(job, step));
  if (manifests.empty()) {
    return Status::NotFound("persisted step " + std::to_string(step) + " of job '" + job +
                            "' has no manifest");
  }
  return manifests.front().layout;
}

Result<local::RestoredState> ReshapeFromTier(persist::PersistentTier* tier,
                                             const protect::SlotMeta& meta, int64_t step,
                                             const JobLayout& saved,
                                             const local::RestoreRequest& request,
                                             RestoreStats* stats) {
  RankFiles files(tier, meta.job, step);
  StepCatalog catalog;
  catalog.job = meta.job;
  catalog.step = step;
  catalog.layout = saved;
  for (int pp = 0; pp < saved.pp; ++pp) {
    for (int tp = 0; tp < saved.tp; ++tp) {
      REFT_ASSIGN_OR_RETURN(const persist::PersistedRank* f, files.Get(pp, tp, 0));
      REFT_ASSIGN_OR_RETURN(uint64_t size, f->RegionSize(protect::kRegionMeta));
      if (size == 0 || size > protect::kMaxSlotMetaBytes) {
        return Status::Corrupted(f->path() + ": 'meta' region of " + std::to_string(size) +
                                 " bytes");
      }
      std::vector<uint8_t> bytes(size);
      REFT_RETURN_NOT_OK(f->ReadRegion(protect::kRegionMeta, bytes.data(), size));
      stats->bytes_persistent += size;
      stats->bytes_other += size;
      SavedGroup g;
      g.pp = pp;
      g.tp = tp;
      REFT_ASSIGN_OR_RETURN(g.meta.meta, DecodeMetaRegion(bytes.data(), size));
      REFT_ASSIGN_OR_RETURN(g.geometry, g.meta.meta.Geometry());
      REFT_RETURN_NOT_OK(AddGroup(&catalog, std::move(g)));
    }
  }
  catalog.scheme = catalog.groups.front().meta.meta.scheme.ToString();

  auto assemble = [&](const std::vector<RangeRequest>& requests, std::string* detail) -> Status {
    uint64_t bytes = 0;
    // Reads [lo, hi) of `region` of a saved rank into dst.
    auto read = [&](int pp, int tp, int dp, const std::string& region, uint64_t lo, uint64_t hi,
                    uint8_t* dst) -> Status {
      REFT_ASSIGN_OR_RETURN(const persist::PersistedRank* f, files.Get(pp, tp, dp));
      bytes += hi - lo;
      return f->Read(region, lo, dst, hi - lo);
    };
    for (const RangeRequest& r : requests) {
      REFT_ASSIGN_OR_RETURN(const SavedBuffer* saved_buf, catalog.Find(r.name, r.tp, r.pp));
      const SavedGroup& g = catalog.groups[saved_buf->group];
      const protect::BufferSpec& spec = saved_buf->spec;
      if (r.begin >= r.end) continue;
      if (spec.kind == protect::BufferKind::kReplicated) {
        // The canonical range [o+begin, o+end) lies in the members' "rep/shard" regions.
        const protect::BufferExtent* extent = g.geometry.Extent(r.name);
        const uint64_t o = extent != nullptr ? extent->offset : 0;
        for (int d = 0; d < g.geometry.m; ++d) {
          const uint64_t a = std::max(o + r.begin, g.geometry.shard_begin[d]);
          const uint64_t e = std::min(o + r.end, g.geometry.shard_begin[d + 1]);
          if (a >= e) continue;
          REFT_RETURN_NOT_OK(read(g.pp, g.tp, d, protect::kRegionShard,
                                  a - g.geometry.shard_begin[d], e - g.geometry.shard_begin[d],
                                  r.dst + (a - o - r.begin)));
        }
      } else if (!spec.sharded()) {
        REFT_RETURN_NOT_OK(read(g.pp, g.tp, r.dp, protect::UniqueRegionName(r.name), r.begin,
                                r.end, r.dst));
      } else {
        for (const PartOverlap& p : OverlappingParts(spec, catalog.layout.dp, r.begin, r.end)) {
          REFT_RETURN_NOT_OK(read(g.pp, g.tp, p.dp, protect::UniqueRegionName(r.name), p.lo,
                                  p.hi, r.dst + p.at));
        }
      }
    }
    stats->bytes_persistent += bytes;
    *detail = std::to_string(bytes) + " bytes from the rank files of persisted step " +
              std::to_string(step) + " in " + tier->options().dir;
    return Status::OK();
  };
  REFT_ASSIGN_OR_RETURN(local::RestoredState out, ReshapeRank(meta, catalog, assemble, request));
  out.source = coord::RestoreSourceName(coord::RestoreSource::kTier);
  return out;
}

}  // namespace reft::recovery
