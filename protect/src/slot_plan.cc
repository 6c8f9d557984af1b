/// \file slot_plan.cc
/// \brief PlanSlot and the checks of hello and register that libreft and reftd both apply.

#include "reft/protect/slot_plan.h"

#include <cctype>
#include <string>

namespace reft::protect {

namespace {

constexpr uint64_t kMaxBufferBytes = 1ull << 40;  // 1 TiB per buffer: a bound before allocating
constexpr uint32_t kHostMemory = 0;               // local_proto::BufferMemory::memory_kind

Status CheckJobId(const std::string& job) {
  if (job.empty()) return Status::InvalidArgument("job id is empty");
  for (char c : job) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return Status::InvalidArgument("job id '" + job +
                                     "' may contain only letters, digits, '-', '_' and '.'");
    }
  }
  return Status::OK();
}

BufferSpec SpecOf(const local_proto::Register& r) {
  BufferSpec s;
  s.name = r.name;
  s.size = r.size;
  s.dtype = r.dtype;
  s.kind = r.kind == local_proto::BufferKind::kUnique ? BufferKind::kUnique
                                                      : BufferKind::kReplicated;
  s.layer = r.layer;
  s.optimizer = r.optimizer;
  s.shard_offset = r.shard_offset;
  s.shard_total = r.shard_total;
  return s;
}

uint32_t IndexOf(const std::vector<local_proto::Register>& buffers, const std::string& name) {
  for (uint32_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].name == name) return i;
  }
  return static_cast<uint32_t>(buffers.size());  // unreachable: the plan names registered buffers
}

// Parity reads every replicated buffer, so they must all be in one memory: host, or one device.
Status CheckParityMemory(const SlotPlan& p, const std::vector<local_proto::Register>& buffers,
                         const Scheme& scheme) {
  const local_proto::Register* host = nullptr;
  const local_proto::Register* device = nullptr;
  for (uint32_t i : p.replicated) {
    const auto& b = buffers[i];
    if (b.memory.memory_kind == kHostMemory) {
      if (host == nullptr) host = &b;
    } else if (device == nullptr) {
      device = &b;
    } else if (b.memory.memory_kind != device->memory.memory_kind ||
               b.memory.device != device->memory.device) {
      return Status::InvalidArgument("protection '" + scheme.ToString() +
                                     "' computes parity over all replicated buffers, which must "
                                     "then be on one device: '" + device->name + "' and '" +
                                     b.name + "' are not");
    }
  }
  if (host != nullptr && device != nullptr) {
    return Status::InvalidArgument("protection '" + scheme.ToString() +
                                   "' computes parity over all replicated buffers, which must "
                                   "then live in one memory: '" + device->name +
                                   "' is device memory while '" + host->name +
                                   "' is host memory");
  }
  return Status::OK();
}

}  // namespace

Result<Scheme> CheckHello(const local_proto::Hello& hello) {
  REFT_RETURN_NOT_OK(CheckJobId(hello.job));
  REFT_RETURN_NOT_OK(hello.layout.CheckRank(hello.coord));
  REFT_ASSIGN_OR_RETURN(Scheme scheme, Scheme::Parse(hello.protection));
  // At connect, not at the first snapshot: a scheme the layout cannot hold never joins.
  REFT_RETURN_NOT_OK(scheme.CheckFits(hello.layout.dp));
  REFT_RETURN_NOT_OK(CheckAorLayout(hello.layout, scheme));
  return scheme;
}

Status CheckShardRegistration(const local_proto::Register& r, const RankCoord& coord,
                              const JobLayout& layout) {
  return CheckShard(SpecOf(r), coord.dp, layout.dp);
}

