#include "session_buffers.h"

#include "reft/protect/slot_plan.h"

namespace reft::local {

namespace {

// Overflow-safe: [offset, offset+size) inside [0, limit).
bool RangeInside(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

}  // namespace

Status SessionBuffers::Add(const local_proto::Register& r, const local_proto::Frame& f,
                           const protect::Scheme& scheme, uint32_t max_buffers) {
  if (buffers_.size() >= max_buffers) {
    return Status::InvalidArgument("too many buffers: limit " + std::to_string(max_buffers));
  }
  REFT_RETURN_NOT_OK(protect::CheckRegistration(r, scheme));
  for (const auto& b : buffers_) {
    if (b.reg.name == r.name) return Status::AlreadyExists("buffer '" + r.name + "' registered twice");
  }
  if (f.fds.size() != (r.memory.has_fd ? 1u : 0u)) {
    return Status::Protocol("register '" + r.name + "': has_fd does not match the fds sent");
  }
  if (r.memory.memory_kind > static_cast<uint32_t>(kernels::MemoryKind::kHip)) {
    return Status::InvalidArgument("buffer '" + r.name + "': unknown memory kind " +
                                   std::to_string(r.memory.memory_kind));
  }
  Buffer buf;
  buf.reg = r;
  const auto kind = static_cast<kernels::MemoryKind>(r.memory.memory_kind);
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
      // An allocation is opened once per importing process (CUDA refuses a second open).
      buf.memory = it->second;
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
  return Status::OK();
}

std::vector<local_proto::Register> SessionBuffers::Registrations() const {
  std::vector<local_proto::Register> out;
  out.reserve(buffers_.size());
  for (const auto& b : buffers_) out.push_back(b.reg);
  return out;
}

uint64_t SessionBuffers::bytes() const {
  uint64_t n = 0;
  for (const auto& b : buffers_) n += b.reg.size;
  return n;
}

Result<kernels::CopyStream*> SessionBuffers::StreamFor(kernels::DeviceBackend* backend, int device) {
  auto key = std::make_pair(static_cast<int>(backend->kind()), device);
  auto it = streams_.find(key);
  if (it != streams_.end()) return it->second.get();
  REFT_ASSIGN_OR_RETURN(auto stream, backend->CreateStream(device));
  kernels::CopyStream* raw = stream.get();
  streams_[key] = std::move(stream);
  return raw;
}

void SessionBuffers::Clear() {
  streams_.clear();
  buffers_.clear();
  imports_.clear();
}

}  // namespace reft::local
