#include "reft/client.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <new>
#include <thread>
#include <vector>

#include "channel.h"
#include "device_staging.h"
#include "optimizer_fields.h"
#include "reft/aor/adamw.h"
#include "reft/aor/hyper_codec.h"
#include "reft/kernels/device.h"
#include "reft/local_proto/has_hints.h"
#include "reft/local_proto/stream.h"
#include "reft/protect/codec.h"
#include "reft/protect/slot_plan.h"
#include "reftd_socket.h"

namespace reft {

using local_proto::MessageType;

static_assert(static_cast<int>(MemoryLocation::kEmulated) ==
              static_cast<int>(kernels::MemoryKind::kEmulated));
static_assert(static_cast<int>(MemoryLocation::kCuda) == static_cast<int>(kernels::MemoryKind::kCuda));
static_assert(static_cast<int>(MemoryLocation::kHip) == static_cast<int>(kernels::MemoryKind::kHip));

namespace {

constexpr const char* kClientVersion = "libreft 0.1.0";

/// One mapping of a slot file, kept across snapshots so steady-state copies take no page
/// faults (slots rotate among a few files). Keyed by inode and size: a re-sized slot is
/// re-mapped, so a copy never touches pages beyond the file (no SIGBUS).
struct Mapping {
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t size = 0;
  uint8_t* base = nullptr;
};

class MappingCache {
 public:
  ~MappingCache() { Clear(); }
  Result<uint8_t*> Get(int fd, uint64_t needed) {
    struct stat st{};
    if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat of the slot fd");
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (needed > size) {
      return Status::Protocol("slot file of " + std::to_string(size) + " bytes is smaller than the " +
                              std::to_string(needed) + " bytes the daemon described");
    }
    for (auto it = maps_.begin(); it != maps_.end(); ++it) {
      if (it->dev == st.st_dev && it->ino == st.st_ino && it->size == size) return it->base;
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping the snapshot slot");
    maps_.push_back({st.st_dev, st.st_ino, size, static_cast<uint8_t*>(p)});
    // Bounded: a dropped slot's pages stay alive only while mapped here.
    while (maps_.size() > kMaxMappings) {
      ::munmap(maps_.front().base, maps_.front().size);
      maps_.pop_front();
    }
    return static_cast<uint8_t*>(p);
  }
  void Clear() {
    for (auto& m : maps_) ::munmap(m.base, m.size);
    maps_.clear();
  }

 private:
  // Slots rotate among a few files per rank, plus the AOR gradient staging file.
  static constexpr size_t kMaxMappings = 6;
  std::deque<Mapping> maps_;
};

struct RegisteredBuffer {
  std::string name;
  void* data = nullptr;
  uint64_t size = 0;
  MemoryLocation memory = MemoryLocation::kHost;
  int device = 0;
  BufferOptions options;
  /// Device memory reftd cannot pull: the copy worker stages it through this host buffer.
  std::shared_ptr<client::StagingBuffer> staging;
  std::string staged_reason;

  /// The copy worker reads and restore writes these bytes: host memory, or the staging copy.
  bool on_host() const { return memory == MemoryLocation::kHost || staging != nullptr; }
  uint8_t* host_data() const {
    return staging ? staging->host() : static_cast<uint8_t*>(data);
  }
  local_proto::Register reg;  ///< what was sent: an input of the slot plan
};

/// This rank's slot plan (protect::PlanSlot, the function reftd calls on the same hello and
/// registrations) and the replicated buffers the copy worker reads from host memory.
struct SlotPlan {
  protect::SlotPlan slot;
  protect::ReplicatedSource host_replicated;
};

/// A ready event recorded by snapshot() on the trainer thread for one (memory kind, device).
struct PendingEvent {
  MemoryLocation memory;
  int device;
  kernels::EventExport event;  // fd borrowed from the backend (lives as long as the process)
};

const kernels::EventExport* FindEvent(const std::vector<PendingEvent>& events,
                                      MemoryLocation memory, int device) {
  for (const auto& e : events) {
    if (e.memory == memory && e.device == device) return &e.event;
  }
  return nullptr;
}

/// GateHostCopies(): a host word a device copy writes once the staged bytes have landed.
struct HostCopyGate {
  const uint64_t* word = nullptr;
  uint64_t value = 0;
};

}  // namespace

// Hidden: the version script exports reft::Client*, which would otherwise match Impl too.
struct __attribute__((visibility("hidden"))) Client::Impl {
  ClientOptions options;
  std::unique_ptr<client::Channel> channel;
  uint64_t session_id = 0;
  uint64_t shard_chunk = 0;               // from reftd's hello reply
  local_proto::Hello hello;               // as sent: an input of the slot plan
  protect::Scheme scheme;
  // Written under mu only while no snapshot is in flight (Register and StartSnapshot wait for
  // idle first), read by the copy worker while one is: a handshake the analysis cannot see,
  // so these two are not annotated.
  std::vector<RegisteredBuffer> buffers;
  std::shared_ptr<const SlotPlan> plan;
  MappingCache mappings;                  // used only by the copy worker

  std::atomic<local_proto::HasHintPage*> has_page{nullptr};  // HAS hints; set once, under mu
  Mutex mu;
  std::condition_variable cv;
  bool has_disabled REFT_GUARDED_BY(mu) = false;  // reftd refused has_attach
  std::map<std::pair<MemoryLocation, int>, void*> streams REFT_GUARDED_BY(mu);  // SetStream()
  HostCopyGate next_gate REFT_GUARDED_BY(mu);  // GateHostCopies()
  bool in_flight REFT_GUARDED_BY(mu) = false;
  bool job_ready REFT_GUARDED_BY(mu) = false;
  int64_t job_step REFT_GUARDED_BY(mu) = -1;
  std::vector<PendingEvent> job_events REFT_GUARDED_BY(mu);
  HostCopyGate job_gate REFT_GUARDED_BY(mu);
  std::vector<local_proto::OptimizerHyper> job_optimizer REFT_GUARDED_BY(mu);
  Status last_result REFT_GUARDED_BY(mu);
  std::optional<RestoreReport> last_restore REFT_GUARDED_BY(mu);
  std::atomic<bool> aor_status_unsupported{false};  // reftd answered kAorStatus as unknown
  // RestoreProgressNow(): written by the restoring thread (under mu), read by any thread
  // without it. ReceiveStream adds each streamed record's size to restore_done.
  std::atomic<uint8_t> restore_phase{static_cast<uint8_t>(RestorePhase::kIdle)};
  std::atomic<uint64_t> restore_done{0};
  std::atomic<uint64_t> restore_total{0};
  bool exit REFT_GUARDED_BY(mu) = false;
  bool closed REFT_GUARDED_BY(mu) = false;
  std::thread worker;

