// Writing: rank files and manifests, each through the durable temp/fdatasync/rename path.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

#include "fs_ops.h"
#include "manifest.h"
#include "paths.h"
#include "tier_impl.h"

namespace reft::persist::internal {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Pieces of one write(2): small enough to pace smoothly under a bandwidth limit, large enough
/// to cost few system calls without one.
size_t PieceSize(uint64_t rate) { return rate ? (1u << 20) : (8u << 20); }

}  // namespace

Status TierImpl::EnsureStepDir(const std::string& job, int64_t step) {
  REFT_RETURN_NOT_OK(CheckRoot());
  REFT_RETURN_NOT_OK(MakeDirDurable(JobDir(job), 0750, options_.dir, JobDirName(job)));
  return MakeDirDurable(StepDir(job, step), 0750, options_.dir, StepRel(job, step));
}

Result<RankFileInfo> TierImpl::WriteRank(const store::RankKey& rank, int64_t step,
                                         const std::vector<store::ImageRegion>& regions) {
  const auto t0 = std::chrono::steady_clock::now();
  REFT_RETURN_NOT_OK(ValidateJob(rank.job));
  REFT_RETURN_NOT_OK(CheckRoot());  // before spending time on checksums
  store::ImageOptions io;
  io.chunk_size = options_.chunk_size;
  io.checksum_threads = options_.checksum_threads;
  // Validates rank, step and regions and checksums every chunk before anything is created.
  REFT_ASSIGN_OR_RETURN(auto image, store::SegmentImageWriter::Prepare(rank, step, regions, io));
  InFlight guard(this, rank.job, step);
  REFT_RETURN_NOT_OK(EnsureStepDir(rank.job, step));

  RankFileInfo info;
  info.rank = rank;
  info.step = step;
  info.file = RankFileName(rank);
  info.path = StepDir(rank.job, step) + "/" + info.file;
  DurableWrite w;
  w.root = options_.dir;
  w.dir = StepDir(rank.job, step);
  w.rel = StepRel(rank.job, step) + "/" + info.file;
  w.temp_name = ScratchName("tmp", options_.node_id, NextSeq(), info.file);
  w.final_name = info.file;
  w.mode = options_.file_mode;
  w.expected_bytes = image.file_bytes();
  w.preallocate = options_.preallocate;
  w.bucket = write_bucket_.get();
  w.piece = PieceSize(options_.bandwidth);
  REFT_RETURN_NOT_OK(WriteFileDurably(w, [&](const store::SegmentImageWriter::Sink& sink) {
    return image.Stream(sink, w.piece);
  }));
  info.file_bytes = image.file_bytes();
  info.payload_bytes = image.payload_bytes();
  info.chunk_size = image.chunk_size();
  info.chunk_count = image.chunk_count();
  info.chunk_table_checksum = image.chunk_table_checksum();
  info.regions = image.regions();
  info.seconds = SecondsSince(t0);
  return info;
}

std::optional<Manifest> TierImpl::ReadOwnManifestLocked(const std::string& job, int64_t step) {
  const std::string path = StepDir(job, step) + "/" + ManifestFileName(options_.node_id);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  auto m = DecodeManifest(ss.str(), path);
  // An unreadable own manifest is replaced (its entries are lost, the rank files are not).
  if (!m.ok() || m->job != job || m->step != step) return std::nullopt;
  return std::move(m).value();
}

