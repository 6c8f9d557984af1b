#include "naming.h"

#include <set>

#include "reft/store/segment_layout.h"

namespace reft::store {

std::string RankKey::ToString() const { return job + "/" + coord().ToString(); }

bool RankKey::operator==(const RankKey& o) const { return job == o.job && coord() == o.coord(); }

bool RankKey::operator<(const RankKey& o) const {
  if (job != o.job) return job < o.job;
  return coord() < o.coord();
}

const char* SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kFree: return "free";
    case SlotState::kWriting: return "writing";
    case SlotState::kComplete: return "complete";
    case SlotState::kCommitted: return "committed";
  }
  return "unknown";
}

namespace internal {

Status ValidateJobName(const std::string& job) {
  if (job.empty()) return Status::InvalidArgument("job id is empty");
  if (job.size() > REFT_SEGMENT_JOB_MAX) {
    return Status::InvalidArgument("job id '" + job.substr(0, 16) + "...' is " +
                                   std::to_string(job.size()) + " bytes; at most " +
                                   std::to_string(REFT_SEGMENT_JOB_MAX) + " allowed");
  }
  for (unsigned char c : job) {
    if (c < 0x20 || c == 0x7f) {
      return Status::InvalidArgument("job id contains control character 0x" +
                                     std::to_string(static_cast<int>(c)) + " (not allowed)");
    }
    if (c == '/') return Status::InvalidArgument("job id '" + job + "' contains '/'");
  }
  if (job.find("..") != std::string::npos) {
    return Status::InvalidArgument("job id '" + job + "' contains '..'");
  }
  return Status::OK();
}

Status ValidateRankKey(const RankKey& rank) {
  REFT_RETURN_NOT_OK(ValidateJobName(rank.job));
  if (rank.pp < 0 || rank.tp < 0 || rank.dp < 0) {
    return Status::InvalidArgument("rank coordinates of " + rank.ToString() +
                                   " must be non-negative");
  }
  return Status::OK();
}

Status ValidateLayout(const std::vector<RegionSpec>& layout) {
  if (layout.empty()) return Status::InvalidArgument("slot layout has no region");
  std::set<std::string> seen;
  for (const auto& r : layout) {
    if (r.name.empty()) return Status::InvalidArgument("region name is empty");
    if (r.name.size() > REFT_SEGMENT_REGION_NAME_MAX) {
      return Status::InvalidArgument("region name '" + r.name.substr(0, 32) + "...' is " +
                                     std::to_string(r.name.size()) + " bytes; at most " +
                                     std::to_string(REFT_SEGMENT_REGION_NAME_MAX) + " allowed");
    }
    if (r.name.find('\0') != std::string::npos) {
      return Status::InvalidArgument("region name contains a NUL byte");
    }
    if (!seen.insert(r.name).second) {
      return Status::InvalidArgument("region name '" + r.name + "' appears twice in the layout");
    }
    if (r.size > (1ull << 46)) {
      return Status::InvalidArgument("region '" + r.name + "' size " + std::to_string(r.size) +
                                     " exceeds 64 TiB");
    }
  }
  return Status::OK();
}

std::string SegmentFileName(const RankKey& rank, uint32_t slot) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : rank.job) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-';
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  out += ".pp" + std::to_string(rank.pp) + "-tp" + std::to_string(rank.tp) + "-dp" +
         std::to_string(rank.dp) + ".s" + std::to_string(slot) + ".seg";
  return out;
}

bool LooksLikeSegmentName(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".seg") == 0;
}

}  // namespace internal
}  // namespace reft::store
