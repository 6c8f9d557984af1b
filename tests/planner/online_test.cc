// The decision over a running job (reft/planner/online.h): policies, layouts, transfers, exit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "reft/planner/online.h"

using namespace reft::planner;
using nlohmann::json;

namespace {

// dp × pp ranks, one per node "n<d*pp+s>", `layers_per_stage` layers each with distinct bytes.
online::JobModelView Job(int dp, int pp, int layers_per_stage, double step_ms = 200) {
  online::JobModelView m;
  m.job = "j";
  m.dp = dp;
  m.pp = pp;
  m.step = 7;
  m.step_ms = step_ms;
  m.step_samples = step_ms > 0 ? 5 : 0;
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < pp; ++s) m.ranks.push_back({s, 0, d, "n" + std::to_string(d * pp + s)});
  for (int l = 0; l < pp * layers_per_stage; ++l)
    m.layers.push_back({l, l / layers_per_stage, 1000000u + 1000u * l, 3000000u + 7u * l});
  return m;
}

online::Membership Live(int nodes, std::set<int> lost, std::vector<std::string> extra = {}) {
  online::Membership ms;
  for (int n = 0; n < nodes; ++n) {
    if (lost.count(n)) ms.lost.push_back("n" + std::to_string(n));
    else ms.live.push_back("n" + std::to_string(n));
  }
  for (auto& e : extra) ms.live.push_back(e);
  return ms;
}

// Layers held by every node in the current layout of Job().
std::map<std::string, std::set<int>> Held(const online::JobModelView& m) {
  std::map<std::string, std::set<int>> held;
  for (const auto& r : m.ranks)
    for (const auto& l : m.layers)
      if (l.stage == r.pp) held[r.node].insert(l.layer);
  return held;
}

}  // namespace

TEST_CASE("online: no lost node shows the layout and needs no decision") {
  auto m = Job(2, 2, 3);
  auto out = online::Decide(m, nullptr, Live(4, {}));
  REQUIRE(out.ok());
  CHECK((*out)["decision"]["needed"] == false);
  CHECK((*out)["decision"]["policy"] == "none");
  CHECK((*out)["decision"]["reason"].get<std::string>().find("no decision needed") != std::string::npos);
  CHECK((*out)["ranks"].size() == 4);
  CHECK((*out)["model"]["layers"].size() == 6);
  CHECK((*out)["model"]["layers"][2]["bytes"] == 1000000u + 2000u + 3000000u + 14u);
  // The measured step spread over the layers reproduces the measured step for the running plan.
  CHECK((*out)["profile"]["source"] == "measured_step_time");
  CHECK(std::abs((*out)["decision"]["current_step_ms"].get<double>() - 200.0) < 1e-6);
}

TEST_CASE("online: a lost node without a spare reconfigures onto the survivors with a KM transfer") {
  auto m = Job(2, 2, 3);
  auto out = online::Decide(m, nullptr, Live(4, {3}));
  REQUIRE(out.ok());
  const json& d = (*out)["decision"];
  INFO(out->dump(2));
  CHECK((*out)["profile"]["source"] == "measured_step_time");
  CHECK((*out)["profile"]["note"].get<std::string>().find("no profile attached") != std::string::npos);
  CHECK(d["needed"] == true);
  CHECK((*out)["lost_nodes"] == json({"n3"}));
  CHECK(d["candidates"][0]["policy"] == "restart_on_spare");
  CHECK(d["candidates"][0]["feasible"] == false);
  REQUIRE(d["policy"] == "reconfigure");
  // Beside the layout: the best plan on the same three positions, Odyssey's search (every
  // position used) or the uniform one, whichever is faster.
  const double uniform = d["new_layout"]["step_ms"], any = d["new_layout"]["unrestricted_step_ms"];
  CHECK(any <= uniform * (1 + 1e-12));
  // The new layout runs on survivors only and holds every layer once per pipeline.
  std::set<std::string> used;
  auto held = Held(m);
  std::map<std::string, std::set<int>> needs;
  for (const auto& p : d["new_layout"]["pipelines"]) {
    std::set<int> layers;
    for (const auto& s : p["stages"]) {
      const std::string node = s["node"];
      CHECK(node != "n3");
      CHECK(used.insert(node).second);
      for (int l = s["layers"]["first"]; l <= s["layers"]["last"].get<int>(); ++l) {
        layers.insert(l);
        needs[node].insert(l);
      }
    }
    CHECK(layers.size() == 6);
  }
  // Every layer a node needs and lacks arrives by exactly one move from a live holder, with the
  // registered bytes of that layer.
  std::map<std::pair<std::string, int>, int> arrivals;
  uint64_t total = 0;
  for (const auto& mv : d["transfer"]["moves"]) {
    const int l = mv["layer"];
    CHECK(held[mv["from_node"].get<std::string>()].count(l) == 1);
    CHECK(mv["from_node"] != "n3");
    CHECK(mv["bytes"].get<uint64_t>() == m.layers[l].bytes());
    ++arrivals[{mv["to_node"].get<std::string>(), l}];
    total += mv["bytes"].get<uint64_t>();
  }
  for (const auto& [node, layers] : needs)
    for (int l : layers) CHECK(arrivals[{node, l}] == (held[node].count(l) ? 0 : 1));
  CHECK(d["transfer"]["total_bytes"] == total);
  CHECK(d["transfer"]["executed"] == false);
}

