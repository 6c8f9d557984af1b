#pragma once
/// \file commit_coordinator.h
/// \brief The seam between the local channel and the commit decision: which step is committed
/// job-wide (complete on every rank of the job, docs/architecture.md "Glossary"), committed in
/// the store only then. It is the commit ledger of a coord::JobCoordinator (daemon/coord: etcd,
/// or gossip), or, for the local channel's tests and benches, daemon/coord's single-node ledger
/// (its src/single_node_commit.h). Header only: the components that implement it do not link
/// the local server.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "reft/job_layout.h"
#include "reft/local/job_ownership.h"
#include "reft/peer_credentials.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::local {

/// \brief The error a completion of an older restore epoch gets (CommitCoordinator::Complete):
/// the trainer restored (or joined) before the job's newest restore decision, so its state
/// belongs to an abandoned timeline and nothing it writes may be committed.
inline Status StaleEpoch(const store::RankKey& rank, int64_t step, int64_t epoch,
                         int64_t current) {
  return Status::Cancelled(
      "step " + std::to_string(step) + " of " + rank.ToString() +
      " is not counted: the job was restored again (restore epoch " + std::to_string(current) +
      ") since this trainer restored or joined (epoch " + std::to_string(epoch) +
      "); restart the trainer so that it restores with the rest of the job");
}

/// \brief The refusal of a join whose layout differs from the one the job's connected ranks
/// run with (`holders`: which ranks hold it, where the coordinator knows; may be empty).
inline Status LayoutConflict(const store::RankKey& rank, const JobLayout& running,
                             const JobLayout& declared, const std::string& holders = "") {
  return Status::InvalidArgument(
      "job '" + rank.job + "' is running with layout " + running.ToString() +
      (holders.empty() ? "" : " (" + holders + ")") + "; rank " + rank.ToString() +
      " connected with " + declared.ToString() +
      ": declare the layout the job runs with, use another job name, or stop every rank of "
      "the job first (its layout changes only while none is connected)");
}

/// \brief A replicated buffer as the sharding group that saves it declares it.
struct ReplicatedBuffer {
  std::string name;
  std::string dtype;
  uint64_t size = 0;
};
using ReplicatedBuffers = std::vector<ReplicatedBuffer>;

/// \brief InvalidArgument when sharding groups `a` and `b` (their pp and tp; the same job)
/// save one replicated name with different sizes or dtypes. Only groups of the same tp are
/// compared: a name saved by several tp ranks is looked up at the rank's own tp in a reshape,
/// so a tensor-parallel slice may differ between tp ranks; across pipeline stages one name is
/// one tensor (tied embeddings), or a reshape could not tell which is meant.
inline Status CheckReplicatedAgree(const store::RankKey& a, const ReplicatedBuffers& mine,
                                   const store::RankKey& b, const ReplicatedBuffers& theirs) {
  if (a.tp != b.tp || a.pp == b.pp) return Status::OK();
  for (const ReplicatedBuffer& x : mine) {
    for (const ReplicatedBuffer& y : theirs) {
      if (x.name != y.name || (x.size == y.size && x.dtype == y.dtype)) continue;
      auto group = [](const store::RankKey& r) {
        return "pp" + std::to_string(r.pp) + "-tp" + std::to_string(r.tp);
      };
      return Status::InvalidArgument(
          "job '" + a.job + "': replicated buffer '" + x.name + "' is " +
          std::to_string(x.size) + " bytes of " + x.dtype + " on stage " + group(a) +
          " but " + std::to_string(y.size) + " bytes of " + y.dtype + " on stage " + group(b) +
          ": one replicated name must mean one tensor on every stage (give each stage's "
          "tensor its own name, or register it kind=\"unique\")");
    }
  }
  return Status::OK();
}

/// \brief Who joins a job: the trainer's credentials (SO_PEERCRED), and the owner it claims
/// the job as when the job has none yet (MakeClaim).
struct Joiner {
  PeerCredentials caller;
  JobOwner claim;
  /// reftd's own uid and group: in-process callers and tests.
  static Joiner Self() {
    Joiner j;
    j.caller.uid = static_cast<uint32_t>(::geteuid());
    j.caller.gid = static_cast<uint32_t>(::getegid());
    j.claim.uid = j.caller.uid;
    return j;
  }
};

/// \brief Commit decisions for every job on this daemon. Thread-safe.
class CommitCoordinator {
 public:
  virtual ~CommitCoordinator() = default;
  /// \brief A trainer of `rank` connected with `layout`. InvalidArgument when the rank lies
  /// outside the layout or the layout differs from the one the job's connected ranks use;
  /// AlreadyExists when another live session holds the rank (on this node, or — with a
  /// control plane that records joins — on another node). A coordinator that records the
  /// job's owner with its layout (etcd) claims the job for `who` when it has no owner, and
  /// refuses (NotYourJob) a caller who may not use it.
  virtual Status Join(const store::RankKey& rank, const JobLayout& layout,
                      const Joiner& who) = 0;
  /// \brief Join as reftd's own uid (in-process callers and tests).
  Status Join(const store::RankKey& rank, const JobLayout& layout) {
    return Join(rank, layout, Joiner::Self());
  }
  /// \brief The trainer of `rank` disconnected (its completions stay counted).
  virtual void Leave(const store::RankKey& rank) = 0;
  /// \brief `rank` sealed `step` (state complete) under restore epoch `epoch` (the session's:
  /// RestoreEpoch() when the trainer joined, or the one its restore followed). When every rank
  /// of the job has completed it in the job's current epoch, the coordinator commits it for
  /// each rank in the store and wakes WaitCommitted(). Cancelled when `epoch` is not the job's
  /// current one: the job was restored again since this trainer restored, so nothing it writes
  /// may count (it must restart and restore).
  virtual Status Complete(const store::RankKey& rank, int64_t step, int64_t epoch) = 0;
  /// \brief The job's restore epoch: the version of the newest restore decision this node
  /// knows for `job` (0: none). Every restore decision starts a new epoch, and completions of an
  /// older one never count (docs/recovery.md "Restore epochs").
  virtual int64_t RestoreEpoch(const std::string& job) = 0;
  /// \brief Newest step committed job-wide, if any (restores never read anything newer).
  virtual std::optional<int64_t> NewestCommitted(const std::string& job) = 0;
  /// \brief Waits until a step >= `step` of `job` is committed; false on timeout.
  virtual bool WaitCommitted(const std::string& job, int64_t step,
                             std::chrono::milliseconds timeout) = 0;
  /// \brief The sharding group of `rank` (its dp 0, at its first snapshot and whenever its
  /// buffers change) saves these replicated buffers. InvalidArgument (CheckReplicatedAgree)
  /// when a live group of another stage of the job disagrees: the snapshot is refused then,
  /// not the restore that would need it. The declaration is withdrawn when the rank leaves.
  /// Default: no check (a coordinator that cannot see the other stages).
  virtual Status DeclareReplicated(const store::RankKey& rank, const ReplicatedBuffers& buffers) {
    (void)rank;
    (void)buffers;
    return Status::OK();
  }
};

}  // namespace reft::local
