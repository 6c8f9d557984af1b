// The restore stream's ring under contention: fetch workers borrowing slots, writing lent and
// copied pieces at once, one of them reading the trainer's acknowledgements while the others
// wait, and the trainer copying out as it goes. Many rounds, each on the ring the last one gave
// back (stale bytes in it): every byte lands where it belongs and the ring comes back.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <thread>

#include "reft/local_proto/stream.h"
#include "restore_stream.h"
#include "test_support.h"

using namespace reft;
using reft::local::RestoreStream;
using reft::local::StreamRings;

TEST_CASE("a restore stream's ring under concurrent writers delivers every byte, round after round") {
  constexpr uint64_t kState = (1u << 20) + 12345;
  constexpr uint64_t kPiece = 64 << 10;
  constexpr int kWorkers = 4;
  StreamRings rings;
  for (int round = 0; round < 500; ++round) {
    INFO("round " << round);
    const auto state = reft::testing::RandomBytes(kState, static_cast<uint64_t>(round));
    UniqueFd sock, ring;
    RestoreStream stream(
        [&](const std::vector<uint8_t>&, std::vector<int> fds) {
          sock.reset(::dup(fds.at(0)));
          ring.reset(::dup(fds.at(1)));
          return Status::OK();
        },
        [&](const std::map<std::string, uint64_t>&) {
          return Result<std::vector<local_proto::Placement>>(
              std::vector<local_proto::Placement>{{0, 0, kState}});
        },
        5000, &rings, 1000);
    REQUIRE(stream.Begin({{"state", 0}}, kState, kPiece, kWorkers).ok());
    std::vector<uint8_t> out(kState, 0xEE);
    Result<uint64_t> received = Status::Internal("not run");
    std::thread trainer([&] {
      received = local_proto::ReceiveStream(sock.get(), ring.get(), {{0, kState, out.data()}}, 5000);
      sock.reset();  // the client closes its end once the stream ended
    });
    // Pieces of three kinds: read into a lent slot (most), written from the worker's own memory
    // (copied in), and one larger than a slot (no slot lent: copied in, split).
    std::vector<std::pair<uint64_t, uint64_t>> pieces;  // (offset, size)
    for (uint64_t at = 0; at < kState;) {
      const uint64_t n = std::min(pieces.size() == 2 ? 3 * kPiece : kPiece, kState - at);
      pieces.push_back({at, n});
      at += n;
    }
    std::atomic<size_t> next{0};
    std::atomic<int> failures{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&] {
        for (size_t p = next++; p < pieces.size(); p = next++) {
          const auto [at, n] = pieces[p];
          Result<uint8_t*> lent = p % 3 == 1 ? Result<uint8_t*>(nullptr) : stream.Borrow(n);
          Status st = lent.status();
          if (lent.ok() && *lent != nullptr) {
            std::memcpy(*lent, state.data() + at, n);
            st = stream.Write(at, *lent, n);
            stream.GiveBack(*lent);
          } else if (lent.ok()) {
            st = stream.Write(at, state.data() + at, n);
          }
          if (!st.ok()) failures.fetch_add(1);
        }
      });
    }
    for (auto& t : workers) t.join();
    stream.End(true);
    trainer.join();
    REQUIRE(failures.load() == 0);
    REQUIRE(received.ok());
    CHECK(*received == kState);
    REQUIRE(out == state);
  }
  // Every round gave its ring back (all pieces acknowledged) and the next took it again.
  CHECK(rings.idle() == 1);
}
