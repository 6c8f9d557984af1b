/// \file session.cc
/// \brief The strand of one session and the decoding of its requests.

#include "session.h"

#include <cstring>
#include <optional>
#include <string>

#include "reft/mapped_memfd.h"
#include "restore_stream.h"

namespace reft::local {

using local_proto::Frame;
using local_proto::MessageType;

namespace {

// The plan reply for `json`: inline when it fits a frame, else in a memfd (`file`) sealed
// against writes and resizing, so the client reads exactly the bytes written here.
Result<local_proto::PlanReply> PlanReplyOf(const std::string& json, UniqueFd* file) {
  local_proto::PlanReply reply;
  if (json.size() <= local_proto::PlanReply::kMaxInline) {
    reply.json = json;
    return reply;
  }
  if (json.size() > local_proto::PlanReply::kMaxFileBytes) {
    return Status::Internal("the plan document of " + std::to_string(json.size()) +
                            " bytes exceeds the local channel's limit of " +
                            std::to_string(local_proto::PlanReply::kMaxFileBytes));
  }
  REFT_ASSIGN_OR_RETURN(MappedMemfd m, MappedMemfd::Create("reft-plan", json.size()));
  std::memcpy(m.data(), json.data(), json.size());
  *file = m.Release();
  reply.file_bytes = json.size();
  return reply;
}

}  // namespace

Session::Session(uint64_t id, UniqueFd sock, PeerCredentials cred, const SessionContext& ctx)
    : id_(id),
      fd_(sock.get()),
      sock_(std::move(sock)),
      ctx_(ctx),
      options_(*ctx.options),
      cred_(std::move(cred)),
      writer_(SnapshotWriter::Context{ctx.options, ctx.store, ctx.coordinator, ctx.copier, &info_,
                                      &hung_up_},
              &buffers_),
      deliverer_(ctx.restorer, &buffers_) {
  info_.Update([&](SessionInfo& i) {
    i.id = id;
    i.pid = cred_.pid;
    i.uid = cred_.uid;
    i.gid = cred_.gid;
  });
}

Session::~Session() = default;

bool Session::Enqueue(Frame frame) {
  if (frame.header.type == MessageType::kAorStatus) {
    // Answered here, on the loop thread, from the session's counters: never behind the work
    // the session has queued (the replay or copy of the step just fenced runs on its strand).
    AnswerAorStatus(frame);
    return false;
  }
  MutexLock lock(mu_);
  if (hangup_queued_) return false;
  queue_.push_back(std::move(frame));
  if (scheduled_) return false;
  scheduled_ = true;
  return true;
}

bool Session::EnqueueHangup() {
  hung_up_ = true;
  MutexLock lock(mu_);
  hangup_queued_ = true;
  if (scheduled_) return false;
  scheduled_ = true;
  return true;
}

void Session::AnswerAorStatus(const Frame& f) {
  const SessionInfo info = info_.Get();
  if (!info.joined) {
    ReplyError(f.header.request_id, Status::Protocol("aor_status before hello"));
    return;
  }
  if (!f.payload.empty() || !f.fds.empty()) {
    ReplyError(f.header.request_id, Status::Protocol("aor_status takes no payload and no fds"));
    return;
  }
  local_proto::AorStatusReply reply;
  reply.state = info.aor_state;
  reply.replays = info.aor_replays;
  reply.copies = info.aor_copies;
  reply.verified = info.aor_verified;
  reply.mismatches = info.aor_mismatches;
  Status sent =
      Reply(MessageType::kAorStatusReply, f.header.request_id, local_proto::Encode(reply));
  if (!sent.ok()) ctx_.counters->failed_replies++;
}

bool Session::RejectFrame(const Status& error) {
  ctx_.counters->rejected_frames++;
  ReplyError(0, error);
  return ++protocol_errors_ <= options_.max_protocol_errors;
}

bool Session::Drain() {
  for (;;) {
    std::optional<Frame> frame;
    bool cleanup = false;
    {
      MutexLock lock(mu_);
      if (!queue_.empty() && !finished_) {
        frame = std::move(queue_.front());
        queue_.pop_front();
      } else if (hangup_queued_ && !finished_) {
        cleanup = true;
      } else {
        queue_.clear();  // frames that arrived after the hang-up was processed
        scheduled_ = false;
        return finished_;
      }
    }
    if (cleanup) {
      Cleanup();
      MutexLock lock(mu_);
      finished_ = true;
      queue_.clear();
      continue;
    }
    Handle(*frame);
  }
}

Status Session::Reply(MessageType type, uint32_t request_id, const std::vector<uint8_t>& payload,
                      const std::vector<int>& fds) {
  MutexLock lock(send_mu_);
  if (!sock_.valid()) return Status::Unavailable("session closed");
  return local_proto::SendFrame(sock_.get(), type, request_id, payload, fds);
}

void Session::ReplyError(uint32_t request_id, const Status& error) {
  // A client that does not take its error frame (gone, or not reading) is hung up by the loop
  // thread when its socket reports it; nothing else is owed to it.
  Status sent = Reply(MessageType::kError, request_id, local_proto::EncodeError(error));
  if (!sent.ok()) ctx_.counters->failed_replies++;
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
    case MessageType::kPlanQuery: st = HandlePlanQuery(f); break;
    case MessageType::kFailureReport: st = HandleFailureReport(f); break;
    default:
      st = Status::Protocol(std::string("unexpected message '") +
                            local_proto::MessageTypeName(f.header.type) + "' from a client");
  }
  if (!st.ok()) {
    if (st.code() == StatusCode::kProtocol) {
      ctx_.counters->rejected_frames++;
      if (++protocol_errors_ > options_.max_protocol_errors) ::shutdown(fd_, SHUT_RDWR);
    }
    ReplyError(f.header.request_id, st);
  }
}