Status CheckRegistration(const local_proto::Register& r, const Scheme& scheme) {
  if (r.name.empty() || r.name.size() > kMaxBufferName) {
    return Status::InvalidArgument("buffer name '" + r.name + "' must have 1 to " +
                                   std::to_string(kMaxBufferName) + " bytes");
  }
  if (r.size == 0 || r.size > kMaxBufferBytes) {
    return Status::InvalidArgument("buffer '" + r.name + "': size " + std::to_string(r.size) +
                                   " must be between 1 byte and 1 TiB");
  }
  REFT_ASSIGN_OR_RETURN(int elem, DtypeSize(r.dtype));
  if (r.size % static_cast<uint64_t>(elem) != 0) {
    return Status::InvalidArgument("buffer '" + r.name + "': " + std::to_string(r.size) +
                                   " bytes is not a whole number of " + r.dtype + " elements");
  }
  if (r.gradient.size() > kMaxBufferName) {
    return Status::InvalidArgument("buffer '" + r.name + "': gradient name too long");
  }
  if (r.kind == local_proto::BufferKind::kGradient) {
    // Read by the AOR replay at snapshot time, never stored: only meaningful under "aor".
    if (!scheme.aor) {
      return Status::InvalidArgument("gradient buffer '" + r.name + "' is read only by "
                                     "protection 'aor', which this job does not use ('" +
                                     scheme.ToString() + "')");
    }
    auto code = GradientDtypeCode(r.dtype);
    if (!code.ok()) return code.status().WithContext("buffer '" + r.name + "'");
    if (!r.gradient.empty() || r.optimizer) {
      return Status::InvalidArgument("gradient buffer '" + r.name + "' cannot be an optimizer "
                                     "shard or name a gradient itself");
    }
  }
  return Status::OK();
}

Result<SlotPlan> PlanSlot(const local_proto::Hello& hello,
                          const std::vector<local_proto::Register>& buffers, uint64_t shard_chunk) {
  REFT_ASSIGN_OR_RETURN(Scheme scheme, CheckHello(hello));
  SlotPlan p;
  SlotMeta& m = p.meta;
  m.job = hello.job;
  m.coord = hello.coord;
  m.layout = hello.layout;
  m.scheme = scheme;
  m.shard_chunk = shard_chunk;
  AorInput aor_in;
  for (const auto& b : buffers) {
    if (b.kind == local_proto::BufferKind::kGradient) {
      aor_in.gradients.push_back({b.name, b.size, b.dtype});  // read by AOR, never stored
      continue;
    }
    m.buffers.push_back(SpecOf(b));
    if (!b.gradient.empty()) aor_in.gradient_of[b.name] = b.gradient;
  }
  REFT_ASSIGN_OR_RETURN(p.rank, m.Plan());
  REFT_ASSIGN_OR_RETURN(p.geometry, m.Geometry());
  p.meta_bytes = m.Encode();
  if (p.meta_bytes.size() > kMaxSlotMetaBytes) {
    return Status::InvalidArgument("too many or too long buffer names: the slot description "
                                   "exceeds " + std::to_string(kMaxSlotMetaBytes) + " bytes");
  }
  for (const auto& e : p.geometry.buffers) {
    const uint32_t i = IndexOf(buffers, e.name);
    p.replicated.push_back(i);
    p.any_replicated_on_device |= buffers[i].memory.memory_kind != kHostMemory;
  }
  p.parity = (scheme.aec || scheme.rs > 0) && p.geometry.m >= 2;
  if (p.parity) REFT_RETURN_NOT_OK(CheckParityMemory(p, buffers, scheme));

  aor_in.layout = m.layout;
  aor_in.scheme = m.scheme;
  aor_in.coord = m.coord;
  aor_in.buffers = m.buffers;
  REFT_ASSIGN_OR_RETURN(p.aor, PlanAor(aor_in));
  for (const auto& b : p.aor.bindings) {
    p.aor_buffer.push_back(IndexOf(buffers, b.buffer));
    p.aor_gradient.push_back(IndexOf(buffers, b.gradient));
  }
  return p;
}

}  // namespace reft::protect