  /// One connection and its hello (Connect() retries it while the rank is still joined).
  static Result<std::unique_ptr<Client>> Join(const ClientOptions& opts,
                                              const local_proto::Hello& hello,
                                              const protect::Scheme& spec);
  Status RunSnapshot(int64_t step, const std::vector<PendingEvent>& events,
                     const HostCopyGate& gate,
                     const std::vector<local_proto::OptimizerHyper>& optimizer,
                     const SlotPlan& plan);
  Status StageDeviceBuffers(const std::vector<PendingEvent>& events, const HostCopyGate& gate);
  Status StartSnapshot(int64_t step, const OptimizerStep* all,
                       const std::map<std::string, OptimizerStep>* per_buffer);
  Result<std::vector<local_proto::OptimizerHyper>> OptimizerRecords(
      int64_t step, const SlotPlan& plan, const OptimizerStep* all,
      const std::map<std::string, OptimizerStep>* per_buffer) const;
  Status FillHostRegions(const local_proto::Frame& begin, const local_proto::SlotReply& slot,
                         const SlotPlan& plan);
  Result<std::shared_ptr<const SlotPlan>> MakePlanLocked() const REFT_REQUIRES(mu);
  /// kAorStatus (any thread, with or without mu: it only uses the channel).
  Result<AorReport> QueryAorState();
  /// Restore() after its checks and the wait for an idle copy worker.
  Result<std::optional<int64_t>> RestoreLocked(const RestoreOptions& options) REFT_REQUIRES(mu);
  void SetRestorePhase(RestorePhase phase) {
    restore_phase.store(static_cast<uint8_t>(phase), std::memory_order_release);
  }
  Result<std::vector<PendingEvent>> RecordReadyEvents() REFT_REQUIRES(mu);
  void WorkerMain();
  void WaitIdleLocked(MutexLock& lock) REFT_REQUIRES(mu) {
    lock.Wait(cv, [&]() REFT_REQUIRES(mu) { return !in_flight; });
  }
};

Client::Client() : impl_(std::make_unique<Impl>()) {}
// The destructor has no caller to tell: Close() returns the last snapshot's error to whoever
// wants it (documented in client.h).
Client::~Client() { (void)Close(); }

uint64_t Client::session_id() const { return impl_->session_id; }

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  ClientOptions opts = options;
  opts.socket_path = client::ReftdSocketPath(opts.socket_path);
  if (opts.reply_timeout_ms <= 0) {
    return Status::InvalidArgument("the reply timeout must be > 0 (Python: timeout=, in seconds)");
  }
  local_proto::Hello hello;
  hello.job = opts.job;
  hello.coord = {opts.pp, opts.tp, opts.dp};
  hello.layout = opts.layout;
  hello.protection = opts.protection;
  hello.client_version = kClientVersion;
  hello.owner_group = opts.owner_group;
  if (hello.owner_group.empty()) {
    const char* env = std::getenv("REFT_OWNER_GROUP");
    if (env != nullptr) hello.owner_group = env;
  }
  // The checks reftd applies to a hello, here first: a bad declaration fails before connecting.
  REFT_ASSIGN_OR_RETURN(protect::Scheme spec, protect::CheckHello(hello));
  hello.protection = spec.ToString();
  if (opts.connect_timeout.count() < 0) {
    return Status::InvalidArgument("connect_timeout must be >= 0");
  }
  // A rank still joined elsewhere is refused with AlreadyExists; the usual cause is this
  // trainer's own previous process, whose hang-up reftd has not processed yet (a launcher
  // restarts ranks at once), so that refusal alone is retried, on a fresh connection each time.
  const auto deadline = std::chrono::steady_clock::now() + opts.connect_timeout;
  std::chrono::milliseconds backoff(50);
  for (;;) {
    auto c = Impl::Join(opts, hello, spec);
    if (c.ok() || c.status().code() != StatusCode::kAlreadyExists) return c;
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) {
      if (opts.connect_timeout.count() == 0) return c.status();
      // In seconds when whole: Python's connect_timeout is in seconds, C++'s a duration.
      const int64_t ms = opts.connect_timeout.count();
      return c.status().WithContext(
          "still refused after " +
          (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms") +
          " (connect_timeout)");
    }
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(backoff, left));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

Result<std::unique_ptr<Client>> Client::Impl::Join(const ClientOptions& opts,
                                                   const local_proto::Hello& hello,
                                                   const protect::Scheme& spec) {
  REFT_ASSIGN_OR_RETURN(UniqueFd sock, client::ConnectReftd(opts.socket_path));

  std::unique_ptr<Client> c(new Client());
  c->impl_->options = opts;
  c->impl_->channel = std::make_unique<client::Channel>(std::move(sock), opts.reply_timeout_ms);
  REFT_ASSIGN_OR_RETURN(local_proto::Frame reply,
                        c->impl_->channel->Call(MessageType::kHello, local_proto::Encode(hello),
                                                MessageType::kHelloReply));
  local_proto::HelloReply hr;
  REFT_RETURN_NOT_OK(local_proto::Decode(reply.payload, local_proto::Limits{}, &hr));
  if (hr.shard_chunk == 0) return Status::Protocol("reftd sent no shard alignment");
  c->impl_->session_id = hr.session_id;
  c->impl_->shard_chunk = hr.shard_chunk;
  c->impl_->hello = hello;
  c->impl_->scheme = spec;
  Impl* impl = c->impl_.get();
  impl->worker = std::thread([impl] { impl->WorkerMain(); });
  return c;
}

Status Client::Register(const std::string& name, void* data, uint64_t size,
                        const BufferOptions& options) {
  Impl& d = *impl_;
  if (data == nullptr || size == 0) {
    return Status::InvalidArgument("buffer '" + name + "': memory is null or empty");
  }
  if (options.kind != BufferKind::kReplicated && options.kind != BufferKind::kUnique &&
      options.kind != BufferKind::kGradient) {
    return Status::InvalidArgument("buffer '" + name + "': unknown kind " +
                                   std::to_string(static_cast<int>(options.kind)));
  }
  local_proto::Register r;
  std::shared_ptr<client::StagingBuffer> staging;
  std::string staged_reason;
  int device = 0;
  r.name = name;
  r.kind = options.kind == BufferKind::kUnique     ? local_proto::BufferKind::kUnique
           : options.kind == BufferKind::kGradient ? local_proto::BufferKind::kGradient
                                                   : local_proto::BufferKind::kReplicated;
  r.gradient = options.gradient;
  r.dtype = options.dtype;
  r.layer = options.layer;
  r.size = size;
  r.optimizer = options.optimizer;
  r.shard_offset = options.shard_offset;
  r.shard_total = options.shard_total;
  r.memory.memory_kind = static_cast<uint32_t>(options.memory);
  // The checks reftd applies to a registration, here first (the scheme is fixed at Connect).
  REFT_RETURN_NOT_OK(protect::CheckRegistration(r, d.scheme));
  REFT_RETURN_NOT_OK(protect::CheckShardRegistration(r, d.hello.coord, d.hello.layout));
  MutexLock lock(d.mu);
  if (d.closed) return Status::Unavailable("client is closed");
  d.WaitIdleLocked(lock);
  std::vector<int> fds;
  if (options.memory != MemoryLocation::kHost) {
    auto kind = static_cast<kernels::MemoryKind>(options.memory);
    auto found = kernels::GetDeviceBackend(kind);
    if (!found.ok()) return found.status().WithContext("buffer '" + name + "'");
    kernels::DeviceBackend* backend = *found;
    auto ex = backend->Export(data, size);
    if (ex.ok()) {
      device = ex->device;
      r.memory.device = ex->device;
      // The ordinal is this process's (CUDA_VISIBLE_DEVICES renumbers); reftd opens the
      // device by its UUID / PCI bus id.
      if (auto id = backend->Identify(ex->device); id.ok()) {
        r.memory.device_uuid = id->uuid;
        r.memory.pci_bus_id = id->pci_bus_id;
      }
      r.memory.ipc_handle = ex->ipc_handle;
      r.memory.allocation_id = ex->allocation_id;
      r.memory.allocation_size = ex->allocation_size;
      r.memory.offset = ex->offset;
      r.memory.has_fd = ex->fd >= 0;
      if (ex->fd >= 0) fds.push_back(ex->fd);
    } else {
      // Staged fallback: only for memory the backend owns but will not export (Locate fails
      // for a pointer that is not this kind's memory at all).
      auto located = backend->Locate(data);
      if (ex.status().code() != StatusCode::kUnsupported || !options.allow_staging ||
          !located.ok()) {
        return ex.status().WithContext("exporting buffer '" + name + "'");
      }
      device = *located;
      REFT_ASSIGN_OR_RETURN(staging, client::StagingBuffer::Create(backend, device, data, size));
      staged_reason = ex.status().message();
      r.memory = {};  // reftd sees host memory: this process copies it into the slot
    }
  }
  REFT_ASSIGN_OR_RETURN(local_proto::Frame reply,
                        d.channel->Call(MessageType::kRegister, local_proto::Encode(r),
                                        MessageType::kRegisterReply, fds));
  local_proto::RegisterReply rr;
  REFT_RETURN_NOT_OK(local_proto::Decode(reply.payload, local_proto::Limits{}, &rr));
  if (rr.buffer_index != d.buffers.size()) {
    return Status::Protocol("reftd numbered buffer '" + name + "' out of order");
  }
  d.buffers.push_back({name, data, size, options.memory, device, options, std::move(staging),
                       std::move(staged_reason), r});
  d.plan.reset();
  return Status::OK();
}

Result<std::string> Client::StagedReason(const std::string& name) const {
  MutexLock lock(impl_->mu);
  for (const auto& b : impl_->buffers) {
    if (b.name == name) return b.staged_reason;
  }
  return Status::NotFound("no buffer '" + name + "' is registered");
}

Status Client::SetStream(MemoryLocation memory, int device, void* native_stream) {
  if (memory != MemoryLocation::kCuda && memory != MemoryLocation::kHip &&
      memory != MemoryLocation::kEmulated) {
    return Status::InvalidArgument("a stream for memory kind " +
                                   std::to_string(static_cast<int>(memory)) +
                                   ": that memory has no streams");
  }
  if (device < 0) {
    return Status::InvalidArgument("a stream for device " + std::to_string(device) +
                                   ": a device ordinal is >= 0");
  }
  MutexLock lock(impl_->mu);
  impl_->streams[{memory, device}] = native_stream;
  return Status::OK();
}

Status Client::GateHostCopies(const uint64_t* word, uint64_t value) {
  if (word == nullptr) return Status::InvalidArgument("the host copies' gate word is null");
  MutexLock lock(impl_->mu);
  impl_->next_gate = {word, value};
  return Status::OK();
}

Result<std::vector<PendingEvent>> Client::Impl::RecordReadyEvents() {
  std::vector<PendingEvent> out;
  for (const auto& b : buffers) {
    if (b.memory == MemoryLocation::kHost) continue;
    bool seen = false;
    for (const auto& e : out) seen = seen || (e.memory == b.memory && e.device == b.device);
    if (seen) continue;
    REFT_ASSIGN_OR_RETURN(kernels::DeviceBackend * backend,
                          kernels::GetDeviceBackend(static_cast<kernels::MemoryKind>(b.memory)));
    // CUDA/HIP: recorded on the stream SetStream() named (the legacy default stream unless
    // set) after the trainer's queued work, the optimizer step; the daemon's copy stream, or
    // this process's staging copy, waits on it before reading the buffers.
    auto stream = streams.find({b.memory, b.device});
    REFT_ASSIGN_OR_RETURN(
        kernels::EventExport ev,
        backend->RecordReadyEvent(b.device, stream == streams.end() ? nullptr : stream->second));
    out.push_back({b.memory, b.device, ev});
  }
  return out;
}

Result<std::shared_ptr<const SlotPlan>> Client::Impl::MakePlanLocked() const {
  auto plan = std::make_shared<SlotPlan>();
  std::vector<local_proto::Register> registrations;
  for (const auto& b : buffers) registrations.push_back(b.reg);
  REFT_ASSIGN_OR_RETURN(plan->slot, protect::PlanSlot(hello, registrations, shard_chunk));
  for (uint32_t i : plan->slot.replicated) {
    const auto& b = buffers[i];
    if (b.on_host()) {
      plan->host_replicated[b.name] = {b.host_data(), b.size};
    }
  }
  return std::shared_ptr<const SlotPlan>(std::move(plan));
}

Status Client::Impl::FillHostRegions(const local_proto::Frame& begin,
                                     const local_proto::SlotReply& slot, const SlotPlan& plan) {
  std::map<std::string, const local_proto::RegionPlacement*> placed;
  for (const auto& r : slot.regions) placed[r.name] = &r;
  for (const auto& r : plan.slot.rank.regions) {
    auto it = placed.find(r.name);
    if (it == placed.end() || it->second->size != r.size) {
      return Status::Protocol("reftd's slot layout differs from this client's plan at region '" +
                              r.name + "' (different reft versions?)");
    }
  }
  bool host_unique = false;
  for (const auto& b : buffers) {
    host_unique |= b.options.kind == BufferKind::kUnique && b.on_host();
  }
  // AOR: the ring neighbour's slice of every host-memory gradient goes to reftd's staging file
  // (its second fd); reftd replays from it after the fence, when the trainer may overwrite the
  // gradient. Device gradients are pulled by reftd.
  size_t host_gradients = 0;
  const auto& bindings = plan.slot.aor.bindings;
  for (size_t i = 0; i < bindings.size(); ++i) {
    if (buffers[plan.slot.aor_gradient[i]].on_host()) ++host_gradients;
  }
  if (slot.gradients.size() != host_gradients) {
    return Status::Protocol("reftd asks for " + std::to_string(slot.gradients.size()) +
                            " gradient slices, this client's AOR plan has " +
                            std::to_string(host_gradients) + " (different reft versions?)");
  }
  if (host_gradients > 0) {
    if (begin.fds.size() != 2) return Status::Protocol("snapshot reply carries no staging fd");
    REFT_ASSIGN_OR_RETURN(uint8_t * staging,
                          mappings.Get(begin.fds[1].get(), slot.gradient_file_size));
    for (const auto& g : slot.gradients) {
      size_t i = 0;
      while (i < bindings.size() && bindings[i].buffer != g.name) ++i;
      if (i == bindings.size() || g.file_offset != bindings[i].staging_offset ||
          g.size != bindings[i].grad_bytes) {
        return Status::Protocol("reftd's gradient staging differs from this client's AOR plan "
                                "at '" + g.name + "'");
      }
      const auto& src = buffers[plan.slot.aor_gradient[i]];
      std::memcpy(staging + g.file_offset, src.host_data() + bindings[i].grad_offset, g.size);
    }
  }
  if (plan.host_replicated.empty() && !host_unique) return Status::OK();  // all on a device
  if (begin.fds.empty()) return Status::Protocol("snapshot reply carries no slot fd");
  REFT_ASSIGN_OR_RETURN(uint8_t * base, mappings.Get(begin.fds[0].get(), slot.file_size));
  auto span = [&](const std::string& name) {
    const auto* p = placed.at(name);
    return protect::MutableSpan{base + p->file_offset, p->size};
  };
  if (!plan.host_replicated.empty()) {
    const protect::SgGeometry& g = plan.slot.geometry;
    std::map<std::string, protect::MutableSpan> regions;
    regions[protect::kRegionShard] = span(protect::kRegionShard);
    for (int o = 1; o <= scheme.arc; ++o) {
      regions[protect::ArcRegionName(o)] = span(protect::ArcRegionName(o));
    }
    const bool parity = plan.slot.parity_on_host();
    if (parity && scheme.aec) regions[protect::kRegionAec] = span(protect::kRegionAec);
    if (parity && scheme.rs > 0) regions[protect::kRegionRs] = span(protect::kRegionRs);
    REFT_RETURN_NOT_OK(protect::EncodeMember(g, scheme, options.dp, plan.host_replicated, regions,
                                             1, plan.slot.any_replicated_on_device));
  }
  for (const auto& b : buffers) {
    if (b.options.kind != BufferKind::kUnique || !b.on_host()) continue;
    auto dst = span(protect::UniqueRegionName(b.name));
    std::memcpy(dst.data, b.host_data(), b.size);
  }
  return Status::OK();
}

Status Client::Impl::StageDeviceBuffers(const std::vector<PendingEvent>& events,
                                        const HostCopyGate& gate) {
  if (gate.word != nullptr) {
    REFT_RETURN_NOT_OK(client::WaitHostCopyGate(gate.word, gate.value, options.reply_timeout_ms));
  }
  for (const auto& b : buffers) {
    if (!b.staging) continue;
    const kernels::EventExport* ready = FindEvent(events, b.memory, b.device);
    if (ready == nullptr) {
      return Status::Internal("no ready event for staged buffer '" + b.name + "'");
    }
    REFT_RETURN_NOT_OK(b.staging->Pull(*ready).WithContext("staging buffer '" + b.name + "'"));
  }
  return Status::OK();
}

Status Client::Impl::RunSnapshot(int64_t step, const std::vector<PendingEvent>& events,
                                 const HostCopyGate& gate,
                                 const std::vector<local_proto::OptimizerHyper>& optimizer,
                                 const SlotPlan& plan) {
  local_proto::StepMessage m{step};
  local_proto::SnapshotBegin sb{step, optimizer};
  REFT_ASSIGN_OR_RETURN(local_proto::Frame begin,
                        channel->Call(MessageType::kSnapshotBegin, local_proto::Encode(sb),
                                      MessageType::kSnapshotBeginReply));
  local_proto::SlotReply slot;
  REFT_RETURN_NOT_OK(local_proto::Decode(begin.payload, local_proto::Limits{}, &slot));
  Status copied = StageDeviceBuffers(events, gate);
  if (copied.ok()) copied = FillHostRegions(begin, slot, plan);
  if (!copied.ok()) {
    // reftd discards the slot on abort, or when this client hangs up if the abort is lost.
    Status aborted =
        channel->Call(MessageType::kSnapshotAbort, local_proto::Encode(m), MessageType::kAck)
            .status();
    if (!aborted.ok()) copied = copied.WithContext("(abort: " + aborted.message() + ")");
    return copied.WithContext("snapshot of step " + std::to_string(step));
  }
  local_proto::SnapshotStaged staged;
  staged.step = step;
  std::vector<int> event_fds;
  for (const auto& e : events) {
    bool pulled = false;  // reftd waits only on devices it pulls from
    for (const auto& b : buffers) {
      pulled |= b.memory == e.memory && b.device == e.device && !b.on_host();
    }
    if (!pulled) continue;
    local_proto::ReadyEvent re;
    re.memory_kind = static_cast<uint32_t>(e.memory);
    re.device = e.device;
    re.ipc_handle = e.event.ipc_handle;
    re.has_fd = e.event.fd >= 0;
    if (re.has_fd) event_fds.push_back(e.event.fd);
    staged.events.push_back(re);
  }
  REFT_ASSIGN_OR_RETURN(local_proto::Frame done,
                        channel->Call(MessageType::kSnapshotStaged, local_proto::Encode(staged),
                                      MessageType::kSnapshotDone, event_fds));
  (void)done;
  return Status::OK();
}

void Client::Impl::WorkerMain() {
  pthread_setname_np(pthread_self(), "reft-copy");
  // SCHED_BATCH: a woken copy worker must not preempt the trainer thread that woke it (on a
  // busy core CFS wake-up preemption would otherwise block snapshot() for a time slice).
  // Best effort: the policy needs no privilege; if refused the worker stays SCHED_OTHER.
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
  MutexLock lock(mu);
  for (;;) {
    lock.Wait(cv, [&]() REFT_REQUIRES(mu) { return exit || job_ready; });
    if (!job_ready) return;
    job_ready = false;
    int64_t step = job_step;
    std::vector<PendingEvent> events = std::move(job_events);
    job_events.clear();
    HostCopyGate gate = job_gate;
    std::vector<local_proto::OptimizerHyper> optimizer = std::move(job_optimizer);
    job_optimizer.clear();
    std::shared_ptr<const SlotPlan> slot_plan = plan;
    lock.Unlock();
    Status st = RunSnapshot(step, events, gate, optimizer, *slot_plan);
    lock.Lock();
    last_result = st;
    in_flight = false;
    cv.notify_all();
  }
}

Status Client::Snapshot(int64_t step) { return impl_->StartSnapshot(step, nullptr, nullptr); }

Status Client::Snapshot(int64_t step, const OptimizerStep& optimizer) {
  return impl_->StartSnapshot(step, &optimizer, nullptr);
}

Status Client::Snapshot(int64_t step, const std::map<std::string, OptimizerStep>& optimizer) {
  return impl_->StartSnapshot(step, nullptr, &optimizer);
}

Result<std::vector<local_proto::OptimizerHyper>> Client::Impl::OptimizerRecords(
    int64_t step, const SlotPlan& p, const OptimizerStep* all,
    const std::map<std::string, OptimizerStep>* per_buffer) const {
  const std::string at = "snapshot of step " + std::to_string(step) + ": ";
  if (per_buffer != nullptr) {
    for (const auto& [name, o] : *per_buffer) {
      bool known = false;
      for (const auto& b : buffers) known |= b.name == name && b.options.optimizer;
      if (!known) {
        return Status::InvalidArgument(at + "optimizer hyper-parameters for '" + name +
                                       "', which is not a registered optimizer buffer");
      }
    }
  }
  std::vector<local_proto::OptimizerHyper> out;
  for (size_t i = 0; i < p.slot.aor.bindings.size(); ++i) {
    const std::string& name = p.slot.aor.bindings[i].buffer;
    const OptimizerStep* o = all;
    if (per_buffer != nullptr) {
      auto it = per_buffer->find(name);
      o = it == per_buffer->end() ? nullptr : &it->second;
    }
    if (o == nullptr) {
      return Status::InvalidArgument(
          at + "protection '" + scheme.ToString() + "' replays optimizer shard '" + name +
          "' from each step's optimizer hyper-parameters: pass them with the snapshot "
          "(Python: snapshot(step, optimizer=...))");
    }
    aor::StepHyper h;
    h.iteration = static_cast<uint64_t>(step);
    client_internal::CopyOptimizerFields(*o, &h);
    Status valid = aor::ValidateStepHyper(h);
    if (!valid.ok()) return valid.WithContext(at + "optimizer shard '" + name + "'");
    local_proto::OptimizerHyper rec;
    rec.buffer_index = p.slot.aor_buffer[i];
    const auto wire = aor::EncodeStepHyper(h);
    std::copy(wire.begin(), wire.end(), rec.record.begin());
    out.push_back(rec);
  }
  return out;
}

Status Client::Impl::StartSnapshot(int64_t step, const OptimizerStep* all,
                                   const std::map<std::string, OptimizerStep>* per_buffer) {
  Impl& d = *this;
  MutexLock lock(d.mu);
  if (d.closed) return Status::Unavailable("client is closed");
  if (step < 0) return Status::InvalidArgument("step " + std::to_string(step) + " is negative");
  if (d.buffers.empty()) return Status::InvalidArgument("snapshot with no registered buffer");
  d.WaitIdleLocked(lock);
  if (!d.last_result.ok()) {
    Status previous = d.last_result;
    d.last_result = Status::OK();
    return previous.WithContext("previous snapshot failed");
  }
  if (!d.plan) {
    REFT_ASSIGN_OR_RETURN(d.plan, d.MakePlanLocked());  // once per set of registered buffers
  }
  REFT_ASSIGN_OR_RETURN(std::vector<local_proto::OptimizerHyper> optimizer,
                        d.OptimizerRecords(step, *d.plan, all, per_buffer));
  REFT_ASSIGN_OR_RETURN(d.job_events, d.RecordReadyEvents());
  d.job_optimizer = std::move(optimizer);
  d.job_gate = d.next_gate;
  d.next_gate = {};
  if (auto* page = d.has_page.load(std::memory_order_relaxed)) {
    page->snapshot_ns.store(local_proto::MonotonicNs(), std::memory_order_release);
  }
  d.in_flight = true;
  d.job_ready = true;
  d.job_step = step;
  d.cv.notify_all();
  return Status::OK();
}

Status Client::Fence() {
  Impl& d = *impl_;
  MutexLock lock(d.mu);
  auto* page = d.has_page.load(std::memory_order_relaxed);
  if (page != nullptr) {
    // The deadline is here: reftd's release gate sees it and lets every remaining chunk out.
    page->fence_ns.store(local_proto::MonotonicNs(), std::memory_order_release);
    page->fence_waiting.store(1, std::memory_order_release);
  }
  d.WaitIdleLocked(lock);
  if (page != nullptr) page->fence_waiting.store(0, std::memory_order_release);
  Status result = d.last_result;
  d.last_result = Status::OK();
  return result;
}

Result<bool> Client::WaitCommitted(int64_t step, std::optional<std::chrono::milliseconds> timeout) {
  Impl& d = *impl_;
  {
    MutexLock lock(d.mu);
    if (d.closed) return Status::Unavailable("client is closed");
  }
  const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout
                                : std::chrono::steady_clock::time_point::max();
  auto delay = std::chrono::microseconds(200);
  local_proto::StepMessage m{step};
  for (;;) {
    REFT_ASSIGN_OR_RETURN(local_proto::Frame f,
                          d.channel->Call(MessageType::kQueryCommitted, local_proto::Encode(m),
                                          MessageType::kQueryCommittedReply));
    local_proto::QueryCommittedReply r;
    REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, local_proto::Limits{}, &r));
    if (r.committed) return true;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    // Polling keeps the channel strictly request/reply (no unsolicited frames to demultiplex).
    auto sleep = std::min<std::chrono::steady_clock::duration>(delay, deadline - now);
    std::this_thread::sleep_for(sleep);
    delay = std::min(delay * 2, std::chrono::microseconds(20000));
  }
}