Status Session::HandleHello(const Frame& f) {
  if (joined_) return Status::Protocol("hello sent twice on one connection");
  if (!f.fds.empty()) return Status::Protocol("hello must not carry fds");
  local_proto::Hello h;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &h));
  REFT_ASSIGN_OR_RETURN(protect::Scheme scheme, protect::CheckHello(h));
  const store::RankKey rank(h.job, h.coord);
  // Before anything of the job is touched: a session of another uid's job never joins it, so
  // it can neither write, restore nor (by hanging up) unpublish the owner's slots. With etcd
  // the claim of a new job is made by Join, with the layout; the owner is checked there again.
  REFT_ASSIGN_OR_RETURN(JobOwner claim, MakeClaim(cred_, h.owner_group, options_.node_id));
  REFT_RETURN_NOT_OK(ctx_.owners->Admit(h.job, cred_, claim));
  REFT_RETURN_NOT_OK(ctx_.held->Hold(rank, id_, cred_.pid));
  Status joined = ctx_.coordinator->Join(rank, h.layout, Joiner{cred_, claim});
  if (!joined.ok()) {
    ctx_.held->Release(rank, id_);
    // Join checks the owner again in the transaction that claims the job: a claim made on
    // another node between Admit and Join is refused there.
    if (joined.code() == StatusCode::kPermissionDenied) ctx_.owners->NoteDenied(h.job);
    return joined;
  }
  joined_ = true;
  rank_ = rank;
  layout_ = h.layout;
  scheme_ = scheme;
  writer_.Join(h, scheme);
  writer_.SetEpoch(ctx_.coordinator->RestoreEpoch(rank.job));
  info_.Update([&](SessionInfo& i) {
    i.joined = true;
    i.rank = rank;
    i.layout = h.layout;
    i.protection = scheme.ToString();
  });
  local_proto::HelloReply reply;
  reply.session_id = id_;
  reply.daemon_version = options_.daemon_version;
  reply.shard_chunk = options_.shard_chunk;
  return Reply(MessageType::kHelloReply, f.header.request_id, local_proto::Encode(reply));
}

