// PersistentTier on real files: round trip, manifests, completeness, retention, corruption,
// missing directories, bandwidth.
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "persist_test_util.h"
#include "reft/persist/persistent_tier.h"
#include "test_support.h"

using namespace reft;
using namespace reft::persist;
using reft::store::RankKey;
namespace pt = reft::persist::testing;

namespace {

const JobLayout k2x1x2{/*dp=*/2, /*tp=*/1, /*pp=*/2};

PersistReport Persist(PersistentTier& tier, const std::string& job, int64_t step,
                      const JobLayout& layout, const std::vector<pt::RankData>& ranks) {
  auto r = tier.PersistStep(job, step, layout, pt::Images(ranks));
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

std::vector<int64_t> Steps(PersistentTier& tier, const std::string& job) {
  auto s = tier.ListSteps(job);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return *s;
}

std::optional<int64_t> Newest(PersistentTier& tier, const std::string& job, const JobLayout& l) {
  auto s = tier.NewestCompleteStep(job, l);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return *s;
}

StepStatus Check(PersistentTier& tier, const std::string& job, int64_t step, const JobLayout& l) {
  auto s = tier.CheckStep(job, step, l);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return *s;
}

bool HasProblem(const StepStatus& st, const std::string& needle) {
  for (const auto& p : st.problems) {
    if (pt::Contains(p, needle)) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("persist: round trip of several ranks and regions with manifest", "[persist]") {
  reft::testing::TempDir dir("reft-persist");
  auto tier = pt::OpenTier(pt::TestOptions(dir.path()));
  const std::string job = "run 1.x";  // needs escaping in the directory name
  auto ranks = pt::AllRanks(job, k2x1x2, 10);
  PersistReport rep = Persist(*tier, job, 10, k2x1x2, ranks);
  REQUIRE(rep.files.size() == 4);
  CHECK(rep.bytes_written > 4 * (37 + 3 * 4096 + 123 + 4096 + 1));

  // Layout on disk: <dir>/run%201%2Ex/step-000000000010/pp<P>-tp<T>-dp<D>.reft + manifest.
  const std::string step_dir = dir.path() + "/run%201%2Ex/step-000000000010";
  CHECK(pt::StepPath(dir.path(), job, 10) == step_dir);
  CHECK(pt::ListDir(step_dir) ==
        std::vector<std::string>{"manifest.node-a.json", "pp0-tp0-dp0.reft", "pp0-tp0-dp1.reft",
                                 "pp1-tp0-dp0.reft", "pp1-tp0-dp1.reft"});
  CHECK(rep.manifest_path == step_dir + "/manifest.node-a.json");
  for (const auto& f : rep.files) {
    CHECK(f.path == step_dir + "/" + f.file);
    CHECK(pt::FileSize(f.path) == f.file_bytes);
  }
  auto jobs = tier->ListJobs();
  REQUIRE(jobs.ok());
  CHECK(*jobs == std::vector<std::string>{job});
  CHECK(Steps(*tier, job) == std::vector<int64_t>{10});

  for (const auto& r : ranks) CHECK(pt::ReadsBack(*tier, r));

  // Partial reads across chunk boundaries, from a rank written "by another node".
  const uint64_t seed = reft::testing::TestSeed(11);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  auto pr = tier->OpenRank(ranks[3].rank(), 10);
  REQUIRE(pr.ok());
  const auto& shard = ranks[3].bytes(1);
  for (int k = 0; k < 50; ++k) {
    uint64_t off = rng() % shard.size();
    uint64_t len = rng() % (shard.size() - off + 1);
    std::vector<uint8_t> got(len);
    REQUIRE((*pr)->Read("rep/shard", off, got.data(), len).ok());
    CHECK(std::equal(got.begin(), got.end(), shard.begin() + off));
  }
  auto sz = (*pr)->RegionSize("unique/empty");
  REQUIRE(sz.ok());
  CHECK(*sz == 0);
  CHECK((*pr)->RegionSize("nope").status().code() == StatusCode::kNotFound);
  std::vector<uint8_t> wrong(10);
  CHECK((*pr)->ReadRegion("meta", wrong.data(), wrong.size()).code() ==
        StatusCode::kInvalidArgument);
  auto v = (*pr)->Verify();
  REQUIRE(v.ok());
  CHECK(v->bad.empty());

  // The manifest lists the four files with the sizes and checksums the files carry.
  auto ms = tier->ReadManifests(job, 10);
  INFO(ms.status().ToString());
  REQUIRE(ms.ok());
  REQUIRE(ms->size() == 1);
  const Manifest& m = ms->front();
  CHECK(m.node_id == "node-a");
  CHECK(m.job == job);
  CHECK(m.step == 10);
  CHECK(m.layout.dp == 2);
  CHECK(m.layout.pp == 2);
  REQUIRE(m.files.size() == 4);
  for (const auto& f : m.files) {
    auto r = tier->OpenRank(f.rank, 10);
    REQUIRE(r.ok());
    CHECK(f.chunk_table_checksum == (*r)->chunk_table_checksum());
    CHECK(f.file_bytes == (*r)->file_bytes());
    CHECK(f.regions == (*r)->regions());
  }
  CHECK(pt::TempFiles(step_dir).empty());
}

TEST_CASE("persist: complete-step detection for a layout", "[persist]") {
  reft::testing::TempDir dir("reft-persist");
  auto tier = pt::OpenTier(pt::TestOptions(dir.path()));
  const std::string job = "job-c";
  Persist(*tier, job, 10, k2x1x2, pt::AllRanks(job, k2x1x2, 10));
  auto step20 = pt::AllRanks(job, k2x1x2, 20);
  std::vector<pt::RankData> three(step20.begin(), step20.begin() + 3);
  Persist(*tier, job, 20, k2x1x2, three);

  CHECK(Steps(*tier, job) == std::vector<int64_t>{10, 20});
  StepStatus s20 = Check(*tier, job, 20, k2x1x2);
  CHECK_FALSE(s20.complete);
  CHECK(s20.valid.size() == 3);
  CHECK(HasProblem(s20, "pp1-tp0-dp1: missing"));
  CHECK(Newest(*tier, job, k2x1x2) == std::optional<int64_t>(10));
  auto complete = tier->CompleteSteps(job, k2x1x2);
  REQUIRE(complete.ok());
  CHECK(*complete == std::vector<int64_t>{10});

  // Against other layouts, step 10 is not complete: ranks missing, or ranks outside.
  CHECK(HasProblem(Check(*tier, job, 10, {/*dp=*/3, /*tp=*/1, /*pp=*/2}), "pp0-tp0-dp2: missing"));
  StepStatus narrow = Check(*tier, job, 10, {/*dp=*/1, /*tp=*/1, /*pp=*/2});
  CHECK_FALSE(narrow.complete);
  CHECK(HasProblem(narrow, "pp0-tp0-dp1: outside the layout"));
  CHECK(Check(*tier, job, 10, k2x1x2).complete);
  CHECK(tier->CheckStep(job, 30, k2x1x2).status().code() == StatusCode::kNotFound);
  CHECK(tier->CheckStep(job, 10, {/*dp=*/0, 1, 1}).status().code() == StatusCode::kInvalidArgument);

  // The missing rank arrives later, from another node: the step becomes complete, and that
  // node has its own manifest. Node a's manifest is merged, not replaced, by a second call.
  auto other = pt::OpenTier(pt::TestOptions(dir.path(), "node-b"));
  auto info = other->WriteRank(step20[3].rank(), 20, step20[3].image().regions);
  INFO(info.status().ToString());
  REQUIRE(info.ok());
  REQUIRE(other->WriteManifest(job, 20, k2x1x2, {*info}).ok());
  CHECK(Check(*tier, job, 20, k2x1x2).complete);
  CHECK(Newest(*tier, job, k2x1x2) == std::optional<int64_t>(20));
  auto again = tier->WriteRank(step20[0].rank(), 20, step20[0].image().regions);
  REQUIRE(again.ok());
  REQUIRE(tier->WriteManifest(job, 20, k2x1x2, {*again}).ok());
  auto ms = tier->ReadManifests(job, 20);
  REQUIRE(ms.ok());
  REQUIRE(ms->size() == 2);
  CHECK((*ms)[0].node_id == "node-a");
  CHECK((*ms)[0].files.size() == 3);
  CHECK((*ms)[1].node_id == "node-b");
  CHECK((*ms)[1].files.size() == 1);
  CHECK(Check(*tier, job, 20, k2x1x2).manifests == std::vector<std::string>{"node-a", "node-b"});
  for (const auto& r : step20) CHECK(pt::ReadsBack(*tier, r));

  // A file whose header names another rank than its path is not valid for that rank.
  std::filesystem::copy_file(pt::RankPath(dir.path(), step20[0].rank(), 20),
                             pt::RankPath(dir.path(), step20[1].rank(), 20),
                             std::filesystem::copy_options::overwrite_existing);
  StepStatus swapped = Check(*tier, job, 20, k2x1x2);
  CHECK_FALSE(swapped.complete);
  CHECK(HasProblem(swapped, "pp0-tp0-dp1: corrupted"));
  CHECK(tier->OpenRank(step20[1].rank(), 20).status().code() == StatusCode::kCorrupted);
  CHECK(Newest(*tier, job, k2x1x2) == std::optional<int64_t>(10));

  // Bad input.
  CHECK(tier->PersistStep(job, 40, k2x1x2, {pt::RankData({job, 2, 0, 0}, 40).image()})
            .status()
            .code() == StatusCode::kInvalidArgument);
  CHECK(tier->PersistStep(job, 40, k2x1x2, {pt::RankData({"other", 0, 0, 0}, 40).image()})
            .status()
            .code() == StatusCode::kInvalidArgument);
  CHECK(tier->WriteManifest(job, 40, k2x1x2, {*info}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(Steps(*tier, "no-such-job").empty());
  CHECK(Newest(*tier, "no-such-job", k2x1x2) == std::nullopt);
}

TEST_CASE("persist: retention keeps the newest complete steps", "[persist]") {
  reft::testing::TempDir dir("reft-persist");
  auto o = pt::TestOptions(dir.path());
  o.keep = 2;
  auto tier = pt::OpenTier(o);
  const std::string job = "job-r";
  const JobLayout l{/*dp=*/2, /*tp=*/1, /*pp=*/1};
  Persist(*tier, job, 1, l, pt::AllRanks(job, l, 1));
  Persist(*tier, job, 2, l, pt::AllRanks(job, l, 2));
  auto three = pt::AllRanks(job, l, 3);
  three.pop_back();
  Persist(*tier, job, 3, l, three);  // incomplete
  CHECK(Steps(*tier, job) == std::vector<int64_t>{1, 2, 3});
  PersistReport r4 = Persist(*tier, job, 4, l, pt::AllRanks(job, l, 4));
  CHECK(r4.removed_steps == std::vector<int64_t>{1});
  CHECK(r4.retention_error.empty());
  CHECK(Steps(*tier, job) == std::vector<int64_t>{2, 3, 4});  // 3 is newer than the cutoff (2)
  PersistReport r5 = Persist(*tier, job, 5, l, pt::AllRanks(job, l, 5));
  CHECK(r5.removed_steps == std::vector<int64_t>{2, 3});
  CHECK(Steps(*tier, job) == std::vector<int64_t>{4, 5});
  // A newer incomplete step removes nothing.
  auto six = pt::AllRanks(job, l, 6);
  six.pop_back();
  CHECK(Persist(*tier, job, 6, l, six).removed_steps.empty());
  CHECK(Steps(*tier, job) == std::vector<int64_t>{4, 5, 6});
  for (const auto& r : pt::AllRanks(job, l, 4)) CHECK(pt::ReadsBack(*tier, r));
  // No trash directory is left behind.
  for (const auto& n : pt::ListDir(dir.path() + "/job-r")) CHECK(n.rfind("step-", 0) == 0);

  // keep = 0 keeps everything.
  auto all = pt::OpenTier(pt::TestOptions(dir.path()));
  Persist(*all, job, 7, l, pt::AllRanks(job, l, 7));
  auto none = all->ApplyRetention(job, l);
  REQUIRE(none.ok());
  CHECK(none->empty());
  CHECK(Steps(*tier, job) == std::vector<int64_t>{4, 5, 6, 7});
}

TEST_CASE("persist: retention never deletes a step this tier is writing", "[persist]") {
  reft::testing::TempDir dir("reft-persist");
  const std::string job = "job-w";
  const JobLayout l{1, 1, 1};
  auto fast = pt::OpenTier(pt::TestOptions(dir.path()));
  Persist(*fast, job, 5, l, pt::AllRanks(job, l, 5));
  Persist(*fast, job, 6, l, pt::AllRanks(job, l, 6));

  auto o = pt::TestOptions(dir.path());
  o.keep = 1;
  o.bandwidth = 2u << 20;  // 1 MiB takes ~0.5 s
  auto slow = pt::OpenTier(o);
  pt::RankData old(RankKey{job, 0, 0, 0}, 2, {{"rep/shard", 1u << 20}});
  Status write_status = Status::Internal("not run");
  std::thread writer([&] {
    auto r = slow->WriteRank(old.rank(), 2, old.image().regions);
    write_status = r.ok() ? Status::OK() : r.status();
  });
  const std::string step2 = pt::StepPath(dir.path(), job, 2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pt::TempFiles(step2).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE_FALSE(pt::TempFiles(step2).empty());
  auto removed = slow->ApplyRetention(job, l);
  writer.join();
  INFO(removed.status().ToString());
  REQUIRE(removed.ok());
  CHECK(*removed == std::vector<int64_t>{5});  // 2 is older than the cutoff but in flight
  INFO(write_status.ToString());
  CHECK(write_status.ok());
  CHECK(pt::ReadsBack(*slow, old));
  auto later = slow->ApplyRetention(job, l);
  REQUIRE(later.ok());
  CHECK(*later == std::vector<int64_t>{2});
  CHECK(Steps(*slow, job) == std::vector<int64_t>{6});
}

TEST_CASE("persist: a flipped payload byte is reported with region and chunk", "[persist]") {
  reft::testing::TempDir dir("reft-persist");
  auto tier = pt::OpenTier(pt::TestOptions(dir.path()));
  const std::string job = "job-f";
  const JobLayout l{1, 1, 1};
  auto ranks = pt::AllRanks(job, l, 3);
  Persist(*tier, job, 3, l, ranks);
  const std::string path = pt::RankPath(dir.path(), ranks[0].rank(), 3);
  pt::FlipByte(path, pt::RegionOffset(path, "rep/shard") + 2 * 4096 + 5);

  auto pr = tier->OpenRank(ranks[0].rank(), 3);  // header and chunk table are fine
  REQUIRE(pr.ok());
  const auto& shard = ranks[0].bytes(1);
  std::vector<uint8_t> buf(shard.size());
  Status s = (*pr)->ReadRegion("rep/shard", buf.data(), buf.size());
  CHECK(s.code() == StatusCode::kCorrupted);
  CHECK(pt::Contains(s.message(), path));
  CHECK(pt::Contains(s.message(), "region 'rep/shard' chunk 2"));
  CHECK(pt::Contains(s.message(), "bytes [8192, 12288)"));
  // A range inside the damaged chunk fails; ranges and regions around it still read.
  CHECK((*pr)->Read("rep/shard", 2 * 4096 + 100, buf.data(), 10).code() ==
        StatusCode::kCorrupted);
  REQUIRE((*pr)->Read("rep/shard", 0, buf.data(), 2 * 4096).ok());
  CHECK(std::equal(buf.begin(), buf.begin() + 2 * 4096, shard.begin()));
  REQUIRE((*pr)->Read("rep/shard", 3 * 4096, buf.data(), 123).ok());
  std::vector<uint8_t> meta(37);
  REQUIRE((*pr)->ReadRegion("meta", meta.data(), meta.size()).ok());
  CHECK(meta == ranks[0].bytes(0));
  auto v = (*pr)->Verify();
  REQUIRE(v.ok());
  REQUIRE(v->bad.size() == 1);
  CHECK(v->bad[0].region == "rep/shard");
  CHECK(v->bad[0].chunk == 2);
  CHECK(v->bad[0].offset == 8192);
}

TEST_CASE("persist: damaged or truncated rank files are rejected", "[persist]") {
  reft::testing::TempDir dir("reft-persist");
  auto tier = pt::OpenTier(pt::TestOptions(dir.path()));
  const std::string job = "job-t";
  const JobLayout l{/*dp=*/2, /*tp=*/1, /*pp=*/1};
  auto ranks = pt::AllRanks(job, l, 4);
  Persist(*tier, job, 4, l, ranks);
  const std::string path = pt::RankPath(dir.path(), ranks[1].rank(), 4);
  std::string expect;
  SECTION("truncated by one page") {
    pt::Truncate(path, pt::FileSize(path) - 4096);
    expect = "bytes";
  }
  SECTION("truncated to its header") {
    pt::Truncate(path, 512);
    expect = "bytes";
  }
  SECTION("empty") {
    pt::Truncate(path, 0);
    expect = "shorter than a segment header";
  }
  SECTION("chunk table damaged") {
    pt::FlipByte(path, pt::ChunkTableOffset(path) + 9);
    expect = "chunk table checksum mismatch";
  }
  auto r = tier->OpenRank(ranks[1].rank(), 4);
  CHECK(r.status().code() == StatusCode::kCorrupted);
  CHECK(pt::Contains(r.status().message(), path));
  CHECK(pt::Contains(r.status().message(), expect));
  StepStatus st = Check(*tier, job, 4, l);
  CHECK_FALSE(st.complete);
  CHECK(HasProblem(st, "pp0-tp0-dp1: corrupted"));
  CHECK(Newest(*tier, job, l) == std::nullopt);
  CHECK(pt::ReadsBack(*tier, ranks[0]));
}

TEST_CASE("persist: missing or misnamed directories are clear errors", "[persist]") {
  reft::testing::TempDir dir("reft-persist");
  SECTION("missing at open") {
    auto t = PersistentTier::Open(pt::TestOptions(dir.path() + "/nope"));
    CHECK(t.status().code() == StatusCode::kNotFound);
    CHECK(pt::Contains(t.status().message(), dir.path() + "/nope"));
    CHECK(pt::Contains(t.status().message(), "does not exist"));
  }
  SECTION("a file, not a directory") {
    std::ofstream(dir.path() + "/file") << "x";
    auto t = PersistentTier::Open(pt::TestOptions(dir.path() + "/file"));
    CHECK(t.status().code() == StatusCode::kNotFound);
    CHECK(pt::Contains(t.status().message(), "is not a directory"));
  }
  SECTION("bad options") {
    CHECK(PersistentTier::Open(pt::TestOptions("")).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(PersistentTier::Open(pt::TestOptions(dir.path(), "a~b")).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(PersistentTier::Open(pt::TestOptions(dir.path(), ".hidden")).status().code() ==
          StatusCode::kInvalidArgument);
    auto o = pt::TestOptions(dir.path());
    o.chunk_size = 1000;
    CHECK(PersistentTier::Open(o).status().code() == StatusCode::kInvalidArgument);
  }
  SECTION("removed after open") {
    const std::string root = dir.path() + "/root";
    REQUIRE(::mkdir(root.c_str(), 0700) == 0);
    auto tier = pt::OpenTier(pt::TestOptions(root));
    REQUIRE(::rmdir(root.c_str()) == 0);
    pt::RankData d({"j", 0, 0, 0}, 1);
    auto w = tier->WriteRank(d.rank(), 1, d.image().regions);
    CHECK(w.status().code() == StatusCode::kNotFound);
    CHECK(pt::Contains(w.status().message(), root));
    CHECK(tier->ListSteps("j").status().code() == StatusCode::kNotFound);
    CHECK(tier->PersistStep("j", 1, {1, 1, 1}, {d.image()}).status().code() ==
          StatusCode::kNotFound);
    // (A directory replaced by another one, e.g. an unmounted NFS export revealing its empty
    // mount point, is refused: see full_dir_test.cc, which can mount.)
  }
}

TEST_CASE("persist: bandwidth limit paces writes", "[persist]") {
  reft::testing::TempDir dir("reft-persist");
  auto o = pt::TestOptions(dir.path());
  o.chunk_size = 64 << 10;
  o.bandwidth = 4u << 20;  // 4 MiB/s
  auto tier = pt::OpenTier(o);
  const uint64_t n = 3u << 20;
  pt::RankData d({"job-b", 0, 0, 0}, 1, {{"rep/shard", n}});
  const auto t0 = std::chrono::steady_clock::now();
  auto w = tier->WriteRank(d.rank(), 1, d.image().regions);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(w.ok());
  const double expected = double(n) / double(o.bandwidth);
  INFO("wrote " << w->file_bytes << " bytes in " << secs << " s; N/B = " << expected << " s");
  CHECK(secs >= 0.8 * expected);  // a lower bound only: a loaded machine may be slower
  CHECK(pt::ReadsBack(*tier, d));
}

TEST_CASE("persist: stale temp files and trash of other nodes expire by age", "[persist]") {
  reft::testing::TempDir dir("reft-persist");
  auto tier = pt::OpenTier(pt::TestOptions(dir.path()));
  const std::string job = "job-s";
  Persist(*tier, job, 1, {1, 1, 1}, pt::AllRanks(job, {1, 1, 1}, 1));
  const std::string step = pt::StepPath(dir.path(), job, 1);
  const std::string job_dir = dir.path() + "/" + job;
  const std::string old_tmp = step + "/.tmp~node-z~12345~0~pp0-tp0-dp0.reft";
  const std::string new_tmp = step + "/.tmp~node-z~12346~0~pp0-tp0-dp0.reft";
  const std::string old_trash = job_dir + "/.trash~node-z~12345~1~step-000000000000";
  const std::string not_ours = step + "/.something-else";
  std::ofstream(old_tmp) << "partial";
  std::ofstream(new_tmp) << "partial";
  std::ofstream(not_ours) << "x";
  REQUIRE(::mkdir(old_trash.c_str(), 0700) == 0);
  std::ofstream(old_trash + "/pp0-tp0-dp0.reft") << "x";
  struct timeval two_days_ago[2];
  ::gettimeofday(&two_days_ago[0], nullptr);
  two_days_ago[0].tv_sec -= 2 * 86400;
  two_days_ago[1] = two_days_ago[0];
  REQUIRE(::utimes(old_tmp.c_str(), two_days_ago) == 0);
  REQUIRE(::utimes(old_trash.c_str(), two_days_ago) == 0);

  CleanupReport rep;
  auto o = pt::TestOptions(dir.path(), "node-b");
  o.stale_age_s = 3600;
  pt::OpenTier(o, &rep);
  CHECK(rep.errors.empty());
  CHECK(rep.removed.size() == 2);
  CHECK_FALSE(std::filesystem::exists(old_tmp));
  CHECK_FALSE(std::filesystem::exists(old_trash));
  CHECK(std::filesystem::exists(new_tmp));   // young: maybe a live writer on node-z
  CHECK(std::filesystem::exists(not_ours));  // not a name the tier makes
  CHECK(Check(*tier, job, 1, {1, 1, 1}).temp_files == 1);
  CHECK(Check(*tier, job, 1, {1, 1, 1}).complete);
}
