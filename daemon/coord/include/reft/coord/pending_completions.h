#pragma once
/// \file pending_completions.h
/// \brief The completions of a job's steps that are not committed yet, as the node that decides
/// the job's commits sees them (docs/coordination.md "Commit" and "Timeline stamps").
///
/// Whoever decides a commit — the job's coordinator on etcd, every node by gossip, the
/// single-node ledger — keeps the same book: per step, per source (the node that reported the
/// ranks; one merged set where sources are not told apart), the ranks that completed the step
/// and the timeline they completed it in. A step commits once the records made in the job's
/// current timeline cover every rank of its layout.
///
/// The rules, one copy of them:
/// - a source's record only grows within one timeline: the same record may arrive twice (a
///   report, then its etcd key) and out of order, and adds ranks, never removes them. A record
///   of a newer timeline replaces an older one; one of an older timeline is a late copy and
///   changes nothing.
/// - only records made in the current timeline count, and only their ranks the layout has. A
///   timeline change (a new restore epoch, a reshape) keeps the records — one of the new
///   timeline may have arrived first — and counts again; what a new generation abandons its
///   owner clears.
/// - what is covered is updated as each record arrives, so deciding a commit costs O(1) per
///   report instead of a pass over every rank of the job; a step is counted again only when a
///   record of it was replaced or the timeline changed.
/// Thread-compatible: its owner guards it with its own lock.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "reft/coord/timeline.h"
#include "reft/job_layout.h"
#include "reft/store/snapshot_store.h"

namespace reft::coord {

class PendingCompletions {
 public:
  /// The source of an owner that does not tell sources apart (gossip merges every node's ranks
  /// of a step into one set; the single-node ledger has one node).
  static constexpr const char* kMergedSource = "";

  /// What one source recorded for one step.
  struct Record {
    TimelineStamp made_in;
    std::set<store::RankKey> ranks;
  };

  /// Records that `source` vouches for `ranks` completing `step` in timeline `made_in`. True when
  /// something was recorded (a rank or a newer timeline); false for a late copy.
  bool Add(int64_t step, const std::string& source, const TimelineStamp& made_in,
           const std::vector<store::RankKey>& ranks);

  /// Whether a record of `step` may be kept with at most `max_steps` steps held (a step already
  /// held always may): the cap on what a coordinator keeps in memory for one job.
  bool HasRoomFor(int64_t step, size_t max_steps) const {
    return steps_.count(step) > 0 || steps_.size() < max_steps;
  }
  /// Steps with at least one record.
  size_t steps() const { return steps_.size(); }

  /// How many ranks of `layout` the records of `step` made in timeline `now` cover (0 without a
  /// layout: before the job's layout is known nothing counts).
  int64_t Covered(int64_t step, const TimelineStamp& now, const JobLayout* layout);
  /// The newest step whose records made in `now` cover every rank of `layout`.
  std::optional<int64_t> NewestCovered(const TimelineStamp& now, const JobLayout* layout);
  /// The records of `step` made in `now`, by source (etcd records the slot locations they name).
  std::vector<std::pair<std::string, const Record*>> Counting(int64_t step,
                                                              const TimelineStamp& now) const;
  /// Every rank recorded for `step`, whatever the timeline.
  std::set<store::RankKey> RanksOf(int64_t step) const;
  /// Every rank recorded for each step, whatever the timeline (the sets gossip exchanges).
  std::map<int64_t, std::set<store::RankKey>> RanksByStep() const;

  /// Forgets the steps up to `step` (committed: a later record of them is a late copy).
  void DropThrough(int64_t step);
  /// Forgets everything (a new generation, a coordinator that stopped coordinating).
  void Clear();

 private:
  struct Step {
    std::map<std::string, Record> by_source;
    std::set<store::RankKey> covered;  ///< ranks of the layout counted under `counted_in_`
    bool recount = false;              ///< a record was replaced: `covered` is rebuilt before use
  };
  /// The timeline and layout `covered` was counted for.
  struct CountedIn {
    TimelineStamp stamp;
    std::optional<JobLayout> layout;
    bool operator==(const CountedIn& o) const { return stamp == o.stamp && layout == o.layout; }
  };

  /// Marks every step to be counted again when `now`/`layout` is not what was counted for.
  void CountFor(const TimelineStamp& now, const JobLayout* layout);
  void Recount(Step& s) const;
  /// Adds the ranks of `r` to `s.covered` when it counts under `counted_in_`.
  void CountRecord(const Record& r, Step& s) const;

  std::map<int64_t, Step> steps_;
  CountedIn counted_in_;
};

}  // namespace reft::coord
