#include "reft/coord/pending_completions.h"

namespace reft::coord {

bool PendingCompletions::Add(int64_t step, const std::string& source, const TimelineStamp& made_in,
                             const std::vector<store::RankKey>& ranks) {
  Step& s = steps_[step];
  auto [it, fresh] = s.by_source.try_emplace(source);
  Record& held = it->second;
  bool grew = false;
  if (fresh || made_in == held.made_in) {
    held.made_in = made_in;
    for (const auto& r : ranks) grew = held.ranks.insert(r).second || grew;
  } else if (held.made_in < made_in) {
    held = Record{made_in, {ranks.begin(), ranks.end()}};
    s.recount = true;  // the ranks it covered belonged to the older timeline
    grew = true;
  } else {
    return false;  // a late copy of an older timeline
  }
  if (!s.recount) CountRecord(held, s);
  return grew;
}

int64_t PendingCompletions::Covered(int64_t step, const TimelineStamp& now,
                                    const JobLayout* layout) {
  CountFor(now, layout);
  auto it = steps_.find(step);
  if (it == steps_.end()) return 0;
  if (it->second.recount) Recount(it->second);
  return static_cast<int64_t>(it->second.covered.size());
}

std::optional<int64_t> PendingCompletions::NewestCovered(const TimelineStamp& now,
                                                         const JobLayout* layout) {
  if (layout == nullptr) return std::nullopt;
  CountFor(now, layout);
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    if (it->second.recount) Recount(it->second);
    if (static_cast<int64_t>(it->second.covered.size()) >= layout->world()) return it->first;
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, const PendingCompletions::Record*>> PendingCompletions::Counting(
    int64_t step, const TimelineStamp& now) const {
  std::vector<std::pair<std::string, const Record*>> out;
  auto it = steps_.find(step);
  if (it == steps_.end()) return out;
  for (const auto& [source, record] : it->second.by_source) {
    if (record.made_in == now) out.emplace_back(source, &record);
  }
  return out;
}

std::set<store::RankKey> PendingCompletions::RanksOf(int64_t step) const {
  std::set<store::RankKey> out;
  auto it = steps_.find(step);
  if (it == steps_.end()) return out;
  for (const auto& entry : it->second.by_source) {
    out.insert(entry.second.ranks.begin(), entry.second.ranks.end());
  }
  return out;
}

std::map<int64_t, std::set<store::RankKey>> PendingCompletions::RanksByStep() const {
  std::map<int64_t, std::set<store::RankKey>> out;
  for (const auto& entry : steps_) out[entry.first] = RanksOf(entry.first);
  return out;
}

void PendingCompletions::DropThrough(int64_t step) {
  steps_.erase(steps_.begin(), steps_.upper_bound(step));
}

void PendingCompletions::Clear() { steps_.clear(); }

void PendingCompletions::CountFor(const TimelineStamp& now, const JobLayout* layout) {
  CountedIn wanted{now, layout ? std::optional<JobLayout>(*layout) : std::nullopt};
  if (wanted == counted_in_) return;
  // A new restore epoch or layout record: records of the old one stay (they are the sources'
  // latest word) but no longer count, and ones of the new timeline count now.
  counted_in_ = std::move(wanted);
  for (auto& entry : steps_) entry.second.recount = true;
}

void PendingCompletions::Recount(Step& s) const {
  s.covered.clear();
  s.recount = false;
  for (const auto& entry : s.by_source) CountRecord(entry.second, s);
}

void PendingCompletions::CountRecord(const Record& r, Step& s) const {
  if (!counted_in_.layout || r.made_in != counted_in_.stamp) return;
  for (const auto& rank : r.ranks) {
    if (counted_in_.layout->CheckRank(rank).ok()) s.covered.insert(rank);
  }
}

}  // namespace reft::coord
