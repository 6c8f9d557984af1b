#pragma once
/// \file layout.h
/// \brief Inputs of the sharding function: parallel layout, placement and registered buffers.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reft/result.h"

namespace reft::protect {

/// \brief Coordinates of a rank; ranks are keyed by these, never by node or local rank.
struct RankCoord {
  int pp = 0;
  int tp = 0;
  int dp = 0;
  bool operator==(const RankCoord& o) const { return pp == o.pp && tp == o.tp && dp == o.dp; }
  std::string ToString() const;  ///< "pp0-tp1-dp2"
};

/// \brief dp/tp/pp sizes, ZeRO stage and which node hosts each rank.
struct Layout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int zero_stage = 0;  ///< 0..3; stage 3 partitions parameters, so nothing is replicated
  /// Node name of every rank, indexed by GlobalRank() (Megatron order: tp fastest, then dp,
  /// then pp). Empty = every rank on its own node "rank<i>".
  std::vector<std::string> nodes;

  int world() const { return dp * tp * pp; }
  /// \brief pp·(dp·tp) + dp·tp + tp.
  int GlobalRank(const RankCoord& c) const { return (c.pp * dp + c.dp) * tp + c.tp; }
  std::string NodeOf(const RankCoord& c) const;
  /// \brief Checks sizes >= 1, zero_stage 0..3, nodes empty or of size world().
  Status Validate() const;
};

enum class BufferKind { kReplicated, kUnique };

/// Longest buffer name: its slot regions ("unique/<name>", "peer/<name>") must fit the store's
/// 127-byte region names.
inline constexpr size_t kMaxBufferName = 100;

/// \brief One registered buffer of a rank.
struct BufferSpec {
  std::string name;
  uint64_t size = 0;            ///< bytes
  std::string dtype = "uint8";  ///< see DtypeSize()
  BufferKind kind = BufferKind::kReplicated;
  int layer = -1;          ///< optional layer index, -1 = none
  bool optimizer = false;  ///< a ZeRO-1 optimizer shard (AOR-eligible when unique)
};

/// \brief Element size of a dtype name, or InvalidArgument naming it.
Result<int> DtypeSize(const std::string& dtype);

}  // namespace reft::protect
