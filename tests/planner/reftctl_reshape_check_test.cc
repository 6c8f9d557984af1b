// `reftctl restore-check --layout`'s verdict (tools/reftctl/reshape_check.h) from a restore
// check's JSON: a native job keeps its tp; a PyTorch DCP checkpoint (every buffer under "dcp/")
// may change tp and pp, since DCP's planner reshards on load from saved byte ranges.
#include <catch2/catch.hpp>

#include <string>

#include "reshape_check.h"

namespace {

using nlohmann::json;

// The restore-check document (RestoreCheckJson's shape) of a step saved under dp=2 × `tp`,
// every shard in its own slot; `dcp` as the daemon reports it.
json SavedCheck(int tp, bool dcp, bool recoverable = true) {
  json groups = json::array();
  for (int t = 0; t < tp; ++t) {
    json shards = json::array();
    json ranks = json::array();
    for (int d = 0; d < 2; ++d) {
      const std::string node = "n" + std::to_string(d);
      shards.push_back({{"dp", d},
                        {"state", recoverable || d == 0 ? "slot" : "lost"},
                        {"node", node},
                        {"detail", "own slot"}});
      ranks.push_back({{"rank", {{"job", "j"}, {"pp", 0}, {"tp", t}, {"dp", d}}},
                       {"nodes", json::array({node})},
                       {"unique", "own slot on node '" + node + "'"},
                       {"rebuildable", false}});
    }
    groups.push_back({{"pp", 0}, {"tp", t}, {"members", 2}, {"scheme", "arc1"},
                      {"alive", json::array({0, 1})}, {"recoverable", recoverable},
                      {"lost", recoverable ? "" : "bytes [0,4096)"}, {"shards", shards},
                      {"ranks", ranks}});
  }
  return {{"job", "j"},
          {"step", 7},
          {"recoverable", recoverable},
          {"dcp", dcp},
          {"summary", recoverable ? "job 'j' step 7: recoverable" : "job 'j' step 7: LOST: x"},
          {"groups", groups}};
}

reft::JobLayout Layout(int dp, int tp, int pp = 1) {
  reft::JobLayout l;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  return l;
}

bool Contains(const json& s, const std::string& part) {
  return s.get<std::string>().find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a native job cannot change tp in a reshape") {
  const json r = reft::ctl::ReshapeCheckJson(SavedCheck(2, false), Layout(1, 1));
  CHECK(r["possible"] == false);
  CHECK(r.at("dcp") == false);
  CHECK(r["from_layout"] == "dp=2,tp=2,pp=1");
  CHECK(Contains(r["reason"], "tp cannot change in a reshape (saved with tp=2)"));
  REQUIRE(r["ranks"].size() == 1);
  CHECK(r["ranks"][0]["per_rank_state"] == "from own slot on node 'n0'");
}

TEST_CASE("a check without the dcp field is a native job's") {
  json check = SavedCheck(2, false);
  check.erase("dcp");
  const json r = reft::ctl::ReshapeCheckJson(check, Layout(1, 1));
  CHECK(r["possible"] == false);
  CHECK(Contains(r["reason"], "tp cannot change"));
}

TEST_CASE("a native job may change dp at the same tp") {
  const json r = reft::ctl::ReshapeCheckJson(SavedCheck(2, false), Layout(1, 2));
  CHECK(r["possible"] == true);
  CHECK(Contains(r["reason"], "every replicated and sharded buffer of step 7"));
}

TEST_CASE("a DCP checkpoint may change tp: DCP reshards on load") {
  const json r = reft::ctl::ReshapeCheckJson(SavedCheck(2, true), Layout(1, 1));
  CHECK(r["possible"] == true);
  CHECK(r.at("dcp") == true);
  CHECK(r["from_layout"] == "dp=2,tp=2,pp=1");
  CHECK(Contains(r["reason"], "a DCP checkpoint: DCP's planner reshards on load"));
  CHECK(Contains(r["reason"], "every saved byte range of step 7 can be read from memory"));
  REQUIRE(r["ranks"].size() == 1);
  CHECK(Contains(r["ranks"][0]["per_rank_state"], "read by range"));
  CHECK(r["sources"].size() == 2);
}

TEST_CASE("a DCP checkpoint may grow tp and change pp") {
  const json r = reft::ctl::ReshapeCheckJson(SavedCheck(2, true), Layout(1, 4, 2));
  CHECK(r["possible"] == true);
  CHECK(r["ranks"].size() == 8);
  for (const auto& k : r["ranks"]) CHECK(Contains(k["per_rank_state"], "read by range"));
}

TEST_CASE("a DCP checkpoint memory cannot rebuild is refused, naming why") {
  const json r = reft::ctl::ReshapeCheckJson(SavedCheck(2, true, false), Layout(1, 1));
  CHECK(r["possible"] == false);
  CHECK(Contains(r["reason"], "memory cannot rebuild step 7"));
  CHECK(!Contains(r["reason"], "tp cannot change"));
  REQUIRE(r["ranks"].size() == 1);
  CHECK(r["ranks"][0]["per_rank_state"] == "not readable from memory");
}

TEST_CASE("nothing committed: no reshape, DCP or not") {
  json check = SavedCheck(1, true);
  check["step"] = -1;
  check["groups"] = json::array();
  const json r = reft::ctl::ReshapeCheckJson(check, Layout(1, 1));
  CHECK(r["possible"] == false);
  CHECK(r["reason"] == "nothing of the job is committed in memory");
}