TEST_CASE("online: a spare node takes the lost node's ranks when that scores best") {
  auto m = Job(2, 2, 3);
  auto out = online::Decide(m, nullptr, Live(4, {1}, {"spare-a", "spare-b"}));
  REQUIRE(out.ok());
  const json& d = (*out)["decision"];
  INFO(out->dump(2));
  CHECK((*out)["spare_nodes"] == json({"spare-a", "spare-b"}));
  REQUIRE(d["policy"] == "restart_on_spare");
  CHECK(d["new_layout"]["pipelines"][0]["stages"][1]["node"] == "spare-a");
  CHECK(d["new_layout"]["pipelines"][1]["stages"][0]["node"] == "n2");
  CHECK(!d.contains("transfer"));
}

TEST_CASE("online: fewer live units than (f+1)·n0 exit and restart from the tier") {
  auto m = Job(2, 1, 4);
  auto out = online::Decide(m, json{{"model", {{"num_layers", 4}, {"layer", {{"forward_ms", 1}}}}},
                                    {"job", {{"f", 1}}}},
                            Live(2, {0}));
  REQUIRE(out.ok());
  const json& d = (*out)["decision"];
  CHECK((*out)["profile"]["source"] == "attached");
  CHECK(d["policy"] == "exit");
  CHECK(d["reason"].get<std::string>().find("(f+1)·n0 = 2") != std::string::npos);
  CHECK(d["reason"].get<std::string>().find("persistent tier") != std::string::npos);
  // With f = 0 one unit is enough: the survivor takes the whole model.
  auto f0 = online::Decide(m, json{{"model", {{"num_layers", 4}, {"layer", {{"forward_ms", 1}}}}},
                                   {"job", {{"f", 0}}}},
                           Live(2, {0}));
  REQUIRE(f0.ok());
  CHECK((*f0)["decision"]["policy"] != "exit");
  // Below (f+1)·n0 a spare still keeps the job in memory: it takes the lost node's ranks, and
  // the policies that would run on the survivors alone say why they cannot.
  auto spare = online::Decide(m, json{{"model", {{"num_layers", 4}, {"layer", {{"forward_ms", 1}}}}},
                                      {"job", {{"f", 1}}}},
                              Live(2, {0}, {"spare-a"}));
  REQUIRE(spare.ok());
  const json& sd = (*spare)["decision"];
  INFO(spare->dump(2));
  REQUIRE(sd["policy"] == "restart_on_spare");
  CHECK(sd["new_layout"]["pipelines"][0]["stages"][0]["node"] == "spare-a");
  for (const auto& c : sd["candidates"]) {
    if (c["policy"] == "restart_on_spare") continue;
    CHECK(c["feasible"] == false);
    CHECK(c["why"].get<std::string>().find("(f+1)·n0 = 2") != std::string::npos);
  }
}

