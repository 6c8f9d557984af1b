#pragma once
/// \file commit_hold.h
/// \brief Orders a persist before the next commit (docs/persist.md "Persist and commit").
///
/// The problem: a persist of the newest committed step S races the training. The commit of
/// S+1 frees every node's slots of S, and a node that receives the persist request after that
/// has nothing to write. A hold asks the job's commit coordinator not to commit past S until
/// every node named in the hold has pinned its slots of S (or reported that it has nothing to
/// pin), for at most a timeout: then the commit goes on and the persist fails on the nodes
/// that had not pinned — the persist fails, never the training.
///
/// The persisting node calls Hold, asks every node to persist S (each calls Pinned right
/// after pinning), and calls Release when they answered. Implemented on etcd by
/// coord::PersistHold; the gossip control plane has none (it does not order persist and
/// commit). Header-only.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reft/result.h"

namespace reft::coord {

class CommitHold {
 public:
  virtual ~CommitHold() = default;

  /// \brief Holds the job's next commit at its commit point S until every one of `nodes` has
  /// pinned S, or `timeout` after the coordinator first sees the hold. `step`: hold only if S
  /// is that step. Returns S; std::nullopt when `step` is not the commit point (nothing held).
  /// NotFound when the job has no commit point; an error when the control plane cannot be
  /// reached (nothing held).
  virtual Result<std::optional<int64_t>> Hold(const std::string& job,
                                              std::optional<int64_t> step,
                                              const std::vector<std::string>& nodes,
                                              std::chrono::milliseconds timeout) = 0;

  /// \brief This node pinned its slots of `step` (or has nothing of it to pin): the hold of
  /// that step no longer waits for it. Does nothing when no hold of the job is in place.
  virtual Status Pinned(const std::string& job, int64_t step) = 0;

  /// \brief Ends this node's hold of `step` (one another node put in its place stays).
  virtual void Release(const std::string& job, int64_t step) = 0;
};

}  // namespace reft::coord
