#include "session.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "reft/local_proto/has_hints.h"
#include "reft/protect/scheme.h"
#include "reft/units.h"
// HAS (daemon/has) gates the device pull when reft_has is linked into this library.
#if __has_include("reft/has/release_gate.h")
#define REFT_LOCAL_WITH_HAS 1
#include "reft/has/bubble_estimate.h"
#include "reft/has/release_gate.h"
#include "reft/kernels/emulated.h"
#else
#define REFT_LOCAL_WITH_HAS 0
#endif

namespace reft::local {

using local_proto::Frame;
using local_proto::MessageType;

namespace {

constexpr uint64_t kMaxBufferBytes = 1ull << 40;  // 1 TiB per buffer: sanity bound before any allocation

Status ValidateJob(const std::string& job) {
  if (job.empty()) return Status::InvalidArgument("job id is empty");
  for (char c : job) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return Status::InvalidArgument("job id '" + job +
                                     "' may contain only letters, digits, '-', '_' and '.'");
    }
  }
  return Status::OK();
}

// Overflow-safe: [offset, offset+size) inside [0, limit).
bool RangeInside(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

}  // namespace

struct Session::HasState {
  local_proto::HasHintPage* page = nullptr;
  int64_t prev_snapshot_ns = -1;
  uint64_t chunk_bytes = 1ull << 20;
#if REFT_LOCAL_WITH_HAS
  has::ReleaseGate gate{has::GateOptions{}};
  explicit HasState(has::GateOptions o) : gate(o) {}
#endif
  ~HasState() {
    if (page != nullptr) ::munmap(page, local_proto::kHasHintPageBytes);
  }
};

Session::Session(uint64_t id, local_proto::UniqueFd sock, const ucred& cred,
                 const LocalServerOptions& options, store::SnapshotStore* store,
                 CommitCoordinator* coordinator, ServerCounters* counters)
    : id_(id),
      sock_(std::move(sock)),
      cred_(cred),
      options_(options),
      store_(store),
      coordinator_(coordinator),
      counters_(counters) {
  info_.id = id;
  info_.pid = cred.pid;
  info_.uid = cred.uid;
  info_.gid = cred.gid;
}

Session::~Session() = default;

bool Session::Enqueue(Frame frame) {
  std::lock_guard<std::mutex> lock(mu_);
  if (hangup_queued_) return false;
  queue_.push_back(std::move(frame));
  if (scheduled_) return false;
  scheduled_ = true;
  return true;
}

bool Session::EnqueueHangup() {
  std::lock_guard<std::mutex> lock(mu_);
  hangup_queued_ = true;
  if (scheduled_) return false;
  scheduled_ = true;
  return true;
}

bool Session::RejectFrame(const Status& error) {
  counters_->rejected_frames++;
  (void)Reply(MessageType::kError, 0, local_proto::EncodeError(error));
  return ++protocol_errors_ <= options_.max_protocol_errors;
}

bool Session::Drain() {
  for (;;) {
    std::optional<Frame> frame;
    bool cleanup = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!queue_.empty()) {
        frame = std::move(queue_.front());
        queue_.pop_front();
      } else if (hangup_queued_ && !finished_) {
        cleanup = true;
      } else {
        scheduled_ = false;
        return finished_;
      }
    }
    if (cleanup) {
      Cleanup();
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
      queue_.clear();
      continue;
    }
    if (!finished_) Handle(*frame);
  }
}

Status Session::Reply(MessageType type, uint32_t request_id, const std::vector<uint8_t>& payload,
                      const std::vector<int>& fds) {
  std::lock_guard<std::mutex> lock(send_mu_);
  if (!sock_.valid()) return Status::Unavailable("session closed");
  return local_proto::SendFrame(sock_.get(), type, request_id, payload, fds);
}

