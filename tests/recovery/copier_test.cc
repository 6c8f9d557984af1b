// PeerCopier: a ring neighbour's published region, wherever the neighbour lives; waiting for a
// late Publish; a clean timeout when it never comes.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>

#include "recovery_fixture.h"
#include "reft/recovery/published_copier.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::recovery::test;
using namespace std::chrono_literals;

namespace {

const JobLayout kLayout{3, 1, 1, 0};

// A writing slot of `rank` at `step` whose "unique/rng" holds `bytes` (not published).
std::shared_ptr<store::SlotRef> BeginSlot(store::SnapshotStore* s, const store::RankKey& rank,
                                          int64_t step, const std::vector<uint8_t>& bytes) {
  REQUIRE(s->ConfigureRank(rank, {{"meta", 100}, {"unique/rng", bytes.size()}}).ok());
  auto w = s->BeginWrite(rank, step);
  REQUIRE(w.ok());
  std::memcpy((*w)->region_data(1), bytes.data(), bytes.size());
  return *w;
}

}  // namespace

TEST_CASE("PeerCopier waits for a late Publish on another node", "[recovery]") {
  Cluster c(2);
  c.Converge();
  const store::RankKey next{"job", 0, 0, 1};
  REQUIRE(c.node(1).peer->coordinator()->Join(next, kLayout).ok());
  const auto bytes = reft::testing::RandomBytes(200003, 9);
  auto slot = BeginSlot(c.node(1).store.get(), next, 4, bytes);
  PublishedCopier copier(c.node(0).store.get(), c.node(0).peer.get(), c.node(0).peer->coordinator(),
                         TestOptions());

  std::thread publisher([&] {
    std::this_thread::sleep_for(300ms);
    REQUIRE(c.node(1).store->Publish(next, 4, {"unique/rng"}).ok());
  });
  std::vector<uint8_t> got(bytes.size());
  auto t0 = std::chrono::steady_clock::now();
  Status s = copier.CopyPublished(next, 4, "unique/rng", got.data(), got.size(), 5s);
  auto took = std::chrono::steady_clock::now() - t0;
  publisher.join();
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(got == bytes);
  CHECK(took >= 250ms);
  CHECK(took < 2s);

  // A buffer of another size is refused at once, never filled with a prefix.
  std::vector<uint8_t> small(bytes.size() - 1);
  s = copier.CopyPublished(next, 4, "unique/rng", small.data(), small.size(), 5s);
  CHECK(s.code() == StatusCode::kInvalidArgument);

  // The next step is never published: a clean Timeout at the deadline, naming the region.
  slot.reset();
  REQUIRE(c.node(1).store->Seal(next, 4).ok());
  auto slot5 = BeginSlot(c.node(1).store.get(), next, 5, bytes);
  t0 = std::chrono::steady_clock::now();
  s = copier.CopyPublished(next, 5, "unique/rng", got.data(), got.size(), 600ms);
  took = std::chrono::steady_clock::now() - t0;
  CHECK(s.code() == StatusCode::kTimeout);
  CHECK_THAT(s.message(), Catch::Contains("unique/rng"));
  CHECK_THAT(s.message(), Catch::Contains("job/pp0-tp0-dp1 step 5"));
  CHECK(took >= 600ms);
  CHECK(took < 1500ms);

  // The neighbour's node dies: the copy ends at its deadline too.
  c.KillAndWipe(1);
  t0 = std::chrono::steady_clock::now();
  s = copier.CopyPublished(next, 5, "unique/rng", got.data(), got.size(), 800ms);
  took = std::chrono::steady_clock::now() - t0;
  CHECK(s.code() == StatusCode::kTimeout);
  CHECK(took < 2500ms);
}

TEST_CASE("PeerCopier copies from this node when the neighbour's trainer is local", "[recovery]") {
  Cluster c(1);
  const store::RankKey next{"job", 0, 0, 2};
  REQUIRE(c.node(0).peer->coordinator()->Join(next, kLayout).ok());
  const auto bytes = reft::testing::RandomBytes(77777, 5);
  auto slot = BeginSlot(c.node(0).store.get(), next, 9, bytes);
  PublishedCopier copier(c.node(0).store.get(), c.node(0).peer.get(), c.node(0).peer->coordinator(),
                         TestOptions());
  std::thread publisher([&] {
    std::this_thread::sleep_for(200ms);
    REQUIRE(c.node(0).store->Publish(next, 9, {"unique/rng"}).ok());
  });
  std::vector<uint8_t> got(bytes.size());
  Status s = copier.CopyPublished(next, 9, "unique/rng", got.data(), got.size(), 3s);
  publisher.join();
  REQUIRE(s.ok());
  CHECK(got == bytes);
  // Bytes changed after Publish are never copied: retried until the deadline, then reported.
  slot->region_data(1)[10] ^= 1;
  s = copier.CopyPublished(next, 9, "unique/rng", got.data(), got.size(), 300ms);
  CHECK(s.code() == StatusCode::kTimeout);
  CHECK_THAT(s.message(), Catch::Contains("corrupted"));
}

TEST_CASE("PeerCopier stops waiting the moment the copy is abandoned", "[recovery]") {
  // The neighbour never publishes; the copying rank's snapshot stops counting (its trainer hung
  // up, or the job was restored again without it) well before the copy's timeout.
  Cluster c(1);
  const store::RankKey next{"job", 0, 0, 2};
  REQUIRE(c.node(0).peer->coordinator()->Join(next, kLayout).ok());
  BeginSlot(c.node(0).store.get(), next, 3, reft::testing::RandomBytes(4096, 6));
  PublishedCopier copier(c.node(0).store.get(), c.node(0).peer.get(), c.node(0).peer->coordinator(),
                         TestOptions());
  std::atomic<bool> stale{false};
  std::thread restore([&] {
    std::this_thread::sleep_for(200ms);
    stale = true;
  });
  int asked = 0;
  std::vector<uint8_t> got(4096);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = copier.CopyPublished(next, 3, "unique/rng", got.data(), got.size(), 20s, [&] {
    ++asked;
    return stale ? Status::Cancelled("the job was restored again") : Status::OK();
  });
  restore.join();
  CHECK(s.code() == StatusCode::kCancelled);
  CHECK_THAT(s.message(), Catch::Contains("unique/rng") && Catch::Contains("restored again"));
  CHECK(asked > 1);  // asked between attempts, not only once
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}
