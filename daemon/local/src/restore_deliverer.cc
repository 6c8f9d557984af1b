#include "restore_deliverer.h"

#include <sys/mman.h>

#include <algorithm>

namespace reft::local {

namespace {

bool Stored(const SessionBuffers::Buffer& b) {
  return b.reg.kind != local_proto::BufferKind::kGradient;  // gradients are never stored
}

}  // namespace

namespace {
std::string Cut(const std::string& text) {
  return text.substr(0, local_proto::RestoreReport::kMaxText);
}
}  // namespace

Status RestoreDeliverer::Deliver(const protect::SlotMeta& meta, const RestoreRequest& request,
                                 local_proto::RestoreReply* restore_reply, UniqueFd* fd,
                                 int64_t* epoch, RestoreSink* stream) {
  RestoreRequest wanted = request;
  const auto& buffers = buffers_->all();
  bool any_device = false;
  for (const auto& b : buffers) any_device |= Stored(b) && b.backend != nullptr;
  // Device buffers are filled here from the state: they need it in reftd's memory.
  wanted.sink = stream != nullptr && !any_device && !request.probe && request.reads.empty()
                    ? stream
                    : nullptr;
  REFT_ASSIGN_OR_RETURN(RestoredState restored, restorer_->Restore(meta, wanted));
  *epoch = restored.epoch;
  local_proto::RestoreReport& report = restore_reply->report;
  report.source = restored.step < 0 ? "none" : restored.source;
  report.agreement_ns = static_cast<uint64_t>(restored.agreement.count());
  report.daemon_ns = static_cast<uint64_t>(restored.elapsed.count());
  report.agreement = Cut(restored.agreement_detail);
  report.detail = Cut(restored.detail);
  report.reshaped = restored.reshaped;
  report.from_layout = restored.from_layout;
  report.filled = restored.filled;
  report.untouched = restored.untouched;
  for (const RestorePhaseTime& p : restored.phases) report.phases.push_back({p.phase, p.at_ms, p.node});
  if (restored.step < 0) return Status::OK();  // nothing committed job-wide: a fresh start
  local_proto::SlotReply* reply = &restore_reply->slot;
  reply->step = restored.step;
  if (request.probe || restored.streamed) return Status::OK();  // nothing (more) to deliver
  if (!request.reads.empty()) {  // the ranges, one after another: one placement
    reply->staged = {{0, 0, restored.size}};
    reply->file_size = restored.size;
    if (restored.size > 0) *fd = std::move(restored.fd);
    return Status::OK();
  }
  // Buffers a reshape left untouched keep the trainer's bytes: nothing is delivered for them.
  auto untouched = [&](const SessionBuffers::Buffer& b) {
    return std::find(restored.untouched.begin(), restored.untouched.end(), b.reg.name) !=
           restored.untouched.end();
  };
  for (const auto& b : buffers) {
    if (!Stored(b) || untouched(b)) continue;
    if (!restored.offsets.count(b.reg.name)) {
      return Status::Internal("restore assembled no bytes for buffer '" + b.reg.name + "'");
    }
  }
  if (any_device) {
    const uint64_t mapped = std::max<uint64_t>(restored.size, 1);
    void* map = ::mmap(nullptr, mapped, PROT_READ, MAP_SHARED, restored.fd.get(), 0);
    if (map == MAP_FAILED) return Status::FromErrno(errno, "mapping the restored state");
    Status pushed = PushDevice(static_cast<const uint8_t*>(map), restored.offsets);
    ::munmap(map, mapped);
    REFT_RETURN_NOT_OK(pushed.WithContext("restoring step " + std::to_string(restored.step)));
  }
  REFT_ASSIGN_OR_RETURN(reply->staged, PlaceStaged(restored.offsets, restored.untouched));
  for (const auto& p : reply->staged) {
    reply->file_size = std::max(reply->file_size, p.file_offset + p.size);
  }
  if (!reply->staged.empty()) *fd = std::move(restored.fd);  // the client maps it read-only
  return Status::OK();
}

Result<std::vector<local_proto::Placement>> RestoreDeliverer::PlaceStaged(
    const std::map<std::string, uint64_t>& offsets,
    const std::vector<std::string>& untouched) const {
  std::vector<local_proto::Placement> out;
  const auto& buffers = buffers_->all();
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    if (b.backend != nullptr || !Stored(b)) continue;
    if (std::find(untouched.begin(), untouched.end(), b.reg.name) != untouched.end()) continue;
    auto at = offsets.find(b.reg.name);
    if (at == offsets.end()) {
      return Status::Internal("restore assembled no bytes for buffer '" + b.reg.name + "'");
    }
    out.push_back({static_cast<uint32_t>(i), at->second, b.reg.size});
  }
  return out;
}

Status RestoreDeliverer::PushDevice(const uint8_t* base,
                                    const std::map<std::string, uint64_t>& offsets) {
  std::vector<kernels::CopyStream*> used;
  Status first;
  for (const auto& b : buffers_->all()) {
    if (b.backend == nullptr || !Stored(b) || !offsets.count(b.reg.name)) continue;
    auto stream = buffers_->StreamFor(b.backend, b.reg.memory.device);
    if (!stream.ok()) {
      first = stream.status();
      break;
    }
    first = b.backend->CopyToDeviceAsync(base + offsets.at(b.reg.name), *b.memory,
                                         b.reg.memory.offset, b.reg.size, **stream)
                .WithContext("restoring buffer '" + b.reg.name + "'");
    if (!first.ok()) break;
    if (std::find(used.begin(), used.end(), *stream) == used.end()) used.push_back(*stream);
  }
  // Synchronise everything queued even after an error: the memfd is unmapped after this.
  for (auto* s : used) {
    Status st = s->Synchronize();
    if (first.ok()) first = st;
  }
  return first;
}

}  // namespace reft::local
