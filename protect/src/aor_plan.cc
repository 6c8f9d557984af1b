/// \file aor_plan.cc
/// \brief The AOR plan of a rank: optimizer shard layout and gradient slices (aor_plan.h).

#include "reft/protect/aor_plan.h"

#include <algorithm>
#include <set>

#include "reft/protect/sharding.h"

namespace reft::protect {
namespace {

constexpr uint64_t kStagingAlign = 64;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

Result<int> GradientDtypeCode(const std::string& dtype) {
  if (dtype == "fp32" || dtype == "float32") return 0;
  if (dtype == "fp16" || dtype == "float16" || dtype == "half") return 1;
  if (dtype == "bf16" || dtype == "bfloat16") return 2;
  return Status::InvalidArgument("gradient dtype '" + dtype +
                                 "' is not one AOR replays (fp32/float32, fp16/float16/half, "
                                 "bf16/bfloat16)");
}

Status CheckAorLayout(const JobLayout& layout, const Scheme& scheme) {
  if (!scheme.aor || layout.zero == 1) return Status::OK();
  return Status::InvalidArgument(
      "protection '" + scheme.ToString() +
      "' replays ZeRO-1 optimizer shards (aor), but the "
      "layout's ZeRO stage is " +
      std::to_string(layout.zero) +
      " (must be 1; without 'aor' every unique buffer, optimizer state included, is protected "
      "by a peer copy)");
}

Result<AorPlan> PlanAor(const AorInput& in) {
  REFT_RETURN_NOT_OK(CheckAorLayout(in.layout, in.scheme));
  const int m = in.layout.dp;
  std::set<std::string> names;
  for (const auto& b : in.buffers) names.insert(b.name);
  std::map<std::string, const GradientSpec*> grads;
  for (const auto& g : in.gradients) {
    if (!in.scheme.aor) {
      return Status::InvalidArgument("gradient buffer " + Quote(g.name) +
                                     " is read only by protection 'aor', which this job does not "
                                     "use (protection '" +
                                     in.scheme.ToString() + "')");
    }
    if (names.count(g.name) || !grads.emplace(g.name, &g).second) {
      return Status::InvalidArgument("buffer " + Quote(g.name) + " registered twice");
    }
    REFT_ASSIGN_OR_RETURN(int code, GradientDtypeCode(g.dtype));
    (void)code;
  }
  AorPlan plan;
  std::set<std::string> used;
  std::vector<const BufferSpec*> shards;
  for (const auto& b : in.buffers) {
    if (HasAorRegion(in.layout, in.scheme, b)) shards.push_back(&b);
  }
  std::sort(shards.begin(), shards.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (const auto& [name, grad] : in.gradient_of) {
    if (grad.empty()) continue;
    const bool bound = std::any_of(shards.begin(), shards.end(),
                                   [&n = name](const BufferSpec* s) { return s->name == n; });
    if (!bound) {
      return Status::InvalidArgument(
          "buffer " + Quote(name) + " names gradient " + Quote(grad) +
          ", but only a ZeRO-1 optimizer shard under protection 'aor' (kind unique, optimizer "
          "flag, ZeRO stage 1, dp >= 2) is replayed from a gradient");
    }
  }
  for (const BufferSpec* s : shards) {
    const std::string what = "optimizer shard " + Quote(s->name) + " under protection 'aor'";
    // [master | exp_avg | exp_avg_sq], n each: fp32, or bf16 (torch's Adam/AdamW over bf16
    // parameters keeps bf16 moments).
    const bool bf16 = s->dtype == "bf16" || s->dtype == "bfloat16";
    if (s->dtype != "fp32" && s->dtype != "float32" && !bf16) {
      return Status::InvalidArgument(what +
                                     " must be float32 or bfloat16 [master | exp_avg | "
                                     "exp_avg_sq], it is " +
                                     s->dtype);
    }
    const uint64_t state_esize = bf16 ? 2 : 4;
    const char* state_name = bf16 ? "bfloat16" : "float32";
    if (s->size == 0 || s->size % (3 * state_esize) != 0) {
      return Status::InvalidArgument(what + " has " + std::to_string(s->size) + " bytes: not 3·n " +
                                     state_name +
                                     " elements ([master | exp_avg | exp_avg_sq], n each)");
    }
    const uint64_t n = s->size / (3 * state_esize);
    auto named = in.gradient_of.find(s->name);
    std::string gname = named == in.gradient_of.end() ? std::string() : named->second;
    if (gname.empty()) {
      if (grads.empty()) {
        return Status::InvalidArgument(
            what +
            " is replayed from the all-reduced flat gradient, but no gradient buffer is "
            "registered (register it with kind 'gradient')");
      }
      if (grads.size() > 1) {
        std::string list;
        for (const auto& [gn, g] : grads) list += (list.empty() ? "" : ", ") + Quote(gn);
        return Status::InvalidArgument(what + ": " + std::to_string(grads.size()) +
                                       " gradient buffers are registered (" + list +
                                       "); name the one it is replayed from (gradient=)");
      }
      gname = grads.begin()->first;
    }
    auto git = grads.find(gname);
    if (git == grads.end()) {
      return Status::InvalidArgument(what + " names gradient " + Quote(gname) +
                                     ", which is not registered with kind 'gradient'");
    }
    const GradientSpec& g = *git->second;
    REFT_ASSIGN_OR_RETURN(int code, GradientDtypeCode(g.dtype));
    const uint64_t esize = code == 0 ? 4 : 2;
    if (g.size % esize != 0) {
      return Status::InvalidArgument("gradient buffer " + Quote(g.name) + ": " +
                                     std::to_string(g.size) + " bytes is not a whole number of " +
                                     g.dtype + " elements");
    }
    const uint64_t elems = g.size / esize;
    const uint64_t full = n * static_cast<uint64_t>(m);
    AorBinding b;
    b.buffer = s->name;
    b.region = AorRegionName(s->name);
    b.gradient = g.name;
    b.elements = n;
    b.state_dtype = bf16 ? 2 : 0;
    b.grad_dtype = code;
    b.grad_bytes = n * esize;
    if (elems == full) {
      b.grad_offset = static_cast<uint64_t>((in.coord.dp + 1) % m) * n * esize;
    } else if (elems == n) {
      b.grad_offset = 0;  // the trainer staged its neighbour's slice itself
    } else {
      return Status::InvalidArgument(
          "gradient buffer " + Quote(g.name) + " has " + std::to_string(elems) + " " + g.dtype +
          " elements, but optimizer shard " + Quote(s->name) + " covers n = " + std::to_string(n) +
          " parameters per rank (" + std::to_string(s->size) + " bytes = 3·n " + state_name +
          "): the gradient must have dp·n = " + std::to_string(full) +
          " elements (the full all-reduced flat gradient, padded like the ZeRO-1 partition) or "
          "n = " +
          std::to_string(n) + " (rank dp+1's slice only)");
    }
    b.staging_offset = (plan.staging_bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
    plan.staging_bytes = b.staging_offset + b.grad_bytes;
    used.insert(g.name);
    plan.bindings.push_back(std::move(b));
  }
  if (!plan.bindings.empty()) {
    for (const auto& [gn, g] : grads) {
      if (!used.count(gn)) {
        return Status::InvalidArgument("gradient buffer " + Quote(gn) +
                                       " is not the gradient of any optimizer shard under 'aor'");
      }
    }
  }
  return plan;
}

}  // namespace reft::protect
