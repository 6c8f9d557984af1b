// The job's owner in a node's manifest of a step (docs/security.md "Jobs belong to their
// owner", docs/persist.md "Files"): written when known, read back, absent in manifests of an
// older reftd (read as unknown), kept by a merge that does not know it, and never relabelled.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "persist_test_util.h"
#include "reft/persist/persistent_tier.h"
#include "test_support.h"

using namespace reft;
using namespace reft::persist;
namespace pt = reft::persist::testing;

namespace {

const JobLayout k2x1x1{/*dp=*/2, /*tp=*/1, /*pp=*/1};

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out << text;
}

Manifest OnlyManifest(PersistentTier& tier, const std::string& job, int64_t step) {
  auto ms = tier.ReadManifests(job, step);
  INFO(ms.status().ToString());
  REQUIRE(ms.ok());
  REQUIRE(ms->size() == 1);
  return ms->front();
}

}  // namespace

TEST_CASE("persist manifest: the owner round trip, with and without a group", "[persist]") {
  reft::testing::TempDir dir("reft-persist-owner");
  auto tier = pt::OpenTier(pt::TestOptions(dir.path()));
  const std::string job = "owned";

  ManifestOwner team{1000, 2000, "team"};
  REQUIRE(tier->PersistStep(job, 1, k2x1x1, pt::Images(pt::AllRanks(job, k2x1x1, 1)), team).ok());
  Manifest m1 = OnlyManifest(*tier, job, 1);
  REQUIRE(m1.owner.has_value());
  CHECK(m1.owner->uid == 1000);
  CHECK(m1.owner->gid == std::optional<uint32_t>(2000));
  CHECK(m1.owner->group == "team");
  CHECK(m1.files.size() == 2);
  auto j1 = nlohmann::json::parse(ReadText(pt::StepPath(dir.path(), job, 1) +
                                           "/manifest.node-a.json"));
  CHECK(j1.at("version") == 1);  // an added optional field: older readers still read it
  CHECK(j1.at("owner") == nlohmann::json({{"uid", 1000}, {"gid", 2000}, {"group", "team"}}));

  ManifestOwner alone{4242, std::nullopt, ""};
  REQUIRE(tier->PersistStep(job, 2, k2x1x1, pt::Images(pt::AllRanks(job, k2x1x1, 2)), alone).ok());
  Manifest m2 = OnlyManifest(*tier, job, 2);
  REQUIRE(m2.owner.has_value());
  CHECK(m2.owner->uid == 4242);
  CHECK_FALSE(m2.owner->gid.has_value());
  CHECK(m2.owner->group.empty());
  auto j2 = nlohmann::json::parse(ReadText(pt::StepPath(dir.path(), job, 2) +
                                           "/manifest.node-a.json"));
  CHECK(j2.at("owner").at("gid").is_null());
  CHECK(j2.at("owner").at("group").is_null());

  // Unknown owner: no field at all, the manifest an older reftd wrote.
  REQUIRE(tier->PersistStep(job, 3, k2x1x1, pt::Images(pt::AllRanks(job, k2x1x1, 3))).ok());
  CHECK_FALSE(OnlyManifest(*tier, job, 3).owner.has_value());
  auto j3 = nlohmann::json::parse(ReadText(pt::StepPath(dir.path(), job, 3) +
                                           "/manifest.node-a.json"));
  CHECK_FALSE(j3.contains("owner"));
}

