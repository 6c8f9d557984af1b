// reftd's heap warm-up: the pages WarmHeap faults in stay resident and in the heap after it
// returns (the malloc settings keep them), so a fresh daemon's first restore reuses them. A test
// process of its own: the settings are process-wide.
#include <malloc.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <string>

#include "reft/peer/peer_options.h"

namespace {

uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  REQUIRE(f != nullptr);
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) kib = std::stoull(line + 6);
  }
  std::fclose(f);
  return kib << 10;
}

}  // namespace

TEST_CASE("a warmed heap keeps its pages resident and free for the first restore", "[peer]") {
  REQUIRE(reft::peer::TuneMallocForPeerStreams());
  constexpr uint64_t kWarm = 64ull << 20;
  const uint64_t rss_before = ResidentBytes();
  const size_t free_before = mallinfo2().fordblks;
  reft::peer::WarmHeap(kWarm);
  INFO("rss " << rss_before << " -> " << ResidentBytes() << ", heap free " << free_before
              << " -> " << mallinfo2().fordblks);
  CHECK(ResidentBytes() >= rss_before + kWarm * 9 / 10);  // not trimmed back to the kernel
  CHECK(mallinfo2().fordblks >= free_before + kWarm * 9 / 10);  // free, in the heap

  // A restore-sized allocation is served from those pages: no new resident memory.
  const uint64_t rss_warm = ResidentBytes();
  void* piece = std::malloc(8u << 20);
  REQUIRE(piece != nullptr);
  std::memset(piece, 1, 8u << 20);
  // Most of it: glibc may place the piece so that its tail runs past the warmed pages.
  CHECK(ResidentBytes() < rss_warm + (4u << 20));
  std::free(piece);
}
