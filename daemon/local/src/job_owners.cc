#include "reft/local/job_owners.h"

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace reft::local {
namespace {

// Job ids travel in hellos (at most 255 bytes); the store validates them further. The record
// keeps the job last on its line, so only line breaks and NULs would make it ambiguous.
Status CheckJob(const std::string& job) {
  if (job.empty()) return Status::InvalidArgument("job must not be empty");
  for (unsigned char c : job) {
    if (c < 0x20 || c == 0x7f) {
      return Status::InvalidArgument("job id contains a control character");
    }
  }
  return Status::OK();
}

Result<uint32_t> ResolveGroup(const std::string& name) {
  if (name.find_first_not_of("0123456789") == std::string::npos && name.size() <= 9) {
    return static_cast<uint32_t>(std::stoul(name));
  }
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  int rc = getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr) {
    return Status::InvalidArgument("owner group '" + name + "' is not a group on this node");
  }
  return static_cast<uint32_t>(found->gr_gid);
}

}  // namespace

std::string JobOwner::Describe() const {
  std::string s = "uid " + std::to_string(uid);
  if (gid) {
    s += " (group ";
    if (!group.empty()) s += "'" + group + "', ";
    s += "gid " + std::to_string(*gid) + ")";
  }
  return s;
}

bool MayUse(const JobOwner& owner, const PeerCredentials& caller) {
  return caller.uid == owner.uid || (owner.gid && caller.InGroup(*owner.gid));
}

Result<std::unique_ptr<JobOwners>> JobOwners::Open(std::string path) {
  std::unique_ptr<JobOwners> owners(new JobOwners(std::move(path)));
  REFT_RETURN_NOT_OK(owners->Load());
  return owners;
}

// One line per job: "<uid> <gid|-> <group|-> <job>" (the job last: it may hold spaces).
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
    std::istringstream fields(line);
    std::string uid, gid, group;
    fields >> uid >> gid >> group;
    std::string job;
    if (fields.get() == ' ') std::getline(fields, job);
    auto bad = [&](const std::string& why) {
      return Status::Corrupted("job owners " + path_ + " line " + std::to_string(n) + ": " + why +
                               " (fix or remove the line; reftd will not start without it)");
    };
    if (job.empty() || !CheckJob(job).ok()) return bad("no valid job id");
    if (uid.empty() || uid.find_first_not_of("0123456789") != std::string::npos) {
      return bad("uid '" + uid + "' is not a number");
    }
    JobOwner o;
    o.uid = static_cast<uint32_t>(std::stoul(uid));
    if (gid != "-") {
      if (gid.empty() || gid.find_first_not_of("0123456789") != std::string::npos) {
        return bad("gid '" + gid + "' is not a number or '-'");
      }
      o.gid = static_cast<uint32_t>(std::stoul(gid));
    }
    if (group != "-") o.group = group;
    owners_[job] = o;
  }
  return Status::OK();
}

Status JobOwners::SaveLocked() const {
  if (path_.empty()) return Status::OK();
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& [job, o] : owners_) {
      out << o.uid << ' ' << (o.gid ? std::to_string(*o.gid) : "-") << ' '
          << (o.group.empty() ? "-" : o.group) << ' ' << job << '\n';
    }
    out.flush();
    if (!out) return Status::FromErrno(errno, "cannot write the job owners " + tmp);
  }
  // Only reftd reads it: who owns what is nobody else's business.
  if (::chmod(tmp.c_str(), 0600) != 0) return Status::FromErrno(errno, "chmod " + tmp);
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    return Status::FromErrno(errno, "cannot replace the job owners " + path_);
  }
  return Status::OK();
}

Status JobOwners::Refuse(const std::string& job, const JobOwner& owner,
                         const PeerCredentials& caller) const {
  NoteDenied(job);
  return Status::PermissionDenied("job '" + job + "' belongs to " + owner.Describe() + "; uid " +
                                  std::to_string(caller.uid) + " may not use it");
}

void JobOwners::NoteDenied(const std::string& job) const {
  denied_++;
  if (on_denied_) on_denied_(job);
}

Status JobOwners::Admit(const std::string& job, const PeerCredentials& caller,
                        const std::string& owner_group) {
  REFT_RETURN_NOT_OK(CheckJob(job));
  JobOwner owner;
  {
    MutexLock lock(mu_);
    auto it = owners_.find(job);
    if (it == owners_.end()) {
      JobOwner claim;
      claim.uid = caller.uid;
      if (!owner_group.empty()) {
        if (owner_group.find_first_of(" \t") != std::string::npos) {
          return Status::InvalidArgument("owner group '" + owner_group + "' holds a space");
        }
        REFT_ASSIGN_OR_RETURN(uint32_t gid, ResolveGroup(owner_group));
        claim.gid = gid;
        claim.group = owner_group;
      }
      owners_[job] = claim;
      Status saved = SaveLocked();
      if (!saved.ok()) owners_.erase(job);  // an owner that would not survive a restart
      return saved;
    }
    if (MayUse(it->second, caller)) return Status::OK();
    owner = it->second;
  }
  return Refuse(job, owner, caller);
}

std::optional<JobOwner> JobOwners::Owner(const std::string& job) const {
  MutexLock lock(mu_);
  auto it = owners_.find(job);
  if (it == owners_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, JobOwner> JobOwners::All() const {
  MutexLock lock(mu_);
  return owners_;
}

}  // namespace reft::local