TEST_CASE("online: without a profile or a measured step it says it cannot decide") {
  auto m = Job(2, 2, 1, 0);
  auto out = online::Decide(m, nullptr, Live(4, {0}));
  REQUIRE(out.ok());
  CHECK((*out)["profile"]["source"] == "none");
  CHECK((*out)["decision"]["policy"].is_null());
  CHECK((*out)["decision"]["reason"].get<std::string>().find("no step time measured") != std::string::npos);
}

TEST_CASE("online: the output is a function of the input, whatever the order it came in") {
  auto m = Job(3, 2, 2);
  auto a = online::Decide(m, nullptr, Live(6, {2}));
  auto shuffled = m;
  std::reverse(shuffled.ranks.begin(), shuffled.ranks.end());
  auto ms = Live(6, {2});
  std::reverse(ms.live.begin(), ms.live.end());
  auto b = online::Decide(shuffled, nullptr, ms);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  json ra = *a, rb = *b;
  ra.erase("ranks");  // listed in input order
  rb.erase("ranks");
  CHECK(ra.dump() == rb.dump());
  CHECK(online::Decide(m, nullptr, Live(6, {2}))->dump() == a->dump());
}

TEST_CASE("online: bad profiles and models are refused with the field named") {
  auto m = Job(2, 2, 3);
  auto wrong = online::Decide(m, json{{"model", {{"num_layers", 5}, {"layer", {{"forward_ms", 1}}}}}}, Live(4, {3}));
  REQUIRE(!wrong.ok());
  CHECK(wrong.status().message().find("the job registered 6") != std::string::npos);
  auto neg = online::CheckProfile(json{{"model", {{"num_layers", 2}, {"layer", {{"forward_ms", -1}}}}}});
  CHECK(neg.message().find("forward_ms") != std::string::npos);
  CHECK(online::CheckProfile(json{{"model", {{"num_layers", 2}, {"layer", {{"forward_ms", 1}}}}},
                                  {"bogus", 1}})
            .message()
            .find("profile.bogus") != std::string::npos);
  CHECK(online::CheckProfile(json{{"model", {{"num_layers", 2}, {"layer", {{"forward_ms", 1}}}}},
                                  {"policy", {{"restart_ms", -5}}}})
            .message()
            .find("policy.restart_ms") != std::string::npos);
  auto gap = m;
  gap.layers.erase(gap.layers.begin() + 2);
  CHECK(!online::Decide(gap, nullptr, Live(4, {})).ok());
  auto swapped = m;
  std::swap(swapped.layers[1].stage, swapped.layers[4].stage);
  CHECK(online::Decide(swapped, nullptr, Live(4, {})).status().message().find("consecutive") != std::string::npos);
  auto none = m;  // no buffer names a layer: the error says how to name them
  none.layers.clear();
  CHECK(online::Decide(none, nullptr, Live(4, {})).status().message().find("layer_of=") != std::string::npos);
}

TEST_CASE("online: the positional assignment (the baseline) moves at least what Kuhn-Munkres moves") {
  auto m = Job(4, 2, 4);  // DP4 PP2, as in Odyssey's transfer experiment
  int compared = 0;
  for (int lost : {0, 1, 5}) {
    INFO("lost n" << lost);
    auto km = online::Decide(m, nullptr, Live(8, {lost}));
    auto pos = online::Decide(m, json{{"policy", {{"assignment", "positional"}}}}, Live(8, {lost}));
    REQUIRE(km.ok());
    INFO((pos.ok() ? std::string() : pos.status().ToString()));
    REQUIRE(pos.ok());
    if ((*km)["decision"]["policy"] != "reconfigure" || (*pos)["decision"]["policy"] != "reconfigure") continue;
    // The same new plan, only who goes where differs.
    CHECK((*km)["decision"]["new_layout"]["step_ms"] == (*pos)["decision"]["new_layout"]["step_ms"]);
    CHECK((*km)["decision"]["transfer"]["total_bytes"].get<uint64_t>() <=
          (*pos)["decision"]["transfer"]["total_bytes"].get<uint64_t>());
    ++compared;
  }
  CHECK(compared > 0);
  CHECK_FALSE(online::Decide(m, json{{"policy", {{"assignment", "random"}}}}, Live(8, {1})).ok());
}

