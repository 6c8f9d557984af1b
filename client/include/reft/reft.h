/* reft.h: libreft C ABI (docs/protocol.md). Opaque handles, a versioned options struct
 * (struct_size first: older callers keep working when fields are appended), integer status
 * codes equal to reft::StatusCode, and a thread-local message for the last error.
 * Every function is thread-safe on distinct handles; one handle may be shared (calls are
 * serialised inside). Nothing is ever printed. */
#ifndef REFT_REFT_H_
#define REFT_REFT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define REFT_C_API __attribute__((visibility("default")))
#else
#define REFT_C_API
#endif

/* Status codes: identical to reft::StatusCode (never renumbered, only appended). */
enum {
  REFT_OK = 0,
  REFT_INVALID_ARGUMENT = 1,
  REFT_NOT_FOUND = 2,
  REFT_ALREADY_EXISTS = 3,
  REFT_OUT_OF_MEMORY = 4,
  REFT_CORRUPTED = 5,
  REFT_UNAVAILABLE = 6,
  REFT_TIMEOUT = 7,
  REFT_PERMISSION_DENIED = 8,
  REFT_LOST = 9,
  REFT_IO_ERROR = 10,
  REFT_PROTOCOL = 11,
  REFT_BUSY = 12,
  REFT_CANCELLED = 13,
  REFT_UNSUPPORTED = 14,
  REFT_INTERNAL = 15
};

/* REFT_KIND_GRADIENT: the flat all-reduced gradient protection "aor" replays optimizer shards
 * from; read by reftd at every snapshot, never stored or restored (docs/client.md "AOR"). */
enum { REFT_KIND_REPLICATED = 0, REFT_KIND_UNIQUE = 1, REFT_KIND_GRADIENT = 2 };
enum { REFT_MEMORY_HOST = 0, REFT_MEMORY_EMULATED = 1, REFT_MEMORY_CUDA = 2, REFT_MEMORY_HIP = 3 };

typedef struct reft_client reft_client;

/* Connection options, version 2. Call reft_options_init() first, then set fields. */
typedef struct reft_options {
  uint32_t struct_size;     /* sizeof(reft_options) as compiled by the caller */
  const char* socket_path;  /* NULL: env REFT_SOCKET, else /run/reft/reftd.sock */
  const char* job;
  int32_t pp, tp, dp;       /* this rank's coordinates */
  int32_t layout_dp, layout_tp, layout_pp, layout_zero;
  const char* protection;   /* NULL = "none" */
  int32_t reply_timeout_ms; /* 0 = default (60 s) */
  /* v2: how long reft_connect retries a refusal because this rank is still joined (another
   * live session of it, e.g. the trainer's previous process whose close reftd has not seen
   * yet): REFT_ALREADY_EXISTS only after this long. 0 = default (10 s), < 0 = not retried. */
  int32_t connect_timeout_ms;
} reft_options;

typedef struct reft_buffer_options {
  uint32_t struct_size;
  int32_t kind;       /* REFT_KIND_* */
  const char* dtype;  /* NULL = "uint8" */
  int32_t layer;      /* -1 = none */
  int32_t memory;     /* REFT_MEMORY_* */
  int32_t optimizer;  /* 1: a ZeRO-1 optimizer shard (AOR-eligible when unique); appended in v2 */
  /* v3: for an optimizer shard under "aor", the name of its gradient buffer (REFT_KIND_GRADIENT);
   * NULL = the only gradient buffer registered. */
  const char* gradient;
  /* v4: 1 = device memory reftd cannot pull (VMM / expandable segments) fails to register
   * instead of being staged by this process (reft_staged_reason says when it is). */
  int32_t no_staging;
  /* v5: a sharded buffer (REFT_KIND_UNIQUE): bytes [shard_offset, shard_offset+size) of a
   * global buffer of shard_total bytes; shard_total 0 = not sharded. Every dp rank registers
   * ceil(total/dp) bytes at offset dp*that (the last part padded): the parts tile [0, total). */
  uint64_t shard_offset;
  uint64_t shard_total;
} reft_buffer_options;

/* Bytes [src, src+length) of the saved global buffer `buffer` land at `dst` bytes into the
 * registered buffer of that name (reft_restore_options.remap). */
typedef struct reft_remap_segment {
  const char* buffer;
  uint64_t src;
  uint64_t dst;
  uint64_t length;
} reft_remap_segment;

/* Restore options, version 2. Call reft_restore_options_init() first, then set fields. */
typedef struct reft_restore_options {
  uint32_t struct_size; /* sizeof(reft_restore_options) as compiled by the caller */
  /* 1: restore a step saved under another layout by global buffer names (docs/recovery.md
   * "Reshape"); 0: a layout change is REFT_INVALID_ARGUMENT naming both layouts. */
  int32_t reshape;
  /* Version 2, with reshape: the buffers the segments name are filled from those ranges of the
   * saved buffer of the same name instead of by the sharding rule, their other bytes zeroed
   * (state partitioned by parameter, like a ZeRO optimizer's). Valid for the saved layout
   * `remap_layout` that reft_probe_restore returned; another one is REFT_BUSY: probe again. */
  const char* remap_layout;
  const reft_remap_segment* remap;
  uint32_t remap_count;
} reft_restore_options;

