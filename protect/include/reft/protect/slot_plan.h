#pragma once
/// \file slot_plan.h
/// \brief The slot contract libreft and reftd share. A session's hello and registrations (the
/// local channel's messages, reft/local_proto/messages.h) decide everything about a rank's slot:
/// its "meta", its regions, the sharding group's geometry, which side computes the parity, and
/// which gradient slice advances each "aor/<name>" region. Both sides call the functions here
/// on the same messages, so the client fills exactly the regions reftd lays out, and both
/// refuse the same inputs with the same message.

#include <cstdint>
#include <vector>

#include "reft/local_proto/messages.h"
#include "reft/protect/aor_plan.h"
#include "reft/protect/scheme.h"
#include "reft/protect/sharding.h"
#include "reft/protect/slot_meta.h"
#include "reft/result.h"

namespace reft::protect {

/// \brief What a hello declares, checked: the job id (letters, digits, '-', '_', '.'), the
/// layout and the rank inside it, the protection and whether the layout's dp can hold it
/// (Scheme::CheckFits), and the ZeRO stage AOR needs. Returns the parsed protection;
/// InvalidArgument naming the field (and the fix) otherwise.
Result<Scheme> CheckHello(const local_proto::Hello& hello);

/// \brief One registration, checked against the session's protection: the name (1 to
/// kMaxBufferName bytes), the size (1 byte to 1 TiB, whole elements of its dtype), and the
/// rules of gradient buffers (only under "aor", fp32/fp16/bf16, neither an optimizer shard nor
/// naming a gradient). InvalidArgument naming the buffer otherwise. The limits on the number of
/// buffers, duplicate names and device memory are the daemon's.
Status CheckRegistration(const local_proto::Register& r, const Scheme& scheme);
/// \brief A sharded registration fits the rank's place in its sharding group (CheckShard:
/// the parts of a name tile [0, total) exactly once per group). OK when not sharded.
Status CheckShardRegistration(const local_proto::Register& r, const RankCoord& coord,
                              const JobLayout& layout);

/// \brief A rank's slot plan.
struct SlotPlan {
  SlotMeta meta;                    ///< the "meta" region's content
  std::vector<uint8_t> meta_bytes;  ///< meta.Encode(), at most kMaxSlotMetaBytes
  RankPlan rank;                    ///< the regions after "meta", in order
  SgGeometry geometry;              ///< of the rank's sharding group
  /// geometry.buffers[i] -> the registration index of that replicated buffer.
  std::vector<uint32_t> replicated;
  /// AEC or RS parity is part of the slot (m >= 2). It is computed where every replicated
  /// buffer is: by reftd from device memory, or by the client from host memory.
  bool parity = false;
  bool any_replicated_on_device = false;
  bool parity_on_device() const { return parity && any_replicated_on_device; }
  bool parity_on_host() const { return parity && !any_replicated_on_device; }
  /// AOR: one binding per "aor/<name>" region, and per binding the registration index of the
  /// optimizer shard and of the gradient it is replayed from.
  AorPlan aor;
  std::vector<uint32_t> aor_buffer;
  std::vector<uint32_t> aor_gradient;
};

/// \brief The slot plan of the rank `hello` declares for `buffers` (in registration order;
/// gradient buffers are read by AOR and are not part of the slot). `shard_chunk` is the shard
/// alignment reftd announces in its hello reply. InvalidArgument when the buffers cannot form a
/// slot (the messages of ComputeRankPlan and PlanAor), when parity would read buffers that are
/// not all in one memory (host, or one device), or when the meta is too large.
Result<SlotPlan> PlanSlot(const local_proto::Hello& hello,
                          const std::vector<local_proto::Register>& buffers, uint64_t shard_chunk);

}  // namespace reft::protect
