#include "reft/local/job_owners.h"

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace reft::local {
namespace {

bool IsNumber(const std::string& s, size_t max_digits) {
  return !s.empty() && s.size() <= max_digits &&
         s.find_first_not_of("0123456789") == std::string::npos;
}

// Group names and gids: a name is looked up, a number must be a group too (a gid nobody has
// would let whoever later gets it into the job).
Result<uint32_t> ResolveGroup(const std::string& name) {
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  int rc = IsNumber(name, 9) ? getgrgid_r(static_cast<gid_t>(std::stoul(name)), &g, buf.data(),
                                          buf.size(), &found)
                             : getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr) {
    return Status::InvalidArgument("owner group '" + name + "' is not a group on this node");
  }
  return static_cast<uint32_t>(found->gr_gid);
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

}  // namespace

Status CheckJobId(const std::string& job) {
  if (job.empty()) return Status::InvalidArgument("job must not be empty");
  for (unsigned char c : job) {
    if (c < 0x20 || c == 0x7f) {
      return Status::InvalidArgument("job id contains a control character");
    }
  }
  return Status::OK();
}

Result<JobOwner> MakeClaim(const PeerCredentials& caller, const std::string& owner_group,
                           const std::string& node) {
  JobOwner claim;
  claim.uid = caller.uid;
  claim.claimed_on = node;
  claim.claimed_at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  if (owner_group.empty()) return claim;
  if (owner_group.find_first_of(" \t") != std::string::npos) {
    return Status::InvalidArgument("owner group '" + owner_group + "' holds a space");
  }
  REFT_ASSIGN_OR_RETURN(uint32_t gid, ResolveGroup(owner_group));
  // Sharing a job with a group one is not in would hand it to strangers.
  if (!caller.InGroup(gid)) {
    return Status::PermissionDenied("uid " + std::to_string(caller.uid) +
                                    " is not a member of owner group '" + owner_group +
                                    "' (gid " + std::to_string(gid) + ")");
  }
  claim.gid = gid;
  claim.group = owner_group;
  return claim;
}

Result<std::unique_ptr<JobOwners>> JobOwners::Open(std::string path) {
  std::unique_ptr<JobOwners> owners(new JobOwners(std::move(path)));
  REFT_RETURN_NOT_OK(owners->Load());
  return owners;
}

// The journal, one entry a line (the job last: it may hold spaces):
//   "+ <uid> <gid|-> <group|-> <claimed_at_ms> <claimed_on|-> <job>"   a claim
//   "- <job>"                                                          a forgotten job
//   "<uid> <gid|-> <group|-> <job>"                                    a claim, older reftd
Status JobOwners::Load() {
  if (path_.empty()) return Status::OK();
  if (::access(path_.c_str(), F_OK) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::FromErrno(errno, "cannot read the job owners " + path_);
  }
  std::ifstream in(path_);
  if (!in) return Status::IoError("cannot read the job owners " + path_);
  MutexLock lock(mu_);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    ++journal_lines_;
    auto bad = [&](const std::string& why) {
      return Status::Corrupted("job owners " + path_ + " line " + std::to_string(n) + ": " + why +
                               " (fix or remove the line; reftd will not start without it)");
    };
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (first == "-") {
      std::string job;
      if (fields.get() == ' ') std::getline(fields, job);
      if (!CheckJobId(job).ok()) return bad("no valid job id");
      owners_.erase(job);
      continue;
    }
    const bool current = first == "+";
    std::string uid = current ? "" : first, gid, group, at = "0", on = "-";
    if (current) fields >> uid;
    fields >> gid >> group;
    if (current) fields >> at >> on;
    std::string job;
    if (fields.get() == ' ') std::getline(fields, job);
    if (!CheckJobId(job).ok()) return bad("no valid job id");
    if (!IsNumber(uid, 10)) return bad("uid '" + uid + "' is not a number");
    if (!IsNumber(at, 19)) return bad("claim time '" + at + "' is not a number");
    JobOwner o;
    o.uid = static_cast<uint32_t>(std::stoul(uid));
    if (gid != "-") {
      if (!IsNumber(gid, 10)) return bad("gid '" + gid + "' is not a number or '-'");
      o.gid = static_cast<uint32_t>(std::stoul(gid));
    }
    if (group != "-") o.group = group;
    o.claimed_at_ms = std::stoll(at);
    if (on != "-") o.claimed_on = on;
    owners_[job] = o;
  }
  return Status::OK();
}

