#pragma once
/// \file restore_check.h
/// \brief `reftctl restore-check`: can the newest committed step of a job be rebuilt in memory,
/// and from what. Computed from the located slots and the recovery analysis only (the slots'
/// "meta" regions are read, no payload), so it is cheap and changes nothing.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/store/snapshot_store.h"

namespace reft::recovery {

/// Buffer names under this prefix are reserved to reft.torch.dcp (docs/dcp.md "How it is
/// stored"): a job whose buffers all carry it is a PyTorch DCP checkpoint, loaded by reads of
/// saved byte ranges that DCP's planner chooses, so its layout may change in every dimension.
inline constexpr const char* kDcpBufferPrefix = "dcp/";

/// \brief How one member's shard of the replicated buffers would be obtained.
struct ShardCheck {
  int dp = 0;
  /// "slot": its own slot serves it; "rebuilt": decoded/copied from the survivors' redundancy;
  /// "lost": some of its bytes cannot be rebuilt.
  std::string state;
  std::string node;    ///< node serving it ("slot"), else ""
  std::string detail;  ///< the source, the rebuild ("rebuilt from rep/arc+1 of dp0"), or the loss
};

/// \brief One rank of the group.
struct RankCheck {
  store::RankKey rank;
  std::vector<std::string> nodes;  ///< nodes holding its slot at the step (empty: lost slot)
  /// Where its unique buffers would come from: "own slot on node 'n1'", "peer/<b> of
  /// pp0-tp0-dp1 on node 'n2'", "none" (it has none), or "lost".
  std::string unique;
  bool rebuildable = false;  ///< slot lost but RebuildLostRanks could regenerate it
};

struct GroupCheck {
  int pp = 0;
  int tp = 0;
  int members = 0;
  std::string scheme;
  std::vector<int> alive;  ///< dp of the members whose slot a live node holds
  std::vector<ShardCheck> shards;
  std::vector<RankCheck> ranks;
  bool recoverable = false;
  std::string lost;  ///< exactly what is lost ("" when recoverable)
};

struct RestoreCheck {
  std::string job;
  int64_t step = -1;  ///< newest committed step; -1: nothing committed
  bool recoverable = false;
  std::vector<GroupCheck> groups;        ///< ordered by (pp, tp)
  /// Every buffer of every slot meta read for the step is named under kDcpBufferPrefix: a DCP
  /// checkpoint, whose load reshards (tp and pp may change too; `reftctl restore-check --layout`).
  bool dcp = false;
  std::vector<std::string> unreachable;  ///< members whose manifest could not be read
  /// Nodes of the job that are alive but did not answer within the agreement timeout: what they
  /// hold is unknown, so a step that looks lost without them is "undecided", not lost.
  std::vector<std::string> waiting;
  /// Why the check waited for silent holders, and how long ("" when it did not).
  std::string settled;
  std::vector<std::string> warnings;
  /// Not recoverable from what answered, but some holder is only silent (waiting non-empty).
  bool undecided() const { return !recoverable && !waiting.empty(); }
  /// \brief One line: "step 7: recoverable (2 shards rebuilt)" or "step 7: LOST: ...".
  std::string Summary() const;
};

}  // namespace reft::recovery
