#include "paths.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <vector>

namespace reft::persist::internal {
namespace {

bool Plain(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;  // only upper case is produced
}

/// Non-negative decimal without sign or leading zeros (except "0"), fitting int64.
std::optional<int64_t> ParseCanonicalInt(const std::string& s, bool allow_leading_zeros) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  if (!allow_leading_zeros && s.size() > 1 && s[0] == '0') return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep) {
      out.emplace_back();
    } else {
      out.back().push_back(c);
    }
  }
  return out;
}

}  // namespace

Status ValidateNodeId(const std::string& node_id) {
  if (node_id.empty()) return Status::InvalidArgument("node id is empty");
  if (node_id.size() > 128) {
    return Status::InvalidArgument("node id '" + node_id.substr(0, 16) + "...' is longer than 128 bytes");
  }
  if (node_id[0] == '.') return Status::InvalidArgument("node id '" + node_id + "' starts with '.'");
  for (unsigned char c : node_id) {
    if (!Plain(c) && c != '.') {
      return Status::InvalidArgument("node id '" + node_id +
                                     "' may only contain [A-Za-z0-9._-]");
    }
  }
  return Status::OK();
}

std::string JobDirName(const std::string& job) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : job) {
    if (Plain(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::optional<std::string> ParseJobDirName(const std::string& name) {
  std::string job;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (Plain(c)) {
      job.push_back(static_cast<char>(c));
      continue;
    }
    if (c != '%' || i + 2 >= name.size()) return std::nullopt;
    int hi = HexValue(name[i + 1]), lo = HexValue(name[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    const unsigned char d = static_cast<unsigned char>(hi * 16 + lo);
    if (Plain(d)) return std::nullopt;  // would have been written plain: not canonical
    job.push_back(static_cast<char>(d));
    i += 2;
  }
  if (job.empty()) return std::nullopt;
  return job;
}

std::string StepDirName(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step-%012" PRId64, step);
  return buf;
}

std::optional<int64_t> ParseStepDirName(const std::string& name) {
  if (name.size() < 5 + 12 || name.compare(0, 5, "step-") != 0) return std::nullopt;
  auto v = ParseCanonicalInt(name.substr(5), /*allow_leading_zeros=*/true);
  if (!v || StepDirName(*v) != name) return std::nullopt;
  return v;
}

std::string RankFileName(const store::RankKey& rank) {
  return "pp" + std::to_string(rank.pp) + "-tp" + std::to_string(rank.tp) + "-dp" +
         std::to_string(rank.dp) + ".reft";
}

std::optional<store::RankKey> ParseRankFileName(const std::string& name) {
  const std::string suffix = ".reft";
  if (name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  auto parts = Split(name.substr(0, name.size() - suffix.size()), '-');
  if (parts.size() != 3) return std::nullopt;
  const char* prefixes[3] = {"pp", "tp", "dp"};
  int32_t v[3];
  for (int i = 0; i < 3; ++i) {
    if (parts[i].compare(0, 2, prefixes[i]) != 0) return std::nullopt;
    auto n = ParseCanonicalInt(parts[i].substr(2), false);
    if (!n || *n > INT32_MAX) return std::nullopt;
    v[i] = static_cast<int32_t>(*n);
  }
  store::RankKey key;
  key.pp = v[0];
  key.tp = v[1];
  key.dp = v[2];
  return key;
}

std::string ManifestFileName(const std::string& node_id) {
  return "manifest." + node_id + ".json";
}

std::optional<std::string> ParseManifestFileName(const std::string& name) {
  const std::string prefix = "manifest.", suffix = ".json";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  std::string node = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (!ValidateNodeId(node).ok()) return std::nullopt;
  return node;
}

std::string ScratchName(const char* kind, const std::string& node_id, uint64_t seq,
                        const std::string& final_name) {
  return std::string(".") + kind + "~" + node_id + "~" + std::to_string(::getpid()) + "~" +
         std::to_string(seq) + "~" + final_name;
}

std::optional<ScratchParts> ParseScratchName(const std::string& name) {
  if (name.empty() || name[0] != '.') return std::nullopt;
  auto parts = Split(name.substr(1), '~');
  if (parts.size() != 5) return std::nullopt;
  if (parts[0] != "tmp" && parts[0] != "trash") return std::nullopt;
  if (!ValidateNodeId(parts[1]).ok()) return std::nullopt;
  auto pid = ParseCanonicalInt(parts[2], false);
  auto seq = ParseCanonicalInt(parts[3], false);
  if (!pid || *pid <= 0 || *pid > INT32_MAX || !seq || parts[4].empty()) return std::nullopt;
  ScratchParts p;
  p.kind = parts[0];
  p.node_id = parts[1];
  p.pid = static_cast<pid_t>(*pid);
  p.final_name = parts[4];
  return p;
}

}  // namespace reft::persist::internal