Result<std::optional<int64_t>> Client::Restore() { return Restore(RestoreOptions{}); }

Result<std::optional<RestoreProbe>> Client::ProbeRestore() {
  Impl& d = *impl_;
  MutexLock lock(d.mu);
  if (d.closed) return Status::Unavailable("client is closed");
  d.WaitIdleLocked(lock);
  local_proto::RestoreRequest request;
  request.reshape = true;
  request.probe = true;
  REFT_ASSIGN_OR_RETURN(local_proto::Frame f,
                        d.channel->Call(MessageType::kRestore, local_proto::Encode(request),
                                        MessageType::kRestoreReply));
  local_proto::RestoreReply reply;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, local_proto::Limits{}, &reply));
  if (reply.slot.step < 0) return std::optional<RestoreProbe>();
  return std::optional<RestoreProbe>(RestoreProbe{reply.slot.step, reply.report.from_layout});
}

namespace {

RestoreReport ReportOf(const local_proto::RestoreReply& reply) {
  RestoreReport report;
  report.step = reply.slot.step;
  report.source = reply.report.source;
  report.agreement = std::chrono::nanoseconds(reply.report.agreement_ns);
  report.agreement_reason = reply.report.agreement;
  report.daemon = std::chrono::nanoseconds(reply.report.daemon_ns);
  report.detail = reply.report.detail;
  report.reshaped = reply.report.reshaped;
  report.from_layout = reply.report.from_layout;
  report.filled = reply.report.filled;
  report.untouched = reply.report.untouched;
  const std::pair<const char*, std::optional<RecoveryPhaseTime> RecoveryPhases::*> names[] = {
      {"lost_at", &RecoveryPhases::lost_at},
      {"declared_at", &RecoveryPhases::declared_at},
      {"decided_at", &RecoveryPhases::decided_at},
      {"staged_at", &RecoveryPhases::staged_at},
      {"reconnected_at", &RecoveryPhases::reconnected_at},
      {"restore_started_at", &RecoveryPhases::restore_started_at},
      {"restore_ended_at", &RecoveryPhases::restore_ended_at}};
  for (const local_proto::RestorePhase& p : reply.report.phases) {
    for (const auto& [name, member] : names)  // a phase this client does not know is skipped
      if (p.phase == name) report.phases.*member = RecoveryPhaseTime{p.at_ms, p.node};
  }
  return report;
}

}  // namespace

