#pragma once
/// \file client.h
/// \brief libreft C++ API: a trainer process's connection to its node's reftd (docs/protocol.md).
///
/// One Client per trainer process and rank. It registers buffers once, then per step calls
/// Snapshot(step) (returns at once), Fence() before the optimizer modifies the buffers again,
/// and optionally WaitCommitted(step). After a restart, Restore() fills the registered buffers
/// from the newest step committed job-wide.
///
/// The library is quiet: it prints nothing, uses no gRPC, and starts exactly one thread, the
/// copy worker ("reft-copy"), which copies staged (CPU) buffers into the daemon's slot while
/// the trainer continues. Device buffers (emulated, CUDA, HIP) are pulled by the daemon.
/// Thread-safety: a Client may be used from several threads; calls are serialised internally.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reft/job_layout.h"
#include "reft/result.h"
#include "reft/status.h"

#if defined(__GNUC__)
#define REFT_CLIENT_API __attribute__((visibility("default")))
#else
#define REFT_CLIENT_API
#endif

namespace reft {

/// \brief Parallel layout of the job: dp, tp, pp and the ZeRO stage (reft/job_layout.h).
using Layout = JobLayout;

struct ClientOptions {
  /// reftd's local socket; empty = env REFT_SOCKET, else "/run/reft/reftd.sock".
  std::string socket_path;
  std::string job;             ///< job id (e.g. TORCHELASTIC_RUN_ID)
  int pp = 0, tp = 0, dp = 0;  ///< this rank's coordinates
  Layout layout;
  std::string protection = "none";  ///< "none" | "arcR" | "aec" | "rsR" joined with "+"
  int reply_timeout_ms = 60000;     ///< longest wait for one daemon reply
  /// The group that shares the job with the uid that first opens it on a node (a group name
  /// or gid; docs/security.md "Jobs belong to their owner"). Empty = env REFT_OWNER_GROUP,
  /// else the owner uid alone.
  std::string owner_group;
  /// How long Connect() retries a hello that reftd refuses with AlreadyExists because this
  /// rank is still joined (another live session of it on this node, or its join on another
  /// node): a trainer restarted by its launcher may say hello before its old session's close
  /// reached reftd. Retried with a backoff from 50 ms doubling to 500 ms; after this long the
  /// refusal is returned. Other errors are never retried. 0 = not retried.
  std::chrono::milliseconds connect_timeout{10000};
};

/// \brief kGradient: the flat, all-reduced gradient that protection "aor" replays optimizer
/// shards from. reftd reads it at every snapshot (only the ring neighbour's slice) and never
/// stores it; it is not part of the slot and not restored. See docs/client.md "AOR".
enum class BufferKind { kReplicated = 0, kUnique = 1, kGradient = 2 };

/// \brief Where a buffer's memory lives. Values equal kernels::MemoryKind.
enum class MemoryLocation { kHost = 0, kEmulated = 1, kCuda = 2, kHip = 3 };

struct BufferOptions {
  BufferKind kind = BufferKind::kReplicated;
  std::string dtype = "uint8";  ///< torch/numpy names ("float32", "bfloat16", ...) or "fp32"...
  int layer = -1;  ///< -1: not a layer's buffer
  MemoryLocation memory = MemoryLocation::kHost;
  bool optimizer = false;  ///< a ZeRO-1 optimizer shard (protection "aor" replays it)
  /// For an optimizer shard under "aor": the gradient buffer (kind kGradient) its update is
  /// replayed from. Empty = the only gradient buffer registered.
  std::string gradient;
  /// Device memory that reftd cannot pull (the backend refuses to export it: VMM / expandable
  /// segments, stream-ordered pools): true = stage it instead (the copy worker copies it to a
  /// pinned host buffer of this process at each snapshot; Client::StagedReason() says why);
  /// false = Register() fails with the export error.
  bool allow_staging = true;
  /// A sharded buffer (kind kUnique): this rank holds bytes [shard_offset, shard_offset+size)
  /// of a global buffer of `shard_total` bytes named `name` (ZeRO optimizer partitions, FSDP
  /// flat shards); 0 = not sharded. The dp ranks of a sharding group split it in equal parts in
  /// dp order: every rank registers ceil(total/dp) bytes at offset dp*that (the last part
  /// padded), so the parts tile [0, total) exactly once (InvalidArgument otherwise). A reshaped
  /// restore gives a rank of another layout its range, gathered from the saved parts.
  uint64_t shard_offset = 0;
  uint64_t shard_total = 0;
};

/// \brief How Restore() treats a committed step saved under another layout.
struct RestoreOptions {
  /// false: a layout change is InvalidArgument naming both layouts. true: restore the step into
  /// this rank's layout by global buffer names (docs/recovery.md "Reshape"); the same result
  /// as a plain restore when nothing changed.
  bool reshape = false;
  /// With reshape: registered buffers filled from scattered ranges of the saved buffer of the
  /// same name instead of by the sharding rule — state partitioned by parameter, such as a ZeRO
  /// optimizer's, whose placement changes with the world size. Each segment copies bytes
  /// [src, src+length) of the saved global buffer to `dst` bytes into the registered buffer;
  /// bytes no segment covers are zero. Valid for the saved layout `remap_layout` only (what
  /// ProbeRestore() returned); a newer step saved under another layout is Busy: probe again.
  struct Segment {
    uint64_t src = 0;
    uint64_t dst = 0;
    uint64_t length = 0;
  };
  std::string remap_layout;
  std::map<std::string, std::vector<Segment>> remap;
};

/// \brief Bytes [begin, end) of the saved buffer `name` of sharding group (pp, tp), into `dst`
/// (Client::ReadSaved). A replicated buffer, or a sharded one's global range.
struct SavedRange {
  std::string name;
  int pp = 0;
  int tp = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  void* dst = nullptr;
};

/// \brief What a restore would restore (Client::ProbeRestore).
struct RestoreProbe {
  int64_t step = -1;
  std::string saved_layout;  ///< JobLayout::ToString() of the layout the step was saved under
};

/// \brief One iteration's optimizer hyper-parameters (AdamW, torch.optim.AdamW semantics), sent
/// with Snapshot() so that reftd can replay the update of the ring neighbour's ZeRO-1 optimizer
/// shard on the host (protection "aor"; docs/protection.md "AOR"). The snapshot's step is the
/// training iteration the update belongs to. Every rank of a sharding group sends the same
/// values (they are: one global norm, one loss scaler, one schedule).
struct OptimizerStep {
  /// Optimizer step count after this iteration's update (torch's state['step']), >= 1; it does
  /// not advance on a skipped iteration.
  uint64_t step = 0;
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  /// Global gradient-clipping coefficient min(1, max_norm / (total_norm + 1e-6)); 1 = none.
  double clip_coef = 1.0;
  /// Gradient unscale factor: 1 / loss_scale under fp16 loss scaling, else 1.
  double grad_scale = 1.0;
  /// optimizer.step() was skipped (fp16 overflow): the state does not change.
  bool skipped = false;
  /// The owner updates exp_avg with `lerp_(grad, 1 - beta1)` (torch.optim since 2.0) rather
  /// than `mul_(beta1).add_(grad, alpha=1 - beta1)` (torch 1.x, libtorch's C++ Adam); the
  /// replay must use the same form to stay bit-identical.
  bool lerp_first_moment = false;
  /// How the owner's kernels round (aor::StepHyper; docs/protection.md "What is exact"): they
  /// fuse multiply-adds (torch >= 2.0 on AVX2/AVX-512); torch's fused CPU kernel of this vector
  /// width (0 = not); Adam's L2 weight decay instead of AdamW's decoupled one. The Python
  /// client finds them by running its optimizer (reft.OptimizerStep.from_torch).
  bool fma = false;
  uint8_t fused_width = 0;
  bool l2_weight_decay = false;
  /// Not 0: the owner's update cannot be replayed bit for bit (aor::NotReplayable code): reftd
  /// copies the shard instead of replaying it ("off: <why>").
  uint8_t not_replayable = 0;
};

/// \brief The AOR state of this rank's replay of its ring neighbour's optimizer shards
/// (Client::AorState; docs/protection.md "AOR in reftd").
struct AorReport {
  /// "" (nothing replayed), "probation", "on", "off: <why>" (e.g. "off: mismatch at step 7",
  /// "off: optimizer on cuda"); with several shards that differ, "'opt': on; 'opt2': off: ...".
  std::string state;
  uint64_t replays = 0;     ///< regions advanced by a replay
  uint64_t copies = 0;      ///< regions copied instead (first snapshot, gaps, AOR off)
  uint64_t verified = 0;    ///< replays also compared with the owner's copy
  uint64_t mismatches = 0;  ///< comparisons that differed (each turned AOR off for its shard)
};

/// \brief Runs reft's AOR replay kernel, the one reftd replays with, on host arrays: `n`
/// parameters, first and second moments of `state_dtype` (0 fp32, 2 bf16), updated in place
/// with `n` gradients of `grad_dtype` (0 fp32, 1 fp16, 2 bf16) by `step` (its `step` field is
/// the optimizer step count after the update). For a trainer that checks which replay form
/// reproduces its own optimizer. InvalidArgument for invalid hyper-parameters or arguments
/// (nothing changed).
REFT_CLIENT_API Status ReplayOptimizerStep(void* param, void* exp_avg, void* exp_avg_sq,
                                           int state_dtype, const void* grad, int grad_dtype,
                                           uint64_t n, const OptimizerStep& step);

/// \brief Emulated device memory (a memfd-backed "device", docs/data-paths.md "Save") allocated through
/// libreft, so that Register(..., MemoryLocation::kEmulated) can export it and the daemon pulls
/// it like GPU memory. For CI and benchmarks; Unsupported in a build without device backends.
class REFT_CLIENT_API EmulatedBuffer {
 public:
  /// \brief `exportable` = false: memory the emulated backend refuses to export, as CUDA
  /// refuses VMM memory, so that Register() takes the staged fallback (tests).
  static Result<std::unique_ptr<EmulatedBuffer>> Create(uint64_t size, bool exportable = true);
  ~EmulatedBuffer();
  EmulatedBuffer(const EmulatedBuffer&) = delete;
  EmulatedBuffer& operator=(const EmulatedBuffer&) = delete;
  void* data() const;
  uint64_t size() const;

