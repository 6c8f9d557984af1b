#pragma once
/// \file session_has_state.h
/// \brief A session's HAS state: the trainer's hint page and the release gate (internal).

#include <sys/mman.h>

#include "reft/local_proto/has_hints.h"
#include "session.h"
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

}  // namespace reft::local
