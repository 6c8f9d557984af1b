// Reading side: listing jobs and steps, completeness for a layout, retention, opening ranks
// and manifests.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>

#include "fs_ops.h"
#include "manifest.h"
#include "paths.h"
#include "reft/store/segment_image.h"
#include "tier_impl.h"

namespace reft::persist::internal {
namespace {

/// Names in `dir` (without . and ..); the errno of opendir on failure.
Result<std::vector<std::string>> ListNames(const std::string& dir, const std::string& root,
                                           const std::string& rel, int* err_out = nullptr) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (err_out != nullptr) *err_out = errno;
    return FsError(errno, root, "listing " + rel);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Result<std::vector<std::string>> TierImpl::ListJobs() {
  REFT_RETURN_NOT_OK(CheckRoot());
  REFT_ASSIGN_OR_RETURN(auto names, ListNames(options_.dir, options_.dir, "."));
  std::vector<std::string> jobs;
  for (const auto& n : names) {
    auto job = ParseJobDirName(n);
    if (!job) continue;
    struct stat st {};
    if (::lstat((options_.dir + "/" + n).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      jobs.push_back(*job);
    }
  }
  std::sort(jobs.begin(), jobs.end());
  return jobs;
}

Result<std::vector<int64_t>> TierImpl::ListSteps(const std::string& job) {
  REFT_RETURN_NOT_OK(ValidateJob(job));
  REFT_RETURN_NOT_OK(CheckRoot());
  int err = 0;
  auto names = ListNames(JobDir(job), options_.dir, JobDirName(job), &err);
  if (!names.ok()) {
    if (err == ENOENT) return std::vector<int64_t>{};  // nothing persisted for this job
    return names.status();
  }
  std::vector<int64_t> steps;
  for (const auto& n : *names) {
    if (auto s = ParseStepDirName(n)) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Status TierImpl::CheckRankFile(const store::RankKey& rank, int64_t step) {
  const std::string path = StepDir(rank.job, step) + "/" + RankFileName(rank);
  REFT_ASSIGN_OR_RETURN(auto reader, store::SegmentImageReader::Open(path));
  if (!(reader->rank() == rank) || reader->step() != step) {
    return Status::Corrupted(path + ": header holds " + reader->rank().ToString() + " step " +
                             std::to_string(reader->step()) + ", not what its path names");
  }
  return Status::OK();
}

Result<StepStatus> TierImpl::CheckStep(const std::string& job, int64_t step,
                                       const JobLayout& layout) {
  REFT_RETURN_NOT_OK(ValidateJob(job));
  REFT_RETURN_NOT_OK(layout.Validate());
  REFT_RETURN_NOT_OK(CheckRoot());
  REFT_ASSIGN_OR_RETURN(auto names,
                        ListNames(StepDir(job, step), options_.dir, StepRel(job, step)));
  StepStatus st;
  st.step = step;
  std::set<store::RankKey> present;
  for (const auto& n : names) {
    if (auto r = ParseRankFileName(n)) {
      r->job = job;
      present.insert(*r);
    } else if (auto node = ParseManifestFileName(n)) {
      st.manifests.push_back(*node);
    } else if (ParseScratchName(n)) {
      ++st.temp_files;
    }
  }
  for (int32_t pp = 0; pp < layout.pp; ++pp) {
    for (int32_t tp = 0; tp < layout.tp; ++tp) {
      for (int32_t dp = 0; dp < layout.dp; ++dp) {
        store::RankKey r{job, pp, tp, dp};
        if (present.count(r) == 0) {
          st.problems.push_back(r.coord().ToString() + ": missing");
          continue;
        }
        Status s = CheckRankFile(r, step);
        if (s.ok()) {
          st.valid.push_back(r);
        } else if (s.code() == StatusCode::kNotFound) {
          st.problems.push_back(r.coord().ToString() + ": missing (removed while checking)");
        } else {
          st.problems.push_back(r.coord().ToString() + ": " + s.ToString());
        }
      }
    }
  }
  for (const auto& r : present) {
    if (!layout.Contains(r)) {
      st.problems.push_back(r.coord().ToString() + ": outside the layout " + layout.ToString());
    }
  }
  st.complete = st.problems.empty();
  return st;
}

Result<std::vector<int64_t>> TierImpl::CompleteSteps(const std::string& job,
                                                     const JobLayout& layout) {
  REFT_ASSIGN_OR_RETURN(auto steps, ListSteps(job));
  std::vector<int64_t> complete;
  for (int64_t s : steps) {
    auto st = CheckStep(job, s, layout);
    if (!st.ok()) {
      if (st.status().code() == StatusCode::kNotFound) continue;  // deleted meanwhile
      return st.status();
    }
    if (st->complete) complete.push_back(s);
  }
  return complete;
}

Result<std::optional<int64_t>> TierImpl::NewestCompleteStep(const std::string& job,
                                                            const JobLayout& layout) {
  REFT_ASSIGN_OR_RETURN(auto steps, ListSteps(job));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    auto st = CheckStep(job, *it, layout);
    if (!st.ok()) {
      if (st.status().code() == StatusCode::kNotFound) continue;
      return st.status();
    }
    if (st->complete) return std::optional<int64_t>(*it);
  }
  return std::optional<int64_t>();
}

Result<std::vector<int64_t>> TierImpl::ApplyRetention(const std::string& job,
                                                      const JobLayout& layout) {
  REFT_RETURN_NOT_OK(ValidateJob(job));
  REFT_RETURN_NOT_OK(layout.Validate());
  std::vector<int64_t> removed;
  if (options_.keep == 0) return removed;
  REFT_ASSIGN_OR_RETURN(auto steps, ListSteps(job));
  // The oldest of the newest `keep` complete steps: everything older goes.
  uint32_t found = 0;
  int64_t cutoff = -1;
  for (auto it = steps.rbegin(); it != steps.rend() && found < options_.keep; ++it) {
    auto st = CheckStep(job, *it, layout);
    if (!st.ok()) {
      if (st.status().code() == StatusCode::kNotFound) continue;
      return st.status();
    }
    if (st->complete) {
      ++found;
      cutoff = *it;
    }
  }
  if (found < options_.keep) return removed;
  Status first_error;
  std::vector<std::string> trash;
  {
    // Under the lock so that a WriteRank of a victim either registered first (and the step is
    // skipped) or starts after the rename (and recreates a fresh directory).
    MutexLock lock(mu_);
    for (int64_t s : steps) {
      if (s >= cutoff) break;
      if (in_flight_.count({job, s}) != 0) continue;
      const std::string to =
          JobDir(job) + "/" + ScratchName("trash", options_.node_id, NextSeq(), StepDirName(s));
      if (::rename(StepDir(job, s).c_str(), to.c_str()) != 0) {
        if (errno == ENOENT) continue;  // another node's retention got there first
        if (first_error.ok()) first_error = FsError(errno, options_.dir, "retiring " + StepRel(job, s));
        continue;
      }
      removed.push_back(s);
      trash.push_back(to);
    }
  }
  for (const auto& t : trash) {
    std::string err = RemoveTree(t);  // a leftover is swept by CleanupStale later
    if (!err.empty() && first_error.ok()) {
      first_error = Status::IoError("persistent directory " + options_.dir + ": removing " + err);
    }
  }
  if (!first_error.ok()) return first_error;
  return removed;
}

Result<std::unique_ptr<PersistedRank>> TierImpl::OpenRank(const store::RankKey& rank,
                                                          int64_t step) {
  REFT_RETURN_NOT_OK(ValidateJob(rank.job));
  if (rank.pp < 0 || rank.tp < 0 || rank.dp < 0 || step < 0) {
    return Status::InvalidArgument("no such rank or step: " + rank.ToString() + " step " +
                                   std::to_string(step));
  }
  REFT_RETURN_NOT_OK(CheckRoot());
  const std::string path = StepDir(rank.job, step) + "/" + RankFileName(rank);
  auto reader = store::SegmentImageReader::Open(path);
  if (!reader.ok()) {
    if (reader.status().code() == StatusCode::kNotFound) {
      return Status::NotFound("persistent directory " + options_.dir + ": no file of " +
                              rank.ToString() + " at step " + std::to_string(step) + " (" +
                              path + ")");
    }
    return reader.status();
  }
  if (!((*reader)->rank() == rank) || (*reader)->step() != step) {
    return Status::Corrupted(path + ": header holds " + (*reader)->rank().ToString() + " step " +
                             std::to_string((*reader)->step()) + ", not what its path names");
  }
  return std::make_unique<PersistedRank>(std::move(reader).value(), read_bucket_);
}

Result<std::vector<Manifest>> TierImpl::ReadManifests(const std::string& job, int64_t step) {
  REFT_RETURN_NOT_OK(ValidateJob(job));
  REFT_RETURN_NOT_OK(CheckRoot());
  REFT_ASSIGN_OR_RETURN(auto names,
                        ListNames(StepDir(job, step), options_.dir, StepRel(job, step)));
  std::vector<Manifest> out;
  for (const auto& n : names) {
    if (!ParseManifestFileName(n)) continue;
    const std::string path = StepDir(job, step) + "/" + n;
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;  // replaced or removed meanwhile
    std::stringstream ss;
    ss << in.rdbuf();
    REFT_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(ss.str(), path));
    if (m.job != job || m.step != step) {
      return Status::Corrupted(path + ": names job '" + m.job + "' step " +
                               std::to_string(m.step));
    }
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(),
            [](const Manifest& a, const Manifest& b) { return a.node_id < b.node_id; });
  return out;
}

}  // namespace reft::persist::internal
