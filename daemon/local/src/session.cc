#include "session.h"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "reft/protect/aor_plan.h"
#include "reft/protect/scheme.h"
#include "session_has_state.h"

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

Session::Session(uint64_t id, UniqueFd sock, const ucred& cred,
                 const SessionContext& ctx)
    : id_(id), sock_(std::move(sock)), cred_(cred), ctx_(ctx), options_(*ctx.options) {
  info_.id = id;
  info_.pid = cred.pid;
  info_.uid = cred.uid;
  info_.gid = cred.gid;
}

bool Session::Enqueue(Frame frame) {
  std::lock_guard<std::mutex> lock(mu_);
  if (hangup_queued_) return false;
  queue_.push_back(std::move(frame));
  if (scheduled_) return false;
  scheduled_ = true;
  return true;
}

bool Session::EnqueueHangup() {
  hung_up_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  hangup_queued_ = true;
  if (scheduled_) return false;
  scheduled_ = true;
  return true;
}

bool Session::RejectFrame(const Status& error) {
  ctx_.counters->rejected_frames++;
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
      ctx_.counters->rejected_frames++;
      if (++protocol_errors_ > options_.max_protocol_errors) ::shutdown(sock_.get(), SHUT_RDWR);
    }
    (void)Reply(MessageType::kError, f.header.request_id, local_proto::EncodeError(st));
  }
}

Session::~Session() = default;

Status Session::HandleHello(const Frame& f) {
  if (joined_) return Status::Protocol("hello sent twice on one connection");
  if (!f.fds.empty()) return Status::Protocol("hello must not carry fds");
  local_proto::Hello h;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &h));
  REFT_RETURN_NOT_OK(ValidateJob(h.job));
  REFT_ASSIGN_OR_RETURN(protect::Scheme scheme, protect::Scheme::Parse(h.protection));
  const store::RankKey rank(h.job, h.coord);
  const JobLayout& layout = h.layout;
  REFT_RETURN_NOT_OK(protect::CheckAorLayout(layout, scheme));
  REFT_RETURN_NOT_OK(ctx_.coordinator->Join(rank, layout));
  joined_ = true;
  rank_ = rank;
  scheme_ = scheme;
  {
    std::lock_guard<std::mutex> lock(mu_);
    info_.joined = true;
    info_.rank = rank;
    info_.layout = layout;
    info_.protection = scheme.ToString();
  }
  local_proto::HelloReply reply;
  reply.session_id = id_;
  reply.daemon_version = options_.daemon_version;
  reply.shard_chunk = options_.shard_chunk;
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
  if (r.name.empty() || r.name.size() > protect::kMaxBufferName) {
    return Status::InvalidArgument("buffer name '" + r.name + "' must have 1 to " +
                                   std::to_string(protect::kMaxBufferName) + " bytes");
  }
  for (const auto& b : buffers_) {
    if (b.reg.name == r.name) return Status::AlreadyExists("buffer '" + r.name + "' registered twice");
  }
  if (r.size == 0 || r.size > kMaxBufferBytes) {
    return Status::InvalidArgument("buffer '" + r.name + "': size " + std::to_string(r.size) +
                                   " must be between 1 byte and 1 TiB");
  }
  REFT_ASSIGN_OR_RETURN(int elem, protect::DtypeSize(r.dtype));
  if (r.size % static_cast<uint64_t>(elem) != 0) {
    return Status::InvalidArgument("buffer '" + r.name + "': " + std::to_string(r.size) +
                                   " bytes is not a whole number of " + r.dtype + " elements");
  }
  if (r.kind == local_proto::BufferKind::kGradient) {
    // Read by the AOR replay at snapshot time, never stored: only meaningful under "aor".
    if (!scheme_.aor) {
      return Status::InvalidArgument("gradient buffer '" + r.name + "' is read only by "
                                     "protection 'aor', which this job does not use ('" +
                                     scheme_.ToString() + "')");
    }
    auto code = protect::GradientDtypeCode(r.dtype);
    if (!code.ok()) return code.status().WithContext("buffer '" + r.name + "'");
    if (!r.gradient.empty() || r.optimizer) {
      return Status::InvalidArgument("gradient buffer '" + r.name + "' cannot be an optimizer "
                                     "shard or name a gradient itself");
    }
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
    REFT_ASSIGN_OR_RETURN(buf.backend, kernels::GetDeviceBackend(kind));
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
  plan_.reset();  // the slot layout depends on every registered buffer
  aor_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    info_.buffers = static_cast<uint32_t>(buffers_.size());
    info_.buffer_bytes += r.size;
  }
  local_proto::RegisterReply reply;
  reply.buffer_index = static_cast<uint32_t>(buffers_.size() - 1);
  return Reply(MessageType::kRegisterReply, f.header.request_id, local_proto::Encode(reply));
}

