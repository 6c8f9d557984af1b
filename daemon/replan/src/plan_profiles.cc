#include "reft/replan/plan_profiles.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace reft::replan {

std::string PlanProfiles::Path(const std::string& job) const {
  // Job names come from clients: anything outside [A-Za-z0-9_-] is escaped, so a name never
  // leaves the directory.
  std::string name = "job-";
  static const char kHex[] = "0123456789abcdef";
  for (unsigned char c : job) {
    if (std::isalnum(c) || c == '_' || c == '-') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  return dir_ + "/" + name + ".json";
}

Status PlanProfiles::Attach(const std::string& job, const nlohmann::json& profile) {
  MutexLock lock(mu_);
  if (!dir_.empty()) {
    if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
      return Status::FromErrno(errno, "cannot create the profile directory " + dir_);
    const std::string path = Path(job), tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << profile.dump() << '\n';
      out.flush();
      if (!out) return Status::FromErrno(errno, "cannot write the profile " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      return Status::FromErrno(errno, "cannot replace the profile " + path);
  }
  cache_[job] = profile;
  return Status::OK();
}

nlohmann::json PlanProfiles::Get(const std::string& job) const {
  MutexLock lock(mu_);
  auto it = cache_.find(job);
  if (it != cache_.end()) return it->second;
  if (dir_.empty()) return nullptr;
  std::ifstream in(Path(job));
  if (!in) return nullptr;
  std::stringstream text;
  text << in.rdbuf();
  auto doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return nullptr;  // only reftd writes it, whole; never half
  cache_[job] = doc;
  return doc;
}

}  // namespace reft::replan
