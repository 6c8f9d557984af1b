#include "reft/job_layout.h"

#include <tuple>

namespace reft {

bool RankCoord::operator<(const RankCoord& o) const {
  return std::tie(pp, tp, dp) < std::tie(o.pp, o.tp, o.dp);
}

std::string RankCoord::ToString() const {
  return "pp" + std::to_string(pp) + "-tp" + std::to_string(tp) + "-dp" + std::to_string(dp);
}

std::string JobLayout::ToString() const {
  return "dp=" + std::to_string(dp) + ",tp=" + std::to_string(tp) + ",pp=" + std::to_string(pp) +
         ",zero=" + std::to_string(zero);
}

Status JobLayout::Validate() const {
  if (dp < 1 || tp < 1 || pp < 1 || dp > kMaxDim || tp > kMaxDim || pp > kMaxDim) {
    return Status::InvalidArgument("layout " + ToString() + ": dp, tp and pp must be between 1 and " +
                                   std::to_string(kMaxDim));
  }
  if (zero < 0 || zero > 3) {
    return Status::InvalidArgument("layout " + ToString() + ": zero must be 0, 1, 2 or 3");
  }
  return Status::OK();
}

Status JobLayout::CheckRank(const RankCoord& c) const {
  REFT_RETURN_NOT_OK(Validate());
  if (!Contains(c)) {
    return Status::InvalidArgument("rank " + c.ToString() + " lies outside layout " + ToString());
  }
  return Status::OK();
}

}  // namespace reft
