#pragma once
/// \file restore_decider.h
/// \brief The job-wide restore decision as a value (docs/recovery.md "One decision per job").
///
/// The problem: deciding where a restore comes from mixes reading the control plane, checking
/// memory, scanning the tier and compare-and-swaps, and each of those may find that the job
/// moved. Here the rule itself is one pure function: `DecideRestore` reads one snapshot of the
/// job's agreement state (taken once per attempt, plus what memory and the tier were found to
/// offer when the rule asked for them) and answers what to do next. The driver
/// (ReftLoad::RestoreConsistent) gathers the facts and carries the answer out: snapshot →
/// decide → propose → follow. No I/O here, so every case is a row of a table test.

#include <cstdint>
#include <optional>
#include <string>

#include "reft/coord/job_coordinator.h"
#include "reft/status.h"

namespace reft::recovery {

/// What memory can rebuild of the committed step (the job-wide restore check, or a restore
/// that lost bytes while following a memory decision).
struct MemoryVerdict {
  enum class Kind {
    kRecoverable,  ///< every sharding group can rebuild the step
    kLost,         ///< some group cannot: the job falls back to the tier
    kUndecided,    ///< not recoverable from what answered, but a holder is only silent
    kMoved,        ///< the check saw another step, the generation moved, or slots vanished
  };
  Kind kind = Kind::kRecoverable;
  std::string summary;  ///< the check's summary, or why the bytes are lost / why it moved
};

/// What the persistent tier offers a fall-back from the snapshot's committed step S.
struct TierVerdict {
  /// The sync before the scan saw another committed step than the snapshot: choose again.
  bool committed_moved = false;
  /// Empty when the tier was read; else "no persistent tier is configured" or "the persistent
  /// tier <dir> cannot be read: <why>".
  std::string unreadable;
  std::string dir;                         ///< the tier's directory ("" without a tier)
  std::optional<int64_t> newest_complete;  ///< newest complete step P <= S (any without S)
  int64_t newest_dir = -1;                 ///< the newest step directory (-1: none)
  Status owner;  ///< whether P may go to the job's current owner (OK without P)
};

/// One snapshot of a job's agreement state.
struct AgreementSnapshot {
  std::string job;
  std::string self;            ///< the node deciding
  std::string layout;          ///< the trainer's layout (for messages)
  coord::JobGeneration gen;     ///< generation, base step, persist floor, newest committed
  std::optional<coord::RestoreDecision> recorded;  ///< the decision in the control plane
  std::optional<MemoryVerdict> memory;  ///< filled when the rule asked (kCheckMemory)
  std::optional<TierVerdict> tier;      ///< filled when the rule asked (kScanTier)
};

/// What to do next.
struct RestoreVerdict {
  enum class Kind {
    kFollow,       ///< follow `decision` (recorded for this generation and step)
    kCheckMemory,  ///< check what memory can rebuild of S, fill `memory`, decide again
    kScanTier,     ///< scan the tier, fill `tier`, decide again
    kPropose,      ///< record `decision` (compare-and-swap), then follow the winner
    kFallBack,     ///< start generation g+1 from `fall_back` (records {g+1, P, tier}), follow it
    kStartFresh,   ///< memory holds nothing and the tier cannot be read: no restore, `detail`
    kFail,         ///< `error`, for every rank alike
    kRetry,        ///< the job moved under the snapshot: take a new one (`error` says why)
  };
  Kind kind = Kind::kRetry;
  coord::RestoreDecision decision;  ///< kFollow, kPropose
  coord::GenerationStart fall_back; ///< kFallBack
  Status error;                    ///< kFail, kRetry
  std::string detail;              ///< kStartFresh: why there is no restore
  std::string warning;             ///< kStartFresh: the warning logged with it
};

/// The rule. Pure: the same snapshot gives the same verdict.
RestoreVerdict DecideRestore(const AgreementSnapshot& s);

/// "step 7 from memory (generation 0, decided by node 'n1')": for the agreement detail.
std::string DescribeDecision(const coord::RestoreDecision& d);

}  // namespace reft::recovery
