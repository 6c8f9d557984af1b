// PendingCompletions, the job book's completions not committed yet: what counts toward a commit
// (records of the current timeline, ranks of the layout), how a source's record grows or is
// replaced, what a timeline change keeps, the cap, and what a commit or a new generation drops.
#include <catch2/catch.hpp>

#include "reft/coord/pending_completions.h"

using reft::JobLayout;
using reft::coord::PendingCompletions;
using reft::coord::TimelineStamp;
using reft::store::RankKey;

namespace {

RankKey Dp(int32_t dp) { return RankKey{"j", 0, 0, dp}; }

// Generation 1, restore epoch 10, layout revision 20: the job's timeline in most cases below.
const TimelineStamp kNow{1, 10, 20, 0};

}  // namespace

TEST_CASE("a step is covered once records of the current timeline name every rank") {
  PendingCompletions book;
  const JobLayout dp4{4, 1, 1, 0};
  CHECK(book.Add(5, "a", kNow, {Dp(0), Dp(1)}));
  CHECK(book.Add(5, "b", kNow, {Dp(2)}));
  CHECK(book.Covered(5, kNow, &dp4) == 3);
  CHECK_FALSE(book.NewestCovered(kNow, &dp4).has_value());
  // A rank the layout does not have fills nothing.
  CHECK(book.Add(5, "b", kNow, {Dp(7)}));
  CHECK(book.Covered(5, kNow, &dp4) == 3);
  CHECK_FALSE(book.NewestCovered(kNow, &dp4).has_value());
  CHECK(book.Add(5, "c", kNow, {Dp(3)}));
  CHECK(book.NewestCovered(kNow, &dp4) == std::optional<int64_t>(5));
  // Before the job's layout is known nothing counts.
  CHECK(book.Covered(5, kNow, nullptr) == 0);
  CHECK_FALSE(book.NewestCovered(kNow, nullptr).has_value());
}

TEST_CASE("the newest covered step is the commit, not an older one") {
  PendingCompletions book;
  const JobLayout dp2{2, 1, 1, 0};
  book.Add(3, "a", kNow, {Dp(0), Dp(1)});
  book.Add(4, "a", kNow, {Dp(0)});
  book.Add(5, "a", kNow, {Dp(0), Dp(1)});
  CHECK(book.NewestCovered(kNow, &dp2) == std::optional<int64_t>(5));
  book.DropThrough(5);
  CHECK(book.steps() == 0);
  CHECK_FALSE(book.NewestCovered(kNow, &dp2).has_value());
}

TEST_CASE("a source's record only grows within its timeline, an older one is a late copy") {
  PendingCompletions book;
  const JobLayout dp3{3, 1, 1, 0};
  REQUIRE(book.Add(7, "a", kNow, {Dp(0)}));
  // The same record again (a report, then its etcd key): nothing new.
  CHECK_FALSE(book.Add(7, "a", kNow, {Dp(0)}));
  // Out of order: a smaller record after a larger one removes nothing.
  CHECK(book.Add(7, "a", kNow, {Dp(0), Dp(1)}));
  CHECK_FALSE(book.Add(7, "a", kNow, {Dp(1)}));
  CHECK(book.Covered(7, kNow, &dp3) == 2);
  // A record of an older restore epoch from the same source changes nothing.
  const TimelineStamp older{1, 9, 20, 0};
  CHECK_FALSE(book.Add(7, "a", older, {Dp(2)}));
  CHECK(book.RanksOf(7) == std::set<RankKey>{Dp(0), Dp(1)});
  CHECK(book.Covered(7, kNow, &dp3) == 2);
}

TEST_CASE("a record of a newer timeline replaces the source's older one") {
  PendingCompletions book;
  const JobLayout dp2{2, 1, 1, 0};
  const TimelineStamp old_epoch{1, 9, 20, 0};
  book.Add(7, "a", old_epoch, {Dp(0), Dp(1)});
  CHECK(book.Add(7, "a", kNow, {Dp(0)}));
  // The ranks of the old record are gone with it, in what counts and in what is recorded.
  CHECK(book.RanksOf(7) == std::set<RankKey>{Dp(0)});
  CHECK(book.Covered(7, kNow, &dp2) == 1);
  CHECK_FALSE(book.NewestCovered(kNow, &dp2).has_value());
}

