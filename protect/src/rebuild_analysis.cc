/// \file rebuild_analysis.cc
/// \brief Peeling/erasure analysis over byte intervals of padded shards.

#include "reft/protect/rebuild_analysis.h"

#include <algorithm>
#include <map>

#include "intervals.h"

namespace reft::protect {

using detail::Interval;
using detail::IntervalSet;

int AecIndex(int m, int j, int k) { return ((k - j - 1) % m + m) % m; }
int RsDataShard(int m, int r, int stripe, int p) { return (stripe + r + p) % m; }
int RsParityHolder(int m, int stripe, int q) { return (stripe + q) % m; }

std::string RecoveryAnalysis::Describe() const {
  if (recoverable()) return "nothing lost";
  std::string out;
  for (const auto& l : lost) {
    if (!out.empty()) out += "; ";
    out += "shard dp" + std::to_string(l.shard) + " bytes [" + std::to_string(l.begin) + "," +
           std::to_string(l.end) + ")" + (l.buffers.empty() ? "" : " (" + l.buffers + ")");
  }
  for (const auto& u : lost_unique) {
    if (!out.empty()) out += "; ";
    out += "unique " + u;
  }
  return out;
}

namespace {

/// Segments of [0, len) with the set of `unknown` lists (each already in the common offset
/// space) that cover them; calls fn(begin, end, members) for segments covered by >= 1 list.
template <typename Fn>
void Sweep(const std::vector<std::vector<Interval>>& unknown, uint64_t len, Fn fn) {
  std::vector<uint64_t> cuts{0, len};
  for (const auto& u : unknown) {
    for (const auto& iv : u) cuts.push_back(iv.first), cuts.push_back(iv.second);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<size_t> cursor(unknown.size(), 0);
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const uint64_t a = cuts[c];
    const uint64_t b = cuts[c + 1];
    if (a >= len) break;
    std::vector<int> members;
    for (size_t i = 0; i < unknown.size(); ++i) {
      const auto& u = unknown[i];
      while (cursor[i] < u.size() && u[cursor[i]].second <= a) ++cursor[i];
      if (cursor[i] < u.size() && u[cursor[i]].first <= a) members.push_back(static_cast<int>(i));
    }
    if (!members.empty()) fn(a, b, members);
  }
}

/// Unknown bytes of `known` within [base, base+len), shifted to [0, len).
std::vector<Interval> UnknownIn(const IntervalSet& known, uint64_t base, uint64_t len) {
  auto miss = known.Missing(base, base + len);
  for (auto& iv : miss) iv.first -= base, iv.second -= base;
  return miss;
}

class Analyzer {
 public:
  Analyzer(const SgGeometry& g, const Scheme& s, const std::vector<bool>& alive)
      : g_(g), s_(s), alive_(alive), m_(g.m), known_(static_cast<size_t>(g.m)) {
    const uint64_t padded = g.PaddedShard();
    for (int j = 0; j < m_; ++j) {
      // Alive shards are known; padding beyond a shard's real size is known to be zero.
      if (alive_[j]) {
        known_[j].Add(0, padded);
      } else {
        known_[j].Add(g.ShardSize(j), padded);
      }
    }
  }

  RecoveryAnalysis Run() {
    bool progress = true;
    while (progress) {
      progress = false;
      if (s_.arc > 0) progress |= PeelArc();
      if (s_.aec) progress |= PeelAec();
      if (s_.rs > 0) progress |= DecodeRs();
    }
    for (int j = 0; j < m_; ++j) {
      const uint64_t begin = g_.shard_begin[j];
      for (const auto& iv : known_[j].Missing(0, g_.ShardSize(j))) {
        out_.lost.push_back(
            {j, iv.first, iv.second, g_.DescribeRange(begin + iv.first, begin + iv.second)});
      }
    }
    // Unique buffers: member d-1 keeps a copy (peer copy or AOR replica) of member d's.
    for (int d = 0; d < m_; ++d) {
      if (alive_[d]) continue;
      const int holder = (d - 1 + m_) % m_;
      if (m_ >= 2 && alive_[holder]) continue;
      for (const auto& u : g_.unique)
        out_.lost_unique.push_back("dp" + std::to_string(d) + "/" + u);
    }
    return std::move(out_);
  }

 private:
  bool PeelArc() {
    bool progress = false;
    for (int k = 0; k < m_; ++k) {
      if (!alive_[k]) continue;
      for (int o = 1; o <= s_.arc; ++o) {
        const int j = (k + o) % m_;
        for (const auto& iv : known_[j].Missing(0, g_.ShardSize(j))) {
          RecoveryOp op;
          op.kind = RecoveryOp::Kind::kCopy;
          op.target = j;
          op.begin = iv.first;
          op.end = iv.second;
          op.holder = k;
          op.region = ArcRegionName(o);
          op.region_offset = iv.first;
          out_.ops.push_back(std::move(op));
          known_[j].Add(iv.first, iv.second);
          progress = true;
        }
      }
    }
    return progress;
  }

