#include "chunk_checksums.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "reft/checksum.h"
#include "reft/thread.h"

namespace reft::store::internal {

void AppendRegionChunks(const uint8_t* base, const Geometry& g, const reft_segment_region& r,
                        std::vector<ChunkRef>* out) {
  for (uint64_t c = 0; c < r.chunk_count; ++c) {
    const uint64_t off = c * g.chunk_size;
    out->push_back({base + r.offset + off, std::min(g.chunk_size, r.size - off)});
  }
}

std::vector<ChunkRef> ListChunks(const uint8_t* base, const Geometry& g) {
  std::vector<ChunkRef> out;
  out.reserve(g.chunk_count);
  for (const auto& r : g.regions) AppendRegionChunks(base, g, r, &out);
  return out;
}

void ChecksumChunks(const std::vector<ChunkRef>& chunks, uint64_t* out, int threads) {
  uint64_t total = 0;
  for (const auto& c : chunks) total += c.size;
  // Below ~8 MiB a thread start costs more than it saves.
  int n = static_cast<int>(std::min<uint64_t>(
      {static_cast<uint64_t>(std::max(threads, 1)), chunks.size(), total / (8ull << 20) + 1}));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < chunks.size(); i = next.fetch_add(1)) {
      out[i] = Checksum64(chunks[i].data, chunks[i].size);
    }
  };
  std::vector<reft::Thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back("reft-checksum", work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace reft::store::internal