Status JobOwners::AppendLocked(const std::string& line) {
  if (path_.empty()) return Status::OK();
  if (journal_lines_ >= 1024 && journal_lines_ >= 2 * owners_.size()) {
    return CompactLocked();  // the rewrite holds this change already
  }
  // O_APPEND: the line lands whole at the end. Only reftd reads it: who owns what is nobody
  // else's business.
  FILE* f = std::fopen(path_.c_str(), "a");
  if (f == nullptr) return Status::FromErrno(errno, "cannot write the job owners " + path_);
  ::fchmod(::fileno(f), 0600);
  const bool ok = std::fputs((line + "\n").c_str(), f) >= 0;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) return Status::FromErrno(errno, "cannot write the job owners " + path_);
  ++journal_lines_;
  return Status::OK();
}

Status JobOwners::CompactLocked() {
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& [job, o] : owners_) {
      out << "+ " << o.uid << ' ' << (o.gid ? std::to_string(*o.gid) : "-") << ' '
          << OrDash(o.group) << ' ' << o.claimed_at_ms << ' ' << OrDash(o.claimed_on) << ' '
          << job << '\n';
    }
    out.flush();
    if (!out) return Status::FromErrno(errno, "cannot write the job owners " + tmp);
  }
  if (::chmod(tmp.c_str(), 0600) != 0) return Status::FromErrno(errno, "chmod " + tmp);
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    return Status::FromErrno(errno, "cannot replace the job owners " + path_);
  }
  journal_lines_ = owners_.size();
  return Status::OK();
}

void JobOwners::NoteDenied(const std::string& job) {
  denied_++;
  if (on_denied_) on_denied_(job);
}

Status JobOwners::Admit(const std::string& job, const PeerCredentials& caller,
                        const JobOwner& claim) {
  REFT_RETURN_NOT_OK(CheckJobId(job));
  {
    MutexLock lock(mu_);
    auto it = owners_.find(job);
    if (it == owners_.end()) {
      owners_[job] = claim;
      Status saved = AppendLocked(
          "+ " + std::to_string(claim.uid) + " " +
          (claim.gid ? std::to_string(*claim.gid) : "-") + " " + OrDash(claim.group) + " " +
          std::to_string(claim.claimed_at_ms) + " " + OrDash(claim.claimed_on) + " " + job);
      if (!saved.ok()) owners_.erase(job);  // an owner that would not survive a restart
      return saved;
    }
    if (MayUse(it->second, caller)) return Status::OK();
  }
  NoteDenied(job);
  return NotYourJob(job, caller);
}

Status JobOwners::Forget(const std::string& job) {
  MutexLock lock(mu_);
  if (owners_.erase(job) == 0) return Status::NotFound("no job '" + job + "'");
  return AppendLocked("- " + job);
}

size_t JobOwners::size() const {
  MutexLock lock(mu_);
  return owners_.size();
}

Result<std::optional<JobOwner>> JobOwners::Owner(const std::string& job) {
  MutexLock lock(mu_);
  auto it = owners_.find(job);
  if (it == owners_.end()) return std::optional<JobOwner>();
  return std::optional<JobOwner>(it->second);
}

Result<std::map<std::string, JobOwner>> JobOwners::All() {
  MutexLock lock(mu_);
  return owners_;
}

}  // namespace reft::local