 private:
  EmulatedBuffer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// \brief Where `ptr` lives as the device backends built into this libreft see it: the memory
/// kind and device ordinal, or {kHost, 0} when no device backend claims it.
REFT_CLIENT_API std::pair<MemoryLocation, int> LocateMemory(const void* ptr);
/// \brief The memory kinds this libreft registers: host and emulated always, CUDA and HIP when
/// their backends were compiled in.
REFT_CLIENT_API std::vector<MemoryLocation> BuiltMemoryLocations();
/// \brief {CUDA runtime this libreft was built with, installed driver} as cudaRuntimeGetVersion
/// and cudaDriverGetVersion report them (13000 = 13.0); {0, 0} without the CUDA backend, driver
/// 0 without a driver. A driver older than the runtime cannot run the CUDA backend.
REFT_CLIENT_API std::pair<int, int> CudaRuntimeAndDriver();

/// \brief The plan document of `job` from the reftd behind `socket_path` (empty: env
/// REFT_SOCKET, else "/run/reft/reftd.sock"): the JSON `reftctl plan show --job J -o json`
/// prints, without its "schema" member (docs/planner.md "The online path"). Asked on the local
/// socket without joining the job, so a launcher may ask before it knows its rank, and without
/// operator rights: reftd answers only a caller who owns the job (docs/security.md "Jobs
/// belong to their owner"). NotFound when the job has no committed step (or no owner: the
/// same answer as for a job that does not exist), PermissionDenied when another uid owns it
/// (the message names nothing of the job) or this uid may not use the socket, Unavailable
/// when reftd cannot be reached, Timeout when it does not answer within `timeout`.
REFT_CLIENT_API Result<std::string> QueryPlan(
    const std::string& socket_path, const std::string& job,
    std::chrono::milliseconds timeout = std::chrono::seconds(120));

/// \brief Reports a suspicion that a node of `job` failed — the node of `peer_rank` (a global
/// rank of the job) or, without one, every other node of the job — to the reftd at
/// `socket_path` (as QueryPlan: no hello, the caller must own the job). For trainers whose
/// collective failed and launchers whose worker group failed: reftd knocks at the suspected
/// node's port and, if nothing listens there any more, ends its lease at once instead of a TTL
/// later. A report never declares a death by itself (docs/coordination.md "Suspicions").
/// Returns the nodes being looked into. Busy when the job reports faster than reftd takes
/// reports (3 at once, then 1 a second), InvalidArgument for a rank outside the job, errors of
/// QueryPlan otherwise.
REFT_CLIENT_API Result<std::vector<std::string>> ReportFailure(
    const std::string& socket_path, const std::string& job, const std::string& reason,
    std::optional<int64_t> peer_rank = std::nullopt,
    std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// \brief Optional description of this rank's pipeline for HAS (daemon/has): lets reftd start
/// from the 1F1B simulator's bubble estimate before it has measured one iteration.
struct HasPipelineHint {
  int stages = 0;         ///< |P|; 0 = no hint (reftd learns the bubbles online)
  int stage = 0;          ///< this rank's stage, 0-based
  int micro_batches = 0;  ///< micro-batches per step
  double forward_seconds = 0, backward_seconds = 0;  ///< per micro-batch on this stage
};

/// \brief What reftd's HAS release gate did with this client's device pulls (cumulative).
struct HasCounters {
  uint64_t bubble_bytes = 0;    ///< released inside a bubble hint (layer 1)
  uint64_t compute_bytes = 0;   ///< released alongside compute, or when fence() waited (layer 2)
  uint64_t landed_in_bubble_bytes = 0;  ///< layer-1 bytes whose copy also ended in that bubble
  uint64_t gated_snapshots = 0;
  bool copying = false;  ///< a device-copy chunk is in flight right now
};

/// \brief How the last Restore() went. A restore is a decision the job's ranks take together
/// (docs/recovery.md "One decision per job"): every rank restores the same step from the same
/// source, or none does; `agreement` is the time this rank waited for that decision.
/// \brief One phase of a recovery: wall-clock unix ms on `node`, the node that observed it.
struct RecoveryPhaseTime {
  int64_t at_ms = 0;
  std::string node;
};

/// \brief When each phase of the recovery a restore ended happened (docs/recovery.md "Phases of
/// a recovery"); none where a phase did not happen (a restore with no loss, a decision without
/// a transfer, a fall-back to the tier) or was reported by a reftd that does not report phases.
/// Times of different nodes are subject to their clocks' skew.
struct RecoveryPhases {
  std::optional<RecoveryPhaseTime> lost_at;             ///< the lost node's last sign of life
  std::optional<RecoveryPhaseTime> declared_at;         ///< its departure declared (coordinator)
  std::optional<RecoveryPhaseTime> decided_at;          ///< the decision published
  std::optional<RecoveryPhaseTime> staged_at;           ///< its transfer plan staged everywhere
  std::optional<RecoveryPhaseTime> reconnected_at;      ///< this rank's trainer said hello
  std::optional<RecoveryPhaseTime> restore_started_at;  ///< reftd began this rank's restore
  std::optional<RecoveryPhaseTime> restore_ended_at;    ///< ... and ended it
};

struct RestoreReport {
  int64_t step = -1;        ///< -1: nothing committed job-wide (Restore() returned nullopt)
  std::string source;       ///< "memory" | "tier" | "none"
  std::chrono::nanoseconds agreement{0};  ///< part of `daemon`
  std::string agreement_reason;  ///< why it waited and whose decision it followed ("" = no wait)
  std::chrono::nanoseconds daemon{0};  ///< the restore inside reftd (locate, fetch, decode, ...)
  std::chrono::nanoseconds total{0};   ///< Restore() as the trainer saw it, copies included
  std::string detail;                  ///< where each part came from
  bool reshaped = false;     ///< the step was saved under another layout (`from_layout`)
  std::string from_layout;   ///< "dp=4,tp=1,pp=1,zero=1" when reshaped
  std::vector<std::string> filled;     ///< reshaped: buffers restored
  std::vector<std::string> untouched;  ///< reshaped: per-rank buffers the old layout lacks
  /// AorReport::state when the restore happened, under protection "aor" with optimizer shards
  /// replayed ("" otherwise, or from a reftd that does not report it).
  std::string aor;
  RecoveryPhases phases;
};

/// \brief Where a Restore() stands (Client::RestoreProgressNow), in the order a restore goes.
enum class RestorePhase : uint8_t {
  kIdle = 0,      ///< no restore started on this client yet
  kDeciding = 1,  ///< reftd takes the job-wide decision and locates the step (no bytes yet)
  kFetching = 2,  ///< reftd streams the verified bytes; they land in the buffers as they come
  kCopying = 3,   ///< reftd abandoned the stream (it decoded a lost part): copying its memfd
  kStaging = 4,   ///< pushing staged device buffers back to their devices
  kDone = 5,      ///< the last restore returned successfully (also with nothing to restore)
  kFailed = 6,    ///< the last restore returned an error
};

/// \brief Progress of the running (or last) Restore(): the bytes it delivers into this
/// process's buffers (host memory and staged device buffers; device memory that reftd writes
/// itself is not counted). `bytes_total` is 0 until reftd has placed the state (kDeciding);
/// at kDone `bytes_done == bytes_total`.
struct RestoreProgress {
  RestorePhase phase = RestorePhase::kIdle;
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
};

class REFT_CLIENT_API Client {
 public:
  /// \brief Connects and joins the job. Unavailable when reftd does not answer, InvalidArgument
  /// for a bad job/layout/protection, PermissionDenied when this uid is not allowed.
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();  ///< Close()s; its error is dropped (call Close() first to see it)
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// \brief Registers [data, data+size) under a unique `name` (at most 100 bytes). The memory
  /// must stay valid until Close(). Host memory is staged by the copy worker; device memory
  /// is exported (emulated memfd / CUDA or HIP IPC handle) and pulled by the daemon.
  ///
  /// Snapshots are sharded (docs/architecture.md "Glossary"): a rank stores 1/dp of the replicated bytes of its
  /// sharding group plus the redundancy its protection asks for, computed from its own copy.
  /// The copy worker fills what comes from host memory; reftd pulls what is on a device.
  Status Register(const std::string& name, void* data, uint64_t size,
                  const BufferOptions& options = {});
  /// \brief Why the device buffer `name` is staged (copied device->host by this process's copy
  /// worker instead of pulled by reftd), or "" when reftd pulls it or it is host memory.
  /// NotFound for a name that is not registered.
  Result<std::string> StagedReason(const std::string& name) const;

  /// \brief The stream whose queued work produces this client's buffers on `device` of
  /// `memory` (a cudaStream_t / hipStream_t; nullptr, the initial setting, is the legacy default
  /// stream). Snapshot() records its ready event there, so the pull starts after that work and
  /// Snapshot() never synchronises the device; staged restores are queued there too. Takes
  /// effect from the next Snapshot(); emulated memory ignores it.
  Status SetStream(MemoryLocation memory, int device, void* native_stream);
  /// \brief For language bindings that stage device memory with their own device copies
  /// (which libreft cannot wait on): the next Snapshot()'s copy worker waits until `*word >=
  /// value` before it reads host buffers. The binding queues its device->host copies, then a
  /// copy that writes `value` to `word` (pinned host memory) behind them. Consumed by the next
  /// Snapshot(); Timeout (that snapshot's error) after the reply timeout.
  Status GateHostCopies(const uint64_t* word, uint64_t value);

  /// \brief Starts the snapshot of `step` and returns without waiting for the copy. If the
  /// previous snapshot is still copying it is waited for first; if it failed and Fence() has
  /// not reported that yet, its error is returned and no new snapshot starts.
  /// Under protection "aor" with optimizer shards to replay, this form is InvalidArgument: use
  /// one of the overloads below.
  Status Snapshot(int64_t step);
  /// \brief Snapshot(step) carrying this iteration's optimizer hyper-parameters, the same for
  /// every optimizer shard reftd replays (protection "aor"). Ignored (not sent) when nothing is
  /// replayed (no "aor", dp = 1). InvalidArgument naming the field when a value is out of range.
  Status Snapshot(int64_t step, const OptimizerStep& optimizer);
  /// \brief The same with hyper-parameters per optimizer shard (by buffer name; e.g. one per
  /// parameter group with different weight decay). Every replayed shard needs an entry; names
  /// that are not registered optimizer buffers are InvalidArgument.
  Status Snapshot(int64_t step, const std::map<std::string, OptimizerStep>& optimizer);
  /// \brief Waits until the last snapshot's copy no longer needs the buffers; returns its error
  /// (e.g. OutOfMemory: the snapshot was refused, training may continue). OK with none.
  Status Fence();
  /// \brief True once `step` (or a newer step) is committed job-wide; false on timeout
  /// (nullopt = wait forever). An error when the daemon failed this step on this rank.
  Result<bool> WaitCommitted(int64_t step,
                             std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  /// \brief Fills every registered buffer from the newest step committed job-wide and returns
  /// it; nullopt when there is nothing to restore. Corrupted when a checksum fails (no byte
  /// that failed its checksum is ever written). Where reftd can, the bytes are streamed into
  /// the buffers as they are verified (docs/client.md "Streamed restores"): a restore that
  /// fails part-way may then leave the buffers partly overwritten with bytes of that step.
  Result<std::optional<int64_t>> Restore();
  /// \brief Restore() with options: `reshape` restores a step saved under another layout by
  /// global buffer names (the report's `untouched` buffers keep their bytes).
  Result<std::optional<int64_t>> Restore(const RestoreOptions& options);
  /// \brief Takes the job-wide restore decision as Restore() does and returns the step it chose
  /// and the layout that step was saved under, restoring nothing (nullopt: nothing committed).
  /// A trainer whose state placement depends on the layout computes RestoreOptions::remap from it.
  Result<std::optional<RestoreProbe>> ProbeRestore();
  /// \brief Reads ranges of saved buffers of committed step `step` into caller memory, from
  /// wherever the job holds them (this node, peers, the redundancy, else the persistent tier),
  /// nothing into the registered buffers, which need not exist: for a reader that finds its
  /// state in the step's own records (PyTorch DCP's metadata). Each call takes the job-wide
  /// restore decision as Restore() does; `step` must be the one it chose (ProbeRestore()), else
  /// Busy (a newer decision: probe and read the records again). NotFound for a name or group
  /// the step lacks; InvalidArgument for a per-rank buffer (unique without a shard) or a range
  /// outside the saved buffer. Many ranges are sent in several requests.
  Status ReadSaved(int64_t step, const std::vector<SavedRange>& ranges);
  /// \brief The report of the last Restore() that reached a decision; nullopt before one.
  std::optional<RestoreReport> LastRestore() const;
  /// \brief Progress of the Restore() running now (or of the last one): three atomic loads,
  /// no lock, so another thread may poll it while Restore() runs. The restore itself only
  /// adds each streamed record's size to a counter.
  RestoreProgress RestoreProgressNow() const;
  /// \brief The AOR state of this rank's replay of its ring neighbour's optimizer shards, as
  /// reftd has it now (answered at once, not after the work of the step just fenced: a change
  /// from the step just fenced shows one step later). Unsupported from a reftd that does not
  /// report it (then never asked again).
  Result<AorReport> AorState();
  /// \brief HAS hints (docs/has.md): the device is idle (pipeline bubble) from BubbleBegin()
  /// until BubbleEnd(). Two atomic stores in a page shared with reftd, no system call; reftd
  /// releases the device pull of the current snapshot into these windows first, alongside
  /// compute only what the bubbles cannot hold before the deadline (the next Fence()). The
  /// first call attaches the page (EnableHas() with no pipeline hint) and waits for an
  /// in-flight snapshot; if reftd has no HAS it returns that error once and later calls are
  /// no-ops. Call from the training thread.
  Status BubbleBegin();
  Status BubbleEnd();
  /// \brief Attaches the HAS hint page explicitly, with an optional pipeline description.
  Status EnableHas(const HasPipelineHint& hint = {});
  /// \brief reftd's HAS counters for this client; NotFound before EnableHas().
  Result<HasCounters> has_counters() const;

  /// \brief Fences, hangs up and joins the copy worker. Idempotent.
  Status Close();

  uint64_t session_id() const;

 private:
  Client();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace reft