TEST_CASE("online: every decision is a layout a dp x tp x pp job can run") {
  // DP4 x PP2 loses node n3 (stage 1 of pipeline 1). Rerouting that stage would keep pipeline
  // 1's stage 0 running, which no dp x tp x pp layout expresses: refused, with the reason.
  auto m = Job(4, 2, 3);
  // Device memory for half the model: every plan keeps two stages per pipeline.
  const json profile = {{"cluster", {{"device_memory", 20000000}, {"memory_margin", 0}}}};
  auto out = online::Decide(m, profile, Live(8, {3}));
  REQUIRE(out.ok());
  const json& d = (*out)["decision"];
  INFO(out->dump(2));
  const json* reroute = nullptr;
  for (const auto& c : d["candidates"])
    if (c["policy"] == "reroute") reroute = &c;
  REQUIRE(reroute != nullptr);
  CHECK((*reroute)["feasible"] == false);
  CHECK((*reroute)["why"].get<std::string>().find("pipeline 1 lost 1 of its 2 stages") != std::string::npos);
  // The chosen layout: identical pipelines of at least two stages on the survivors (7 nodes
  // cannot all be used: the rest stay spares).
  REQUIRE(d["policy"] == "reconfigure");
  const json& pipes = d["new_layout"]["pipelines"];
  REQUIRE(pipes.size() >= 2);
  std::set<std::string> used;
  for (const auto& p : pipes) {
    CHECK(p["stages"].size() >= 2);
    CHECK(p["stages"].size() == pipes[0]["stages"].size());
    CHECK(p["stages"].back()["layers"]["last"] == 5);
    for (size_t s = 0; s < p["stages"].size(); ++s) {
      CHECK(p["stages"][s]["layers"] == pipes[0]["stages"][s]["layers"]);
      CHECK(used.insert(p["stages"][s]["node"].get<std::string>()).second);
    }
  }
  CHECK(used.count("n3") == 0);
  CHECK(used.size() < 7);

  // A data-parallel job that loses a whole replica may reroute: its layout drops a pipeline.
  auto dp = online::Decide(Job(3, 1, 4), nullptr, Live(3, {1}));
  REQUIRE(dp.ok());
  INFO(dp->dump(2));
  for (const auto& c : (*dp)["decision"]["candidates"])
    if (c["policy"] == "reroute") CHECK(c["feasible"] == true);
}

TEST_CASE("online: a job below its peak grows onto a live node outside it, up to the peak") {
  auto m = Job(2, 1, 4);  // DP2 after a loss: nodes n0, n1
  m.peak_units = 3;
  // Two live nodes outside the job; the peak takes one of them.
  auto out = online::Decide(m, nullptr, Live(2, {}, {"back", "extra"}));
  REQUIRE(out.ok());
  INFO(out->dump(2));
  const json& d = (*out)["decision"];
  CHECK((*out)["peak_units"] == 3);
  CHECK(d["needed"] == true);
  REQUIRE(d["policy"] == "grow");
  CHECK(d["joining_nodes"] == json({"back"}));
  const json& pipes = d["new_layout"]["pipelines"];
  REQUIRE(pipes.size() == 3);
  std::set<std::string> nodes;
  for (const auto& p : pipes) {
    REQUIRE(p["stages"].size() == 1);
    CHECK(p["stages"][0]["layers"] == json({{"first", 0}, {"last", 3}}));
    nodes.insert(p["stages"][0]["node"].get<std::string>());
  }
  CHECK(nodes == std::set<std::string>{"n0", "n1", "back"});
  // The node that joins holds nothing: it reads every layer as it restores, and nothing else
  // moves. No transfer plan runs ahead (the job commits on until its ranks restart).
  uint64_t all = 0;
  for (const auto& l : (*out)["model"]["layers"]) all += l["bytes"].get<uint64_t>();
  CHECK(d["restore_fetch_bytes"] == all);
  CHECK_FALSE(d.contains("transfer"));
  // Growing beats staying: three pipelines take the step in about two thirds of the time.
  REQUIRE(d["candidates"].size() == 2);
  CHECK(d["candidates"][0]["policy"] == "stay");
  CHECK(d["candidates"][1]["policy"] == "grow");
  CHECK(d["candidates"][1]["score"].get<double>() > d["candidates"][0]["score"].get<double>());
  CHECK(d["new_layout"]["step_ms"].get<double>() < d["current_step_ms"].get<double>());
  // Data parallelism over the three positions is also the best unrestricted plan.
  CHECK(d["new_layout"]["unrestricted_step_ms"].get<double>() ==
        Approx(d["new_layout"]["step_ms"].get<double>()).epsilon(1e-9));
}

