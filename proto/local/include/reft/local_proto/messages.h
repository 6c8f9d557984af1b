#pragma once
/// \file messages.h
/// \brief The payloads of every local-channel message and their bounded codecs.
///
/// Each Decode() consumes the whole payload (trailing bytes are a Protocol error) and checks
/// every string/count against Limits before allocating. fds travel out of band (SCM_RIGHTS)
/// and are not part of these structs.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reft/job_layout.h"
#include "reft/local_proto/frame.h"
#include "reft/result.h"

namespace reft::local_proto {

/// Client -> daemon, first message of a session.
struct Hello {
  std::string job;
  RankCoord coord;  ///< this rank's coordinates
  JobLayout layout;
  std::string protection = "none";
  std::string client_version;
  /// The group that shares the job with its owner (a name or numeric gid; "" = the owner's
  /// uid alone). Only the session that claims the job sets it. Optional trailing field:
  /// encoded only when non-empty, so a hello without it is byte-identical to protocol 3's.
  std::string owner_group;
};
struct HelloReply {
  uint64_t session_id = 0;
  std::string daemon_version;
  /// Shard alignment of the sharding function (protect::SlotMeta::shard_chunk): the client
  /// computes its rank's slot plan with the same inputs as reftd.
  uint64_t shard_chunk = 0;
};

/// kGradient: a flat gradient the AOR replay reads at snapshot time and never stores (its slot
/// plan ignores it; protect/aor_plan.h). Old daemons refuse kind 2 with a Protocol error.
enum class BufferKind : uint8_t { kReplicated = 0, kUnique = 1, kGradient = 2 };

/// Mirrors kernels::MemoryExport on the wire (the codec does not depend on kernels).
struct BufferMemory {
  uint32_t memory_kind = 0;  ///< kernels::MemoryKind value: 0 host (staged), 1 emulated, 2 CUDA, 3 HIP
  int32_t device = 0;
  std::string ipc_handle;
  uint64_t allocation_id = 0;
  uint64_t allocation_size = 0;
  uint64_t offset = 0;
  bool has_fd = false;  ///< an fd (emulated memfd) rides with the frame
  /// The device's stable identity (kernels::DeviceIdentity): `device` is the client's ordinal,
  /// which CUDA_VISIBLE_DEVICES renumbers per process; reftd opens the device with this UUID
  /// (else this PCI bus id). Empty for host memory and for older clients (the ordinal is
  /// trusted then).
  std::string device_uuid;
  std::string pci_bus_id;
};

struct Register {
  std::string name;
  BufferKind kind = BufferKind::kReplicated;
  std::string dtype;
  int32_t layer = -1;  ///< -1: none
  uint64_t size = 0;
  bool optimizer = false;  ///< a ZeRO-1 optimizer shard (AOR-eligible when unique)
  BufferMemory memory;
  /// For an optimizer shard under "aor": the gradient buffer it is replayed from ("" = the only
  /// one). Optional trailer: `gradient`, then the device identity (memory.device_uuid,
  /// memory.pci_bus_id). Each part is encoded only when it or a later one is non-empty, so a
  /// register without them is byte-identical to protocol 2's and old daemons keep accepting it.
  std::string gradient;
  /// A sharded buffer: bytes [shard_offset, shard_offset+size) of a global buffer of
  /// `shard_total` bytes (0 = not sharded). Optional trailer after `gradient` (which is then
  /// encoded even when empty): encoded only for sharded buffers.
  uint64_t shard_offset = 0;
  uint64_t shard_total = 0;
};
struct RegisterReply {
  uint32_t buffer_index = 0;
};

struct StepMessage {  ///< SnapshotDone, SnapshotAbort, QueryCommitted (and SnapshotBegin's head)
  int64_t step = 0;
};

/// Bytes of one optimizer hyper-parameter record (aor::kStepHyperWireSize; the codec does not
/// depend on reft_aor, the daemon decodes and validates the record).
inline constexpr size_t kOptimizerHyperBytes = 80;

/// This step's optimizer hyper-parameters for one optimizer shard (by registration index),
/// which reftd needs to replay the update into its "aor/<name>" region.
struct OptimizerHyper {
  uint32_t buffer_index = 0;
  std::array<uint8_t, kOptimizerHyperBytes> record{};  ///< aor::EncodeStepHyper
};

/// SnapshotBegin. Without optimizer records it encodes exactly like a StepMessage (8 bytes), so
/// old daemons accept it; the records follow as an optional trailer: u32 count (at most
/// Limits::max_buffers), then per record u32 buffer_index + 80 bytes.
struct SnapshotBegin {
  int64_t step = 0;
  std::vector<OptimizerHyper> optimizer;
};

/// Where one staged buffer lives in the slot file passed with the reply.
struct Placement {
  uint32_t buffer_index = 0;
  uint64_t file_offset = 0;
  uint64_t size = 0;
};
/// Where one region of the rank's slot lives in the slot file (SnapshotBeginReply).
struct RegionPlacement {
  std::string name;
  uint64_t file_offset = 0;
  uint64_t size = 0;
};
/// SnapshotBeginReply: the slot's regions (the client fills those whose source is its host
/// memory: shard/ARC/parity pieces and unique buffers). RestoreReply: the restored bytes of
/// every staged buffer (`staged`), in the file passed with the reply; step -1 = nothing.
struct SlotReply {
  int64_t step = -1;
  uint64_t file_size = 0;  ///< bytes the client maps (covers every placement)
  std::vector<Placement> staged;
  std::vector<RegionPlacement> regions;
  /// SnapshotBeginReply under "aor" with host-memory gradients: where the client copies each
  /// optimizer shard's gradient slice (name = the optimizer buffer) in the staging file passed
  /// as the reply's second fd, of `gradient_file_size` bytes. Optional trailer: encoded only
  /// when non-empty (only clients that registered a gradient buffer ever get it).
  uint64_t gradient_file_size = 0;
  std::vector<RegionPlacement> gradients;
};

/// How a restore went, as the trainer's LastRestore() reports it. The restore is a job-wide
/// decision (docs/recovery.md "One decision per job"): `agreement_ns` is the time this rank's
/// restore spent reaching it (waiting for silent holders of the job's slots, following another
/// rank's decision), `agreement` says why it waited and whose decision it followed.
/// One phase of the recovery a restore ended (docs/recovery.md "Phases of a recovery").
struct RestorePhase {
  std::string phase;  ///< "lost_at", "declared_at", ..., "restore_ended_at"
  int64_t at_ms = 0;  ///< wall-clock unix ms on `node`
  std::string node;   ///< the node that observed it
};
struct RestoreReport {
  static constexpr uint32_t kMaxText = 8192;  ///< `agreement` and `detail` are cut to this
  static constexpr uint32_t kMaxPhases = 16;
  std::string source;    ///< "memory" | "tier" | "none" (nothing committed job-wide)
  uint64_t agreement_ns = 0;
  uint64_t daemon_ns = 0;  ///< the whole restore inside reftd (agreement included)
  std::string agreement;
  std::string detail;    ///< where each part came from
  /// Reshape (optional trailer, encoded only when `reshaped`): the step was saved under
  /// `from_layout` and assembled by global name; `filled` buffers got their bytes,
  /// `untouched` ones (unique, unsharded, coordinates gone) kept the trainer's.
  bool reshaped = false;
  std::string from_layout;
  std::vector<std::string> filled;
  std::vector<std::string> untouched;
  /// The phases that happened (optional trailer after the reshape one, encoded only when
  /// non-empty: tag 3, u32 count, per phase its name, i64 at_ms, its node). Older daemons send
  /// none; a reply without it is byte-identical to one from before phases.
  std::vector<RestorePhase> phases;
};
/// Bytes [src, src+length) of the saved global buffer land at `dst` bytes into the registered
/// buffer (RestoreRequest::remap).
struct RemapSegment {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t length = 0;
};
/// One registered buffer restored from scattered ranges of the saved buffer of the same name.
struct BufferRemap {
  std::string name;
  std::vector<RemapSegment> segments;  ///< empty = the buffer is zero-filled
};
/// Bytes [begin, end) of the saved buffer `name` of sharding group (pp, tp) (a replicated
/// buffer, or the global range of a sharded one) (RestoreRequest::reads).
struct SavedRange {
  std::string name;
  int32_t pp = 0;
  int32_t tp = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
};
/// Restore (client -> daemon). Empty payload = {reshape: false}, what older clients send;
/// otherwise one flags byte (bit 0 reshape, bit 1 probe, bit 2 a remap trailer follows: the
/// layout it was computed for, u32 buffer count, per buffer its name, u32 segment count and
/// the segments as three u64 each; bit 3 stream; bit 4 a reads trailer follows the remap
/// one: i64 read_step, u32 count, per range its name, i32 pp, i32 tp, u64 begin, u64 end).
struct RestoreRequest {
  bool reshape = false;  ///< restore a step saved under another layout by global names
  /// Take the job-wide decision and report the step and the layout it was saved under
  /// (RestoreReport::from_layout, always set), but deliver no bytes.
  bool probe = false;
  /// Reshape: these buffers are filled from the listed ranges of the saved buffer of their
  /// name instead of by the sharding rule (e.g. an optimizer state partitioned by parameter,
  /// whose placement changes with the world size). Valid only for the saved layout
  /// `remap_layout` (a probe's from_layout); a newer step saved under another one is refused
  /// with Busy, and the trainer probes again.
  std::string remap_layout;
  std::vector<BufferRemap> remap;
  /// The client can take a streamed restore (kRestoreStream, stream.h): verified bytes written
  /// into its buffers as they arrive instead of a memfd it copies out of afterwards.
  bool stream = false;
  /// A read (reshape set, no remap, no probe): the job-wide decision as for a restore, then
  /// these ranges of step `read_step` instead of the registered buffers, laid out one after
  /// another in the reply's memfd (one placement, index 0, covering them all). Busy when the
  /// decision chose another step (the reader located its ranges in `read_step`'s metadata).
  int64_t read_step = -1;
  std::vector<SavedRange> reads;
};
/// RestoreReply: the restored bytes (SlotReply without a gradient trailer) and the report.
struct RestoreReply {
  SlotReply slot;
  RestoreReport report;
};

/// A trainer-side "ready" event of one device (CUDA/HIP IPC event, emulated shared counter):
/// the daemon's copy stream waits on it before pulling that device's buffers, so it never
/// reads a buffer the trainer's stream is still writing. At most Limits::max_fds_per_frame.
struct ReadyEvent {
  uint32_t memory_kind = 0;
  int32_t device = 0;
  std::string ipc_handle;
  bool has_fd = false;  ///< fds ride with the frame, in the order of the events that have one
};
struct SnapshotStaged {
  int64_t step = 0;
  std::vector<ReadyEvent> events;
};

struct QueryCommittedReply {
  bool committed = false;
  int64_t newest_committed = -1;
};

struct ErrorReply {
  uint32_t code = 0;  ///< reft::StatusCode value
  std::string message;
};

/// PlanQuery (client -> daemon): the plan document of `job`, which the caller must own. The one
/// request a connection may send without a hello.
struct PlanQuery {
  std::string job;
};
/// PlanReply: the job's plan document, the JSON `reftctl plan show --job J -o json` prints
/// (without its "schema" member). Why two forms: the document grows with the job (its ranks,
/// layers and transfer plan) past what one frame carries (Limits::max_payload_bytes), so a
/// large one travels in a memfd sealed against writes and resizing that rides with the frame
/// (one fd), `file_bytes` long. Payload: u8 form (0 inline, 1 file), then the document as a
/// length-prefixed string (at most kMaxInline bytes) or u64 file_bytes (1..kMaxFileBytes).
struct PlanReply {
  static constexpr uint32_t kMaxInline = 48 * 1024;     ///< larger documents go in the file
  static constexpr uint64_t kMaxFileBytes = 64ull << 20;
  std::string json;         ///< the document when inline ("" in the file form)
  uint64_t file_bytes = 0;  ///< > 0: the document is the first file_bytes of the frame's fd
};

/// AorStatusReply (kAorStatus has an empty payload): the AOR state of the session's replayed
/// optimizer shards, as SessionInfo keeps it (docs/protection.md "AOR in reftd").
struct AorStatusReply {
  static constexpr uint32_t kMaxText = 4096;  ///< `state` is cut to this
  /// SessionInfo::aor_state: "" (nothing replayed), "probation", "on", "off: <why>", or one
  /// of those per shard ("'opt': on; 'opt2': off: mismatch at step 7").
  std::string state;
  uint64_t replays = 0;
  uint64_t copies = 0;
  uint64_t verified = 0;
  uint64_t mismatches = 0;
};

/// FailureReport (client -> daemon): a trainer's or launcher's suspicion that a node of `job`
/// failed — the node of `peer_rank` (its global rank in the job's layout) or, without one, every
/// other node of the job. The caller must own the job. Payload: job, reason (at most
/// kMaxReason bytes), u8 has_peer_rank, i64 peer_rank.
struct FailureReport {
  static constexpr uint32_t kMaxReason = 1024;
  std::string job;
  std::string reason;
  std::optional<int64_t> peer_rank;
};
/// FailureReportReply: the nodes the report made reftd look into (u32 count, then each name).
struct FailureReportReply {
  static constexpr uint32_t kMaxNodes = 4096;
  std::vector<std::string> nodes;
};

std::vector<uint8_t> Encode(const Hello& m);
std::vector<uint8_t> Encode(const HelloReply& m);
std::vector<uint8_t> Encode(const Register& m);
std::vector<uint8_t> Encode(const RegisterReply& m);
std::vector<uint8_t> Encode(const StepMessage& m);
std::vector<uint8_t> Encode(const SnapshotBegin& m);
std::vector<uint8_t> Encode(const SlotReply& m);
std::vector<uint8_t> Encode(const RestoreReply& m);
std::vector<uint8_t> Encode(const RestoreRequest& m);
std::vector<uint8_t> Encode(const QueryCommittedReply& m);
std::vector<uint8_t> Encode(const SnapshotStaged& m);
std::vector<uint8_t> Encode(const ErrorReply& m);
std::vector<uint8_t> Encode(const PlanQuery& m);
std::vector<uint8_t> Encode(const PlanReply& m);
std::vector<uint8_t> Encode(const AorStatusReply& m);
std::vector<uint8_t> Encode(const FailureReport& m);
std::vector<uint8_t> Encode(const FailureReportReply& m);
/// The error reply for a status (messages longer than 4 KiB are cut).
std::vector<uint8_t> EncodeError(const Status& status);

Status Decode(const std::vector<uint8_t>& p, const Limits& l, Hello* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, HelloReply* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, Register* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, RegisterReply* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, StepMessage* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, SnapshotBegin* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, SlotReply* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, RestoreReply* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, RestoreRequest* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, QueryCommittedReply* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, SnapshotStaged* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, ErrorReply* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, PlanQuery* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, PlanReply* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, AorStatusReply* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, FailureReport* m);
Status Decode(const std::vector<uint8_t>& p, const Limits& l, FailureReportReply* m);
/// The Status an error reply carries (unknown codes become Protocol errors).
Status ToStatus(const ErrorReply& e);

}  // namespace reft::local_proto
