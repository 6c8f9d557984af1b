// Slots whose writer populates the pages as it writes (NewPages::kByWriter): what a replacement
// node's slot rebuild uses, so that allocating a fresh slot does not stand before the restore.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "reft/store/snapshot_store.h"
#include "store_test_util.h"

using namespace reft;
using namespace reft::store;
using reft::store::testing::CheckPattern;
using reft::store::testing::FillPattern;
using reft::store::testing::OpenStore;
using reft::store::testing::ShmTestDir;
using reft::store::testing::TestOptions;

namespace {

// Regions of several pages each, so that holes are visible in the file's allocated blocks.
const std::vector<RegionSpec> kLayout = {{"meta", 4096}, {"rep/shard", 8u << 20}, {"rep/arc+1", 8u << 20}};

struct FileUse {
  uint64_t allocated = 0;  // bytes tmpfs holds for the file
  uint64_t size = 0;
  ino_t inode = 0;
};

FileUse Use(const std::string& path) {
  struct stat s {};
  REQUIRE(::stat(path.c_str(), &s) == 0);
  return {static_cast<uint64_t>(s.st_blocks) * 512, static_cast<uint64_t>(s.st_size), s.st_ino};
}

Status PopulateRegion(const SlotRef& slot, size_t i) {
  return slot.Populate(slot.region_data(i), slot.region_size(i));
}

}  // namespace

TEST_CASE("store: a slot begun by its writer holds only the pages written so far", "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  const RankKey rank{"pages", 0, 0, 1};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());

  auto w = st->BeginWrite(rank, 3, NewPages::kByWriter);
  REQUIRE(w.ok());
  const SlotRef& slot = **w;
  const FileUse fresh = Use(slot.info().path);
  INFO("allocated " << fresh.allocated << " of " << fresh.size);
  CHECK(fresh.allocated < (1u << 20));  // the header and tables, none of the 16 MiB payload

  REQUIRE(PopulateRegion(slot, 0).ok());
  REQUIRE(PopulateRegion(slot, 1).ok());
  const FileUse half = Use(slot.info().path);
  CHECK(half.allocated >= fresh.allocated + kLayout[1].size);
  CHECK(half.allocated < fresh.allocated + kLayout[1].size + kLayout[2].size);

  // Ranges outside the mapping are refused, not populated.
  CHECK(slot.Populate(slot.region_data(2), kLayout[2].size + 4096).code() ==
        StatusCode::kInvalidArgument);
  CHECK(slot.Populate(slot.region_data(0) - (64u << 20), 4096).code() ==
        StatusCode::kInvalidArgument);

  REQUIRE(PopulateRegion(slot, 2).ok());
  FillPattern(slot, 3);
  REQUIRE(st->Seal(rank, 3).ok());
  REQUIRE(st->Commit(rank, 3).ok());
  auto r = st->Get(rank, 3);
  REQUIRE(r.ok());
  CHECK(CheckPattern(**r, 3));
  auto report = st->Verify(rank, 3);
  REQUIRE(report.ok());
  CHECK(report->bad.empty());
}

TEST_CASE("store: a writer-populated slot given up on is populated whole when a write re-uses it",
          "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  const RankKey rank{"pages", 0, 0, 2};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());

  std::string path;
  {
    auto w = st->BeginWrite(rank, 5, NewPages::kByWriter);
    REQUIRE(w.ok());
    path = (*w)->info().path;
    REQUIRE(PopulateRegion(**w, 1).ok());  // a rebuild that stopped after one region
  }
  const FileUse holed = Use(path);
  REQUIRE(st->Abort(rank, 5).ok());
  CHECK(holed.allocated < holed.size - kLayout[2].size);

  // A trainer's snapshot takes the same segment: every page exists before it writes (no
  // first-touch faults, no SIGBUS on a full tmpfs).
  auto w = st->BeginWrite(rank, 6);
  REQUIRE(w.ok());
  REQUIRE((*w)->info().path == path);
  const FileUse reused = Use(path);
  CHECK(reused.inode == holed.inode);
  CHECK(reused.allocated >= reused.size);
  FillPattern(**w, 6);
  REQUIRE(st->Seal(rank, 6).ok());
  REQUIRE(st->Commit(rank, 6).ok());
}
