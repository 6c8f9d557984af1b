// SingleNodeCommitCoordinator against a real store: commit rule, layout checks, roll-forward of
// a commit interrupted by a daemon crash.
#include <catch2/catch.hpp>

#include <cstring>

#include "single_node_commit.h"
#include "test_support.h"

using namespace reft;
using reft::JobLayout;
using reft::coord::SingleNodeCommitCoordinator;

namespace {

std::unique_ptr<store::SnapshotStore> OpenStore(const std::string& dir) {
  store::StoreOptions so;
  so.shm_dir = dir;
  so.chunk_size = 4096;
  so.prefault = false;
  auto s = store::SnapshotStore::Open(so);
  REQUIRE(s.ok());
  return std::move(*s);
}

void WriteComplete(store::SnapshotStore& st, const store::RankKey& r, int64_t step) {
  REQUIRE(st.ConfigureRank(r, {{"x", 100}}).ok());
  auto slot = st.BeginWrite(r, step);
  REQUIRE(slot.ok());
  std::memset((*slot)->region_data(0), static_cast<int>(step), 100);
  slot->reset();
  REQUIRE(st.Seal(r, step).ok());
}

}  // namespace

TEST_CASE("a step commits when every rank completed it") {
  reft::testing::TempDir dir;
  auto st = OpenStore(dir.path());
  SingleNodeCommitCoordinator c(st.get());
  store::RankKey r0{"j", 0, 0, 0}, r1{"j", 0, 0, 1};
  JobLayout l{2, 1, 1, 0};
  REQUIRE(c.Join(r0, l).ok());
  REQUIRE(c.Join(r1, l).ok());
  CHECK(c.Join(store::RankKey{"j", 0, 0, 2}, l).code() == StatusCode::kInvalidArgument);
  CHECK(c.Join(r0, JobLayout{4, 1, 1, 0}).code() == StatusCode::kInvalidArgument);
  CHECK(c.Join(r0, JobLayout{2, 1, 1, 5}).code() == StatusCode::kInvalidArgument);
  WriteComplete(*st, r0, 1);
  REQUIRE(c.Complete(r0, 1, 0).ok());
  CHECK_FALSE(c.NewestCommitted("j").has_value());
  CHECK_FALSE(c.WaitCommitted("j", 1, std::chrono::milliseconds(10)));
  WriteComplete(*st, r1, 1);
  REQUIRE(c.Complete(r1, 1, 0).ok());
  CHECK(c.NewestCommitted("j") == std::optional<int64_t>(1));
  CHECK(c.WaitCommitted("j", 1, std::chrono::milliseconds(10)));
  CHECK(st->NewestCommitted(r0) == std::optional<int64_t>(1));
  CHECK(st->NewestCommitted(r1) == std::optional<int64_t>(1));
}

TEST_CASE("a commit interrupted by a daemon crash is rolled forward, never mixed") {
  reft::testing::TempDir dir;
  store::RankKey r0{"j", 0, 0, 0}, r1{"j", 0, 0, 1};
  {
    auto st = OpenStore(dir.path());
    WriteComplete(*st, r0, 1);
    WriteComplete(*st, r1, 1);
    REQUIRE(st->Commit(r0, 1).ok());
    REQUIRE(st->Commit(r1, 1).ok());
    WriteComplete(*st, r0, 2);
    WriteComplete(*st, r1, 2);
    REQUIRE(st->Commit(r0, 2).ok());  // the daemon died here, before committing r1
  }
  auto st = OpenStore(dir.path());  // restart: adoption
  CHECK(st->NewestCommitted(r1) == std::optional<int64_t>(1));
  SingleNodeCommitCoordinator c(st.get());
  CHECK(c.NewestCommitted("j") == std::optional<int64_t>(2));
  CHECK(st->NewestCommitted(r0) == std::optional<int64_t>(2));
  CHECK(st->NewestCommitted(r1) == std::optional<int64_t>(2));
}