void Session::Handle(Frame& f) {
  Status st;
  switch (f.header.type) {
    case MessageType::kHello: st = HandleHello(f); break;
    case MessageType::kRegister: st = HandleRegister(f); break;
    case MessageType::kSnapshotBegin: st = HandleSnapshotBegin(f); break;
    case MessageType::kSnapshotStaged: st = HandleSnapshotStaged(f); break;
    case MessageType::kSnapshotAbort: st = HandleSnapshotAbort(f); break;
    case MessageType::kQueryCommitted: st = HandleQueryCommitted(f); break;
    case MessageType::kRestore: st = HandleRestore(f); break;
    case MessageType::kRestoreDone: st = HandleRestoreDone(f); break;
    case MessageType::kHasAttach: st = HandleHasAttach(f); break;
    default:
      st = Status::Protocol(std::string("unexpected message '") +
                            local_proto::MessageTypeName(f.header.type) + "' from a client");
  }
  if (!st.ok()) {
    if (st.code() == StatusCode::kProtocol) {
      counters_->rejected_frames++;
      if (++protocol_errors_ > options_.max_protocol_errors) ::shutdown(sock_.get(), SHUT_RDWR);
    }
    (void)Reply(MessageType::kError, f.header.request_id, local_proto::EncodeError(st));
  }
}

Status Session::HandleHello(const Frame& f) {
  if (joined_) return Status::Protocol("hello sent twice on one connection");
  if (!f.fds.empty()) return Status::Protocol("hello must not carry fds");
  local_proto::Hello h;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &h));
  REFT_RETURN_NOT_OK(ValidateJob(h.job));
  REFT_ASSIGN_OR_RETURN(protect::Scheme spec, protect::Scheme::Parse(h.protection));
  store::RankKey rank{h.job, h.pp, h.tp, h.dp};
  JobLayout layout{h.layout.dp, h.layout.tp, h.layout.pp, h.layout.zero};
  REFT_RETURN_NOT_OK(coordinator_->Join(rank, layout));
  joined_ = true;
  rank_ = rank;
  {
    std::lock_guard<std::mutex> lock(mu_);
    info_.joined = true;
    info_.rank = rank;
    info_.layout = layout;
    info_.protection = spec.ToString();
  }
  local_proto::HelloReply reply;
  reply.session_id = id_;
  reply.daemon_version = options_.daemon_version;
  return Reply(MessageType::kHelloReply, f.header.request_id, local_proto::Encode(reply));
}

Status Session::HandleRegister(Frame& f) {
  if (!joined_) return Status::Protocol("register before hello");
  if (writing_) return Status::Busy("cannot register a buffer while a snapshot is being written");
  local_proto::Register r;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &r));
  if (buffers_.size() >= options_.limits.max_buffers) {
    return Status::InvalidArgument("too many buffers: limit " +
                                   std::to_string(options_.limits.max_buffers));
  }
  if (r.name.empty()) return Status::InvalidArgument("buffer name is empty");
  for (const auto& b : buffers_) {
    if (b.reg.name == r.name) return Status::AlreadyExists("buffer '" + r.name + "' registered twice");
  }
  if (r.size == 0 || r.size > kMaxBufferBytes) {
    return Status::InvalidArgument("buffer '" + r.name + "': size " + std::to_string(r.size) +
                                   " must be between 1 byte and 1 TiB");
  }
  if (f.fds.size() != (r.memory.has_fd ? 1u : 0u)) {
    return Status::Protocol("register '" + r.name + "': has_fd does not match the fds sent");
  }
  Buffer buf;
  buf.reg = r;
  auto kind = static_cast<kernels::MemoryKind>(r.memory.memory_kind);
  if (r.memory.memory_kind > static_cast<uint32_t>(kernels::MemoryKind::kHip)) {
    return Status::InvalidArgument("buffer '" + r.name + "': unknown memory kind " +
                                   std::to_string(r.memory.memory_kind));
  }
  if (kind != kernels::MemoryKind::kHost) {
    if (r.memory.allocation_size == 0 ||
        !RangeInside(r.memory.offset, r.size, r.memory.allocation_size)) {
      return Status::InvalidArgument("buffer '" + r.name + "': offset " +
                                     std::to_string(r.memory.offset) + " + size " +
                                     std::to_string(r.size) + " lies outside its allocation of " +
                                     std::to_string(r.memory.allocation_size) + " bytes");
    }
#if REFT_HAVE_DEVICE_BACKENDS
    REFT_ASSIGN_OR_RETURN(buf.backend, kernels::GetDeviceBackend(kind));
#else
    return Status::Unsupported("buffer '" + r.name + "': this reftd was built without device "
                               "backends (memory kind " + std::to_string(r.memory.memory_kind) +
                               ")");
#endif
    auto it = imports_.find(r.memory.allocation_id);
    if (it != imports_.end() && it->second->kind() == kind &&
        it->second->size() >= r.memory.allocation_size) {
      buf.memory = it->second;  // field-notes §0.2: open each allocation once per importer
    } else {
      kernels::MemoryExport ex;
      ex.kind = kind;
      ex.device = r.memory.device;
      ex.ipc_handle = r.memory.ipc_handle;
      ex.fd = f.fds.empty() ? -1 : f.fds[0].get();
      ex.allocation_id = r.memory.allocation_id;
      ex.allocation_size = r.memory.allocation_size;
      ex.offset = 0;  // import the whole allocation; copies add the buffer's offset
      ex.size = r.memory.allocation_size;
      auto imported = buf.backend->Import(ex);
      if (!imported.ok()) return imported.status().WithContext("importing buffer '" + r.name + "'");
      buf.memory = *imported;
      imports_[r.memory.allocation_id] = buf.memory;
    }
  }
  buffers_.push_back(std::move(buf));
  layout_dirty_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    info_.buffers = static_cast<uint32_t>(buffers_.size());
    info_.buffer_bytes += r.size;
  }
  local_proto::RegisterReply reply;
  reply.buffer_index = static_cast<uint32_t>(buffers_.size() - 1);
  return Reply(MessageType::kRegisterReply, f.header.request_id, local_proto::Encode(reply));
}

