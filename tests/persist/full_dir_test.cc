// A full and a read-only persistent directory, on a real tiny tmpfs mounted by the test.
// Needs CAP_SYS_ADMIN (CI runs as root). Without it the test exits 77, which CTest reports as
// skipped (SKIP_RETURN_CODE in CMakeLists.txt), and says why on stderr.
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "persist_test_util.h"
#include "reft/persist/persistent_tier.h"
#include "test_support.h"
#include "tiny_tmpfs.h"

using namespace reft;
using namespace reft::persist;
using reft::store::RankKey;
namespace pt = reft::persist::testing;
using reft::testing::TinyTmpfs;

namespace {

uint64_t FreeBytes(const std::string& dir) {
  struct statvfs s {};
  REQUIRE(::statvfs(dir.c_str(), &s) == 0);
  return uint64_t(s.f_bavail) * s.f_frsize;
}

}  // namespace

TEST_CASE("persist: a full directory is an IoError that leaves earlier steps and memory alone",
          "[persist][full]") {
  const bool preallocate = GENERATE(true, false);  // fails in fallocate, or in write(2)
  INFO("preallocate " << preallocate);
  TinyTmpfs fs("size=256k");
  auto o = pt::TestOptions(fs.path());
  o.preallocate = preallocate;
  auto tier = pt::OpenTier(o);
  const std::string job = "full-job";
  const JobLayout l{1, 1, 1};
  pt::RankData small(RankKey{job, 0, 0, 0}, 1);  // ~40 KiB file
  REQUIRE(tier->PersistStep(job, 1, l, {small.image()}).ok());
  const uint64_t free_before = FreeBytes(fs.path());

  pt::RankData big(RankKey{job, 0, 0, 0}, 2, {{"meta", 64}, {"rep/shard", 1u << 20}});
  const std::vector<uint8_t> source_before = big.bytes(1);
  auto r = tier->PersistStep(job, 2, l, {big.image()});
  REQUIRE_FALSE(r.ok());
  INFO(r.status().ToString());
  CHECK(r.status().code() == StatusCode::kIoError);
  CHECK(pt::Contains(r.status().message(), "persistent directory " + fs.path()));
  CHECK(pt::ContainsNoCase(r.status().message(), "no space left on device"));
  CHECK(pt::Contains(r.status().message(), "in-memory snapshots are unaffected"));

  // No temp file and no final file; the space is given back.
  const std::string step2 = pt::StepPath(fs.path(), job, 2);
  CHECK(pt::TempFiles(step2).empty());
  CHECK_FALSE(std::filesystem::exists(pt::RankPath(fs.path(), big.rank(), 2)));
  CHECK(FreeBytes(fs.path()) + 8192 >= free_before);
  // The source bytes (an in-memory snapshot) were only read.
  CHECK(big.bytes(1) == source_before);
  // The earlier step is still complete and readable.
  auto newest = tier->NewestCompleteStep(job, l);
  REQUIRE(newest.ok());
  CHECK(*newest == std::optional<int64_t>(1));
  CHECK(pt::ReadsBack(*tier, small));
  // And a write that fits still works afterwards.
  pt::RankData again(RankKey{job, 0, 0, 0}, 3);
  CHECK(tier->PersistStep(job, 3, l, {again.image()}).ok());
  CHECK(pt::ReadsBack(*tier, again));
}

TEST_CASE("persist: a read-only directory is PermissionDenied at open", "[persist][full]") {
  TinyTmpfs fs("size=64k", /*read_only=*/true);
  auto t = PersistentTier::Open(pt::TestOptions(fs.path()));
  INFO(t.status().ToString());
  CHECK(t.status().code() == StatusCode::kPermissionDenied);
  CHECK(pt::Contains(t.status().message(), fs.path()));
  CHECK(pt::ContainsNoCase(t.status().message(), "read-only file system"));
}

TEST_CASE("persist: an unmounted directory is refused instead of filling the mount point",
          "[persist][full]") {
  TinyTmpfs fs("size=1m");
  auto tier = pt::OpenTier(pt::TestOptions(fs.path()));
  pt::RankData d(RankKey{"job-u", 0, 0, 0}, 1);
  REQUIRE(tier->WriteRank(d.rank(), 1, d.image().regions).ok());
  // The export goes away: what is left at the path is the (empty) mount point directory.
  REQUIRE(::umount2(fs.path().c_str(), MNT_DETACH) == 0);
  auto w = tier->WriteRank(d.rank(), 2, d.image().regions);
  INFO(w.status().ToString());
  CHECK(w.status().code() == StatusCode::kIoError);
  CHECK(pt::Contains(w.status().message(), fs.path()));
  CHECK(pt::Contains(w.status().message(), "replaced or (un)mounted"));
  CHECK(pt::ListDir(fs.path()).empty());
  CHECK(tier->NewestCompleteStep("job-u", {1, 1, 1}).status().code() == StatusCode::kIoError);
}
