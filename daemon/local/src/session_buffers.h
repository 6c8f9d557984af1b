#pragma once
/// \file session_buffers.h
/// \brief The buffers one session registered, the device memory behind them (each allocation
/// imported once) and reftd's copy streams on those devices. Owned by the Session; the snapshot
/// writer pulls from it and the restore deliverer pushes into it. Touched only by the session's
/// strand (its requests run in order), so it has no lock.

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "reft/kernels/device.h"
#include "reft/local_proto/socket.h"
#include "reft/local_proto/messages.h"
#include "reft/protect/scheme.h"
#include "reft/result.h"

namespace reft::local {

class SessionBuffers {
 public:
  struct Buffer {
    local_proto::Register reg;
    kernels::DeviceBackend* backend = nullptr;        ///< null for staged (host) buffers
    std::shared_ptr<kernels::ImportedMemory> memory;  ///< the whole allocation (cached import)
  };

  /// \brief Checks registration `r` of frame `f` (the rules libreft applies too, plus the
  /// session's limits) and adds it; device memory is imported, once per allocation.
  /// The index of the buffer is size() - 1 afterwards. Pointers to earlier buffers stay valid
  /// only until the next Add (the slot plan is recomputed after a registration).
  Status Add(const local_proto::Register& r, const local_proto::Frame& f,
             const protect::Scheme& scheme, uint32_t max_buffers);

  const std::vector<Buffer>& all() const { return buffers_; }
  const Buffer& operator[](size_t i) const { return buffers_[i]; }
  size_t size() const { return buffers_.size(); }
  bool empty() const { return buffers_.empty(); }
  /// \brief The registrations in order: what libreft sent, the input of the slot plan.
  std::vector<local_proto::Register> Registrations() const;
  uint64_t bytes() const;

  /// \brief reftd's copy stream on (backend, device), created on first use.
  Result<kernels::CopyStream*> StreamFor(kernels::DeviceBackend* backend, int device);

  /// \brief Drops the streams, then the buffers and their imports. Only after the last copy
  /// has finished: a mapping is never closed under a copy that reads it.
  void Clear();

 private:
  std::vector<Buffer> buffers_;
  std::map<uint64_t, std::shared_ptr<kernels::ImportedMemory>> imports_;  // by allocation_id
  std::map<std::pair<int, int>, std::unique_ptr<kernels::CopyStream>> streams_;  // (kind, device)
};

}  // namespace reft::local