Status Session::CheckSlotMatchesBuffers(const store::SlotRef& slot) const {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const auto& reg = buffers_[i].reg;
    auto idx = slot.FindRegion(reg.name);
    if (!idx.ok()) {
      return Status::InvalidArgument("buffer '" + reg.name + "' is not in the snapshot of step " +
                                     std::to_string(slot.info().step) + " (layout changed?)");
    }
    if (slot.region_size(*idx) != reg.size) {
      return Status::InvalidArgument("buffer '" + reg.name + "' has " + std::to_string(reg.size) +
                                     " bytes but the snapshot of step " +
                                     std::to_string(slot.info().step) + " holds " +
                                     std::to_string(slot.region_size(*idx)));
    }
  }
  return Status::OK();
}

Status Session::HandleSnapshotBegin(const Frame& f) {
  if (!joined_) return Status::Protocol("snapshot before hello");
  local_proto::StepMessage m;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &m));
  if (m.step < 0) return Status::InvalidArgument("step " + std::to_string(m.step) + " is negative");
  if (buffers_.empty()) return Status::InvalidArgument("snapshot with no registered buffer");
  if (writing_) {
    return Status::Busy("step " + std::to_string(writing_->step) +
                        " is still being written; fence() before the next snapshot");
  }
  if (layout_dirty_) {
    std::vector<store::RegionSpec> layout;
    for (const auto& b : buffers_) layout.push_back({b.reg.name, b.reg.size});
    REFT_RETURN_NOT_OK(store_->ConfigureRank(rank_, layout));
    layout_dirty_ = false;
  }
  REFT_ASSIGN_OR_RETURN(std::shared_ptr<store::SlotRef> slot, store_->BeginWrite(rank_, m.step));
  writing_ = Writing{m.step, slot};
  Status st = CheckSlotMatchesBuffers(*slot);
  local_proto::SlotReply reply;
  reply.step = m.step;
  for (size_t i = 0; st.ok() && i < buffers_.size(); ++i) {
    if (buffers_[i].backend != nullptr) continue;
    size_t region = *slot->FindRegion(buffers_[i].reg.name);
    local_proto::Placement p{static_cast<uint32_t>(i), slot->region_file_offset(region),
                             buffers_[i].reg.size};
    reply.file_size = std::max(reply.file_size, p.file_offset + p.size);
    reply.staged.push_back(p);
  }
  std::vector<int> fds;
  local_proto::UniqueFd dup;
  if (st.ok() && !reply.staged.empty()) {
    auto d = slot->DupFd();
    if (d.ok()) {
      dup.reset(*d);
      fds.push_back(dup.get());
    } else {
      st = d.status();
    }
  }
  if (!st.ok()) {
    AbortWriting("slot preparation failed");
    return st;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    info_.writing_step = m.step;
  }
  return Reply(MessageType::kSnapshotBeginReply, f.header.request_id, local_proto::Encode(reply),
               fds);
}

