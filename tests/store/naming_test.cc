// Job id validation and the segment naming scheme.
#include <catch2/catch.hpp>

#include "reft/store/snapshot_store.h"
#include "store_test_util.h"

using namespace reft;
using namespace reft::store;

TEST_CASE("store: bad job names are rejected with a clear error", "[store]") {
  testing::ShmTestDir dir;
  auto st = SnapshotStore::Open(testing::TestOptions(dir.shm_dir()));
  REQUIRE(st.ok());
  const std::vector<RegionSpec> layout = {{"a", 4096}};
  struct Case {
    std::string job;
    std::string expect;
  };
  std::vector<Case> cases = {{"", "empty"},
                             {"a/b", "'/'"},
                             {"..", "'..'"},
                             {"x..y", "'..'"},
                             {"../../etc", "'/'"},
                             {std::string("tab\there"), "control character"},
                             {std::string("nl\n"), "control character"},
                             {std::string("nul\0x", 5), "control character"},
                             {std::string(65, 'j'), "at most 64"}};
  for (const auto& c : cases) {
    INFO("job '" << c.job << "'");
    Status s = (*st)->ConfigureRank({c.job, 0, 0, 0}, layout);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find(c.expect) != std::string::npos);
    CHECK((*st)->BeginWrite({c.job, 0, 0, 0}, 1).status().code() == StatusCode::kInvalidArgument);
  }
  CHECK((*st)->ConfigureRank({"ok", -1, 0, 0}, layout).code() == StatusCode::kInvalidArgument);
  CHECK((*st)->ConfigureRank({"ok", 0, 0, 0}, {{std::string(128, 'r'), 1}}).code() ==
        StatusCode::kInvalidArgument);

  // Unusual but valid names are escaped into one file inside shm_dir.
  for (std::string job : {std::string(64, 'j'), std::string("run 1.%x"), std::string("ü-é"),
                          std::string(".hidden")}) {
    INFO("job '" << job << "'");
    RankKey rank{job, 2, 1, 0};
    REQUIRE((*st)->ConfigureRank(rank, layout).ok());
    auto w = (*st)->BeginWrite(rank, 1);
    REQUIRE(w.ok());
    const std::string& path = (*w)->info().path;
    CHECK(path.rfind(dir.shm_dir() + "/", 0) == 0);
    CHECK(path.find('/', dir.shm_dir().size() + 1) == std::string::npos);
    CHECK(path.find(".pp2-tp1-dp0.s0.seg") != std::string::npos);
  }
  auto names = testing::ListDir(dir.shm_dir());
  CHECK(std::find(names.begin(), names.end(), "run%201%2E%25x.pp2-tp1-dp0.s0.seg") != names.end());
  CHECK(std::find(names.begin(), names.end(), "%2Ehidden.pp2-tp1-dp0.s0.seg") != names.end());
}

TEST_CASE("store: RankKey formatting and ordering", "[store]") {
  RankKey a{"job", 0, 1, 2}, b{"job", 0, 1, 3};
  CHECK(a.ToString() == "job/pp0-tp1-dp2");
  CHECK(a < b);
  CHECK(!(b < a));
  CHECK(a == RankKey{"job", 0, 1, 2});
  CHECK(std::string(SlotStateName(SlotState::kCommitted)) == "committed");
}
