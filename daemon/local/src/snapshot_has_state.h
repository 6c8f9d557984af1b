#pragma once
/// \file snapshot_has_state.h
/// \brief The snapshot writer's HAS state: the trainer's hint page and the release gate (internal).

#include <sys/mman.h>

#include "reft/has/release_gate.h"
#include "reft/local_proto/has_hints.h"
#include "snapshot_writer.h"

namespace reft::local {

struct SnapshotWriter::HasState {
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