Status Client::ReadSaved(int64_t step, const std::vector<SavedRange>& ranges) {
  Impl& d = *impl_;
  MutexLock lock(d.mu);
  if (d.closed) return Status::Unavailable("client is closed");
  d.WaitIdleLocked(lock);
  // Requests stay well under the frame limit (64 KiB) and the daemon's count limit.
  constexpr size_t kMaxReads = 512;
  constexpr size_t kMaxRequestBytes = 48 << 10;
  size_t next = 0;
  while (next < ranges.size()) {
    local_proto::RestoreRequest request;
    request.reshape = true;
    request.read_step = step;
    size_t bytes = 0;
    const size_t first = next;
    while (next < ranges.size() && request.reads.size() < kMaxReads &&
           bytes + ranges[next].name.size() + 32 <= kMaxRequestBytes) {
      const SavedRange& r = ranges[next++];
      if (r.end < r.begin || (r.dst == nullptr && r.end > r.begin)) {
        return Status::InvalidArgument("read of saved buffer '" + r.name +
                                       "': the range ends before it begins or has no memory");
      }
      request.reads.push_back({r.name, r.pp, r.tp, r.begin, r.end});
      bytes += r.name.size() + 32;
    }
    REFT_ASSIGN_OR_RETURN(local_proto::Frame f,
                          d.channel->Call(MessageType::kRestore, local_proto::Encode(request),
                                          MessageType::kRestoreReply));
    local_proto::RestoreReply reply;
    REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, local_proto::Limits{}, &reply));
    if (reply.slot.step < 0) {
      return Status::NotFound("job '" + d.options.job + "' has no committed step to read");
    }
    d.last_restore = ReportOf(reply);  // where the bytes came from (memory, tier), as a restore
    uint64_t total = 0;
    for (size_t i = first; i < next; ++i) total += ranges[i].end - ranges[i].begin;
    if (reply.slot.file_size != total || (total > 0 && f.fds.size() != 1)) {
      return Status::Protocol("reftd answered a read of " + std::to_string(total) + " bytes with " +
                              std::to_string(reply.slot.file_size));
    }
    if (total == 0) continue;
    void* p = ::mmap(nullptr, total, PROT_READ, MAP_SHARED | MAP_POPULATE, f.fds[0].get(), 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping the read ranges");
    const auto* base = static_cast<const uint8_t*>(p);
    for (size_t i = first; i < next; ++i) {
      const uint64_t n = ranges[i].end - ranges[i].begin;
      if (n > 0) std::memcpy(ranges[i].dst, base, n);
      base += n;
    }
    ::munmap(p, total);
    REFT_RETURN_NOT_OK(d.channel->Call(MessageType::kRestoreDone, {}, MessageType::kAck).status());
  }
  return Status::OK();
}