Result<std::string> TierImpl::WriteManifest(const std::string& job, int64_t step,
                                            const JobLayout& layout,
                                            const std::vector<RankFileInfo>& files,
                                            const std::optional<ManifestOwner>& owner) {
  REFT_RETURN_NOT_OK(ValidateJob(job));
  REFT_RETURN_NOT_OK(layout.Validate());
  if (step < 0) return Status::InvalidArgument("step " + std::to_string(step) + " must be >= 0");
  for (const auto& f : files) {
    if (f.rank.job != job || f.step != step) {
      return Status::InvalidArgument("manifest of job '" + job + "' step " +
                                     std::to_string(step) + " given the file of " +
                                     f.rank.ToString() + " step " + std::to_string(f.step));
    }
  }
  InFlight guard(this, job, step);
  REFT_RETURN_NOT_OK(EnsureStepDir(job, step));
  MutexLock lock(manifest_mu_);
  std::map<store::RankKey, RankFileInfo> merged;
  std::optional<ManifestOwner> recorded = owner;
  if (auto old = ReadOwnManifestLocked(job, step)) {
    // One manifest speaks for one owner: files written here for another one are not relabelled
    // (a restore checks the owner of every manifest of the step, docs/security.md).
    if (owner && old->owner && *old->owner != *owner) {
      return Status::AlreadyExists("step " + std::to_string(step) + " of job '" + job +
                                   "' in the persistent tier holds files this node wrote for "
                                   "another owner of the job; remove " + StepDir(job, step) +
                                   " before persisting the step again");
    }
    if (!recorded) recorded = old->owner;  // unknown now: keep what the manifest knew
    for (auto& f : old->files) merged[f.rank] = std::move(f);
  }
  for (const auto& f : files) {
    RankFileInfo e = f;
    e.path.clear();
    e.seconds = 0;
    merged[e.rank] = std::move(e);
  }
  Manifest m;
  m.node_id = options_.node_id;
  m.job = job;
  m.step = step;
  m.layout = layout;
  m.owner = std::move(recorded);
  m.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (auto& [rank, f] : merged) m.files.push_back(std::move(f));
  const std::string text = EncodeManifest(m);

  DurableWrite w;
  w.root = options_.dir;
  w.dir = StepDir(job, step);
  w.final_name = ManifestFileName(options_.node_id);
  w.rel = StepRel(job, step) + "/" + w.final_name;
  w.temp_name = ScratchName("tmp", options_.node_id, NextSeq(), w.final_name);
  w.mode = options_.file_mode;
  w.expected_bytes = text.size();
  w.preallocate = false;
  w.bucket = write_bucket_.get();
  w.piece = PieceSize(options_.bandwidth);
  REFT_RETURN_NOT_OK(WriteFileDurably(w, [&](const store::SegmentImageWriter::Sink& sink) {
    return sink(text.data(), text.size());
  }));
  return w.dir + "/" + w.final_name;
}

Result<PersistReport> TierImpl::PersistStep(const std::string& job, int64_t step,
                                            const JobLayout& layout,
                                            const std::vector<RankImage>& ranks,
                                            const std::optional<ManifestOwner>& owner) {
  const auto t0 = std::chrono::steady_clock::now();
  REFT_RETURN_NOT_OK(ValidateJob(job));
  REFT_RETURN_NOT_OK(layout.Validate());
  if (step < 0) return Status::InvalidArgument("step " + std::to_string(step) + " must be >= 0");
  for (const auto& r : ranks) {
    if (r.rank.job != job) {
      return Status::InvalidArgument("persist of job '" + job + "' given rank " +
                                     r.rank.ToString());
    }
    if (r.rank.pp < 0 || r.rank.pp >= layout.pp || r.rank.tp < 0 || r.rank.tp >= layout.tp ||
        r.rank.dp < 0 || r.rank.dp >= layout.dp) {
      return Status::InvalidArgument("rank " + r.rank.ToString() + " is outside the layout " +
                                     layout.ToString());
    }
  }
  InFlight guard(this, job, step);
  PersistReport report;
  report.job = job;
  report.step = step;
  for (const auto& r : ranks) {
    REFT_ASSIGN_OR_RETURN(RankFileInfo info, WriteRank(r.rank, step, r.regions));
    report.bytes_written += info.file_bytes;
    report.files.push_back(std::move(info));
  }
  REFT_ASSIGN_OR_RETURN(report.manifest_path,
                        WriteManifest(job, step, layout, report.files, owner));
  {
    struct stat st {};
    if (::stat(report.manifest_path.c_str(), &st) == 0) report.bytes_written += st.st_size;
  }
  if (options_.keep > 0) {
    auto removed = ApplyRetention(job, layout);
    if (removed.ok()) {
      report.removed_steps = std::move(removed).value();
    } else {
      report.retention_error = removed.status().ToString();
    }
  }
  report.seconds = SecondsSince(t0);
  return report;
}

}  // namespace reft::persist::internal
