/// \file tier_restore.cc
/// \brief One rank's state from a persisted step; the tier's view of a job for restore-check.

#include "reft/recovery/tier_restore.h"

#include <algorithm>
#include <chrono>

#include "reft/coord/restore_source.h"
#include "reft/mapped_memfd.h"
#include "reft/protect/sharding.h"
#include "reft/recovery/snapshot_meta.h"
#include "state_layout.h"

namespace reft::recovery {

namespace {

using Clock = std::chrono::steady_clock;

// Reads a whole region in pieces (progress after each), checking its size first.
Status ReadRegionPieces(const persist::PersistedRank& file, const std::string& region, uint8_t* dst,
                        uint64_t size, uint64_t piece, uint64_t* done, uint64_t total,
                        const ProgressCallback& progress) {
  REFT_ASSIGN_OR_RETURN(uint64_t have, file.RegionSize(region));
  if (have != size) {
    return Status::Corrupted(file.path() + ": region '" + region + "' has " + std::to_string(have) +
                             " bytes, the snapshot meta says " + std::to_string(size));
  }
  for (uint64_t off = 0; off < size; off += piece) {
    const uint64_t n = std::min(piece, size - off);
    REFT_RETURN_NOT_OK(file.Read(region, off, dst + off, n));
    *done += n;
    if (progress) progress(Progress{Phase::kFetch, *done, total, "reading " + file.path()});
  }
  return Status::OK();
}

}  // namespace

persist::ManifestOwner ToManifestOwner(const local::JobOwner& owner) {
  return persist::ManifestOwner{owner.uid, owner.gid, owner.group};
}

Status CheckPersistedOwner(persist::PersistentTier* tier, const std::string& job, int64_t step,
                           const std::optional<local::JobOwner>& owner) {
  if (!owner) return Status::OK();
  const persist::ManifestOwner current = ToManifestOwner(*owner);
  REFT_ASSIGN_OR_RETURN(auto manifests, tier->ReadManifests(job, step));
  for (const auto& m : manifests) {
    if (m.owner && *m.owner != current) {
      return Status::PermissionDenied(
          "step " + std::to_string(step) + " of job '" + job +
          "' in the persistent tier was written for another owner; it is not restored (reftctl "
          "jobs release and the tier: docs/security.md)");
    }
  }
  return Status::OK();
}

Result<local::RestoredState> RestoreFromTier(persist::PersistentTier* tier,
                                             const protect::SlotMeta& meta, int64_t step,
                                             uint64_t piece_bytes, RestoreStats* stats,
                                             const ProgressCallback& progress) {
  const auto start = Clock::now();
  const int m = meta.layout.dp;
  const store::RankKey rank{meta.job, meta.coord.pp, meta.coord.tp, meta.coord.dp};
  const std::string what = rank.ToString() + " step " + std::to_string(step);
  if (progress) progress(Progress{Phase::kLocate, 0, 0, "opening persisted " + what});

  // Every member's file of the step (the rank's own first for the meta).
  std::vector<std::unique_ptr<persist::PersistedRank>> files(static_cast<size_t>(m));
  std::vector<std::string> missing;
  for (int i = 0; i < m; ++i) {
    const int d = (meta.coord.dp + i) % m;
    auto f = tier->OpenRank({meta.job, meta.coord.pp, meta.coord.tp, d}, step);
    if (f.ok()) {
      files[d] = std::move(*f);
    } else if (f.status().code() == StatusCode::kNotFound) {
      missing.push_back("dp" + std::to_string(d) + ": " + f.status().message());
    } else {
      return f.status().WithContext("persisted step " + std::to_string(step));
    }
  }
  const persist::PersistedRank* meta_file = nullptr;
  for (int i = 0; i < m && meta_file == nullptr; ++i) {
    meta_file = files[(meta.coord.dp + i) % m].get();
  }
  if (meta_file == nullptr || !missing.empty()) {
    std::string list;
    for (const auto& x : missing) list += (list.empty() ? "" : "; ") + x;
    return Status::Lost("persisted step " + std::to_string(step) + " of job '" + meta.job +
                        "' lacks rank files of SG pp" + std::to_string(meta.coord.pp) + "-tp" +
                        std::to_string(meta.coord.tp) + ": " + list);
  }
  REFT_ASSIGN_OR_RETURN(uint64_t meta_size, meta_file->RegionSize(protect::kRegionMeta));
  if (meta_size == 0 || meta_size > protect::kMaxSlotMetaBytes) {
    return Status::Corrupted(meta_file->path() + ": 'meta' region of " + std::to_string(meta_size) +
                             " bytes");
  }
  std::vector<uint8_t> meta_bytes(meta_size);
  REFT_RETURN_NOT_OK(meta_file->ReadRegion(protect::kRegionMeta, meta_bytes.data(), meta_size));
  REFT_ASSIGN_OR_RETURN(protect::SlotMeta stored,
                        DecodeMetaRegion(meta_bytes.data(), meta_bytes.size()));
  const store::RankKey& holder = meta_file->rank();
  if (stored.job != holder.job || stored.coord.pp != holder.pp || stored.coord.tp != holder.tp ||
      stored.coord.dp != holder.dp) {
    return Status::Corrupted(meta_file->path() + ": its meta describes " + stored.job + "/" +
                             stored.coord.ToString());
  }
  const protect::SlotMeta snapshot = stored.ForMember(meta.coord.dp);
  const std::string diff = meta.DifferenceFrom(snapshot, "snapshot");
  if (!diff.empty()) {
    return Status::InvalidArgument("the restarted trainer of " + rank.ToString() +
                                   " declares another job layout than its persisted step " +
                                   std::to_string(step) + ": " + diff);
  }
  REFT_ASSIGN_OR_RETURN(protect::SgGeometry g, snapshot.Geometry());
  const StateLayout state = ComputeStateLayout(snapshot, g);
  REFT_ASSIGN_OR_RETURN(MappedMemfd mem,
                        MappedMemfd::Create("reft-restore " + what + " (persistent)", state.size));
  stats->bytes_persistent += meta_size;
  stats->bytes_other += meta_size;
  stats->locate += Clock::now() - start;

  const auto t_fetch = Clock::now();
  const uint64_t piece = std::max<uint64_t>(piece_bytes, 1);
  uint64_t total = 0;
  for (const auto& name : g.unique) total += BufferSize(snapshot, name);
  total += g.total;
  uint64_t done = 0;
  for (int d = 0; d < m; ++d) {
    REFT_RETURN_NOT_OK(ReadRegionPieces(*files[d], protect::kRegionShard,
                                        mem.data() + g.shard_begin[d], g.ShardSize(d), piece, &done,
                                        total, progress));
    stats->bytes_shard += g.ShardSize(d);
  }
  const persist::PersistedRank& own = *files[meta.coord.dp];
  for (const auto& name : g.unique) {
    const uint64_t size = BufferSize(snapshot, name);
    REFT_RETURN_NOT_OK(ReadRegionPieces(own, protect::UniqueRegionName(name),
                                        mem.data() + state.offsets.at(name), size, piece, &done,
                                        total, progress));
    stats->bytes_unique += size;
  }
  stats->bytes_persistent += done;
  stats->fetch += Clock::now() - t_fetch;

  const auto t_deliver = Clock::now();
  local::RestoredState out;
  out.step = step;
  out.source = coord::RestoreSourceName(coord::RestoreSource::kTier);
  out.size = mem.size();
  out.offsets = state.offsets;
  out.fd = mem.Release();
  stats->deliver += Clock::now() - t_deliver;
  if (progress) progress(Progress{Phase::kDeliver, out.size, out.size, what});
  return out;
}

PersistentCheck CheckPersistent(TierAccess* access, const std::string& job,
                                std::optional<JobLayout> layout,
                                std::optional<int64_t> step) {
  PersistentCheck out;
  out.enabled = access->enabled();
  out.dir = access->options().dir;
  if (!out.enabled) return out;
  auto tier = access->Get(true);
  if (!tier.ok()) {
    out.error = tier.status().ToString();
    return out;
  }
  auto steps = (*tier)->ListSteps(job);
  if (!steps.ok()) {
    access->Report(steps.status());
    out.error = steps.status().ToString();
    return out;
  }
  out.steps = *steps;
  if (!layout) {
    // Nothing of the job in memory here: the newest step's manifests name its layout.
    for (auto it = out.steps.rbegin(); it != out.steps.rend() && !layout; ++it) {
      auto manifests = (*tier)->ReadManifests(job, *it);
      if (manifests.ok() && !manifests->empty()) layout = manifests->front().layout;
    }
  }
  if (!layout) return out;
  out.layout_known = true;
  out.layout = *layout;
  auto complete = (*tier)->CompleteSteps(job, *layout);
  if (!complete.ok()) {
    access->Report(complete.status());
    out.error = complete.status().ToString();
    return out;
  }
  for (int64_t s : *complete) {
    if (!step || s <= *step) out.newest_complete = s;
    if (step && s == *step) out.step_complete = true;
  }
  // Problems of the step asked about, else of the newest step directory (why it is not
  // complete: a persist in progress, a node that failed, a corrupted file).
  std::optional<int64_t> inspect = step;
  if (!inspect && !out.steps.empty()) inspect = out.steps.back();
  if (inspect && std::find(out.steps.begin(), out.steps.end(), *inspect) != out.steps.end()) {
    auto st = (*tier)->CheckStep(job, *inspect, *layout);
    if (st.ok()) {
      for (const auto& p : st->problems) {
        out.problems.push_back("step " + std::to_string(*inspect) + ": " + p);
      }
    }
  }
  return out;
}

}  // namespace reft::recovery