  bool PeelAec() {
    bool progress = false;
    const uint64_t sub = g_.aec_sub;
    for (int k = 0; k < m_; ++k) {
      if (!alive_[k]) continue;
      std::vector<int> covered;
      std::vector<std::vector<Interval>> unknown;
      for (int j = 0; j < m_; ++j) {
        if (j == k) continue;
        covered.push_back(j);
        unknown.push_back(UnknownIn(known_[j], AecIndex(m_, j, k) * sub, sub));
      }
      std::vector<std::pair<Interval, int>> solvable;
      Sweep(unknown, sub, [&](uint64_t a, uint64_t b, const std::vector<int>& who) {
        if (who.size() == 1) solvable.push_back({{a, b}, covered[who[0]]});
      });
      for (const auto& [iv, j] : solvable) {
        RecoveryOp op;
        op.kind = RecoveryOp::Kind::kXor;
        op.target = j;
        op.begin = AecIndex(m_, j, k) * sub + iv.first;
        op.end = op.begin + (iv.second - iv.first);
        op.holder = k;
        op.region = kRegionAec;
        op.region_offset = iv.first;
        for (int i : covered) {
          if (i != j) op.sources.emplace_back(i, AecIndex(m_, i, k) * sub + iv.first);
        }
        known_[j].Add(op.begin, op.end);
        out_.ops.push_back(std::move(op));
        progress = true;
      }
    }
    return progress;
  }

  bool DecodeRs() {
    bool progress = false;
    const int r = s_.rs;
    const int k = m_ - r;
    const uint64_t sub = g_.rs_sub;
    for (int t = 0; t < m_; ++t) {
      std::vector<int> dead_parity;
      for (int q = 0; q < r; ++q) {
        if (!alive_[RsParityHolder(m_, t, q)]) dead_parity.push_back(k + q);
      }
      const int alive_parity = r - static_cast<int>(dead_parity.size());
      if (alive_parity == 0) continue;
      std::vector<std::vector<Interval>> unknown;
      for (int p = 0; p < k; ++p) {
        const int j = RsDataShard(m_, r, t, p);
        unknown.push_back(UnknownIn(known_[j], AecIndex(m_, j, t) * sub, sub));
      }
      std::vector<std::pair<Interval, std::vector<int>>> solvable;
      Sweep(unknown, sub, [&](uint64_t a, uint64_t b, const std::vector<int>& who) {
        if (static_cast<int>(who.size()) <= alive_parity) solvable.push_back({{a, b}, who});
      });
      for (const auto& [iv, who] : solvable) {
        RecoveryOp op;
        op.kind = RecoveryOp::Kind::kRs;
        op.stripe = t;
        op.begin = iv.first;
        op.end = iv.second;
        op.erased = who;
        op.erased.insert(op.erased.end(), dead_parity.begin(), dead_parity.end());
        for (int p : who) {
          const int j = RsDataShard(m_, r, t, p);
          const uint64_t base = AecIndex(m_, j, t) * sub;
          known_[j].Add(base + iv.first, base + iv.second);
        }
        out_.ops.push_back(std::move(op));
        progress = true;
      }
    }
    return progress;
  }

  const SgGeometry& g_;
  const Scheme& s_;
  const std::vector<bool>& alive_;
  const int m_;
  std::vector<IntervalSet> known_;
  RecoveryAnalysis out_;
};

}  // namespace

Result<RecoveryAnalysis> AnalyzeRecovery(const SgGeometry& geometry, const Scheme& scheme,
                                         const std::vector<bool>& alive) {
  if (alive.size() != static_cast<size_t>(geometry.m)) {
    return Status::InvalidArgument("AnalyzeRecovery: alive has " + std::to_string(alive.size()) +
                                   " entries, SG has " + std::to_string(geometry.m) + " members");
  }
  if (scheme.rs > 0 && scheme.rs != geometry.rs_r) {
    return Status::InvalidArgument("AnalyzeRecovery: geometry built for rs" +
                                   std::to_string(geometry.rs_r) + ", scheme is " +
                                   scheme.ToString());
  }
  if ((scheme.arc > 0 && scheme.arc >= geometry.m) || (scheme.aec && geometry.m < 2)) {
    return Status::InvalidArgument("AnalyzeRecovery: scheme " + scheme.ToString() +
                                   " impossible with dp=" + std::to_string(geometry.m));
  }
  return Analyzer(geometry, scheme, alive).Run();
}

std::vector<RegionRef> RequiredRegions(const SgGeometry& g, const Scheme& scheme,
                                       const std::vector<bool>& alive,
                                       const RecoveryAnalysis& analysis) {
  std::vector<RegionRef> out;
  auto shard = [&](int j) {
    if (alive[j]) out.push_back({j, kRegionShard});
  };
  for (const auto& op : analysis.ops) {
    switch (op.kind) {
      case RecoveryOp::Kind::kCopy:
        out.push_back({op.holder, op.region});
        break;
      case RecoveryOp::Kind::kXor:
        out.push_back({op.holder, op.region});
        for (const auto& src : op.sources) shard(src.first);
        break;
      case RecoveryOp::Kind::kRs:
        for (int p = 0; p < g.m - scheme.rs; ++p) shard(RsDataShard(g.m, scheme.rs, op.stripe, p));
        for (int q = 0; q < scheme.rs; ++q) {
          const int holder = RsParityHolder(g.m, op.stripe, q);
          if (alive[holder]) out.push_back({holder, kRegionRs});
        }
        break;
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace reft::protect
