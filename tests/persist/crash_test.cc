// A writer SIGKILLed in the middle of a rank file: no file under the final name, the older step
// intact, and the temp file removed by the next Open of the same node.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "persist_test_util.h"
#include "reft/persist/persistent_tier.h"
#include "test_support.h"

using namespace reft;
using namespace reft::persist;
using reft::store::RankKey;
namespace pt = reft::persist::testing;

TEST_CASE("persist: SIGKILL mid-write leaves no final file and the older step intact",
          "[persist][crash]") {
  reft::testing::TempDir dir("reft-persist-crash");
  const std::string job = "crash-job";
  const JobLayout l{1, 1, 1};
  const bool preallocate = GENERATE(true, false);
  INFO("preallocate " << preallocate);
  auto tier = pt::OpenTier(pt::TestOptions(dir.path()));
  pt::RankData step1(RankKey{job, 0, 0, 0}, 1);
  REQUIRE(tier->PersistStep(job, 1, l, {step1.image()}).ok());

  const std::string step2 = pt::StepPath(dir.path(), job, 2);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // 32 MiB at 4 MiB/s: about 8 s, far longer than the parent waits before the kill.
    auto o = pt::TestOptions(dir.path());
    o.bandwidth = 4u << 20;
    o.preallocate = preallocate;
    auto t = PersistentTier::Open(o);
    if (!t.ok()) ::_exit(10);
    pt::RankData big(RankKey{job, 0, 0, 0}, 2, {{"meta", 100}, {"rep/shard", 32u << 20}});
    auto r = (*t)->PersistStep(job, 2, l, {big.image()});
    ::_exit(r.ok() ? 0 : 11);
  }
  // Wait until the child is writing (its temp file has data), then kill it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool writing = false;
  while (!writing && std::chrono::steady_clock::now() < deadline) {
    for (const auto& t : pt::TempFiles(step2)) {
      std::error_code ec;
      if (std::filesystem::file_size(step2 + "/" + t, ec) > (256u << 10)) writing = true;
    }
    if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(child, SIGKILL);
  int wstatus = 0;
  REQUIRE(::waitpid(child, &wstatus, 0) == child);
  REQUIRE(writing);
  INFO("child exit status " << (WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1));
  REQUIRE(WIFSIGNALED(wstatus));
  CHECK(WTERMSIG(wstatus) == SIGKILL);

  // Nothing under a final name in step 2; the temp file is there until cleanup.
  auto names = pt::ListDir(step2);
  REQUIRE(names.size() == 1);
  CHECK(names[0].rfind(".tmp~node-a~" + std::to_string(child) + "~", 0) == 0);
  auto st2 = tier->CheckStep(job, 2, l);
  REQUIRE(st2.ok());
  CHECK_FALSE(st2->complete);
  CHECK(st2->temp_files == 1);
  // Step 1 is intact and still the newest complete step.
  CHECK(pt::ReadsBack(*tier, step1));
  auto newest = tier->NewestCompleteStep(job, l);
  REQUIRE(newest.ok());
  CHECK(*newest == std::optional<int64_t>(1));

  // Another node does not touch a young temp file of node-a ...
  CleanupReport other;
  pt::OpenTier(pt::TestOptions(dir.path(), "node-b"), &other);
  CHECK(other.removed.empty());
  CHECK(pt::TempFiles(step2).size() == 1);
  // ... node-a's next Open removes it: its writer pid is gone.
  CleanupReport rep;
  pt::OpenTier(pt::TestOptions(dir.path()), &rep);
  CHECK(rep.errors.empty());
  REQUIRE(rep.removed.size() == 1);
  CHECK(pt::Contains(rep.removed[0], step2 + "/.tmp~node-a~"));
  CHECK(pt::ListDir(step2).empty());
  CHECK(pt::ReadsBack(*tier, step1));
}