Status Session::HandleSnapshotBegin(Frame& f) {
  if (!joined_) return Status::Protocol("snapshot before hello");
  local_proto::SnapshotBegin m;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &m));
  if (m.step < 0) return Status::InvalidArgument("step " + std::to_string(m.step) + " is negative");
  if (buffers_.empty()) return Status::InvalidArgument("snapshot with no registered buffer");
  if (writing_) {
    return Status::Busy("step " + std::to_string(writing_->step) +
                        " is still being written; fence() before the next snapshot");
  }
  if (!plan_) {
    REFT_ASSIGN_OR_RETURN(plan_, MakePlan());
  }
  REFT_ASSIGN_OR_RETURN(std::vector<aor::StepHyper> hypers, OptimizerHypers(m));
  if (!plan_->configured) {
    REFT_RETURN_NOT_OK(ctx_.store->ConfigureRank(rank_, plan_->layout));
    plan_->configured = true;
  }
  REFT_ASSIGN_OR_RETURN(std::shared_ptr<store::SlotRef> slot, BeginWriteKeepingReplicas(m.step));
  writing_ = Writing{m.step, slot, std::move(hypers)};
  local_proto::SlotReply reply;
  reply.step = m.step;
  Status st;
  for (const auto& region : slot->info().regions) {
    auto idx = slot->FindRegion(region.name);
    if (!idx.ok()) {
      st = idx.status();
      break;
    }
    const uint64_t off = slot->region_file_offset(*idx);
    reply.regions.push_back({region.name, off, region.size});
    reply.file_size = std::max(reply.file_size, off + region.size);
  }
  if (st.ok() && slot->info().regions != plan_->layout) {
    st = Status::Internal("the slot of step " + std::to_string(m.step) + " has another layout");
  }
  if (st.ok()) {
    // The meta region is reftd's to write: it describes the slot to every later reader.
    auto mi = slot->FindRegion(protect::kRegionMeta);
    st = mi.status();
    if (st.ok()) std::memcpy(slot->region_data(*mi), plan_->meta_bytes.data(), plan_->meta_bytes.size());
  }
  std::vector<int> fds;
  UniqueFd dup;
  if (st.ok()) {
    auto d = slot->DupFd();
    if (d.ok()) {
      dup.reset(*d);
      fds.push_back(dup.get());
    } else {
      st = d.status();
    }
  }
  if (st.ok() && plan_->staging_for_client) {
    // The client copies its host-memory gradients' slices here before snapshot_staged.
    reply.gradient_file_size = plan_->staging->mem.size();
    for (size_t i = 0; i < plan_->aor.bindings.size(); ++i) {
      if (plan_->aor_gradient[i]->backend != nullptr) continue;
      const auto& b = plan_->aor.bindings[i];
      reply.gradients.push_back({b.buffer, b.staging_offset, b.grad_bytes});
    }
    fds.push_back(plan_->staging->mem.fd());
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

void Session::AbortWriting(const char* why) {
  (void)why;
  if (!writing_) return;
  (void)ctx_.store->Abort(rank_, writing_->step);  // partial snapshot discarded; committed untouched
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
  Status pulled = has_ ? PullDeviceGated(*slot, ready, ready_keys)
                       : PullDevice(*slot, ready, ready_keys);
  if (!pulled.ok()) {
    AbortWriting("device pull failed");
    return pulled.WithContext("snapshot of step " + std::to_string(m.step));
  }
  // The fence: every byte from the trainer's buffers is in the slot, the trainer may modify
  // them again. Peer copies, sealing (checksums) and the commit run after the reply, off the
  // trainer's critical path.
  Status sent = Reply(MessageType::kSnapshotDone, f.header.request_id, local_proto::Encode(m));
  writing_->slot.reset();
  Status st = CompleteStep(m.step, slot);
  slot.reset();
  if (!st.ok()) {
    ResetAor("step " + std::to_string(m.step) + " failed on this rank: " + st.message());
    AbortWriting("completion failed");
    failed_steps_[m.step] = st.WithContext("completing step " + std::to_string(m.step));
  } else {
    writing_.reset();
    std::lock_guard<std::mutex> lock(mu_);
    info_.writing_step = -1;
    info_.last_complete_step = m.step;
    info_.snapshots++;
  }
  if (st.ok()) {
    st = ctx_.coordinator->Complete(rank_, m.step);
    if (!st.ok()) failed_steps_[m.step] = st;
  }
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
  auto newest = ctx_.coordinator->NewestCommitted(rank_.job);
  reply.newest_committed = newest.value_or(-1);
  reply.committed = newest && *newest >= m.step;
  return Reply(MessageType::kQueryCommittedReply, f.header.request_id, local_proto::Encode(reply));
}

Status Session::HandleRestore(const Frame& f) {
  if (!joined_) return Status::Protocol("restore before hello");
  if (!f.payload.empty()) return Status::Protocol("restore carries no payload");
  if (writing_) return Status::Busy("cannot restore while a snapshot is being written");
  if (buffers_.empty()) return Status::InvalidArgument("restore with no registered buffer");
  if (!plan_) {
    REFT_ASSIGN_OR_RETURN(plan_, MakePlan());
  }
  // The trainer goes back to a committed step: whatever the replicas replayed is ahead of it.
  ResetAor("the trainer restored");
  REFT_ASSIGN_OR_RETURN(RestoredState restored, ctx_.restorer->Restore(plan_->meta));
  local_proto::SlotReply reply;
  if (restored.step < 0) {
    return Reply(MessageType::kRestoreReply, f.header.request_id, local_proto::Encode(reply));
  }
  for (const auto& b : buffers_) {
    if (b.reg.kind == local_proto::BufferKind::kGradient) continue;  // never stored
    if (!restored.offsets.count(b.reg.name)) {
      return Status::Internal("restore assembled no bytes for buffer '" + b.reg.name + "'");
    }
  }
  bool any_device = false;
  for (const auto& b : buffers_) {
    any_device |= b.backend != nullptr && b.reg.kind != local_proto::BufferKind::kGradient;
  }
  if (any_device) {
    void* map = ::mmap(nullptr, std::max<uint64_t>(restored.size, 1), PROT_READ, MAP_SHARED,
                       restored.fd.get(), 0);
    if (map == MAP_FAILED) return Status::FromErrno(errno, "mapping the restored state");
    Status pushed = PushDevice(static_cast<const uint8_t*>(map), restored.offsets);
    ::munmap(map, std::max<uint64_t>(restored.size, 1));
    REFT_RETURN_NOT_OK(pushed.WithContext("restoring step " + std::to_string(restored.step)));
  }
  reply.step = restored.step;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].backend != nullptr) continue;
    if (buffers_[i].reg.kind == local_proto::BufferKind::kGradient) continue;
    local_proto::Placement p{static_cast<uint32_t>(i), restored.offsets.at(buffers_[i].reg.name),
                             buffers_[i].reg.size};
    reply.file_size = std::max(reply.file_size, p.file_offset + p.size);
    reply.staged.push_back(p);
  }
  std::vector<int> fds;
  if (!reply.staged.empty()) fds.push_back(restored.fd.get());  // the client maps it read-only
  return Reply(MessageType::kRestoreReply, f.header.request_id, local_proto::Encode(reply), fds);
}

Status Session::HandleRestoreDone(const Frame& f) {
  return Reply(MessageType::kAck, f.header.request_id, {});
}

void Session::Cleanup() {
  // The client is gone (exit, crash, SIGKILL): whatever it was writing is undefined.
  AbortWriting("client hung up");
  if (joined_) ctx_.store->Unpublish(rank_);  // a redo of the step may write other bytes
  DetachHas();
  aor_.clear();  // lets go of the slots the replicas lived in
  streams_.clear();
  plan_.reset();
  buffers_.clear();
  imports_.clear();  // field-notes §1: close mappings only after the last copy finished (strand)
  if (joined_) ctx_.coordinator->Leave(rank_);
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    sock_.reset();
  }
  ctx_.counters->closed_sessions++;
}

SessionInfo Session::Info() const {
  std::lock_guard<std::mutex> lock(mu_);
  return info_;
}

}  // namespace reft::local