Result<kernels::CopyStream*> Session::StreamFor(kernels::DeviceBackend* backend, int device) {
  auto key = std::make_pair(static_cast<int>(backend->kind()), device);
  auto it = streams_.find(key);
  if (it != streams_.end()) return it->second.get();
  REFT_ASSIGN_OR_RETURN(auto stream, backend->CreateStream(device));
  kernels::CopyStream* raw = stream.get();
  streams_[key] = std::move(stream);
  return raw;
}

Status Session::PullDeviceBuffers(const store::SlotRef& slot,
                                  const std::vector<kernels::EventExport>& ready,
                                  const std::vector<std::pair<int, int>>& ready_keys) {
  std::vector<kernels::CopyStream*> used;
  for (const auto& b : buffers_) {
    if (b.backend == nullptr) continue;
    REFT_ASSIGN_OR_RETURN(size_t region, slot.FindRegion(b.reg.name));
    uint8_t* dst = slot.region_data(region);
    REFT_RETURN_NOT_OK(b.backend->PinHost(dst, b.reg.size));
    REFT_ASSIGN_OR_RETURN(kernels::CopyStream * stream, StreamFor(b.backend, b.reg.memory.device));
    if (std::find(used.begin(), used.end(), stream) == used.end()) {
      // First copy on this stream: wait for the trainer's ready event of this device.
      const auto key = std::make_pair(static_cast<int>(b.backend->kind()), b.reg.memory.device);
      for (size_t e = 0; e < ready_keys.size(); ++e) {
        if (ready_keys[e] == key) REFT_RETURN_NOT_OK(stream->WaitEvent(ready[e]));
      }
    }
    REFT_RETURN_NOT_OK(b.backend->CopyToHostAsync(*b.memory, b.reg.memory.offset, dst, b.reg.size,
                                                  *stream)
                           .WithContext("pulling buffer '" + b.reg.name + "'"));
    if (std::find(used.begin(), used.end(), stream) == used.end()) used.push_back(stream);
  }
  Status first;
  for (auto* s : used) {
    Status st = s->Synchronize();
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

Status Session::PushDeviceBuffers(const store::SlotRef& slot) {
  std::vector<kernels::CopyStream*> used;
  for (const auto& b : buffers_) {
    if (b.backend == nullptr) continue;
    REFT_ASSIGN_OR_RETURN(size_t region, slot.FindRegion(b.reg.name));
    REFT_ASSIGN_OR_RETURN(kernels::CopyStream * stream, StreamFor(b.backend, b.reg.memory.device));
    REFT_RETURN_NOT_OK(b.backend->CopyToDeviceAsync(slot.region_data(region), *b.memory,
                                                    b.reg.memory.offset, b.reg.size, *stream)
                           .WithContext("restoring buffer '" + b.reg.name + "'"));
    if (std::find(used.begin(), used.end(), stream) == used.end()) used.push_back(stream);
  }
  Status first;
  for (auto* s : used) {
    Status st = s->Synchronize();
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

void Session::AbortWriting(const char* why) {
  if (!writing_) return;
  (void)store_->Abort(rank_, writing_->step);  // partial snapshot discarded; committed untouched
  writing_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  info_.writing_step = -1;
}

Status Session::HandleSnapshotStaged(const Frame& f) {
  local_proto::SnapshotStaged staged;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &staged));
  local_proto::StepMessage m{staged.step};
  std::vector<kernels::EventExport> ready;
  std::vector<std::pair<int, int>> ready_keys;
  size_t next_fd = 0;
  for (const auto& e : staged.events) {
    kernels::EventExport ev;
    ev.ipc_handle = e.ipc_handle;
    if (e.has_fd) {
      if (next_fd >= f.fds.size()) return Status::Protocol("snapshot_staged: event fd missing");
      ev.fd = f.fds[next_fd++].get();  // owned by the frame, alive until the copies finished
    }
    ready.push_back(ev);
    ready_keys.emplace_back(static_cast<int>(e.memory_kind), e.device);
  }
  if (next_fd != f.fds.size()) return Status::Protocol("snapshot_staged: unexpected fds");
  if (!writing_ || writing_->step != m.step) {
    return Status::Protocol("snapshot_staged for step " + std::to_string(m.step) +
                            " that is not being written");
  }
  std::shared_ptr<store::SlotRef> slot = writing_->slot;
  Status pulled = has_ ? PullDeviceBuffersGated(*slot, ready, ready_keys)
                       : PullDeviceBuffers(*slot, ready, ready_keys);
  if (!pulled.ok()) {
    AbortWriting("device pull failed");
    return pulled.WithContext("snapshot of step " + std::to_string(m.step));
  }
  // The fence: every byte is in the slot, the trainer may modify its buffers again. Sealing
  // (checksums) and the commit run after the reply, off the trainer's critical path.
  Status sent = Reply(MessageType::kSnapshotDone, f.header.request_id, local_proto::Encode(m));
  slot.reset();
  writing_->slot.reset();
  Status st = store_->Seal(rank_, m.step);
  if (!st.ok()) {
    AbortWriting("seal failed");
    failed_steps_[m.step] = st.WithContext("sealing step " + std::to_string(m.step));
    return sent;
  }
  writing_.reset();
  {
    std::lock_guard<std::mutex> lock(mu_);
    info_.writing_step = -1;
    info_.last_complete_step = m.step;
    info_.snapshots++;
  }
  st = coordinator_->Complete(rank_, m.step);
  if (!st.ok()) failed_steps_[m.step] = st;
  while (failed_steps_.size() > 64) failed_steps_.erase(failed_steps_.begin());
  return sent;
}

Status Session::HandleSnapshotAbort(const Frame& f) {
  local_proto::StepMessage m;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &m));
  if (writing_ && writing_->step == m.step) AbortWriting("client abort");
  return Reply(MessageType::kAck, f.header.request_id, {});
}

