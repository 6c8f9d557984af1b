#pragma once
/// \file intervals.h
/// \brief Sorted disjoint half-open byte intervals (internal to reft_protect).

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace reft::protect::detail {

using Interval = std::pair<uint64_t, uint64_t>;

/// \brief A set of bytes as sorted, disjoint, non-adjacent intervals. Value type.
class IntervalSet {
 public:
  void Add(uint64_t b, uint64_t e) {
    if (b >= e) return;
    std::vector<Interval> out;
    bool placed = false;
    for (const auto& iv : v_) {
      if (iv.second < b) {
        out.push_back(iv);
      } else if (iv.first > e) {
        if (!placed) out.emplace_back(b, e), placed = true;
        out.push_back(iv);
      } else {
        b = std::min(b, iv.first);
        e = std::max(e, iv.second);
      }
    }
    if (!placed) out.emplace_back(b, e);
    v_ = std::move(out);
  }
  /// \brief The bytes of [b, e) not in the set.
  std::vector<Interval> Missing(uint64_t b, uint64_t e) const {
    std::vector<Interval> out;
    uint64_t cur = b;
    for (const auto& iv : v_) {
      if (iv.second <= cur) continue;
      if (iv.first >= e) break;
      if (iv.first > cur) out.emplace_back(cur, iv.first);
      cur = std::max(cur, iv.second);
      if (cur >= e) break;
    }
    if (cur < e) out.emplace_back(cur, e);
    return out;
  }
  bool Covers(uint64_t b, uint64_t e) const { return Missing(b, e).empty(); }
  const std::vector<Interval>& intervals() const { return v_; }

 private:
  std::vector<Interval> v_;
};

}  // namespace reft::protect::detail
