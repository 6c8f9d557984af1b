#pragma once
/// \file aor_plan.h
/// \brief What the AOR host replay of one rank reads and writes (docs/protection.md
/// "AOR"): for each "aor/<name>" region of the rank's slot, the layout of the
/// optimizer shard and the slice of the flat gradient it is advanced with. A pure function of
/// the registered buffers, like the rank plan: reftd and libreft compute it from the same
/// inputs and check each other's result.
///
/// Layout the replay assumes (ZeRO-1 over flat parameters, the way DeepSpeed and Megatron's
/// distributed optimizer partition them):
/// - the job's parameters of one sharding group form one flat vector of N = dp·n elements
///   (padded to a multiple of dp); member j owns elements [j·n, (j+1)·n);
/// - member j's optimizer shard is ONE registered buffer (kind unique, optimizer flag) of 3·n
///   float32: [fp32 master weights | exp_avg | exp_avg_sq], each n elements, covering its
///   elements [j·n, (j+1)·n);
/// - the gradient is a registered buffer of kind "gradient" (fp32, fp16 or bf16) that reftd
///   reads at snapshot time but never stores, either
///   - the full flat gradient, dp·n elements, identical on every member (all-reduced): member d
///     reads elements [((d+1) mod dp)·n, +n), the part of its ring neighbour; or
///   - exactly n elements: the neighbour's slice only (a reduce-scatter ZeRO-1 where the trainer
///     forwards member d+1's reduced slice to member d, docs/protection.md "AOR": gradient availability).
/// Several (optimizer shard, gradient) pairs are allowed (e.g. one per parameter group): an
/// optimizer shard names its gradient, or takes the only one registered.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reft/protect/buffer_spec.h"
#include "reft/protect/scheme.h"
#include "reft/result.h"

namespace reft::protect {

/// \brief A registered gradient buffer: read by the AOR replay, never stored in a slot.
struct GradientSpec {
  std::string name;
  uint64_t size = 0;  ///< bytes
  std::string dtype;  ///< fp32/float32, fp16/float16/half, bf16/bfloat16
};

/// \brief One "aor/<buffer>" region and how it is advanced.
struct AorBinding {
  std::string buffer;           ///< the optimizer shard (kind unique, optimizer flag)
  std::string region;           ///< "aor/<buffer>": replica of member (dp+1) mod m's shard
  std::string gradient;         ///< the gradient buffer it is replayed from
  uint64_t elements = 0;        ///< n; the shard is 3·n elements of state_dtype
  int state_dtype = 0;          ///< aor::StateDtype value: 0 fp32, 2 bf16 (torch's bf16 Adam)
  int grad_dtype = 0;           ///< aor::GradDtype value: 0 fp32, 1 fp16, 2 bf16
  uint64_t grad_offset = 0;     ///< byte offset of member dp+1's slice in the gradient buffer
  uint64_t grad_bytes = 0;      ///< n · element size
  uint64_t staging_offset = 0;  ///< where the slice is staged before the fence (64-B aligned)
};

/// \brief The rank's AOR work; empty when the slot has no "aor/" region.
struct AorPlan {
  std::vector<AorBinding> bindings;  ///< in slot region order (sorted by buffer name)
  uint64_t staging_bytes = 0;        ///< bytes of gradient slices staged per snapshot
};

struct AorInput {
  JobLayout layout;
  Scheme scheme;
  RankCoord coord;
  std::vector<BufferSpec> buffers;      ///< the slot's buffers (what SlotMeta lists)
  std::vector<GradientSpec> gradients;  ///< gradient buffers, in registration order
  /// Optimizer shard -> the gradient buffer it is replayed from. A missing or empty entry means
  /// the only gradient buffer registered.
  std::map<std::string, std::string> gradient_of;
};

/// \brief The gradient dtype code (aor::GradDtype value) of a dtype name; InvalidArgument
/// naming the accepted ones otherwise.
Result<int> GradientDtypeCode(const std::string& dtype);

/// \brief Protection "aor" replays ZeRO-1 optimizer shards: InvalidArgument unless the layout's
/// ZeRO stage is 1 when `scheme` has aor.
Status CheckAorLayout(const JobLayout& layout, const Scheme& scheme);

/// \brief The AOR plan of the rank `in.coord`. InvalidArgument with a sentence naming the
/// buffer and the rule when: aor with ZeRO stage != 1; a gradient buffer under a protection
/// without aor, of another dtype than fp32/fp16/bf16, or unused; an optimizer shard that is not
/// float32 of 3·n elements, has no gradient (none registered, or several and none named), or
/// names an unknown one; a gradient whose element count is neither dp·n nor n; a
/// `gradient_of` entry for a buffer that has no "aor/" region.
Result<AorPlan> PlanAor(const AorInput& in);

}  // namespace reft::protect