TEST_CASE("persist manifest: a manifest of an older reftd (no owner) reads as unknown, a bad "
          "owner is corrupted",
          "[persist]") {
  reft::testing::TempDir dir("reft-persist-owner");
  auto tier = pt::OpenTier(pt::TestOptions(dir.path()));
  const std::string job = "old";
  REQUIRE(tier->PersistStep(job, 7, k2x1x1, pt::Images(pt::AllRanks(job, k2x1x1, 7))).ok());
  const std::string step_dir = pt::StepPath(dir.path(), job, 7);
  // Exactly what reftd wrote before manifests recorded owners.
  WriteText(step_dir + "/manifest.node-a.json",
            R"({"format": "reft-persist-manifest", "version": 1, "job": "old", "step": 7,
 "node_id": "node-a", "layout": {"pp": 1, "tp": 1, "dp": 2}, "created_unix_ms": 1700000000000,
 "files": [{"file": "pp0-tp0-dp0.reft", "pp": 0, "tp": 0, "dp": 0, "bytes": 1, "payload_bytes": 1,
            "chunk_size": 4096, "chunk_count": 1, "chunk_table_xxh3": "9f86d081884c7d65",
            "regions": [{"name": "meta", "size": 1}]}]}
)");
  Manifest old = OnlyManifest(*tier, job, 7);
  CHECK_FALSE(old.owner.has_value());
  CHECK(old.files.size() == 1);
  CHECK(old.created_unix_ms == 1700000000000);

  // "owner": null is the same.
  auto j = nlohmann::json::parse(ReadText(step_dir + "/manifest.node-a.json"));
  j["owner"] = nullptr;
  WriteText(step_dir + "/manifest.node-a.json", j.dump());
  CHECK_FALSE(OnlyManifest(*tier, job, 7).owner.has_value());

  // An owner that is there but malformed is not taken for "unknown".
  for (const nlohmann::json& bad :
       {nlohmann::json("1000"), nlohmann::json({{"gid", 5}}), nlohmann::json({{"uid", -1}}),
        nlohmann::json({{"uid", "1000"}}), nlohmann::json({{"uid", 1}, {"gid", 1.5}}),
        nlohmann::json({{"uid", 1}, {"group", 7}})}) {
    INFO(bad.dump());
    j["owner"] = bad;
    WriteText(step_dir + "/manifest.node-a.json", j.dump());
    auto ms = tier->ReadManifests(job, 7);
    REQUIRE_FALSE(ms.ok());
    CHECK(ms.status().code() == StatusCode::kCorrupted);
    CHECK(pt::Contains(ms.status().message(), "manifest.node-a.json"));
  }
}

TEST_CASE("persist manifest: a merge keeps the owner it does not know and refuses another one",
          "[persist]") {
  reft::testing::TempDir dir("reft-persist-owner");
  auto tier = pt::OpenTier(pt::TestOptions(dir.path()));
  const std::string job = "merge";
  auto ranks = pt::AllRanks(job, k2x1x1, 5);
  ManifestOwner a{1000, std::nullopt, ""};
  auto f0 = tier->WriteRank(ranks[0].rank(), 5, ranks[0].image().regions);
  REQUIRE(f0.ok());
  REQUIRE(tier->WriteManifest(job, 5, k2x1x1, {*f0}, a).ok());

  // A second write that does not know the owner keeps it (and merges the entries).
  auto f1 = tier->WriteRank(ranks[1].rank(), 5, ranks[1].image().regions);
  REQUIRE(f1.ok());
  REQUIRE(tier->WriteManifest(job, 5, k2x1x1, {*f1}).ok());
  Manifest m = OnlyManifest(*tier, job, 5);
  CHECK(m.owner == std::optional<ManifestOwner>(a));
  CHECK(m.files.size() == 2);
  // The same owner again: fine.
  REQUIRE(tier->WriteManifest(job, 5, k2x1x1, {*f1}, a).ok());

  // Another owner (same uid, another group; another uid): refused, the manifest unchanged.
  for (const ManifestOwner& other : {ManifestOwner{1000, 2000, "team"}, ManifestOwner{1001}}) {
    auto w = tier->WriteManifest(job, 5, k2x1x1, {*f1}, other);
    REQUIRE_FALSE(w.ok());
    CHECK(w.status().code() == StatusCode::kAlreadyExists);
    CHECK(pt::Contains(w.status().message(), "another owner"));
    CHECK(OnlyManifest(*tier, job, 5).owner == std::optional<ManifestOwner>(a));
  }

  // An ownerless manifest (older reftd) takes the owner a newer write knows.
  auto g0 = tier->WriteRank(ranks[0].rank(), 6, pt::AllRanks(job, k2x1x1, 6)[0].image().regions);
  REQUIRE(g0.ok());
  REQUIRE(tier->WriteManifest(job, 6, k2x1x1, {*g0}).ok());
  CHECK_FALSE(OnlyManifest(*tier, job, 6).owner.has_value());
  REQUIRE(tier->WriteManifest(job, 6, k2x1x1, {*g0}, a).ok());
  CHECK(OnlyManifest(*tier, job, 6).owner == std::optional<ManifestOwner>(a));
}
