// Opening the tier: option checks, the directory probe (docs/failure-model.md: "persistent directory
// full or missing: error reported"), and the cleanup of what dead writers left behind.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <vector>

#include "fs_ops.h"
#include "paths.h"
#include "reft/store/segment_layout.h"
#include "tier_impl.h"

namespace reft::persist {

namespace internal {

Status ValidateJob(const std::string& job) {
  if (job.empty()) return Status::InvalidArgument("job id is empty");
  if (job.size() > REFT_SEGMENT_JOB_MAX) {
    return Status::InvalidArgument("job id '" + job.substr(0, 16) + "...' is longer than " +
                                   std::to_string(REFT_SEGMENT_JOB_MAX) + " bytes");
  }
  for (unsigned char c : job) {
    if (c < 0x20 || c == 0x7f) return Status::InvalidArgument("job id contains a control character");
    if (c == '/') return Status::InvalidArgument("job id '" + job + "' contains '/'");
  }
  if (job.find("..") != std::string::npos) {
    return Status::InvalidArgument("job id '" + job + "' contains '..'");
  }
  return Status::OK();
}

Status ValidateOptions(const PersistOptions& o) {
  if (o.dir.empty()) return Status::InvalidArgument("persistent directory (persist_dir) is empty");
  REFT_RETURN_NOT_OK(ValidateNodeId(o.node_id));
  if (o.chunk_size < 4096 || (o.chunk_size & (o.chunk_size - 1)) != 0) {
    return Status::InvalidArgument("persist chunk_size " + std::to_string(o.chunk_size) +
                                   " must be a power of two >= 4096");
  }
  if (o.checksum_threads < 1 || o.checksum_threads > 256) {
    return Status::InvalidArgument("persist checksum_threads " +
                                   std::to_string(o.checksum_threads) + " must be in [1, 256]");
  }
  if (o.file_mode != 0600 && o.file_mode != 0640 && o.file_mode != 0644) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(o.file_mode));
    return Status::InvalidArgument(std::string("persist file_mode ") + buf +
                                   " must be 0600, 0640 or 0644");
  }
  return Status::OK();
}

TierImpl::TierImpl(PersistOptions options, dev_t dev, ino_t ino)
    : options_(std::move(options)),
      root_dev_(dev),
      root_ino_(ino),
      write_bucket_(std::make_shared<TokenBucket>(options_.bandwidth)),
      read_bucket_(options_.read_bandwidth
                       ? std::make_shared<TokenBucket>(options_.read_bandwidth)
                       : nullptr) {}

TierImpl::InFlight::InFlight(TierImpl* tier, std::string job, int64_t step)
    : tier_(tier), key_(std::move(job), step) {
  MutexLock lock(tier_->mu_);
  ++tier_->in_flight_[key_];
}

TierImpl::InFlight::~InFlight() {
  MutexLock lock(tier_->mu_);
  auto it = tier_->in_flight_.find(key_);
  if (it != tier_->in_flight_.end() && --it->second == 0) tier_->in_flight_.erase(it);
}

Status TierImpl::CheckRoot() const {
  struct stat st {};
  const std::string& dir = options_.dir;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return Status::NotFound("persistent directory " + dir + " does not exist (any more)");
    }
    return FsError(errno, dir, "stat");
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::NotFound("persistent directory " + dir + " is not a directory");
  }
  if (st.st_dev != root_dev_ || st.st_ino != root_ino_) {
    return Status::IoError("persistent directory " + dir +
                           " was replaced or (un)mounted since the tier was opened; refusing to "
                           "write to what is there now (reopen the tier)");
  }
  return Status::OK();
}

std::string TierImpl::JobDir(const std::string& job) const {
  return options_.dir + "/" + JobDirName(job);
}
std::string TierImpl::StepDir(const std::string& job, int64_t step) const {
  return JobDir(job) + "/" + StepDirName(step);
}
std::string TierImpl::StepRel(const std::string& job, int64_t step) const {
  return JobDirName(job) + "/" + StepDirName(step);
}

