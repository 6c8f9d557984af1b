#include <catch2/catch.hpp>

#include "reft/planner/api.h"
#include "reft/planner/profile.h"

using namespace reft::planner;
using nlohmann::json;

namespace {
json Load(const std::string& name) {
  auto r = LoadDocument(std::string(REFT_PLANNER_EXAMPLES) + "/" + name);
  REQUIRE(r.ok());
  return *r;
}
std::string Err(const reft::Result<json>& r) { return r.ok() ? "" : r.status().message(); }
}  // namespace

TEST_CASE("worked examples run", "[api]") {
  auto t = PlanTemplates(Load("templates.toml"));
  REQUIRE(t.ok());
  CHECK((*t)["n0"] == 2);
  CHECK((*t)["n_max"] == 6);  // 8 nodes − f·n0
  CHECK((*t)["templates"].size() == 5u);
  for (const auto& tm : (*t)["templates"]) {
    // Layers covered once, in order; the T1/T2/T3 total equals its parts.
    int next = 0;
    for (const auto& st : tm["stages"]) {
      CHECK(st["layers"][0] == next);
      next = st["layers"][1];
    }
    CHECK(next == 24);
    CHECK(tm["iteration_ms"].get<double>() ==
          Approx(tm["t1_ms"].get<double>() + tm["t2_ms"].get<double>() + tm["t3_ms"].get<double>()));
    CHECK(tm["iteration_ms"].get<double>() <= tm["simulated_iteration_ms"].get<double>() * (1 + 1e-9));
  }
  auto i = PlanInstantiate(Load("instantiate.json"));
  REQUIRE(i.ok());
  CHECK((*i)["num_options"] == 4);  // 9 = 2+2+5 = 2+3+4 = 3+3+3 = 2+2+2+3 (templates 2..5, >= 3 parts)
  CHECK((*i)["complete"] == true);
  int mb = 0;
  for (int x : (*i)["best"]["micro_batches"]) mb += x;
  CHECK(mb == 64);  // global batch 256 / micro-batch 4
  CHECK((*i)["best"]["step_ms"].get<double>() ==
        Approx((*i)["best"]["compute_ms"].get<double>() + (*i)["best"]["allreduce_ms"].get<double>()));
  CHECK((*i)["best"]["allreduce_ms"].get<double>() > 0);
  auto f = PlanFailover(Load("failover_odyssey.json"));
  REQUIRE(f.ok());
  CHECK((*f)["candidates"].size() == 3u);
  auto o = PlanFailover(Load("failover_oobleck.json"));
  REQUIRE(o.ok());
  CHECK_FALSE((*o)["exit_required"].get<bool>());
  CHECK((*o)["copies"]["moves"].size() > 0u);  // the borrowed / joined nodes need layers
  for (const auto& mv : (*o)["copies"]["moves"]) CHECK(mv["from_node"] != 7);  // never the failed node
  auto x = PlanTransferJson(Load("transfer.json"));
  REQUIRE(x.ok());
  CHECK((*x)["total_layers"] == 3);
  CHECK((*x)["positional_total_layers"] == 10);
  for (const auto& m : (*x)["moves"]) {
    CHECK(m.contains("from"));
    CHECK(m.contains("to"));
  }
  auto r = Reliability(Load("reliability.toml"));
  REQUIRE(r.ok());
  CHECK((*r)["reft_days"].get<double>() == Approx(16.18).epsilon(0.002));
}

TEST_CASE("outputs are deterministic", "[api]") {
  for (const char* name : {"templates.toml", "instantiate.json", "failover_odyssey.json", "failover_oobleck.json"}) {
    const json in = Load(name);
    auto a = std::string(name).find("failover") == 0 ? PlanFailover(in)
             : std::string(name).find("templates") == 0 ? PlanTemplates(in) : PlanInstantiate(in);
    auto b = std::string(name).find("failover") == 0 ? PlanFailover(in)
             : std::string(name).find("templates") == 0 ? PlanTemplates(in) : PlanInstantiate(in);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    INFO(name);
    CHECK(a->dump() == b->dump());
    CHECK_FALSE(a->contains("planning_seconds"));
  }
}

TEST_CASE("n0 is derived from device memory when not given", "[api]") {
  json j = Load("templates.toml");
  j["job"].erase("n0");
  j["cluster"]["device_memory"] = "2GiB";  // 24 layers x 256 MiB static: > 1 node of 2 x 2 GiB
  auto t = PlanTemplates(j);
  REQUIRE(t.ok());
  CHECK((*t)["n0"].get<int>() >= 2);
  j["cluster"]["device_memory"] = "64MiB";
  CHECK(Err(PlanTemplates(j)).find("cluster.nodes") != std::string::npos);
}

TEST_CASE("bad input names the field", "[api]") {
  json base = Load("templates.toml");
  json j = base;
  j["model"]["layer"]["forward_ms"] = -1;
  CHECK(Err(PlanTemplates(j)).find("model.layer.forward_ms") != std::string::npos);
  j = base;
  j["cluster"].erase("nodes");
  CHECK(Err(PlanTemplates(j)).find("cluster.nodes: missing") != std::string::npos);
  j = base;
  j["cluster"]["nodes"] = 1;
  j["job"]["f"] = 3;
  CHECK(Err(PlanTemplates(j)).find("cluster.nodes") != std::string::npos);
  j = base;
  j["cluster"]["device_memory"] = "-5G";
  CHECK(Err(PlanTemplates(j)).find("cluster.device_memory") != std::string::npos);
  json t = Load("transfer.json");
  t["layer_bytes"][0] = -3;
  CHECK(Err(PlanTransferJson(t)).find("layer_bytes[0]") != std::string::npos);
  CHECK(Err(Reliability(json{{"sg_size", 7}})).find("sg_size") != std::string::npos);
  CHECK(Err(PlanFailover(json{{"mode", "bogus"}})).find("mode") != std::string::npos);
  auto bad_toml = TomlToJson("x = [", "inline");
  CHECK_FALSE(bad_toml.ok());
}