Result<std::optional<int64_t>> Client::Restore(const RestoreOptions& options) {
  Impl& d = *impl_;
  MutexLock lock(d.mu);
  if (d.closed) return Status::Unavailable("client is closed");
  if (d.buffers.empty()) return Status::InvalidArgument("restore with no registered buffer");
  d.WaitIdleLocked(lock);
  d.restore_done.store(0, std::memory_order_relaxed);
  d.restore_total.store(0, std::memory_order_relaxed);
  d.SetRestorePhase(RestorePhase::kDeciding);
  auto restored = d.RestoreLocked(options);
  d.SetRestorePhase(restored.ok() ? RestorePhase::kDone : RestorePhase::kFailed);
  return restored;
}

RestoreProgress Client::RestoreProgressNow() const {
  const Impl& d = *impl_;
  RestoreProgress p;
  p.phase = static_cast<RestorePhase>(d.restore_phase.load(std::memory_order_acquire));
  p.bytes_done = d.restore_done.load(std::memory_order_relaxed);
  p.bytes_total = d.restore_total.load(std::memory_order_relaxed);
  return p;
}

Result<std::optional<int64_t>> Client::Impl::RestoreLocked(const RestoreOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  local_proto::RestoreRequest request;
  request.reshape = opts.reshape;
  request.remap_layout = opts.remap_layout;
  for (const auto& [name, segments] : opts.remap) {
    local_proto::BufferRemap b{name, {}};
    for (const auto& seg : segments) b.segments.push_back({seg.src, seg.dst, seg.length});
    request.remap.push_back(std::move(b));
  }
  // Streamed where reftd can: verified bytes are written into the buffers as they arrive, and
  // nothing of the state's size is allocated on either side (local_proto/stream.h).
  request.stream = true;
  std::optional<uint64_t> streamed_bytes, stream_expected;
  const client::Channel::Interim stream{MessageType::kRestoreStream, [&](local_proto::Frame& sf) {
    local_proto::SlotReply placed;
    REFT_RETURN_NOT_OK(local_proto::Decode(sf.payload, local_proto::Limits{}, &placed));
    if (sf.fds.size() != 2 || streamed_bytes) {
      return Status::Protocol("a restore stream frame must carry a socket and a ring, once");
    }
    std::vector<local_proto::StreamTarget> targets;
    uint64_t expected = 0;
    for (const auto& pl : placed.staged) {
      if (pl.buffer_index >= buffers.size() || buffers[pl.buffer_index].size != pl.size) {
        return Status::Protocol("the restore stream places an unknown buffer");
      }
      targets.push_back({pl.file_offset, pl.size, buffers[pl.buffer_index].host_data()});
      expected += pl.size;
    }
    restore_total.store(expected, std::memory_order_relaxed);
    SetRestorePhase(RestorePhase::kFetching);
    REFT_ASSIGN_OR_RETURN(uint64_t got,
                          local_proto::ReceiveStream(sf.fds[0].get(), sf.fds[1].get(), targets,
                                                     options.reply_timeout_ms, &restore_done));
    streamed_bytes = got;
    stream_expected = expected;
    return Status::OK();
  }};
  REFT_ASSIGN_OR_RETURN(local_proto::Frame f,
                        channel->Call(MessageType::kRestore, local_proto::Encode(request),
                                      MessageType::kRestoreReply, {}, &stream));
  local_proto::RestoreReply reply;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, local_proto::Limits{}, &reply));
  const local_proto::SlotReply& slot = reply.slot;
  RestoreReport report = ReportOf(reply);
  if (slot.step < 0) {
    if (streamed_bytes) {
      // A first attempt streamed a step, then the job's decision became "nothing to restore"
      // (the job was removed meanwhile): the buffers are not the trainer's own any more.
      return Status::Unavailable(
          "the restore streamed a step into the buffers, then the job's restore decision "
          "changed to nothing to restore; restore again");
    }
    report.total = std::chrono::steady_clock::now() - start;
    last_restore = report;
    return std::optional<int64_t>();
  }
  Status copied;
  if (slot.staged.empty() && streamed_bytes) {
    // Streamed: every placed byte must have come (a stream that ended early is abandoned, and
    // then the reply carries the whole state in a memfd instead).
    if (*streamed_bytes != *stream_expected) {
      copied = Status::Protocol("reftd reported a streamed restore complete after " +
                                std::to_string(*streamed_bytes) + " of " +
                                std::to_string(*stream_expected) + " bytes");
    }
    for (size_t i = 0; i < buffers.size() && copied.ok(); ++i) {
      const RegisteredBuffer& b = buffers[i];
      if (!b.staging) continue;
      SetRestorePhase(RestorePhase::kStaging);
      auto st = streams.find({b.memory, b.device});
      copied = b.staging->Push(st == streams.end() ? nullptr : st->second)
                   .WithContext("restoring staged buffer '" + b.name + "'");
    }
  } else if (!slot.staged.empty()) {
    if (f.fds.size() != 1) {
      copied = Status::Protocol("restore reply carries staged buffers but no slot fd");
    } else {
      // A fresh read-only mapping: restore never writes into a committed slot.
      // MAP_POPULATE: every byte is read once, so map them all in one call, not a fault per page.
      void* p = ::mmap(nullptr, slot.file_size, PROT_READ, MAP_SHARED | MAP_POPULATE,
                       f.fds[0].get(), 0);
      if (p == MAP_FAILED) {
        copied = Status::FromErrno(errno, "mapping the restored slot");
      } else {
        const auto* base = static_cast<const uint8_t*>(p);
        uint64_t total = 0, done = 0;
        for (const auto& pl : slot.staged) total += pl.size;
        restore_total.store(total, std::memory_order_relaxed);
        SetRestorePhase(RestorePhase::kCopying);
        // Bytes a stream delivered before it was abandoned stay counted: progress never goes
        // back.
        const uint64_t streamed = restore_done.load(std::memory_order_relaxed);
        for (const auto& pl : slot.staged) {
          if (pl.buffer_index >= buffers.size() || buffers[pl.buffer_index].size != pl.size) {
            copied = Status::Protocol("restore reply places an unknown buffer");
            break;
          }
          const RegisteredBuffer& b = buffers[pl.buffer_index];
          std::memcpy(b.host_data(), base + pl.file_offset, pl.size);
          done += pl.size;
          restore_done.store(std::max(streamed, done), std::memory_order_relaxed);
          if (b.staging) {
            auto stream = streams.find({b.memory, b.device});
            copied = b.staging->Push(stream == streams.end() ? nullptr : stream->second)
                         .WithContext("restoring staged buffer '" + b.name + "'");
            if (!copied.ok()) break;
          }
        }
        ::munmap(p, slot.file_size);
      }
    }
    Status done = channel->Call(MessageType::kRestoreDone, {}, MessageType::kAck).status();
    if (copied.ok()) copied = done;
  }
  if (!copied.ok()) return copied.WithContext("restore of step " + std::to_string(slot.step));
  if (scheme.aor) {
    // The AOR state is part of the report (last_restore["aor"]); a reftd that does not report
    // it leaves it empty.
    auto aor = QueryAorState();
    if (aor.ok()) report.aor = aor->state;
  }
  report.total = std::chrono::steady_clock::now() - start;
  last_restore = report;
  return std::optional<int64_t>(slot.step);
}

