#pragma once
/// \file buffer_spec.h
/// \brief A registered buffer as the sharding function sees it (the other inputs are the job
/// layout and the rank's coordinates, reft/job_layout.h).

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "reft/job_layout.h"
#include "reft/result.h"

namespace reft::protect {

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
  /// A sharded buffer (unique only): this rank holds bytes [shard_offset, shard_offset+size)
  /// of a global buffer of `shard_total` bytes called `name`; 0 = not sharded. The members of
  /// a sharding group split it in equal parts in dp order (member d at d·size, the last part
  /// padded past `shard_total`), so the parts tile [0, shard_total) exactly once per group
  /// (CheckShard) and a ring neighbour's copy has the same size (docs/recovery.md "Reshape").
  uint64_t shard_offset = 0;
  uint64_t shard_total = 0;

  bool sharded() const { return shard_total != 0; }
  /// Bytes of the global buffer this rank's part really holds (the rest is padding).
  uint64_t ShardValid() const {
    return shard_offset >= shard_total ? 0 : std::min(size, shard_total - shard_offset);
  }
};

/// \brief The tiling rule of a sharded buffer for member `dp` of a group of `members`:
/// unique, size > 0, shard_offset = dp·size, (members−1)·size < shard_total <= members·size.
/// InvalidArgument naming the buffer and the expected values otherwise; OK when not sharded.
Status CheckShard(const BufferSpec& b, int dp, int members);

/// \brief Element size of a dtype name, or InvalidArgument naming it.
Result<int> DtypeSize(const std::string& dtype);

}  // namespace reft::protect
