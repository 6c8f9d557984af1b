#pragma once
/// \file persist_hold.h
/// \brief The commit hold of a persist on etcd (commit_hold.h; docs/coordination.md "Persist
/// holds"): the persisting node's side (Hold, Pinned, Release) and the job coordinator's side
/// (HeldUntil, Guard), in one class each node owns through its EtcdJobCoordinator.
///
/// Keys: `jobs/<job>/persist_hold` {step, timeout_ms, nodes, by}, bound to the persisting
/// node's lease, written in a transaction that compares the commit point's revision (so the
/// hold is at the commit point, never behind it); `jobs/<job>/persist_hold/<node>` {step},
/// each node's pin, bound to its lease and written only while a hold exists.
///
/// The coordinator reads the hold and the pins once per job it commits and then follows them
/// with one watch (each event wakes it). It does not commit a step newer than the held one while
/// a node of the hold has no pin of it, until `timeout_ms` after it first saw the hold (its own
/// clock: no clock skew between nodes) — unless that node is dead: a dead node never pins, and
/// a recovered job must not stand still until the hold runs out. Its commit transaction compares the hold key's revision
/// (Guard): a hold written after the coordinator decided fails the commit, which is then decided
/// again. Thread-safe.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "reft/coord/commit_hold.h"
#include "reft/coord/etcd_client.h"
#include "reft/mutex.h"

namespace reft::coord {

class EtcdNodeDirectory;

/// \brief What the coordinator's side did, for the metrics (reft_commit_hold_*).
struct CommitHoldStats {
  double held_seconds = 0;  ///< time commits waited for pins, summed over holds
  uint64_t timeouts = 0;    ///< holds that ran out before every node pinned
  uint64_t held_checks = 0;  ///< commit decisions that found the commit held
};

class PersistHold final : public CommitHold {
 public:
  using Clock = std::chrono::steady_clock;

  /// `nodes` (this node's id and lease) must outlive the hold; `wake` is called (on etcd's
  /// watch thread, with no lock of this class held) when a hold or pin of a followed job changed.
  PersistHold(std::shared_ptr<EtcdClient> etcd, EtcdNodeDirectory* nodes,
              std::function<void()> wake);
  ~PersistHold() override;
  PersistHold(const PersistHold&) = delete;
  PersistHold& operator=(const PersistHold&) = delete;

  // CommitHold: the persisting node and the nodes it asks.
  Result<std::optional<int64_t>> Hold(const std::string& job, std::optional<int64_t> step,
                                      const std::vector<std::string>& nodes,
                                      std::chrono::milliseconds timeout) override;
  Status Pinned(const std::string& job, int64_t step) override;
  void Release(const std::string& job, int64_t step) override;

  // The job coordinator's side.
  /// \brief Whether committing `step` must wait: the time the hold runs out (the coordinator
  /// decides again then, or when a pin arrives); std::nullopt: commit. Follows the job the
  /// first time (a read and a watch); an error when etcd cannot be read (decide later).
  Result<std::optional<Clock::time_point>> HeldUntil(const std::string& job, int64_t step);
  /// \brief Adds to the commit transaction the compare on the hold key as HeldUntil saw it.
  void Guard(const std::string& job, Txn* txn);
  /// \brief Stops following `job` (the watch is cancelled).
  void Forget(const std::string& job);
  /// \brief Cancels every watch (the owner stops); nothing calls `wake` afterwards.
  void Stop();

  CommitHoldStats stats() const;
  /// \brief The nodes whose pin of the current hold of `job` the coordinator's side has seen.
  std::set<std::string> PinsSeen(const std::string& job) const;

  /// Keys (docs/coordination.md "Keys").
  static std::string HoldKey(const std::string& job);
  static std::string PinKey(const std::string& job, const std::string& node);

 private:
  struct Followed {
    int64_t watch = 0;
    bool stale = true;       // (re-)read before deciding: not read yet, or the watch reset
    int64_t read_rev = 0;    // the store revision of the last read (older events are in it)
    int64_t hold_rev = 0;    // mod revision of the hold key (0: none)
    int64_t hold_step = -1;
    std::vector<std::string> nodes;
    std::chrono::milliseconds timeout{0};
    Clock::time_point seen_at{};  // when this side first saw the hold (its deadline's start)
    bool timed_out = false;       // counted once per hold
    std::optional<Clock::time_point> blocked_since;  // a commit waits for this hold
    std::map<std::string, int64_t> pins;             // node -> step pinned
  };
  /// The nodes of `f`'s hold without a pin of the held step, `dead` ones left out.
  std::vector<std::string> MissingPinsLocked(const Followed& f,
                                             const std::set<std::string>& dead) const
      REFT_REQUIRES(mu_);
  /// Reads the hold and pins of `job` (the first time: and watches them from there).
  Status Read(const std::string& job);
  void OnEvent(const std::string& job, const WatchUpdate& u);
  void ApplyLocked(Followed& f, const KeyValue& kv, bool deleted, const std::string& job)
      REFT_REQUIRES(mu_);
  /// Ends the wait of a commit for the hold (time held counted once).
  void UnblockLocked(Followed& f, Clock::time_point now) REFT_REQUIRES(mu_);

  std::shared_ptr<EtcdClient> etcd_;
  EtcdNodeDirectory* nodes_;
  std::function<void()> wake_;

  mutable Mutex mu_;
  bool stopped_ REFT_GUARDED_BY(mu_) = false;
  std::map<std::string, Followed> followed_ REFT_GUARDED_BY(mu_);
  std::map<std::string, std::pair<int64_t, int64_t>> mine_ REFT_GUARDED_BY(mu_);  // job -> step, rev
  CommitHoldStats stats_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::coord