TEST_CASE("only records of the current timeline count, a timeline change keeps the records") {
  PendingCompletions book;
  const JobLayout dp2{2, 1, 1, 0};
  const TimelineStamp next_epoch{1, 11, 20, 0};
  const TimelineStamp next_layout{1, 10, 21, 0};
  const TimelineStamp next_generation{2, 10, 20, 0};
  // Completions of the current timeline and, from another source, one of the next restore
  // epoch that arrived before this node read the decision.
  book.Add(8, "a", kNow, {Dp(0), Dp(1)});
  book.Add(8, "b", next_epoch, {Dp(1)});
  CHECK(book.NewestCovered(kNow, &dp2) == std::optional<int64_t>(8));
  CHECK(book.Counting(8, kNow).size() == 1);
  // The job moves to the next restore epoch: a's record no longer counts, b's does.
  CHECK(book.Covered(8, next_epoch, &dp2) == 1);
  CHECK_FALSE(book.NewestCovered(next_epoch, &dp2).has_value());
  auto counting = book.Counting(8, next_epoch);
  REQUIRE(counting.size() == 1);
  CHECK(counting[0].first == "b");
  CHECK(counting[0].second->ranks == std::set<RankKey>{Dp(1)});
  // Records of the old epoch stay recorded (a source's latest word), counting for nothing.
  CHECK(book.RanksOf(8) == std::set<RankKey>{Dp(0), Dp(1)});
  CHECK(book.Add(8, "c", next_epoch, {Dp(0)}));
  CHECK(book.NewestCovered(next_epoch, &dp2) == std::optional<int64_t>(8));
  // Another layout revision or generation: neither epoch's records count.
  CHECK(book.Covered(8, next_layout, &dp2) == 0);
  CHECK(book.Covered(8, next_generation, &dp2) == 0);
  // And back: counted again from the records, not from what the other timeline covered.
  CHECK(book.Covered(8, kNow, &dp2) == 2);
}

TEST_CASE("a reshape counts the same records against the new layout") {
  PendingCompletions book;
  const JobLayout dp4{4, 1, 1, 0};
  const JobLayout dp2{2, 1, 1, 0};
  book.Add(9, "a", kNow, {Dp(0), Dp(1), Dp(2)});
  CHECK(book.Covered(9, kNow, &dp4) == 3);
  CHECK(book.Covered(9, kNow, &dp2) == 2);
  CHECK(book.NewestCovered(kNow, &dp2) == std::optional<int64_t>(9));
  CHECK_FALSE(book.NewestCovered(kNow, &dp4).has_value());
}

TEST_CASE("the cap refuses a further step, never one already held") {
  PendingCompletions book;
  book.Add(1, "a", kNow, {Dp(0)});
  book.Add(2, "a", kNow, {Dp(0)});
  CHECK(book.steps() == 2);
  CHECK(book.HasRoomFor(1, 2));
  CHECK(book.HasRoomFor(2, 2));
  CHECK_FALSE(book.HasRoomFor(3, 2));
  CHECK(book.HasRoomFor(3, 3));
  book.DropThrough(1);
  CHECK(book.HasRoomFor(3, 2));
}

TEST_CASE("sets merged from every source are exchanged whole, a new generation clears them") {
  PendingCompletions book;
  const auto merged = PendingCompletions::kMergedSource;
  book.Add(4, merged, kNow, {Dp(1)});
  book.Add(4, merged, kNow, {Dp(0)});
  book.Add(6, merged, kNow, {});  // a step a peer named with no rank this node accepts
  const auto by_step = book.RanksByStep();
  REQUIRE(by_step.size() == 2);
  CHECK(by_step.at(4) == std::set<RankKey>{Dp(0), Dp(1)});
  CHECK(by_step.at(6).empty());
  book.Clear();
  CHECK(book.steps() == 0);
  CHECK(book.RanksByStep().empty());
}