/* What the handle's last restore did (LastRestore() of the C++ API), version 1. Call
 * reft_restore_report_init() first. Strings are NUL-terminated, truncated to their arrays. */
typedef struct reft_restore_report {
  uint32_t struct_size;    /* sizeof(reft_restore_report) as compiled by the caller */
  int64_t step;            /* -1: nothing was committed job-wide */
  char source[16];         /* "memory" | "tier" | "none" */
  int64_t agreement_ns;    /* part of daemon_ns spent agreeing on the job-wide decision */
  int64_t daemon_ns;       /* the restore inside reftd */
  int64_t total_ns;        /* the restore as the trainer saw it, copies included */
  int32_t reshaped;        /* 1: the step was saved under another layout */
  char from_layout[64];    /* "dp=4,tp=1,pp=1,zero=1" when reshaped */
  uint32_t filled;         /* reshaped: buffers restored */
  uint32_t untouched;      /* reshaped: per-rank buffers the old layout lacks (left as they were) */
  char agreement_reason[256];  /* why it waited and whose decision it followed ("" = no wait) */
} reft_restore_report;

/* One iteration's optimizer hyper-parameters (AdamW, torch.optim.AdamW semantics) for
 * reft_snapshot_aor, version 1. Call reft_optimizer_step_init() first (beta1 0.9, beta2 0.999,
 * eps 1e-8, weight_decay 0, clip_coef 1, grad_scale 1), then set fields. */
typedef struct reft_optimizer_step {
  uint32_t struct_size; /* sizeof(reft_optimizer_step) as compiled by the caller */
  int32_t skipped;      /* 1: optimizer.step() was skipped (fp16 overflow) */
  uint64_t step;        /* optimizer step count after this update (torch state['step']), >= 1 */
  double lr, beta1, beta2, eps, weight_decay;
  double clip_coef;     /* min(1, max_norm / (total_norm + 1e-6)); 1 = no clipping */
  double grad_scale;    /* 1 / loss_scale under fp16 loss scaling, else 1 */
  const char* buffer;   /* NULL: every replayed optimizer shard; else the one it applies to */
  int32_t lerp_first_moment; /* 1: exp_avg.lerp_(grad, 1 - beta1) (torch.optim >= 2.0);
                                0: exp_avg.mul_(beta1).add_(grad, 1 - beta1) (torch 1.x, libtorch) */
  /* How the owner's kernels round (docs/protection.md "What is exact"); absent in callers built
   * against an older header (struct_size), which get the init values 0. */
  int32_t fma;             /* 1: multiply-adds are fused (torch >= 2.0 on AVX2/AVX-512) */
  uint32_t fused_width;    /* torch's fused CPU kernel of this vector width; 0 = not */
  int32_t l2_weight_decay; /* 1: Adam's L2 decay (grad += wd * param), not AdamW's */
  uint32_t not_replayable; /* not 0: the update cannot be replayed bit for bit (reason code) */
} reft_optimizer_step;

REFT_C_API void reft_options_init(reft_options* options);
REFT_C_API void reft_buffer_options_init(reft_buffer_options* options);
REFT_C_API void reft_optimizer_step_init(reft_optimizer_step* step);
REFT_C_API void reft_restore_options_init(reft_restore_options* options);
REFT_C_API void reft_restore_report_init(reft_restore_report* report);

/* Connects and joins; *out is set only on REFT_OK. */
REFT_C_API int reft_connect(const reft_options* options, reft_client** out);
/* options may be NULL (replicated, uint8, no layer, host memory). */
REFT_C_API int reft_register(reft_client* c, const char* name, void* data, uint64_t size,
                             const reft_buffer_options* options);
/* Why the device buffer `name` is staged (copied device->host by this process instead of
 * pulled by reftd): copied into reason[0..size) NUL-terminated; "" when it is pulled or host
 * memory. REFT_NOT_FOUND for a name that is not registered. */
REFT_C_API int reft_staged_reason(reft_client* c, const char* name, char* reason, size_t size);
/* The stream (cudaStream_t / hipStream_t; NULL = legacy default stream) whose work produces the
 * buffers on `device` of `memory` (REFT_MEMORY_*): reft_snapshot records its ready event there
 * and never synchronises the device. */
REFT_C_API int reft_set_stream(reft_client* c, int32_t memory, int32_t device, void* stream);
REFT_C_API int reft_snapshot(reft_client* c, int64_t step);
/* reft_snapshot with this iteration's optimizer hyper-parameters (protection "aor"): either one
 * record with buffer = NULL (the same for every replayed optimizer shard), or `count` records
 * each naming its optimizer buffer. Records are read with the stride of steps[0].struct_size.
 * Under "aor" with optimizer shards to replay, plain reft_snapshot is REFT_INVALID_ARGUMENT. */