Status Session::HandleRegister(Frame& f) {
  if (!joined_) return Status::Protocol("register before hello");
  if (writer_.writing()) {
    return Status::Busy("cannot register a buffer while a snapshot is being written");
  }
  local_proto::Register r;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &r));
  REFT_RETURN_NOT_OK(protect::CheckShardRegistration(r, rank_.coord(), layout_));
  REFT_RETURN_NOT_OK(buffers_.Add(r, f, scheme_, options_.limits.max_buffers));
  writer_.BuffersChanged(r);
  info_.Update([&](SessionInfo& i) {
    i.buffers = static_cast<uint32_t>(buffers_.size());
    i.buffer_bytes += r.size;
  });
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
  if (rank_.dp == 0 && declared_buffers_ != buffers_.size()) {
    // Buffers are only ever added, so a new count is a new set: declared again.
    ReplicatedBuffers replicated;
    for (const auto& b : buffers_.all()) {
      if (b.reg.kind == local_proto::BufferKind::kReplicated) {
        replicated.push_back({b.reg.name, b.reg.dtype, b.reg.size});
      }
    }
    REFT_RETURN_NOT_OK(ctx_.coordinator->DeclareReplicated(rank_, replicated));
    declared_buffers_ = buffers_.size();
  }
  local_proto::SlotReply reply;
  std::vector<int> fds;
  UniqueFd slot_fd;
  REFT_RETURN_NOT_OK(writer_.Begin(m, &reply, &fds, &slot_fd));
  return Reply(MessageType::kSnapshotBeginReply, f.header.request_id, local_proto::Encode(reply),
               fds);
}

Status Session::HandleSnapshotStaged(const Frame& f) {
  local_proto::SnapshotStaged staged;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &staged));
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
    // The client numbers its devices its own way: the event belongs to reftd's ordinal of the
    // device its buffers were matched to (device_match.h).
    const int kind = static_cast<int>(e.memory_kind);
    const int device = buffers_.DaemonDevice(kind, e.device);
    if (device != e.device) {
      auto backend = kernels::GetDeviceBackend(static_cast<kernels::MemoryKind>(kind));
      if (backend.ok()) ev = (*backend)->ForDevice(ev, device);
    }
    ready.push_back(ev);
    ready_keys.emplace_back(kind, device);
  }
  if (next_fd != f.fds.size()) return Status::Protocol("snapshot_staged: unexpected fds");
  REFT_RETURN_NOT_OK(writer_.Pull(staged.step, ready, ready_keys));
  // The fence: every byte from the trainer's buffers is in the slot, the trainer may modify
  // them again. Peer copies, sealing (checksums) and the commit run after the reply, off the
  // trainer's critical path.
  local_proto::StepMessage done{staged.step};
  Status sent = Reply(MessageType::kSnapshotDone, f.header.request_id, local_proto::Encode(done));
  writer_.Complete(staged.step);
  return sent;
}

Status Session::HandleSnapshotAbort(const Frame& f) {
  local_proto::StepMessage m;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &m));
  if (writer_.writing_step() == m.step) writer_.AbortWriting("client abort");
  return Reply(MessageType::kAck, f.header.request_id, {});
}

Status Session::HandleQueryCommitted(const Frame& f) {
  if (!joined_) return Status::Protocol("query before hello");
  local_proto::StepMessage m;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &m));
  if (auto failed = writer_.Failure(m.step)) return *failed;
  local_proto::QueryCommittedReply reply;
  auto newest = ctx_.coordinator->NewestCommitted(rank_.job);
  reply.newest_committed = newest.value_or(-1);
  reply.committed = newest && *newest >= m.step;
  return Reply(MessageType::kQueryCommittedReply, f.header.request_id, local_proto::Encode(reply));
}

