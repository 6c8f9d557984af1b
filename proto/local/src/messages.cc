#include "reft/local_proto/messages.h"

#include <algorithm>
#include <string>

#include "reft/local_proto/codec.h"

namespace reft::local_proto {
namespace {

constexpr size_t kMaxErrorMessage = 4096;

void PutLayout(Writer& w, const JobLayout& l) {
  w.I32(l.dp);
  w.I32(l.tp);
  w.I32(l.pp);
  w.I32(l.zero);
}

Status GetLayout(Reader& r, JobLayout* l) {
  REFT_RETURN_NOT_OK(r.I32(&l->dp, "layout.dp"));
  REFT_RETURN_NOT_OK(r.I32(&l->tp, "layout.tp"));
  REFT_RETURN_NOT_OK(r.I32(&l->pp, "layout.pp"));
  return r.I32(&l->zero, "layout.zero");
}

Reader MakeReader(const std::vector<uint8_t>& p) { return Reader(p.data(), p.size()); }

}  // namespace

std::vector<uint8_t> Encode(const Hello& m) {
  Writer w;
  w.Bytes(m.job);
  w.I32(m.coord.pp);
  w.I32(m.coord.tp);
  w.I32(m.coord.dp);
  PutLayout(w, m.layout);
  w.Bytes(m.protection);
  w.Bytes(m.client_version);
  if (!m.owner_group.empty()) w.Bytes(m.owner_group);
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits& l, Hello* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(r.Bytes(&m->job, l.max_string_bytes, "job"));
  REFT_RETURN_NOT_OK(r.I32(&m->coord.pp, "pp"));
  REFT_RETURN_NOT_OK(r.I32(&m->coord.tp, "tp"));
  REFT_RETURN_NOT_OK(r.I32(&m->coord.dp, "dp"));
  REFT_RETURN_NOT_OK(GetLayout(r, &m->layout));
  REFT_RETURN_NOT_OK(r.Bytes(&m->protection, l.max_string_bytes, "protection"));
  REFT_RETURN_NOT_OK(r.Bytes(&m->client_version, l.max_string_bytes, "client_version"));
  m->owner_group.clear();
  if (r.left() > 0) {
    REFT_RETURN_NOT_OK(r.Bytes(&m->owner_group, l.max_string_bytes, "owner_group"));
    if (m->owner_group.empty()) return Status::Protocol("hello: empty owner_group is encoded");
  }
  return r.Finish("hello");
}

std::vector<uint8_t> Encode(const HelloReply& m) {
  Writer w;
  w.U64(m.session_id);
  w.Bytes(m.daemon_version);
  w.U64(m.shard_chunk);
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits& l, HelloReply* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(r.U64(&m->session_id, "session_id"));
  REFT_RETURN_NOT_OK(r.Bytes(&m->daemon_version, l.max_string_bytes, "daemon_version"));
  REFT_RETURN_NOT_OK(r.U64(&m->shard_chunk, "shard_chunk"));
  return r.Finish("hello_reply");
}

std::vector<uint8_t> Encode(const Register& m) {
  Writer w;
  w.Bytes(m.name);
  w.U8(static_cast<uint8_t>(m.kind));
  w.Bytes(m.dtype);
  w.I32(m.layer);
  w.U64(m.size);
  w.U8(m.optimizer ? 1 : 0);
  w.U32(m.memory.memory_kind);
  w.I32(m.memory.device);
  w.Bytes(m.memory.ipc_handle);
  w.U64(m.memory.allocation_id);
  w.U64(m.memory.allocation_size);
  w.U64(m.memory.offset);
  w.U8(m.memory.has_fd ? 1 : 0);
  // Optional trailers, in this order, each written only when it or a later one is present:
  // the gradient name, the device identity, the shard.
  const bool identity = !m.memory.device_uuid.empty() || !m.memory.pci_bus_id.empty();
  const bool shard = m.shard_total != 0;
  if (!m.gradient.empty() || identity || shard) w.Bytes(m.gradient);
  if (identity || shard) {
    w.Bytes(m.memory.device_uuid);
    w.Bytes(m.memory.pci_bus_id);
  }
  if (shard) {
    w.U64(m.shard_offset);
    w.U64(m.shard_total);
  }
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits& l, Register* m) {
  Reader r = MakeReader(p);
  uint8_t kind = 0, has_fd = 0, optimizer = 0;
  REFT_RETURN_NOT_OK(r.Bytes(&m->name, l.max_name_bytes, "name"));
  REFT_RETURN_NOT_OK(r.U8(&kind, "kind"));
  if (kind > 2) return Status::Protocol("register: unknown buffer kind " + std::to_string(kind));
  m->kind = static_cast<BufferKind>(kind);
  REFT_RETURN_NOT_OK(r.Bytes(&m->dtype, l.max_string_bytes, "dtype"));
  REFT_RETURN_NOT_OK(r.I32(&m->layer, "layer"));
  REFT_RETURN_NOT_OK(r.U64(&m->size, "size"));
  REFT_RETURN_NOT_OK(r.U8(&optimizer, "optimizer"));
  if (optimizer > 1) return Status::Protocol("register: optimizer must be 0 or 1");
  m->optimizer = optimizer == 1;
  REFT_RETURN_NOT_OK(r.U32(&m->memory.memory_kind, "memory_kind"));
  REFT_RETURN_NOT_OK(r.I32(&m->memory.device, "device"));
  REFT_RETURN_NOT_OK(r.Bytes(&m->memory.ipc_handle, l.max_handle_bytes, "ipc_handle"));
  REFT_RETURN_NOT_OK(r.U64(&m->memory.allocation_id, "allocation_id"));
  REFT_RETURN_NOT_OK(r.U64(&m->memory.allocation_size, "allocation_size"));
  REFT_RETURN_NOT_OK(r.U64(&m->memory.offset, "offset"));
  REFT_RETURN_NOT_OK(r.U8(&has_fd, "has_fd"));
  if (has_fd > 1) return Status::Protocol("register: has_fd must be 0 or 1");
  m->memory.has_fd = has_fd == 1;
  m->gradient.clear();
  m->memory.device_uuid.clear();
  m->memory.pci_bus_id.clear();
  m->shard_offset = m->shard_total = 0;
  if (r.left() > 0) {
    REFT_RETURN_NOT_OK(r.Bytes(&m->gradient, l.max_name_bytes, "gradient"));
    if (r.left() > 0) {
      REFT_RETURN_NOT_OK(r.Bytes(&m->memory.device_uuid, l.max_string_bytes, "device_uuid"));
      REFT_RETURN_NOT_OK(r.Bytes(&m->memory.pci_bus_id, l.max_string_bytes, "pci_bus_id"));
      if (r.left() > 0) {
        REFT_RETURN_NOT_OK(r.U64(&m->shard_offset, "shard_offset"));
        REFT_RETURN_NOT_OK(r.U64(&m->shard_total, "shard_total"));
        if (m->shard_total == 0) return Status::Protocol("register: encoded shard has total 0");
      } else if (m->memory.device_uuid.empty() && m->memory.pci_bus_id.empty()) {
        return Status::Protocol("register: empty device identity is encoded");
      }
    } else if (m->gradient.empty()) {
      return Status::Protocol("register: empty gradient field is encoded");
    }
  }
  return r.Finish("register");
}

std::vector<uint8_t> Encode(const RegisterReply& m) {
  Writer w;
  w.U32(m.buffer_index);
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits&, RegisterReply* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(r.U32(&m->buffer_index, "buffer_index"));
  return r.Finish("register_reply");
}

std::vector<uint8_t> Encode(const StepMessage& m) {
  Writer w;
  w.I64(m.step);
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits&, StepMessage* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(r.I64(&m->step, "step"));
  return r.Finish("step message");
}

std::vector<uint8_t> Encode(const SnapshotBegin& m) {
  Writer w;
  w.I64(m.step);
  if (!m.optimizer.empty()) {
    w.U32(static_cast<uint32_t>(m.optimizer.size()));
    for (const auto& o : m.optimizer) {
      w.U32(o.buffer_index);
      w.Fixed(o.record.data(), o.record.size());
    }
  }
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits& l, SnapshotBegin* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(r.I64(&m->step, "step"));
  m->optimizer.clear();
  if (r.left() > 0) {
    uint32_t n = 0;
    REFT_RETURN_NOT_OK(r.Count(&n, l.max_buffers, 4 + kOptimizerHyperBytes, "optimizer"));
    if (n == 0) return Status::Protocol("snapshot_begin: empty optimizer trailer is encoded");
    m->optimizer.resize(n);
    for (auto& o : m->optimizer) {
      REFT_RETURN_NOT_OK(r.U32(&o.buffer_index, "optimizer.buffer_index"));
      REFT_RETURN_NOT_OK(r.Fixed(o.record.data(), o.record.size(), "optimizer.record"));
    }
  }
  return r.Finish("snapshot_begin");
}

namespace {
// The part of a slot reply every kind shares: the step, the file and where things lie in it.
void WriteSlotBody(Writer& w, const SlotReply& m) {
  w.I64(m.step);
  w.U64(m.file_size);
  w.U32(static_cast<uint32_t>(m.staged.size()));
  for (const auto& s : m.staged) {
    w.U32(s.buffer_index);
    w.U64(s.file_offset);
    w.U64(s.size);
  }
  w.U32(static_cast<uint32_t>(m.regions.size()));
  for (const auto& g : m.regions) {
    w.Bytes(g.name);
    w.U64(g.file_offset);
    w.U64(g.size);
  }
}
}  // namespace

std::vector<uint8_t> Encode(const SlotReply& m) {
  Writer w;
  WriteSlotBody(w, m);
  if (!m.gradients.empty()) {
    w.U64(m.gradient_file_size);
    w.U32(static_cast<uint32_t>(m.gradients.size()));
    for (const auto& g : m.gradients) {
      w.Bytes(g.name);
      w.U64(g.file_offset);
      w.U64(g.size);
    }
  }
  return w.Take();
}

namespace {
constexpr uint8_t kReportPhasesTag = 3;  // the restore report's phases trailer
}  // namespace

std::vector<uint8_t> Encode(const RestoreReply& m) {
  Writer w;
  WriteSlotBody(w, m.slot);
  w.Bytes(m.report.source);
  w.U64(m.report.agreement_ns);
  w.U64(m.report.daemon_ns);
  w.Bytes(m.report.agreement);
  w.Bytes(m.report.detail);
  // Optional trailer, older clients never see it: 1 = reshaped, 2 = only the saved layout (a
  // probe of a step saved under the trainer's own layout).
  if (m.report.reshaped || !m.report.from_layout.empty()) {
    w.U8(m.report.reshaped ? 1 : 2);
    w.Bytes(m.report.from_layout);
    for (const auto* names : {&m.report.filled, &m.report.untouched}) {
      w.U32(static_cast<uint32_t>(names->size()));
      for (const auto& n : *names) w.Bytes(n);
    }
  }
  // Optional trailer (tag 3), after the reshape one when both are there.
  if (!m.report.phases.empty()) {
    w.U8(kReportPhasesTag);
    w.U32(static_cast<uint32_t>(m.report.phases.size()));
    for (const auto& ph : m.report.phases) {
      w.Bytes(ph.phase);
      w.I64(ph.at_ms);
      w.Bytes(ph.node);
    }
  }
  return w.Take();
}

namespace {
constexpr uint8_t kRestoreReshape = 1, kRestoreProbe = 2, kRestoreRemap = 4, kRestoreStream = 8,
                  kRestoreReads = 16;
}  // namespace

std::vector<uint8_t> Encode(const RestoreRequest& m) {
  Writer w;
  const bool remap = !m.remap.empty();
  const uint8_t flags = (m.reshape ? kRestoreReshape : 0) | (m.probe ? kRestoreProbe : 0) |
                        (remap ? kRestoreRemap : 0) | (m.stream ? kRestoreStream : 0) |
                        (m.reads.empty() ? 0 : kRestoreReads);
  if (flags == 0) return w.Take();  // the default request stays empty (older daemons accept it)
  w.U8(flags);
  if (remap) {
    w.Bytes(m.remap_layout);
    w.U32(static_cast<uint32_t>(m.remap.size()));
    for (const auto& b : m.remap) {
      w.Bytes(b.name);
      w.U32(static_cast<uint32_t>(b.segments.size()));
      for (const auto& s : b.segments) {
        w.U64(s.src);
        w.U64(s.dst);
        w.U64(s.length);
      }
    }
  }
  if (!m.reads.empty()) {
    w.I64(m.read_step);
    w.U32(static_cast<uint32_t>(m.reads.size()));
    for (const auto& r : m.reads) {
      w.Bytes(r.name);
      w.I32(r.pp);
      w.I32(r.tp);
      w.U64(r.begin);
      w.U64(r.end);
    }
  }
  return w.Take();
}

Status Decode(const std::vector<uint8_t>& p, const Limits& l, RestoreRequest* m) {
  Reader r = MakeReader(p);
  *m = RestoreRequest{};
  if (r.left() > 0) {
    uint8_t flags = 0;
    REFT_RETURN_NOT_OK(r.U8(&flags, "flags"));
    if (flags &
        ~(kRestoreReshape | kRestoreProbe | kRestoreRemap | kRestoreStream | kRestoreReads)) {
      return Status::Protocol("restore: unknown flags " + std::to_string(flags));
    }
    m->reshape = flags & kRestoreReshape;
    m->probe = flags & kRestoreProbe;
    m->stream = flags & kRestoreStream;
    if (flags & kRestoreRemap) {
      REFT_RETURN_NOT_OK(r.Bytes(&m->remap_layout, l.max_string_bytes, "remap_layout"));
      uint32_t n = 0;
      REFT_RETURN_NOT_OK(r.Count(&n, l.max_buffers, 8, "remap"));
      if (n == 0) return Status::Protocol("restore: an empty remap trailer is encoded");
      m->remap.resize(n);
      for (auto& b : m->remap) {
        REFT_RETURN_NOT_OK(r.Bytes(&b.name, l.max_name_bytes, "remap.name"));
        uint32_t segments = 0;
        REFT_RETURN_NOT_OK(r.Count(&segments, UINT32_MAX, 24, "remap.segments"));
        b.segments.resize(segments);
        for (auto& s : b.segments) {
          REFT_RETURN_NOT_OK(r.U64(&s.src, "remap.src"));
          REFT_RETURN_NOT_OK(r.U64(&s.dst, "remap.dst"));
          REFT_RETURN_NOT_OK(r.U64(&s.length, "remap.length"));
        }
      }
    }
    if (flags & kRestoreReads) {
      REFT_RETURN_NOT_OK(r.I64(&m->read_step, "read_step"));
      uint32_t n = 0;
      REFT_RETURN_NOT_OK(r.Count(&n, l.max_buffers, 28, "reads"));
      if (n == 0) return Status::Protocol("restore: an empty reads trailer is encoded");
      m->reads.resize(n);
      for (auto& x : m->reads) {
        REFT_RETURN_NOT_OK(r.Bytes(&x.name, l.max_name_bytes, "reads.name"));
        REFT_RETURN_NOT_OK(r.I32(&x.pp, "reads.pp"));
        REFT_RETURN_NOT_OK(r.I32(&x.tp, "reads.tp"));
        REFT_RETURN_NOT_OK(r.U64(&x.begin, "reads.begin"));
        REFT_RETURN_NOT_OK(r.U64(&x.end, "reads.end"));
        if (x.end < x.begin) return Status::Protocol("restore: a read range ends before it begins");
      }
    }
  }
  return r.Finish("restore");
}

namespace {
Status ReadSlotBody(Reader& r, const Limits& l, SlotReply* m) {
  uint32_t n = 0;
  REFT_RETURN_NOT_OK(r.I64(&m->step, "step"));
  REFT_RETURN_NOT_OK(r.U64(&m->file_size, "file_size"));
  REFT_RETURN_NOT_OK(r.Count(&n, l.max_buffers, 20, "staged"));
  m->staged.resize(n);
  for (auto& s : m->staged) {
    REFT_RETURN_NOT_OK(r.U32(&s.buffer_index, "staged.buffer_index"));
    REFT_RETURN_NOT_OK(r.U64(&s.file_offset, "staged.file_offset"));
    REFT_RETURN_NOT_OK(r.U64(&s.size, "staged.size"));
    // Overflow-safe bound check: every placement must lie inside the mapped file.
    if (s.file_offset > m->file_size || s.size > m->file_size - s.file_offset) {
      return Status::Protocol("slot reply: placement of buffer " + std::to_string(s.buffer_index) +
                              " lies outside the slot file");
    }
  }
  // A slot has meta, the shard, r ARC copies, two parities and two regions per unique buffer.
  REFT_RETURN_NOT_OK(r.Count(&n, 2 * l.max_buffers + 32, 20, "regions"));
  m->regions.resize(n);
  for (auto& g : m->regions) {
    REFT_RETURN_NOT_OK(r.Bytes(&g.name, l.max_name_bytes + 8, "regions.name"));
    REFT_RETURN_NOT_OK(r.U64(&g.file_offset, "regions.file_offset"));
    REFT_RETURN_NOT_OK(r.U64(&g.size, "regions.size"));
    if (g.file_offset > m->file_size || g.size > m->file_size - g.file_offset) {
      return Status::Protocol("slot reply: region '" + g.name + "' lies outside the slot file");
    }
  }
  return Status::OK();
}
}  // namespace

Status Decode(const std::vector<uint8_t>& p, const Limits& l, SlotReply* m) {
  Reader r = MakeReader(p);
  uint32_t n = 0;
  REFT_RETURN_NOT_OK(ReadSlotBody(r, l, m));
  m->gradient_file_size = 0;
  m->gradients.clear();
  if (r.left() > 0) {
    REFT_RETURN_NOT_OK(r.U64(&m->gradient_file_size, "gradient_file_size"));
    REFT_RETURN_NOT_OK(r.Count(&n, l.max_buffers, 20, "gradients"));
    if (n == 0) return Status::Protocol("slot reply: empty gradient trailer is encoded");
    m->gradients.resize(n);
    for (auto& g : m->gradients) {
      REFT_RETURN_NOT_OK(r.Bytes(&g.name, l.max_name_bytes, "gradients.name"));
      REFT_RETURN_NOT_OK(r.U64(&g.file_offset, "gradients.file_offset"));
      REFT_RETURN_NOT_OK(r.U64(&g.size, "gradients.size"));
      if (g.file_offset > m->gradient_file_size ||
          g.size > m->gradient_file_size - g.file_offset) {
        return Status::Protocol("slot reply: gradient slice of '" + g.name +
                                "' lies outside the staging file");
      }
    }
  }
  return r.Finish("slot reply");
}

Status Decode(const std::vector<uint8_t>& p, const Limits& l, RestoreReply* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(ReadSlotBody(r, l, &m->slot));
  m->slot.gradient_file_size = 0;
  m->slot.gradients.clear();
  REFT_RETURN_NOT_OK(r.Bytes(&m->report.source, l.max_string_bytes, "report.source"));
  REFT_RETURN_NOT_OK(r.U64(&m->report.agreement_ns, "report.agreement_ns"));
  REFT_RETURN_NOT_OK(r.U64(&m->report.daemon_ns, "report.daemon_ns"));
  REFT_RETURN_NOT_OK(r.Bytes(&m->report.agreement, RestoreReport::kMaxText, "report.agreement"));
  REFT_RETURN_NOT_OK(r.Bytes(&m->report.detail, RestoreReport::kMaxText, "report.detail"));
  m->report.reshaped = false;
  m->report.from_layout.clear();
  m->report.filled.clear();
  m->report.untouched.clear();
  m->report.phases.clear();
  // The trailers, each optional, in this order: reshape (tag 1 or 2), phases (tag 3).
  uint8_t tag = 0;
  if (r.left() > 0) {
    REFT_RETURN_NOT_OK(r.U8(&tag, "report.trailer"));
    if (tag == 0) return Status::Protocol("restore reply: reshape trailer must say 1 or 2");
  }
  if (tag != 0 && tag != kReportPhasesTag) {
    const uint8_t reshaped = tag;
    if (reshaped != 1 && reshaped != 2) {
      return Status::Protocol("restore reply: reshape trailer must say 1 or 2");
    }
    m->report.reshaped = reshaped == 1;
    REFT_RETURN_NOT_OK(r.Bytes(&m->report.from_layout, l.max_string_bytes, "report.from_layout"));
    if (!m->report.reshaped && m->report.from_layout.empty()) {
      // What Encode never writes (a probe's trailer names the layout it found): one encoding
      // per message.
      return Status::Protocol("restore reply: a probe trailer without the saved layout");
    }
    for (auto* names : {&m->report.filled, &m->report.untouched}) {
      uint32_t n = 0;
      REFT_RETURN_NOT_OK(r.Count(&n, l.max_buffers, 4, "report.buffers"));
      names->resize(n);
      for (auto& name : *names) {
        REFT_RETURN_NOT_OK(r.Bytes(&name, l.max_name_bytes, "report.buffer"));
      }
    }
    tag = 0;
    if (r.left() > 0) {
      REFT_RETURN_NOT_OK(r.U8(&tag, "report.trailer"));
      if (tag != kReportPhasesTag) return Status::Protocol("restore reply: unknown trailer after the reshape one");
    }
  }
  if (tag == kReportPhasesTag) {
    uint32_t n = 0;
    REFT_RETURN_NOT_OK(r.Count(&n, RestoreReport::kMaxPhases, 16, "report.phases"));
    if (n == 0) return Status::Protocol("restore reply: a phases trailer without phases");
    m->report.phases.resize(n);
    for (auto& ph : m->report.phases) {
      REFT_RETURN_NOT_OK(r.Bytes(&ph.phase, l.max_name_bytes, "report.phase"));
      REFT_RETURN_NOT_OK(r.I64(&ph.at_ms, "report.phase.at_ms"));
      REFT_RETURN_NOT_OK(r.Bytes(&ph.node, l.max_string_bytes, "report.phase.node"));
    }
  }
  return r.Finish("restore reply");
}

std::vector<uint8_t> Encode(const SnapshotStaged& m) {
  Writer w;
  w.I64(m.step);
  w.U32(static_cast<uint32_t>(m.events.size()));
  for (const auto& e : m.events) {
    w.U32(e.memory_kind);
    w.I32(e.device);
    w.Bytes(e.ipc_handle);
    w.U8(e.has_fd ? 1 : 0);
  }
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits& l, SnapshotStaged* m) {
  Reader r = MakeReader(p);
  uint32_t n = 0;
  REFT_RETURN_NOT_OK(r.I64(&m->step, "step"));
  REFT_RETURN_NOT_OK(r.Count(&n, l.max_fds_per_frame, 13, "events"));
  m->events.resize(n);
  for (auto& e : m->events) {
    uint8_t has_fd = 0;
    REFT_RETURN_NOT_OK(r.U32(&e.memory_kind, "event.memory_kind"));
    REFT_RETURN_NOT_OK(r.I32(&e.device, "event.device"));
    REFT_RETURN_NOT_OK(r.Bytes(&e.ipc_handle, l.max_handle_bytes, "event.ipc_handle"));
    REFT_RETURN_NOT_OK(r.U8(&has_fd, "event.has_fd"));
    if (has_fd > 1) return Status::Protocol("snapshot_staged: has_fd must be 0 or 1");
    e.has_fd = has_fd == 1;
  }
  return r.Finish("snapshot_staged");
}

std::vector<uint8_t> Encode(const QueryCommittedReply& m) {
  Writer w;
  w.U8(m.committed ? 1 : 0);
  w.I64(m.newest_committed);
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits&, QueryCommittedReply* m) {
  Reader r = MakeReader(p);
  uint8_t c = 0;
  REFT_RETURN_NOT_OK(r.U8(&c, "committed"));
  m->committed = c != 0;
  REFT_RETURN_NOT_OK(r.I64(&m->newest_committed, "newest_committed"));
  return r.Finish("query_committed_reply");
}

std::vector<uint8_t> Encode(const ErrorReply& m) {
  Writer w;
  w.U32(m.code);
  w.Bytes(m.message);
  return w.Take();
}
std::vector<uint8_t> EncodeError(const Status& status) {
  ErrorReply e;
  e.code = static_cast<uint32_t>(status.code());
  e.message = status.message().substr(0, kMaxErrorMessage);
  return Encode(e);
}
Status Decode(const std::vector<uint8_t>& p, const Limits&, ErrorReply* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(r.U32(&m->code, "code"));
  REFT_RETURN_NOT_OK(r.Bytes(&m->message, kMaxErrorMessage, "message"));
  return r.Finish("error");
}

std::vector<uint8_t> Encode(const PlanQuery& m) {
  Writer w;
  w.Bytes(m.job);
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits& l, PlanQuery* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(r.Bytes(&m->job, l.max_string_bytes, "job"));
  return r.Finish("plan_query");
}

namespace {
constexpr uint8_t kPlanInline = 0, kPlanFile = 1;
}  // namespace

std::vector<uint8_t> Encode(const PlanReply& m) {
  Writer w;
  if (m.file_bytes > 0) {
    w.U8(kPlanFile);
    w.U64(m.file_bytes);
  } else {
    w.U8(kPlanInline);
    w.Bytes(m.json);
  }
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits&, PlanReply* m) {
  Reader r = MakeReader(p);
  uint8_t form = 0;
  m->json.clear();
  m->file_bytes = 0;
  REFT_RETURN_NOT_OK(r.U8(&form, "form"));
  if (form == kPlanInline) {
    REFT_RETURN_NOT_OK(r.Bytes(&m->json, PlanReply::kMaxInline, "json"));
  } else if (form == kPlanFile) {
    REFT_RETURN_NOT_OK(r.U64(&m->file_bytes, "file_bytes"));
    if (m->file_bytes == 0 || m->file_bytes > PlanReply::kMaxFileBytes) {
      return Status::Protocol("plan_reply: a file of " + std::to_string(m->file_bytes) +
                              " bytes (1.." + std::to_string(PlanReply::kMaxFileBytes) + ")");
    }
  } else {
    return Status::Protocol("plan_reply: unknown form " + std::to_string(form));
  }
  return r.Finish("plan_reply");
}

std::vector<uint8_t> Encode(const AorStatusReply& m) {
  Writer w;
  w.Bytes(m.state.substr(0, AorStatusReply::kMaxText));
  for (uint64_t v : {m.replays, m.copies, m.verified, m.mismatches}) w.U64(v);
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits&, AorStatusReply* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(r.Bytes(&m->state, AorStatusReply::kMaxText, "state"));
  REFT_RETURN_NOT_OK(r.U64(&m->replays, "replays"));
  REFT_RETURN_NOT_OK(r.U64(&m->copies, "copies"));
  REFT_RETURN_NOT_OK(r.U64(&m->verified, "verified"));
  REFT_RETURN_NOT_OK(r.U64(&m->mismatches, "mismatches"));
  return r.Finish("aor_status_reply");
}

std::vector<uint8_t> Encode(const FailureReport& m) {
  Writer w;
  w.Bytes(m.job);
  w.Bytes(m.reason.substr(0, FailureReport::kMaxReason));
  w.U8(m.peer_rank ? 1 : 0);
  w.I64(m.peer_rank.value_or(-1));
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits& l, FailureReport* m) {
  Reader r = MakeReader(p);
  REFT_RETURN_NOT_OK(r.Bytes(&m->job, l.max_string_bytes, "job"));
  REFT_RETURN_NOT_OK(r.Bytes(&m->reason, FailureReport::kMaxReason, "reason"));
  uint8_t has_rank = 0;
  int64_t rank = -1;
  REFT_RETURN_NOT_OK(r.U8(&has_rank, "has_peer_rank"));
  REFT_RETURN_NOT_OK(r.I64(&rank, "peer_rank"));
  if (has_rank > 1 || (has_rank == 0 && rank != -1)) {
    return Status::Protocol("failure_report: has_peer_rank must be 0 (with peer_rank -1) or 1");
  }
  if (has_rank == 1 && rank < 0) {  // libreft refuses it before sending: a malformed frame
    return Status::Protocol("failure_report: peer_rank must be >= 0, not " + std::to_string(rank));
  }
  m->peer_rank = has_rank == 1 ? std::optional<int64_t>(rank) : std::nullopt;
  return r.Finish("failure_report");
}

std::vector<uint8_t> Encode(const FailureReportReply& m) {
  Writer w;
  const size_t n = std::min<size_t>(m.nodes.size(), FailureReportReply::kMaxNodes);
  w.U32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) w.Bytes(m.nodes[i]);
  return w.Take();
}
Status Decode(const std::vector<uint8_t>& p, const Limits& l, FailureReportReply* m) {
  Reader r = MakeReader(p);
  uint32_t n = 0;
  REFT_RETURN_NOT_OK(r.U32(&n, "count"));
  if (n > FailureReportReply::kMaxNodes) {
    return Status::Protocol("failure_report_reply names " + std::to_string(n) +
                            " nodes (at most " + std::to_string(FailureReportReply::kMaxNodes) + ")");
  }
  m->nodes.resize(n);
  for (auto& node : m->nodes) REFT_RETURN_NOT_OK(r.Bytes(&node, l.max_string_bytes, "node"));
  return r.Finish("failure_report_reply");
}

Status ToStatus(const ErrorReply& e) {
  if (e.code == 0 || e.code > static_cast<uint32_t>(StatusCode::kInternal)) {
    return Status::Protocol("daemon sent unknown error code " + std::to_string(e.code) + ": " +
                            e.message);
  }
  return Status(static_cast<StatusCode>(e.code), e.message);
}

}  // namespace reft::local_proto