Status Session::HandleQueryCommitted(const Frame& f) {
  if (!joined_) return Status::Protocol("query before hello");
  local_proto::StepMessage m;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &m));
  auto failed = failed_steps_.find(m.step);
  if (failed != failed_steps_.end()) return failed->second;
  local_proto::QueryCommittedReply reply;
  auto newest = coordinator_->NewestCommitted(rank_.job);
  reply.newest_committed = newest.value_or(-1);
  reply.committed = newest && *newest >= m.step;
  return Reply(MessageType::kQueryCommittedReply, f.header.request_id, local_proto::Encode(reply));
}

Status Session::HandleRestore(const Frame& f) {
  if (!joined_) return Status::Protocol("restore before hello");
  if (!f.payload.empty()) return Status::Protocol("restore carries no payload");
  if (writing_) return Status::Busy("cannot restore while a snapshot is being written");
  restoring_.reset();
  local_proto::SlotReply reply;
  auto newest = coordinator_->NewestCommitted(rank_.job);
  if (!newest) {
    return Reply(MessageType::kRestoreReply, f.header.request_id, local_proto::Encode(reply));
  }
  const int64_t step = *newest;
  auto slot_or = store_->Get(rank_, step);
  if (!slot_or.ok()) {
    return Status::NotFound("job '" + rank_.job + "' committed step " + std::to_string(step) +
                            " but rank " + rank_.ToString() + " has no snapshot of it here: " +
                            slot_or.status().message());
  }
  std::shared_ptr<store::SlotRef> slot = *slot_or;
  REFT_RETURN_NOT_OK(CheckSlotMatchesBuffers(*slot));
  REFT_ASSIGN_OR_RETURN(store::VerifyReport report, store_->Verify(rank_, step));
  if (!report.bad.empty()) {
    const auto& b = report.bad.front();
    return Status::Corrupted("refusing to restore step " + std::to_string(step) + " of " +
                             rank_.ToString() + ": region '" + b.region + "' chunk " +
                             std::to_string(b.chunk) + " (offset " + std::to_string(b.offset) +
                             ") fails its checksum (" + std::to_string(report.bad.size()) +
                             " bad chunk(s))");
  }
  REFT_RETURN_NOT_OK(PushDeviceBuffers(*slot));
  reply.step = step;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].backend != nullptr) continue;
    size_t region = *slot->FindRegion(buffers_[i].reg.name);
    local_proto::Placement p{static_cast<uint32_t>(i), slot->region_file_offset(region),
                             buffers_[i].reg.size};
    reply.file_size = std::max(reply.file_size, p.file_offset + p.size);
    reply.staged.push_back(p);
  }
  std::vector<int> fds;
  local_proto::UniqueFd dup;
  if (!reply.staged.empty()) {
    REFT_ASSIGN_OR_RETURN(int d, slot->DupFd());
    dup.reset(d);
    fds.push_back(d);
    restoring_ = slot;  // keep the slot mapped until the client reports RestoreDone
  }
  return Reply(MessageType::kRestoreReply, f.header.request_id, local_proto::Encode(reply), fds);
}

