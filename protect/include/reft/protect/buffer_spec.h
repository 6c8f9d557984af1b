#pragma once
/// \file buffer_spec.h
/// \brief A registered buffer as the sharding function sees it (the other inputs are the job
/// layout and the rank's coordinates, reft/job_layout.h).

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
};

/// \brief Element size of a dtype name, or InvalidArgument naming it.
Result<int> DtypeSize(const std::string& dtype);

}  // namespace reft::protect