TEST_CASE("online: a job at its peak, or one growing would not pay, stays as it runs") {
  auto m = Job(2, 1, 4);
  SECTION("at its peak (no loss before): a live node outside it is another job's or a spare") {
    auto out = online::Decide(m, nullptr, Live(2, {}, {"other"}));
    REQUIRE(out.ok());
    CHECK((*out)["peak_units"] == 2);
    CHECK((*out)["decision"]["needed"] == false);
    CHECK((*out)["decision"]["policy"] == "none");
  }
  SECTION("below its peak with no node outside it") {
    m.peak_units = 4;
    auto out = online::Decide(m, nullptr, Live(2, {}));
    REQUIRE(out.ok());
    CHECK((*out)["decision"]["policy"] == "none");
    CHECK((*out)["peak_units"] == 4);  // carried on for the next decision
  }
  SECTION("a restart costs more than growing wins before the next expected failure") {
    m.peak_units = 3;
    json profile = {{"policy", {{"restart_ms", 1e9}}}};
    auto out = online::Decide(m, profile, Live(2, {}, {"back"}));
    REQUIRE(out.ok());
    INFO(out->dump(2));
    CHECK((*out)["decision"]["needed"] == false);
    CHECK((*out)["decision"]["policy"] == "none");
    CHECK((*out)["decision"]["reason"].get<std::string>().find("would not raise the score") != std::string::npos);
  }
}

TEST_CASE("online: a pipeline job grows onto its best plan and its nodes keep what they hold") {
  auto m = Job(1, 2, 3);  // one pipeline of two stages on n0, n1; it ran on four positions before
  m.peak_units = 4;
  auto out = online::Decide(m, nullptr, Live(2, {}, {"a", "b"}));
  REQUIRE(out.ok());
  INFO(out->dump(2));
  const json& d = (*out)["decision"];
  REQUIRE(d["policy"] == "grow");
  CHECK(d["joining_nodes"] == json({"a", "b"}));
  // Kuhn–Munkres places the job's nodes where they hold the most: what the four positions lack
  // in all is what they read as they restore, and no other placement lacks less.
  const auto held = Held(m);
  std::map<std::string, std::set<int>> hosted;
  std::vector<std::set<int>> roles;
  for (const auto& p : d["new_layout"]["pipelines"])
    for (const auto& st : p["stages"]) {
      std::set<int> role;
      for (int l = st["layers"]["first"]; l <= st["layers"]["last"].get<int>(); ++l) role.insert(l);
      hosted[st["node"].get<std::string>()] = role;
      roles.push_back(role);
    }
  REQUIRE(hosted.size() == 4);
  std::map<int, uint64_t> bytes;
  for (const auto& l : (*out)["model"]["layers"]) bytes[l["layer"]] = l["bytes"];
  auto lacking = [&](const std::string& node, const std::set<int>& role) {
    uint64_t b = 0;
    for (int l : role)
      if (!held.count(node) || !held.at(node).count(l)) b += bytes[l];
    return b;
  };
  uint64_t chosen = 0;
  for (const auto& [node, role] : hosted) chosen += lacking(node, role);
  CHECK(d["restore_fetch_bytes"] == chosen);
  for (size_t i = 0; i < roles.size(); ++i)
    for (size_t j = 0; j < roles.size(); ++j) {
      if (i == j) continue;
      uint64_t other = lacking("n0", roles[i]) + lacking("n1", roles[j]);
      for (size_t k = 0; k < roles.size(); ++k)
        if (k != i && k != j) other += lacking("a", roles[k]);  // a joining node lacks all of it
      CHECK(other >= chosen);
    }
}