Status Session::HandleRestore(const Frame& f) {
  if (!joined_) return Status::Protocol("restore before hello");
  local_proto::RestoreRequest request;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &request));
  if (writer_.writing()) return Status::Busy("cannot restore while a snapshot is being written");
  const bool read = !request.reads.empty();
  if (buffers_.empty() && !read && !request.probe) {
    return Status::InvalidArgument("restore with no registered buffer");
  }
  if (read && (!request.reshape || request.probe || !request.remap.empty())) {
    return Status::InvalidArgument("a read is a reshaped restore without probe or remap");
  }
  // A restore reads the whole job's state (and may decide the job's restore for everyone): the
  // owner is asked again, in case an operator released the job since this session joined.
  REFT_RETURN_NOT_OK(ctx_.owners->Check(rank_.job, cred_));
  // A reader may come before any registration (it loads first, then saves): the rank as its
  // hello declared it, without buffers.
  protect::SlotMeta bare{rank_.job, rank_.coord(), layout_, scheme_, options_.shard_chunk, {}};
  const protect::SlotMeta* meta = &bare;
  if (!buffers_.empty()) {
    REFT_ASSIGN_OR_RETURN(meta, writer_.Meta());
  }
  // The trainer goes back to a committed step: whatever the replicas replayed is ahead of it.
  writer_.ResetAor("the trainer restored");
  local_proto::RestoreReply reply;
  UniqueFd fd;
  int64_t epoch = 0;
  if (!request.remap.empty() && (!request.reshape || request.probe)) {
    return Status::InvalidArgument(request.probe ? "a restore probe takes no remap"
                                                 : "a remap needs reshape=true");
  }
  RestoreRequest wanted;
  wanted.reshape = request.reshape;
  wanted.probe = request.probe;
  wanted.remap_layout = request.remap_layout;
  for (auto& b : request.remap) {
    auto [at, added] = wanted.remap.emplace(b.name, std::vector<RestoreRequest::Segment>{});
    if (!added) return Status::InvalidArgument("remap names buffer '" + b.name + "' twice");
    for (const auto& s : b.segments) at->second.push_back({s.src, s.dst, s.length});
  }
  wanted.read_step = request.read_step;
  for (const auto& r : request.reads) wanted.reads.push_back({r.name, r.pp, r.tp, r.begin, r.end});
  // A client that can take a stream gets the bytes written into its buffers as they are
  // verified (local_proto/stream.h), when the restore allows it.
  std::optional<RestoreStream> stream;
  if (request.stream) {
    const uint32_t id = f.header.request_id;
    stream.emplace(
        [this, id](const std::vector<uint8_t>& payload, std::vector<int> fds) {
          return Reply(MessageType::kRestoreStream, id, payload, std::move(fds));
        },
        [this](const std::map<std::string, uint64_t>& offsets) {
          return deliverer_.PlaceStaged(offsets);
        },
        options_.send_timeout_ms, ctx_.rings, static_cast<uid_t>(cred_.uid));
  }
  REFT_RETURN_NOT_OK(deliverer_.Deliver(*meta, wanted, &reply, &fd, &epoch,
                                        stream ? &*stream : nullptr));
  writer_.SetEpoch(epoch);
  std::vector<int> fds;
  if (fd.valid()) fds.push_back(fd.get());
  return Reply(MessageType::kRestoreReply, f.header.request_id, local_proto::Encode(reply), fds);
}

Status Session::HandleRestoreDone(const Frame& f) {
  return Reply(MessageType::kAck, f.header.request_id, {});
}

Status Session::HandleHasAttach(Frame& f) {
  if (!joined_) return Status::Protocol("has_attach before hello");
  REFT_RETURN_NOT_OK(writer_.AttachHas(f));
  return Reply(MessageType::kAck, f.header.request_id, {});
}

Status Session::HandlePlanQuery(const Frame& f) {
  if (!f.fds.empty()) return Status::Protocol("plan_query must not carry fds");
  local_proto::PlanQuery q;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &q));
  REFT_RETURN_NOT_OK(CheckJobId(q.job));
  // The owner before anything else: a caller who does not own the job learns nothing of it,
  // not even whether it has a committed step or a planner to ask.
  REFT_RETURN_NOT_OK(ctx_.owners->Check(q.job, cred_));
  if (ctx_.plans == nullptr) return Status::Unavailable("this daemon has no planner");
  REFT_ASSIGN_OR_RETURN(std::string json, ctx_.plans->PlanJson(q.job));
  UniqueFd file;
  REFT_ASSIGN_OR_RETURN(local_proto::PlanReply reply, PlanReplyOf(json, &file));
  std::vector<int> fds;
  if (file.valid()) fds.push_back(file.get());
  return Reply(MessageType::kPlanReply, f.header.request_id, local_proto::Encode(reply), fds);
}

void Session::Cleanup() {
  // The client is gone (exit, crash, SIGKILL): whatever it was writing is undefined.
  writer_.Close();
  if (joined_) ctx_.store->Unpublish(rank_);  // a redo of the step may write other bytes
  // Device mappings are closed only now that the last copy has finished (the strand).
  buffers_.Clear();
  if (joined_) {
    ctx_.coordinator->Leave(rank_);
    ctx_.held->Release(rank_, id_);
  }
  {
    MutexLock lock(send_mu_);
    sock_.reset();
  }
  ctx_.counters->closed_sessions++;
}

}  // namespace reft::local