Result<AorReport> Client::Impl::QueryAorState() {
  if (aor_status_unsupported.load()) {
    return Status::Unsupported("this reftd does not report the AOR state (an older release)");
  }
  auto f = channel->Call(MessageType::kAorStatus, {}, MessageType::kAorStatusReply);
  if (!f.ok()) {
    if (f.status().code() != StatusCode::kProtocol) return f.status();
    // "unknown message type": asked once only (every refused frame counts against the
    // session's protocol-error budget).
    aor_status_unsupported = true;
    return Status::Unsupported("this reftd does not report the AOR state: " + f.status().message());
  }
  local_proto::AorStatusReply reply;
  REFT_RETURN_NOT_OK(local_proto::Decode(f->payload, local_proto::Limits{}, &reply));
  AorReport r;
  r.state = reply.state;
  r.replays = reply.replays;
  r.copies = reply.copies;
  r.verified = reply.verified;
  r.mismatches = reply.mismatches;
  return r;
}

Result<AorReport> Client::AorState() {
  {
    MutexLock lock(impl_->mu);
    if (impl_->closed) return Status::Unavailable("client is closed");
  }
  return impl_->QueryAorState();
}

Status ReplayOptimizerStep(void* param, void* exp_avg, void* exp_avg_sq, int state_dtype,
                           const void* grad, int grad_dtype, uint64_t n,
                           const OptimizerStep& step) {
  if (grad_dtype < 0 || grad_dtype > 2) {
    return Status::InvalidArgument("gradient dtype " + std::to_string(grad_dtype) +
                                   " (0 fp32, 1 fp16, 2 bf16)");
  }
  if (state_dtype != 0 && state_dtype != 2) {
    return Status::InvalidArgument("state dtype " + std::to_string(state_dtype) +
                                   " (0 fp32, 2 bf16)");
  }
  aor::StepHyper h;
  client_internal::CopyOptimizerFields(step, &h);
  h.iteration = h.step;
  const aor::AdamWState state{param, exp_avg, exp_avg_sq, n,
                              static_cast<aor::StateDtype>(state_dtype)};
  return aor::AdamWUpdate(state, h, grad, static_cast<aor::GradDtype>(grad_dtype), n);
}

