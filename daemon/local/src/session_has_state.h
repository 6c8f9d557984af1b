#pragma once
/// \file session_has_state.h
/// \brief A session's HAS state: the trainer's hint page and the release gate (internal).

#include <sys/mman.h>

#include "reft/local_proto/has_hints.h"
#include "reft/has/release_gate.h"
#include "session.h"

namespace reft::local {

struct Session::HasState {
  local_proto::HasHintPage* page = nullptr;
  int64_t prev_snapshot_ns = -1;
  uint64_t chunk_bytes = 1ull << 20;
  has::ReleaseGate gate{has::GateOptions{}};
  explicit HasState(has::GateOptions o) : gate(o) {}
  ~HasState() {
    if (page != nullptr) ::munmap(page, local_proto::kHasHintPageBytes);
  }
};

}  // namespace reft::local
