// RunTransfer: one stage call per receiving node, progress published as it goes, failed moves
// run again and done ones not, and a run that a newer decision replaced stops publishing.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <set>

#include "reft/replan/plan_transfer.h"
#include "reft/mutex.h"

using namespace reft;
using namespace reft::replan;
using nlohmann::json;

namespace {

// A decision's transfer plan without `hosts` (one published before decisions carried them):
// its moves' receivers host.
TransferPlan Transfer() {
  TransferPlan t;
  t.moves = {{0, "n0", "n2", 100}, {1, "n0", "n2", 200}, {5, "n1", "n3", 300}};
  t.total_bytes = 600;
  return t;
}

}  // namespace

TEST_CASE("a transfer plan stages each receiving node's layers in one call and publishes progress",
          "[transfer]") {
  json progress = NewTransferProgress(Transfer());
  CHECK(progress["state"] == "pending");
  CHECK(TransferWanted(progress, 3));
  CHECK(TransferWanted(nullptr, 3));

  Mutex mu;
  std::map<std::string, std::vector<int>> calls;
  Stager stage = [&](const std::string& node, const std::string& job, int64_t step,
                     const std::vector<int>& layers) -> Result<StageOutcome> {
    CHECK(job == "j");
    CHECK(step == 9);
    MutexLock lock(mu);
    calls[node] = layers;
    StageOutcome o;
    for (int l : layers) o.bytes_staged += 100 * (l + 1);
    o.bytes_fetched = 2 * o.bytes_staged;
    o.bytes_peer = o.bytes_staged;
    return o;
  };
  std::vector<json> published;
  auto publish = [&](const json& p) {
    published.push_back(p);
    return true;
  };
  const json done = RunTransfer(progress, "j", 9, stage, 8, publish);
  CHECK(calls == std::map<std::string, std::vector<int>>{{"n2", {0, 1}}, {"n3", {5}}});
  CHECK(done["state"] == "done");
  CHECK(done["attempts"] == 1);
  CHECK(done["bytes_staged"] == 100 + 200 + 600);
  CHECK(done["bytes_fetched"] == 2 * 900);
  for (const json& mv : done["moves"]) CHECK(mv["state"] == "done");
  // Running when it starts, one publication per node, then the end.
  REQUIRE(published.size() == 4);
  CHECK(published.front()["state"] == "running");
  CHECK(published.back() == done);
  CHECK_FALSE(TransferWanted(done, 3));
}

TEST_CASE("failed moves run again, done ones not, up to the attempts allowed", "[transfer]") {
  std::atomic<int> calls_to_n3{0};
  std::atomic<int> calls_to_n2{0};
  bool n3_up = false;
  Stager stage = [&](const std::string& node, const std::string&, int64_t,
                     const std::vector<int>&) -> Result<StageOutcome> {
    if (node == "n3") {
      ++calls_to_n3;
      if (!n3_up) return Status::Unavailable("receiving node 'n3' is not alive");
    } else {
      ++calls_to_n2;
    }
    return StageOutcome{};
  };
  auto publish = [](const json&) { return true; };
  json p = RunTransfer(NewTransferProgress(Transfer()), "j", 9, stage, 1, publish);
  CHECK(p["state"] == "failed");
  CHECK(p["moves"][0]["state"] == "done");
  CHECK(p["moves"][2]["state"] == "failed");
  CHECK_THAT(p["moves"][2]["error"].get<std::string>(), Catch::Contains("not alive"));
  CHECK(TransferWanted(p, 3));
  CHECK_FALSE(TransferWanted(p, 1));

  n3_up = true;
  p = RunTransfer(p, "j", 9, stage, 1, publish);
  CHECK(p["state"] == "done");
  CHECK(p["attempts"] == 2);
  CHECK(calls_to_n2 == 1);  // its layers were done: not staged again
  CHECK(calls_to_n3 == 2);
  CHECK_FALSE(p["moves"][2].contains("error"));
}

TEST_CASE("a transfer replaced by a newer decision stops publishing and starts no further node",
          "[transfer]") {
  std::set<std::string> staged_on;
  Mutex mu;
  Stager stage = [&](const std::string& node, const std::string&, int64_t,
                     const std::vector<int>&) -> Result<StageOutcome> {
    MutexLock lock(mu);
    staged_on.insert(node);
    return StageOutcome{};
  };
  int publications = 0;
  auto publish = [&](const json&) {
    ++publications;
    return publications < 2;  // the first node's progress finds a newer decision in force
  };
  const json p = RunTransfer(NewTransferProgress(Transfer()), "j", 9, stage, 1, publish);
  CHECK(publications == 2);
  CHECK(staged_on == std::set<std::string>{"n2"});
  CHECK(p["state"] == "failed");
  CHECK(p["moves"][2]["state"] == "pending");
}