std::optional<RestoreReport> Client::LastRestore() const {
  Impl& d = *impl_;
  MutexLock lock(d.mu);
  return d.last_restore;
}

Status Client::Close() {
  Impl& d = *impl_;
  Status result;
  {
    MutexLock lock(d.mu);
    if (d.closed) return Status::OK();
    d.WaitIdleLocked(lock);
    result = d.last_result;
    d.closed = true;
    d.exit = true;
    d.cv.notify_all();
  }
  if (d.worker.joinable()) d.worker.join();
  if (d.channel) d.channel->Close();
  d.mappings.Clear();
  if (auto* page = d.has_page.exchange(nullptr)) ::munmap(page, local_proto::kHasHintPageBytes);
  return result;
}

Status Client::EnableHas(const HasPipelineHint& hint) {
  Impl& d = *impl_;
  MutexLock lock(d.mu);
  if (d.closed) return Status::Unavailable("client is closed");
  if (d.has_page.load() != nullptr) return Status::OK();
  std::vector<uint8_t> payload;
  if (hint.stages > 0) {
    if (hint.stage < 0 || hint.stage >= hint.stages || hint.micro_batches < 1 ||
        hint.forward_seconds < 0 || hint.backward_seconds < 0) {
      return Status::InvalidArgument("pipeline hint: stage " + std::to_string(hint.stage) +
                                     " of " + std::to_string(hint.stages) + ", micro_batches " +
                                     std::to_string(hint.micro_batches) +
                                     ": needs 0 <= stage < stages, micro_batches >= 1 and "
                                     "non-negative times (Python: enable_has(...))");
    }
    const int64_t v[5] = {hint.stages, hint.stage, hint.micro_batches,
                          static_cast<int64_t>(hint.forward_seconds * 1e9),
                          static_cast<int64_t>(hint.backward_seconds * 1e9)};
    payload.resize(sizeof(v));
    std::memcpy(payload.data(), v, sizeof(v));
  }
  d.WaitIdleLocked(lock);  // the channel carries one request at a time
  UniqueFd fd(::memfd_create("reft-has-hints", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return Status::IoError(std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd.get(), local_proto::kHasHintPageBytes) != 0 ||
      ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    return Status::IoError(std::string("HAS hint page: ") + std::strerror(errno));
  }
  void* map = ::mmap(nullptr, local_proto::kHasHintPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd.get(), 0);
  if (map == MAP_FAILED) return Status::IoError(std::string("HAS hint page mmap: ") + std::strerror(errno));
  auto* page = new (map) local_proto::HasHintPage();  // zero-filled memfd; atomics value-initialised
  page->magic.store(local_proto::HasHintPage::kMagic);
  auto reply = d.channel->Call(MessageType::kHasAttach, payload, MessageType::kAck, {fd.get()});
  if (!reply.ok()) {
    ::munmap(map, local_proto::kHasHintPageBytes);
    if (reply.status().code() == StatusCode::kUnsupported) d.has_disabled = true;
    return reply.status().WithContext("enabling HAS hints");
  }
  d.has_page.store(page, std::memory_order_release);
  return Status::OK();
}

Status Client::BubbleBegin() {
  Impl& d = *impl_;
  auto* page = d.has_page.load(std::memory_order_acquire);
  if (page == nullptr) {
    {
      MutexLock lock(d.mu);
      if (d.has_disabled) return Status::OK();
    }
    Status st = EnableHas();
    if (!st.ok()) {
      MutexLock lock(d.mu);
      d.has_disabled = true;  // hints are advisory: report once, then ignore
      return st;
    }
    page = d.has_page.load(std::memory_order_acquire);
  }
  page->bubble_begin_ns.store(local_proto::MonotonicNs(), std::memory_order_relaxed);
  page->bubble_seq.fetch_add(1, std::memory_order_acq_rel);
  page->in_bubble.store(1, std::memory_order_release);
  return Status::OK();
}

Status Client::BubbleEnd() {
  auto* page = impl_->has_page.load(std::memory_order_acquire);
  if (page == nullptr || page->in_bubble.load(std::memory_order_relaxed) == 0) return Status::OK();
  page->in_bubble.store(0, std::memory_order_release);
  const uint64_t head = page->ring_head.load(std::memory_order_relaxed);
  auto& r = page->ring[head % local_proto::HasHintPage::kRing];
  r.begin_ns.store(page->bubble_begin_ns.load(std::memory_order_relaxed), std::memory_order_relaxed);
  r.end_ns.store(local_proto::MonotonicNs(), std::memory_order_relaxed);
  page->ring_head.store(head + 1, std::memory_order_release);
  return Status::OK();
}

Result<HasCounters> Client::has_counters() const {
  auto* page = impl_->has_page.load(std::memory_order_acquire);
  if (page == nullptr) {
    return Status::NotFound(
        "HAS hints are not enabled: enable them first (Python: enable_has() or bubble_begin())");
  }
  HasCounters c;
  c.bubble_bytes = page->released_bytes[1].load();
  c.compute_bytes = page->released_bytes[2].load() + page->released_bytes[3].load();
  c.landed_in_bubble_bytes = page->landed_in_bubble_bytes.load();
  c.gated_snapshots = page->gated_snapshots.load();
  c.copying = page->copying.load(std::memory_order_acquire) != 0;
  return c;
}

}  // namespace reft
