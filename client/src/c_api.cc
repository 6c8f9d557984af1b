// The C ABI over reft::Client. Errors never cross as exceptions; each call records its
// message in a thread-local string returned by reft_last_error().
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>

#include "reft/client.h"
#include "reft/reft.h"
#include "optimizer_fields.h"

struct reft_client {
  std::unique_ptr<reft::Client> impl;
};

namespace {

thread_local std::string g_last_error;

int Report(const reft::Status& st) {
  g_last_error = st.ok() ? std::string() : st.ToString();
  return static_cast<int>(st.code());
}

int NullHandle() { return Report(reft::Status::InvalidArgument("reft_client handle is NULL")); }

// Copies `s` into out[0..size), truncated and NUL-terminated (size > 0).
void CopyTruncated(const std::string& s, char* out, size_t size) {
  const size_t n = std::min(s.size(), size - 1);
  std::memcpy(out, s.data(), n);
  out[n] = '\0';
}

// Reads a field only when the caller's struct is new enough to contain it.
#define REFT_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof((ptr)->field))

}  // namespace

extern "C" {

void reft_options_init(reft_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->layout_dp = o->layout_tp = o->layout_pp = 1;
}

void reft_buffer_options_init(reft_buffer_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->layer = -1;
}

void reft_restore_options_init(reft_restore_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
}

void reft_restore_report_init(reft_restore_report* r) {
  if (r == nullptr) return;
  std::memset(r, 0, sizeof(*r));
  r->struct_size = sizeof(*r);
  r->step = -1;
}

void reft_optimizer_step_init(reft_optimizer_step* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  const reft::OptimizerStep d;
  o->beta1 = d.beta1;
  o->beta2 = d.beta2;
  o->eps = d.eps;
  o->weight_decay = d.weight_decay;
  o->clip_coef = d.clip_coef;
  o->grad_scale = d.grad_scale;
}

int reft_connect(const reft_options* o, reft_client** out) {
  if (o == nullptr || out == nullptr) {
    return Report(reft::Status::InvalidArgument("reft_connect: options and out must not be NULL"));
  }
  if (o->struct_size < offsetof(reft_options, protection)) {
    return Report(reft::Status::InvalidArgument("reft_options.struct_size " +
                                                std::to_string(o->struct_size) +
                                                " is too small (call reft_options_init)"));
  }
  reft::ClientOptions opts;
  if (o->socket_path != nullptr) opts.socket_path = o->socket_path;
  if (o->job != nullptr) opts.job = o->job;
  opts.pp = o->pp;
  opts.tp = o->tp;
  opts.dp = o->dp;
  opts.layout = {o->layout_dp, o->layout_tp, o->layout_pp, o->layout_zero};
  if (REFT_HAS_FIELD(o, reft_options, protection) && o->protection != nullptr) {
    opts.protection = o->protection;
  }
  if (REFT_HAS_FIELD(o, reft_options, reply_timeout_ms) && o->reply_timeout_ms > 0) {
    opts.reply_timeout_ms = o->reply_timeout_ms;
  }
  if (REFT_HAS_FIELD(o, reft_options, connect_timeout_ms) && o->connect_timeout_ms != 0) {
    opts.connect_timeout = std::chrono::milliseconds(std::max(o->connect_timeout_ms, 0));
  }
  auto c = reft::Client::Connect(opts);
  if (!c.ok()) return Report(c.status());
  auto* h = new (std::nothrow) reft_client;
  if (h == nullptr) return Report(reft::Status::Internal("out of host memory"));
  h->impl = std::move(*c);
  *out = h;
  return Report(reft::Status::OK());
}

int reft_register(reft_client* c, const char* name, void* data, uint64_t size,
                  const reft_buffer_options* o) {
  if (c == nullptr) return NullHandle();
  if (name == nullptr) return Report(reft::Status::InvalidArgument("buffer name is NULL"));
  reft::BufferOptions opts;
  if (o != nullptr) {
    if (o->struct_size < offsetof(reft_buffer_options, memory) + sizeof(o->memory)) {
      return Report(reft::Status::InvalidArgument("reft_buffer_options.struct_size too small"));
    }
    if (o->kind != REFT_KIND_REPLICATED && o->kind != REFT_KIND_UNIQUE &&
        o->kind != REFT_KIND_GRADIENT) {
      return Report(reft::Status::InvalidArgument("unknown buffer kind " + std::to_string(o->kind)));
    }
    if (o->memory < REFT_MEMORY_HOST || o->memory > REFT_MEMORY_HIP) {
      return Report(reft::Status::InvalidArgument("unknown memory " + std::to_string(o->memory)));
    }
    opts.kind = static_cast<reft::BufferKind>(o->kind);
    if (o->dtype != nullptr) opts.dtype = o->dtype;
    opts.layer = o->layer;
    opts.memory = static_cast<reft::MemoryLocation>(o->memory);
    if (REFT_HAS_FIELD(o, reft_buffer_options, optimizer)) opts.optimizer = o->optimizer != 0;
    if (REFT_HAS_FIELD(o, reft_buffer_options, gradient) && o->gradient != nullptr) {
      opts.gradient = o->gradient;
    }
    if (REFT_HAS_FIELD(o, reft_buffer_options, no_staging)) opts.allow_staging = o->no_staging == 0;
    if (REFT_HAS_FIELD(o, reft_buffer_options, shard_total)) {
      opts.shard_offset = o->shard_offset;
      opts.shard_total = o->shard_total;
    }
  }
  return Report(c->impl->Register(name, data, size, opts));
}

int reft_staged_reason(reft_client* c, const char* name, char* reason, size_t size) {
  if (c == nullptr) return NullHandle();
  if (name == nullptr) return Report(reft::Status::InvalidArgument("buffer name is NULL"));
  if (reason == nullptr || size == 0) {
    return Report(reft::Status::InvalidArgument("reason buffer is NULL or empty"));
  }
  auto why = c->impl->StagedReason(name);
  if (!why.ok()) return Report(why.status());
  CopyTruncated(*why, reason, size);
  return Report(reft::Status::OK());
}

int reft_set_stream(reft_client* c, int32_t memory, int32_t device, void* stream) {
  if (c == nullptr) return NullHandle();
  return Report(c->impl->SetStream(static_cast<reft::MemoryLocation>(memory), device, stream));
}

int reft_snapshot(reft_client* c, int64_t step) {
  if (c == nullptr) return NullHandle();
  return Report(c->impl->Snapshot(step));
}

int reft_snapshot_aor(reft_client* c, int64_t step, const reft_optimizer_step* steps,
                      size_t count) {
  if (c == nullptr) return NullHandle();
  if (steps == nullptr || count == 0) {
    return Report(reft::Status::InvalidArgument("reft_snapshot_aor: no optimizer step given"));
  }
  const uint32_t stride = steps[0].struct_size;
  if (stride < offsetof(reft_optimizer_step, buffer) + sizeof(steps[0].buffer)) {
    return Report(reft::Status::InvalidArgument("reft_optimizer_step.struct_size " +
                                                std::to_string(stride) +
                                                " is too small (call reft_optimizer_step_init)"));
  }
  const auto* base = reinterpret_cast<const uint8_t*>(steps);
  std::map<std::string, reft::OptimizerStep> per_buffer;
  reft::OptimizerStep all;
  for (size_t i = 0; i < count; ++i) {
    const auto* o = reinterpret_cast<const reft_optimizer_step*>(base + i * stride);
    if (o->struct_size != stride) {
      return Report(reft::Status::InvalidArgument(
          "reft_snapshot_aor: records of different struct_size in one array"));
    }
    // A caller compiled against an older header passes a shorter record: the fields it lacks
    // keep reft_optimizer_step_init's defaults.
    reft_optimizer_step full;
    reft_optimizer_step_init(&full);
    std::memcpy(&full, o, std::min<size_t>(stride, sizeof(full)));
    full.struct_size = sizeof(full);
    reft::OptimizerStep s;
    reft::client_internal::CopyOptimizerFields(full, &s);
    if (o->buffer == nullptr) {
      if (count != 1) {
        return Report(reft::Status::InvalidArgument(
            "reft_snapshot_aor: with several records each must name its optimizer buffer"));
      }
      all = s;
    } else if (!per_buffer.emplace(o->buffer, s).second) {
      return Report(reft::Status::InvalidArgument(std::string("reft_snapshot_aor: buffer '") +
                                                  o->buffer + "' given twice"));
    }
  }
  if (per_buffer.empty()) return Report(c->impl->Snapshot(step, all));
  return Report(c->impl->Snapshot(step, per_buffer));
}

int reft_fence(reft_client* c) {
  if (c == nullptr) return NullHandle();
  return Report(c->impl->Fence());
}

int reft_bubble_begin(reft_client* c) {
  if (c == nullptr) return NullHandle();
  return Report(c->impl->BubbleBegin());
}

int reft_bubble_end(reft_client* c) {
  if (c == nullptr) return NullHandle();
  return Report(c->impl->BubbleEnd());
}

int reft_enable_has(reft_client* c, int32_t stages, int32_t stage, int32_t micro_batches,
                    double forward_seconds, double backward_seconds) {
  if (c == nullptr) return NullHandle();
  reft::HasPipelineHint h;
  h.stages = stages;
  h.stage = stage;
  h.micro_batches = micro_batches;
  h.forward_seconds = forward_seconds;
  h.backward_seconds = backward_seconds;
  return Report(c->impl->EnableHas(h));
}

int reft_wait_committed(reft_client* c, int64_t step, int64_t timeout_ms, int* committed) {
  if (c == nullptr) return NullHandle();
  std::optional<std::chrono::milliseconds> t;
  if (timeout_ms >= 0) t = std::chrono::milliseconds(timeout_ms);
  auto r = c->impl->WaitCommitted(step, t);
  if (!r.ok()) return Report(r.status());
  if (committed != nullptr) *committed = *r ? 1 : 0;
  return Report(reft::Status::OK());
}

int reft_restore_progress(reft_client* c, int32_t* phase, uint64_t* bytes_done,
                          uint64_t* bytes_total) {
  if (c == nullptr) return NullHandle();
  static_assert(REFT_RESTORE_FAILED == static_cast<int>(reft::RestorePhase::kFailed));
  const reft::RestoreProgress p = c->impl->RestoreProgressNow();
  if (phase != nullptr) *phase = static_cast<int32_t>(p.phase);
  if (bytes_done != nullptr) *bytes_done = p.bytes_done;
  if (bytes_total != nullptr) *bytes_total = p.bytes_total;
  return Report(reft::Status::OK());
}

int reft_restore(reft_client* c, int64_t* step) {
  if (c == nullptr) return NullHandle();
  auto r = c->impl->Restore();
  if (!r.ok()) return Report(r.status());
  if (step != nullptr) *step = r->value_or(-1);
  return Report(reft::Status::OK());
}

int reft_restore_ex(reft_client* c, const reft_restore_options* o, int64_t* step,
                    int* reshaped) {
  if (c == nullptr) return NullHandle();
  reft::RestoreOptions opts;
  if (o != nullptr) {
    if (o->struct_size < offsetof(reft_restore_options, reshape) + sizeof(o->reshape)) {
      return Report(reft::Status::InvalidArgument("reft_restore_options.struct_size too small"));
    }
    opts.reshape = o->reshape != 0;
    if (o->struct_size >= offsetof(reft_restore_options, remap_count) + sizeof(o->remap_count) &&
        o->remap_count > 0) {
      if (o->remap == nullptr || o->remap_layout == nullptr) {
        return Report(reft::Status::InvalidArgument(
            "reft_restore_options: remap_count > 0 needs remap and remap_layout"));
      }
      opts.remap_layout = o->remap_layout;
      for (uint32_t i = 0; i < o->remap_count; ++i) {
        const reft_remap_segment& s = o->remap[i];
        if (s.buffer == nullptr) {
          return Report(reft::Status::InvalidArgument("reft_restore_options: remap segment " +
                                                      std::to_string(i) + " names no buffer"));
        }
        opts.remap[s.buffer].push_back({s.src, s.dst, s.length});
      }
    }
  }
  auto r = c->impl->Restore(opts);
  if (!r.ok()) return Report(r.status());
  if (step != nullptr) *step = r->value_or(-1);
  if (reshaped != nullptr) {
    auto report = c->impl->LastRestore();
    *reshaped = report && report->reshaped ? 1 : 0;
  }
  return Report(reft::Status::OK());
}

int reft_probe_restore(reft_client* c, int64_t* step, char* saved_layout,
                       size_t saved_layout_size) {
  if (c == nullptr) return NullHandle();
  auto r = c->impl->ProbeRestore();
  if (!r.ok()) return Report(r.status());
  if (step != nullptr) *step = *r ? (*r)->step : -1;
  if (saved_layout != nullptr && saved_layout_size > 0) {
    CopyTruncated(*r ? (*r)->saved_layout : std::string(), saved_layout, saved_layout_size);
  }
  return Report(reft::Status::OK());
}

int reft_last_restore(reft_client* c, reft_restore_report* out) {
  if (c == nullptr) return NullHandle();
  if (out == nullptr) return Report(reft::Status::InvalidArgument("reft_last_restore: report is NULL"));
  if (out->struct_size < sizeof(reft_restore_report)) {
    return Report(reft::Status::InvalidArgument("reft_restore_report.struct_size too small"));
  }
  auto r = c->impl->LastRestore();
  if (!r) return Report(reft::Status::NotFound("this handle has not restored yet"));
  const auto ns = [](std::chrono::nanoseconds d) { return static_cast<int64_t>(d.count()); };
  out->step = r->step;
  CopyTruncated(r->source, out->source, sizeof(out->source));
  out->agreement_ns = ns(r->agreement);
  out->daemon_ns = ns(r->daemon);
  out->total_ns = ns(r->total);
  out->reshaped = r->reshaped ? 1 : 0;
  CopyTruncated(r->from_layout, out->from_layout, sizeof(out->from_layout));
  out->filled = static_cast<uint32_t>(r->filled.size());
  out->untouched = static_cast<uint32_t>(r->untouched.size());
  CopyTruncated(r->agreement_reason, out->agreement_reason, sizeof(out->agreement_reason));
  return Report(reft::Status::OK());
}

int reft_close(reft_client* c) {
  if (c == nullptr) return Report(reft::Status::OK());
  reft::Status st = c->impl->Close();
  delete c;
  return Report(st);
}

int reft_query_plan(const char* socket_path, const char* job, int64_t timeout_ms, char** json) {
  if (job == nullptr || json == nullptr) {
    return Report(reft::Status::InvalidArgument("reft_query_plan: job and json must not be NULL"));
  }
  *json = nullptr;
  const std::chrono::milliseconds timeout(timeout_ms > 0 ? timeout_ms : 120000);
  auto doc = reft::QueryPlan(socket_path != nullptr ? socket_path : "", job, timeout);
  if (!doc.ok()) return Report(doc.status());
  // malloc, not new: the caller frees it with reft_free whatever its language.
  auto* out = static_cast<char*>(std::malloc(doc->size() + 1));
  if (out == nullptr) return Report(reft::Status::OutOfMemory("out of host memory"));
  std::memcpy(out, doc->data(), doc->size());
  out[doc->size()] = '\0';
  *json = out;
  return Report(reft::Status::OK());
}

void reft_free(void* p) { std::free(p); }

const char* reft_last_error(void) { return g_last_error.c_str(); }

const char* reft_status_name(int code) {
  if (code < 0 || code > REFT_INTERNAL) return "unknown";
  return reft::StatusCodeName(static_cast<reft::StatusCode>(code));
}

const char* reft_version(void) { return REFT_VERSION; }

}  // extern "C"
