#pragma once
/// \file timeline.h
/// \brief One typed name for "which timeline of a job" (docs/coordination.md "Timeline stamps").
///
/// The problem: a job's history forks. A fall-back to the persistent tier starts generation
/// g+1, whose step X is another state than generation g's step X; a restore decision starts a
/// restore epoch, after which the dead trainers' last snapshots must never count; a reshape
/// writes another layout, after which a completion made in the old one must not fill a rank of
/// the new one; a planner publishes a decision that a later one replaces. Anything that belongs
/// to one of those timelines — a completion, a commit, a layer staged for a reshape — carries
/// the stamp it was made under and is compared with the stamp in force where it is used, so
/// that a late arrival from another timeline is refused instead of mixed in.
///
/// The fields are opaque versions from the control plane (etcd: generation numbers and mod
/// revisions of the job's keys; 0: none yet). Header-only; depends on nothing but the
/// standard library, so every layer that carries a stamp can include it.

#include <cstdint>
#include <string>
#include <tuple>

namespace reft::coord {

struct TimelineStamp {
  /// The job's generation: 0 until its first fall-back to the persistent tier.
  uint64_t generation = 0;
  /// The restore epoch: the version (etcd: mod revision) of the job's restore decision.
  int64_t restore_epoch = 0;
  /// The version (etcd: mod revision) of the job's layout record `jobs/<job>/layout`.
  int64_t layout_revision = 0;
  /// The version of the planner's published decision the thing belongs to (0: none).
  int64_t plan_version = 0;

  friend bool operator==(const TimelineStamp& a, const TimelineStamp& b) {
    return a.Tie() == b.Tie();
  }
  friend bool operator!=(const TimelineStamp& a, const TimelineStamp& b) { return !(a == b); }
  /// An order for keys and for "which of two is newer" within one job: every field only grows.
  friend bool operator<(const TimelineStamp& a, const TimelineStamp& b) { return a.Tie() < b.Tie(); }

  /// "generation 1, restore epoch 52, layout revision 17, plan version 0": for messages that
  /// say why something of another timeline was refused.
  std::string ToString() const {
    return "generation " + std::to_string(generation) + ", restore epoch " +
           std::to_string(restore_epoch) + ", layout revision " + std::to_string(layout_revision) +
           ", plan version " + std::to_string(plan_version);
  }

 private:
  std::tuple<uint64_t, int64_t, int64_t, int64_t> Tie() const {
    return std::tie(generation, restore_epoch, layout_revision, plan_version);
  }
};

}  // namespace reft::coord