Status Session::HandleRestoreDone(const Frame& f) {
  restoring_.reset();
  return Reply(MessageType::kAck, f.header.request_id, {});
}

Status Session::HandleHasAttach(Frame& f) {
  if (!joined_) return Status::Protocol("has_attach before hello");
  if (f.fds.size() != 1) return Status::Protocol("has_attach must carry exactly one fd");
#if REFT_LOCAL_WITH_HAS
  // Optional payload: the pipeline as five little-endian int64 (stages, this stage,
  // micro-batches, forward ns, backward ns) -> the simulator's bubble estimate seeds the gate.
  if (!f.payload.empty() && f.payload.size() != 5 * sizeof(int64_t)) {
    return Status::Protocol("has_attach payload must be empty or 40 bytes");
  }
  struct stat st {};
  if (::fstat(f.fds[0].get(), &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < local_proto::kHasHintPageBytes) {
    return Status::InvalidArgument("has_attach: the hint page fd is smaller than one page");
  }
  void* map = ::mmap(nullptr, local_proto::kHasHintPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                     f.fds[0].get(), 0);
  if (map == MAP_FAILED) return Status::IoError(std::string("has_attach: mmap: ") + std::strerror(errno));
  has::GateOptions options;
  const uint64_t emulated = kernels::EmulatedCopyBandwidth();
  if (emulated > 0) options.bytes_per_second = static_cast<double>(emulated);
  auto state = std::make_unique<HasState>(options);
  state->page = static_cast<local_proto::HasHintPage*>(map);
  if (state->page->magic.load() != local_proto::HasHintPage::kMagic) {
    return Status::InvalidArgument("has_attach: the hint page has a bad magic number");
  }
  if (const char* env = std::getenv("REFT_HAS_CHUNK"); env != nullptr && *env != '\0') {
    REFT_ASSIGN_OR_RETURN(uint64_t c, ParseByteSize(env));
    if (c == 0) return Status::InvalidArgument("REFT_HAS_CHUNK must be > 0");
    state->chunk_bytes = c;
  }
  if (!f.payload.empty()) {
    int64_t v[5];
    std::memcpy(v, f.payload.data(), sizeof(v));
    if (v[0] < 1 || v[0] > 1024 || v[1] < 0 || v[1] >= v[0] || v[2] < 1 || v[2] > 1 << 20 ||
        v[3] < 0 || v[4] < 0) {
      return Status::InvalidArgument("has_attach: bad pipeline hint (stages " +
                                     std::to_string(v[0]) + ", stage " + std::to_string(v[1]) +
                                     ", micro-batches " + std::to_string(v[2]) + ")");
    }
    planner::PipelineSpec spec;
    spec.forward.assign(static_cast<size_t>(v[0]), static_cast<double>(v[3]) * 1e-9);
    spec.backward.assign(static_cast<size_t>(v[0]), static_cast<double>(v[4]) * 1e-9);
    spec.micro_batches = static_cast<int>(v[2]);
    REFT_ASSIGN_OR_RETURN(auto est, has::EstimateBubbles(spec));
    const auto& stage = est[static_cast<size_t>(v[1])];
    state->gate.profiler().Seed(stage.windows, stage.makespan);
  }
  has_ = std::move(state);
  return Reply(MessageType::kAck, f.header.request_id, {});
#else
  return Status::Unsupported("this reftd was built without HAS (daemon/has)");
#endif
}

Status Session::PullDeviceBuffersGated(const store::SlotRef& slot,
                                       const std::vector<kernels::EventExport>& ready,
                                       const std::vector<std::pair<int, int>>& ready_keys) {
#if REFT_LOCAL_WITH_HAS
  HasState& h = *has_;
  local_proto::HasHintPage* pg = h.page;
  constexpr double kNs = 1e-9;
  // Online profiler: the previous iteration's bubbles, relative to its snapshot() call, and
  // its deadline (its fence() call, just before the optimizer step).
  const int64_t snap_ns = pg->snapshot_ns.load(std::memory_order_acquire);
  const int64_t fence_ns = pg->fence_ns.load(std::memory_order_acquire);
  const uint64_t head = pg->ring_head.load(std::memory_order_acquire);
  if (h.prev_snapshot_ns > 0 && fence_ns > h.prev_snapshot_ns && fence_ns <= snap_ns) {
    std::vector<std::pair<double, double>> windows;
    const uint64_t kRing = local_proto::HasHintPage::kRing;
    // Every remembered bubble, clipped to the previous iteration: a bubble may have ended
    // before that iteration's pull started, so "seen" entries are not skipped.
    for (uint64_t i = head > kRing ? head - kRing : 0; i < head; ++i) {
      const auto& r = pg->ring[i % kRing];
      const int64_t b = std::max(r.begin_ns.load(), h.prev_snapshot_ns);
      const int64_t e = std::min(r.end_ns.load(), fence_ns);
      if (e > b) windows.emplace_back((b - h.prev_snapshot_ns) * kNs, (e - h.prev_snapshot_ns) * kNs);
    }
    h.gate.profiler().Observe(windows, (fence_ns - h.prev_snapshot_ns) * kNs);
  }
  h.prev_snapshot_ns = snap_ns;

  struct Chunk {
    const Buffer* b;
    uint64_t offset, size;
    uint8_t* dst;
    kernels::CopyStream* stream;
  };
  std::vector<Chunk> chunks;
  std::vector<kernels::CopyStream*> used;
  uint64_t total = 0;
  for (const auto& b : buffers_) {
    if (b.backend == nullptr) continue;
    REFT_ASSIGN_OR_RETURN(size_t region, slot.FindRegion(b.reg.name));
    uint8_t* dst = slot.region_data(region);
    REFT_RETURN_NOT_OK(b.backend->PinHost(dst, b.reg.size));
    REFT_ASSIGN_OR_RETURN(kernels::CopyStream * stream, StreamFor(b.backend, b.reg.memory.device));
    if (std::find(used.begin(), used.end(), stream) == used.end()) {
      const auto key = std::make_pair(static_cast<int>(b.backend->kind()), b.reg.memory.device);
      for (size_t e = 0; e < ready_keys.size(); ++e) {
        if (ready_keys[e] == key) REFT_RETURN_NOT_OK(stream->WaitEvent(ready[e]));
      }
      used.push_back(stream);
    }
    for (uint64_t off = 0; off < b.reg.size; off += h.chunk_bytes) {
      chunks.push_back({&b, off, std::min(h.chunk_bytes, b.reg.size - off), dst + off, stream});
    }
    total += b.reg.size;
  }
  h.gate.Begin(snap_ns * kNs, total);
  uint64_t remaining = total;
  size_t next = 0;
  bool missed = false;  // the fence arrived before the last byte: feedback for the gate
  while (next < chunks.size()) {
    has::ReleaseGate::Release rel;
    for (;;) {
      rel = h.gate.DecideBatch(local_proto::MonotonicNs() * kNs, remaining, chunks[next].size,
                               pg->in_bubble.load(std::memory_order_acquire) != 0,
                               pg->fence_waiting.load(std::memory_order_acquire) != 0);
      if (rel.layer != has::Layer::kDeferred) break;
      const timespec pause{0, 200 * 1000};  // poll the hint page every 0.2 ms
      ::nanosleep(&pause, nullptr);
    }
    if (pg->fence_waiting.load(std::memory_order_acquire) != 0) missed = true;
    // Issue the batch, then synchronise once (one wake-up per batch, not per chunk).
    const uint64_t seq = pg->bubble_seq.load(std::memory_order_acquire);
    const int64_t t0 = local_proto::MonotonicNs();
    pg->copying.store(1, std::memory_order_release);
    uint64_t batch = 0;
    Status copied;
    std::vector<kernels::CopyStream*> touched;
    while (next < chunks.size() && (batch == 0 || batch + chunks[next].size <= rel.bytes)) {
      const Chunk& c = chunks[next++];
      copied = c.b->backend->CopyToHostAsync(*c.b->memory, c.b->reg.memory.offset + c.offset,
                                             c.dst, c.size, *c.stream)
                   .WithContext("pulling buffer '" + c.b->reg.name + "'");
      if (!copied.ok()) break;
      if (std::find(touched.begin(), touched.end(), c.stream) == touched.end()) touched.push_back(c.stream);
      batch += c.size;
    }
    for (auto* s : touched) {
      Status st = s->Synchronize();
      if (copied.ok()) copied = st;
    }
    pg->copying.store(0, std::memory_order_release);
    REFT_RETURN_NOT_OK(copied);
    h.gate.ObserveCopy(batch, (local_proto::MonotonicNs() - t0) * kNs);
    pg->released_bytes[static_cast<int>(rel.layer)].fetch_add(batch);
    if (rel.layer == has::Layer::kBubble) {
      const int64_t t1 = local_proto::MonotonicNs();
      if (pg->in_bubble.load() != 0 && pg->bubble_seq.load() == seq) {
        pg->landed_in_bubble_bytes.fetch_add(batch);
      } else if (pg->bubble_seq.load() == seq && t1 > t0) {
        // The bubble ended during the batch: the bytes copied before its end (at the batch's
        // measured rate) landed inside it.
        const uint64_t h2 = pg->ring_head.load(std::memory_order_acquire);
        const int64_t end = h2 > 0 ? pg->ring[(h2 - 1) % local_proto::HasHintPage::kRing].end_ns.load() : t0;
        if (end > t0) {
          const double share = std::min(1.0, static_cast<double>(end - t0) / static_cast<double>(t1 - t0));
          pg->landed_in_bubble_bytes.fetch_add(static_cast<uint64_t>(share * static_cast<double>(batch)));
        }
      }
    }
    remaining -= batch;
  }
  h.gate.EndSnapshot(missed);
  for (auto* s : used) REFT_RETURN_NOT_OK(s->Synchronize());  // streams with no chunk (ready waits)
  pg->gated_snapshots.fetch_add(1);
  return Status::OK();
#else
  return PullDeviceBuffers(slot, ready, ready_keys);
#endif
}

void Session::Cleanup() {
  // The client is gone (exit, crash, SIGKILL): whatever it was writing is undefined.
  AbortWriting("client hung up");
  restoring_.reset();
  has_.reset();
  streams_.clear();
  buffers_.clear();
  imports_.clear();  // field-notes §1: close mappings only after the last copy finished (strand)
  if (joined_) coordinator_->Leave(rank_);
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    sock_.reset();
  }
  counters_->closed_sessions++;
}

SessionInfo Session::Info() const {
  std::lock_guard<std::mutex> lock(mu_);
  return info_;
}

}  // namespace reft::local