REFT_C_API int reft_snapshot_aor(reft_client* c, int64_t step, const reft_optimizer_step* steps,
                                 size_t count);
REFT_C_API int reft_fence(reft_client* c);
/* HAS hints (docs/has.md): the device is idle (pipeline bubble) between these calls; reftd copies
 * the current snapshot there first. Cheap (two atomic stores); the first call attaches the hint
 * page. Advisory: a reftd without HAS reports it once, then the calls do nothing. */
REFT_C_API int reft_bubble_begin(reft_client* c);
REFT_C_API int reft_bubble_end(reft_client* c);
/* Optional: attach the hint page with this rank's pipeline (stages = 0: no description) so
 * reftd starts from the 1F1B simulator's bubble estimate. */
REFT_C_API int reft_enable_has(reft_client* c, int32_t stages, int32_t stage, int32_t micro_batches,
                               double forward_seconds, double backward_seconds);
/* timeout_ms < 0 waits forever; *committed = 1 when committed, 0 on timeout. */
REFT_C_API int reft_wait_committed(reft_client* c, int64_t step, int64_t timeout_ms,
                                   int* committed);
/* *step = restored step, or -1 when there is nothing to restore. */
REFT_C_API int reft_restore(reft_client* c, int64_t* step);
/* reft_restore with options (NULL = defaults). After a reshape, *reshaped (may be NULL) = 1. */
REFT_C_API int reft_restore_ex(reft_client* c, const reft_restore_options* options, int64_t* step,
                               int* reshaped);
/* The job-wide restore decision without restoring: *step = the step a restore would restore (-1:
 * none) and saved_layout (NUL-terminated, truncated to saved_layout_size) = the layout it was
 * saved under, "dp=4,tp=1,pp=1,zero=1". */
REFT_C_API int reft_probe_restore(reft_client* c, int64_t* step, char* saved_layout,
                                  size_t saved_layout_size);
/* Where a restore stands (reft_restore_progress), in the order a restore goes. */
enum {
  REFT_RESTORE_IDLE = 0,     /* no restore started on this handle yet */
  REFT_RESTORE_DECIDING = 1, /* reftd takes the job-wide decision and locates the step */
  REFT_RESTORE_FETCHING = 2, /* verified bytes stream from reftd into the buffers */
  REFT_RESTORE_COPYING = 3,  /* reftd abandoned the stream (it decoded): copying its memfd */
  REFT_RESTORE_STAGING = 4,  /* pushing staged device buffers back to their devices */
  REFT_RESTORE_DONE = 5,     /* the last restore succeeded (also with nothing to restore) */
  REFT_RESTORE_FAILED = 6    /* the last restore failed */
};
/* Progress of the restore running on `c` (or of its last one); lock-free, so another thread may
 * poll it while reft_restore runs on this handle. *phase = REFT_RESTORE_*, *bytes_done and
 * *bytes_total = the bytes it delivers into this process's buffers (total 0 until reftd placed
 * the state; equal at REFT_RESTORE_DONE). Any output pointer may be NULL. */
REFT_C_API int reft_restore_progress(reft_client* c, int32_t* phase, uint64_t* bytes_done,
                                     uint64_t* bytes_total);
/* The report of this handle's last successful restore; REFT_NOT_FOUND before one. */
REFT_C_API int reft_last_restore(reft_client* c, reft_restore_report* report);
/* Closes and frees the handle (NULL is ignored); returns the last snapshot's error, if any. */
REFT_C_API int reft_close(reft_client* c);

/* The plan document of `job` (JSON, what `reftctl plan show --job J -o json` prints without
 * "schema"; docs/planner.md "The online path") from the reftd behind socket_path (NULL: env
 * REFT_SOCKET, else /run/reft/reftd.sock), without joining the job or operator rights: reftd
 * answers the job's owner only. timeout_ms <= 0 = default (120 s). On REFT_OK *json is a
 * NUL-terminated string to release with reft_free. REFT_NOT_FOUND: no committed step (or no
 * such job); REFT_PERMISSION_DENIED: another uid's job; REFT_UNAVAILABLE: reftd not reached. */
REFT_C_API int reft_query_plan(const char* socket_path, const char* job, int64_t timeout_ms,
                               char** json);
/* Frees memory libreft allocated for the caller (reft_query_plan's document); NULL is ignored. */
REFT_C_API void reft_free(void* p);

/* Message of the last failed call on this thread ("" after a success). */
REFT_C_API const char* reft_last_error(void);
/* "ok", "invalid_argument", ... */
REFT_C_API const char* reft_status_name(int code);
REFT_C_API const char* reft_version(void);

#ifdef __cplusplus
}
#endif
#endif /* REFT_REFT_H_ */
