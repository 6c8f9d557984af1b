#include "reft/peer/peer_options.h"

#include <malloc.h>

#include <absl/synchronization/mutex.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace reft::peer {

uint64_t NewEpoch() {
  static std::atomic<uint64_t> last{0};
  uint64_t now = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count());
  uint64_t prev = last.load();
  uint64_t next;
  do {
    next = now > prev ? now : prev + 1;
  } while (!last.compare_exchange_weak(prev, next));
  return next;
}

bool TuneMallocForPeerStreams() {
  bool ok = mallopt(M_ARENA_MAX, 1) == 1;
  ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && ok;
  ok = mallopt(M_TRIM_THRESHOLD, 512 << 20) == 1 && ok;
  ok = mallopt(M_TOP_PAD, 64 << 20) == 1 && ok;
  return ok;
}

void DisableAbslLockGraph() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

void WarmHeap(uint64_t bytes) {
  // Blocks below the mmap threshold come from the heap; freed, they merge into its top.
  constexpr uint64_t kBlock = 4ull << 20;
  std::vector<void*> blocks;
  for (uint64_t done = 0; done < bytes; done += kBlock) {
    void* b = std::malloc(kBlock);
    if (b == nullptr) break;
    std::memset(b, 0, kBlock);
    blocks.push_back(b);
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
}

std::string PeerOptionsCheck::Validate(const PeerOptions& o) {
  if (o.node_id.empty()) return "peer.node_id must not be empty";
  if (o.advertise_address.empty()) return "peer.advertise_address must not be empty";
  if (o.probe_interval.count() <= 0) return "peer.probe_interval must be > 0";
  if (o.probe_timeout.count() <= 0) return "peer.probe_timeout must be > 0";
  if (o.suspicion_timeout.count() <= 0) return "peer.suspicion_timeout must be > 0";
  if (o.rpc_deadline.count() <= 0) return "peer.rpc_deadline must be > 0";
  if (o.fetch_deadline.count() <= 0) return "peer.fetch_deadline must be > 0";
  if (o.max_gossip_nodes < 2) return "peer.max_gossip_nodes must be >= 2";
  if (o.wire_chunk_bytes < kMinWireChunk || o.wire_chunk_bytes > kMaxWireChunk) {
    return "peer.wire_chunk_bytes must be between 4 KiB and 4 MiB";
  }
  if (static_cast<uint64_t>(o.max_message_bytes) < o.wire_chunk_bytes + 4096) {
    return "peer.max_message_bytes must exceed wire_chunk_bytes by at least 4 KiB";
  }
  return "";
}

}  // namespace reft::peer