bool TierImpl::StaleScratch(const std::string& path, const std::string& name,
                            std::string* why) const {
  auto parts = ParseScratchName(name);
  if (!parts) return false;
  if (parts->node_id == options_.node_id && parts->pid != ::getpid() &&
      !ProcessAlive(parts->pid)) {
    *why = "writer pid " + std::to_string(parts->pid) + " of this node is gone";
    return true;
  }
  if (parts->node_id == options_.node_id && parts->pid == ::getpid()) return false;  // ours
  if (options_.stale_age_s == 0) return false;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return false;
  const time_t now = ::time(nullptr);
  if (now > st.st_mtime && static_cast<uint64_t>(now - st.st_mtime) > options_.stale_age_s) {
    *why = "older than " + std::to_string(options_.stale_age_s) + " s";
    return true;
  }
  return false;
}

CleanupReport TierImpl::CleanupStale() {
  CleanupReport report;
  auto list = [](const std::string& dir, std::vector<std::string>* names) -> int {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return errno;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names->push_back(std::move(n));
    }
    ::closedir(d);
    return 0;
  };
  auto sweep = [&](const std::string& dir, const std::string& name) {
    const std::string path = dir + "/" + name;
    std::string why;
    if (!StaleScratch(path, name, &why)) return;
    std::string err = RemoveTree(path);
    if (err.empty()) {
      report.removed.push_back(path + " (" + why + ")");
    } else {
      report.errors.push_back(err);
    }
  };
  std::vector<std::string> top;
  if (int err = list(options_.dir, &top)) {
    report.errors.push_back(options_.dir + ": " + ErrnoText(err));
    return report;
  }
  for (const auto& j : top) {
    if (ParseScratchName(j)) {  // an interrupted probe
      sweep(options_.dir, j);
      continue;
    }
    if (!ParseJobDirName(j)) continue;
    const std::string job_dir = options_.dir + "/" + j;
    std::vector<std::string> entries;
    if (list(job_dir, &entries) != 0) continue;  // not a directory, or gone
    for (const auto& e : entries) {
      if (ParseScratchName(e)) {
        sweep(job_dir, e);
        continue;
      }
      if (!ParseStepDirName(e)) continue;
      std::vector<std::string> files;
      if (list(job_dir + "/" + e, &files) != 0) continue;
      for (const auto& f : files) sweep(job_dir + "/" + e, f);
    }
  }
  return report;
}

}  // namespace internal

Result<std::unique_ptr<PersistentTier>> PersistentTier::Open(const PersistOptions& options,
                                                             CleanupReport* cleanup) {
  REFT_RETURN_NOT_OK(internal::ValidateOptions(options));
  PersistOptions o = options;
  while (o.dir.size() > 1 && o.dir.back() == '/') o.dir.pop_back();
  struct stat st {};
  if (::stat(o.dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return Status::NotFound("persistent directory " + o.dir + " does not exist");
    }
    return internal::FsError(err, o.dir, "stat");
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::NotFound("persistent directory " + o.dir + " is not a directory");
  }
  // Writability probe: access(2) says yes to root even on a read-only export or a root-squashed
  // NFS mount, so create (and remove) a real file.
  const std::string probe_name = internal::ScratchName("tmp", o.node_id, 0, "probe");
  const std::string probe = o.dir + "/" + probe_name;
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    ::unlink(probe.c_str());  // left by an earlier process that had this pid
    fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0) return internal::FsError(errno, o.dir, "not writable: creating a probe file");
  ::close(fd);
  if (::unlink(probe.c_str()) != 0) {
    return internal::FsError(errno, o.dir, "not writable: removing the probe file " + probe_name);
  }
  auto tier = std::make_unique<internal::TierImpl>(std::move(o), st.st_dev, st.st_ino);
  CleanupReport report = tier->CleanupStale();
  if (cleanup != nullptr) *cleanup = std::move(report);
  return std::unique_ptr<PersistentTier>(std::move(tier));
}

}  // namespace reft::persist