TEST_CASE("online: a decision keeps f+1 pipelines (Oobleck's guarantee, reft's protection needs them)") {
  SECTION("a slow all-reduce would favour one pipeline: the plan keeps two") {
    auto m = Job(3, 1, 4);
    json profile = {{"cluster", {{"network_gbps", 0.25}}}};
    auto out = online::Decide(m, profile, Live(3, {2}));
    REQUIRE(out.ok());
    INFO(out->dump(2));
    const json& d = (*out)["decision"];
    REQUIRE(d.contains("new_layout"));
    int live_pipelines = 0;
    for (const auto& p : d["new_layout"]["pipelines"])
      live_pipelines += std::none_of(p["stages"].begin(), p["stages"].end(),
                                     [](const json& st) { return st.contains("rerouted"); });
    CHECK(live_pipelines >= 2);
  }
  SECTION("a reroute that would leave one whole pipeline is refused") {
    auto m = Job(3, 2, 2);  // pipelines on n0 n1 | n2 n3 | n4 n5
    auto out = online::Decide(m, nullptr, Live(6, {0, 2}));
    REQUIRE(out.ok());
    INFO(out->dump(2));
    const json& d = (*out)["decision"];
    bool refused = false;
    for (const auto& c : d["candidates"])
      if (c["policy"] == "reroute") refused = !c["feasible"].get<bool>();
    CHECK(refused);
    CHECK(d["policy"] != "reroute");
    CHECK(d["new_layout"]["pipelines"].size() >= 2);
  }
}

// The coordinator weighs waiting for a spare against deciding now (reft/planner/spare_wait.h):
// without spares restart_on_spare is infeasible and still says what it would do with one.
TEST_CASE("online: without a spare, restart_on_spare says what it would do with one") {
  auto m = Job(2, 2, 3);
  const json profile = {{"policy", {{"restart_ms", 1000}, {"snapshot_load_ms", 500}, {"mtbf_hours_per_node", 3}}}};
  auto out = online::Decide(m, profile, Live(4, {3}));
  REQUIRE(out.ok());
  const json& d = (*out)["decision"];
  INFO(out->dump(2));
  const json& spare = d["candidates"][0];
  REQUIRE(spare["policy"] == "restart_on_spare");
  CHECK(spare["feasible"] == false);
  CHECK_THAT(spare["why"].get<std::string>(), Catch::Contains("0 spare node(s) for 1 lost node(s)"));
  // The running layout's step, a restart and a snapshot load, Odyssey's score over D̂ = 3 h / 3.
  CHECK(spare["step_ms"].get<double>() == Approx(d["current_step_ms"].get<double>()));
  CHECK(spare["transition_ms"].get<double>() == Approx(1500));
  const double interval = 3 * 3.6e6 / 3, b = 16;  // 4 micro-batches per stage and pipeline
  CHECK(d["expected_interval_ms"].get<double>() == Approx(interval));
  CHECK(spare["score"].get<double>() == Approx(b / spare["step_ms"].get<double>() * (interval - 1500) / interval));
  CHECK(d["policy"] == "reconfigure");  // an infeasible candidate is never chosen

  // Exit below (f+1)·n0: restart_on_spare still says what a spare would do, with D̂.
  auto single = Job(2, 1, 4);
  auto exited = online::Decide(single, json{{"model", {{"num_layers", 4}, {"layer", {{"forward_ms", 1}}}}},
                                            {"job", {{"f", 1}}}},
                               Live(2, {0}));
  REQUIRE(exited.ok());
  const json& e = (*exited)["decision"];
  INFO(exited->dump(2));
  CHECK(e["policy"] == "exit");
  REQUIRE(e["candidates"].size() == 1);
  CHECK(e["candidates"][0]["policy"] == "restart_on_spare");
  CHECK(e["candidates"][0]["feasible"] == false);
  CHECK(e["candidates"][0]["step_ms"].get<double>() > 0);
  CHECK(e["expected_interval_ms"].get<double>() > 0);
}
