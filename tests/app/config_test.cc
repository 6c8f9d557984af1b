#include <catch2/catch.hpp>

#include <fstream>

#include "config.h"
#include "test_support.h"

using reft::StatusCode;
using reft::app::DaemonConfig;
using reft::app::ParseDaemonArgs;

namespace {

reft::Result<DaemonConfig> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "reftd");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return ParseDaemonArgs(static_cast<int>(argv.size()), argv.data());
}

std::string WriteFile(const reft::testing::TempDir& dir, const std::string& text) {
  std::string path = dir.path() + "/reftd.toml";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("flags parse and override defaults", "[config]") {
  auto c = Parse({"--node-id", "n1", "--listen", "127.0.0.1:9000", "--memory-limit", "2G",
                  "--peers", "127.0.0.1:9001,127.0.0.1:9002", "--shm-dir", "/dev/shm/x"});
  REQUIRE(c.ok());
  CHECK(c->node_id == "n1");
  CHECK(c->listen == "127.0.0.1:9000");
  CHECK(c->memory_limit == (2ull << 30));
  CHECK(c->peers == std::vector<std::string>{"127.0.0.1:9001", "127.0.0.1:9002"});
}

TEST_CASE("flags override the TOML file, and the file is fully validated", "[config]") {
  reft::testing::TempDir dir;
  auto path = WriteFile(dir, R"(
node_id = "from-file"
listen = "127.0.0.1:7001"
memory_limit = "512M"
peers = ["127.0.0.1:7002"]
[store]
chunk_size = "1M"
slots_per_rank = 4
file_mode = "0640"
[local]
allowed_uids = [0, 1000]
[planner]
mode = "confirm"
spare_wait_ms = 0
[peer]
bulk_transport = "grpc"
bulk_port = 7100
)");
  auto c = Parse({"--config", path, "--listen", "127.0.0.1:7005"});
  REQUIRE(c.ok());
  CHECK(c->node_id == "from-file");
  CHECK(c->listen == "127.0.0.1:7005");
  CHECK(c->memory_limit == (512ull << 20));
  CHECK(c->chunk_size == (1ull << 20));
  CHECK(c->slots_per_rank == 4);
  CHECK(c->file_mode == 0640);
  CHECK(c->allowed_uids == std::vector<uint32_t>{0, 1000});
  CHECK(c->planner_mode == "confirm");
  CHECK(c->planner_spare_wait_ms == 0);
  CHECK(c->bulk_transport == "grpc");
  CHECK(c->bulk_port == 7100);
}

TEST_CASE("bad config names the key", "[config]") {
  reft::testing::TempDir dir;
  struct Case {
    const char* toml;
    const char* needle;
  } cases[] = {
      {"bogus = 1\n", "'bogus': unknown key"},
      {"[store]\nchunk_size = \"3K\"\n", "store.chunk_size"},
      // A float where a size belongs is refused, not converted (4.5e61 overflows an integer).
      {"[store]\nchunk_size = 4.5e61\n", "store.chunk_size': expected a byte size"},
      {"memory_limit = 1.5\n", "memory_limit': expected a byte size"},
      {"[store]\nslots_per_rank = 1\n", "store.slots_per_rank"},
      {"[store]\nfile_mode = \"0777\"\n", "store.file_mode"},
      {"memory_limit = \"lots\"\n", "memory_limit"},
      {"listen = \"nohostport\"\n", "listen"},
      {"peers = [\"a:1\", 3]\n", "peers"},
      {"[local]\nallowed_uids = [-1]\n", "local.allowed_uids"},
      {"log_level = \"chatty\"\n", "log_level"},
      {"node_id = \n", "line 1"},
      {"[planner]\nmode = \"sometimes\"\n", "planner.mode: 'sometimes' is not one of off, automatic, confirm"},
      {"[planner]\nspare_wait_ms = -1\n", "planner.spare_wait_ms"},
      {"[peer]\nbulk_transport = \"udp\"\n", "peer.bulk_transport"},
      {"[peer]\nbulk_port = 70000\n", "peer.bulk_port"},
  };
  for (const auto& tc : cases) {
    INFO(tc.toml);
    auto c = Parse({"--config", WriteFile(dir, tc.toml)});
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(c.status().message(), Catch::Contains(tc.needle));
  }
}

TEST_CASE("bad flags are usage errors", "[config]") {
  CHECK(Parse({"--no-such-flag"}).status().code() == StatusCode::kInvalidArgument);
  CHECK(Parse({"--memory-limit", "12Q"}).status().code() == StatusCode::kInvalidArgument);
  CHECK(Parse({"--config", "/nonexistent/reftd.toml"}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(Parse({"--help"}).status().code() == StatusCode::kCancelled);
}

TEST_CASE("security: a token without TLS beyond loopback is refused, and says why", "[config]") {
  reft::testing::TempDir dir;
  const std::string token = dir.path() + "/token";
  std::ofstream(token) << "0123456789abcdef0123456789abcdef\n";
  const std::string section = "[security]\ntoken_file = \"" + token + "\"\n";

  SECTION("on loopback the token is fine") {
    auto c = Parse({"--config", WriteFile(dir, "listen = \"127.0.0.1:7070\"\n" + section)});
    INFO(c.status().message());
    CHECK(c.ok());
  }
  for (const char* bad : {"listen = \"0.0.0.0:7070\"\n", "peers = [\"10.0.0.2:7070\"]\n",
                          "[peer]\nadvertise = \"10.0.0.1:7070\"\n"}) {
    INFO(bad);
    auto c = Parse({"--config", WriteFile(dir, std::string(bad) + section)});
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(c.status().message(), Catch::Contains("clear text") &&
                                         Catch::Contains("allow_insecure") &&
                                         Catch::Contains("tls_cert"));
    CHECK_THAT(c.status().message(), !Catch::Contains("0123456789abcdef"));
  }
  SECTION("allow_insecure is the operator's explicit way out") {
    auto c = Parse({"--config", WriteFile(dir, "listen = \"0.0.0.0:7070\"\n" + section +
                                                   "allow_insecure = true\n")});
    INFO(c.status().message());
    CHECK(c.ok());
  }
  SECTION("mutual TLS needs no token beyond loopback") {
    auto c = Parse({"--config",
                    WriteFile(dir, "listen = \"0.0.0.0:7070\"\n[security]\ntls_cert = \"c\"\n"
                                   "tls_key = \"k\"\ntls_ca = \"a\"\n"
                                   "operator_identities = [\"reft-operator\"]\n")});
    INFO(c.status().message());
    CHECK(c.ok());
  }
}

TEST_CASE("security.operator_group must name a group", "[config]") {
  reft::testing::TempDir dir;
  auto c = Parse({"--config", WriteFile(dir, "[security]\noperator_group = \"no-such-grp-x\"\n")});
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(),
             Catch::Contains("security.operator_group") && Catch::Contains("no-such-grp-x"));
  auto root = Parse({"--config", WriteFile(dir, "[security]\noperator_group = \"root\"\n")});
  INFO(root.status().message());
  REQUIRE(root.ok());
  CHECK(root->security.operator_group == "root");
}

TEST_CASE("security: etcd in plain text beyond loopback is refused", "[config]") {
  reft::testing::TempDir dir;
  auto c = Parse({"--config", WriteFile(dir, "[etcd]\nendpoints = [\"10.0.0.9:2379\"]\n")});
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("etcd.endpoints") &&
                                       Catch::Contains("no etcd TLS") &&
                                       Catch::Contains("allow_insecure"));
  auto local = Parse({"--config", WriteFile(dir, "[etcd]\nendpoints = [\"127.0.0.1:2379\"]\n")});
  INFO(local.status().message());
  CHECK(local.ok());
  auto tls = Parse({"--config", WriteFile(dir, "[etcd]\nendpoints = [\"10.0.0.9:2379\"]\n"
                                               "tls_ca = \"a\"\ntls_cert = \"c\"\ntls_key = \"k\"\n")});
  INFO(tls.status().message());
  CHECK(tls.ok());
}

TEST_CASE("security: mutual TLS names its operators, never this node", "[config][security]") {
  reft::testing::TempDir dir;
  const std::string tls = "[security]\ntls_cert = \"c\"\ntls_key = \"k\"\ntls_ca = \"a\"\n";

  SECTION("no operator_identities under mutual TLS: refused at start, naming the key") {
    auto c = Parse({"--config", WriteFile(dir, tls)});
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(c.status().message(), Catch::Contains("security.operator_identities") &&
                                         Catch::Contains("reft-operator"));
  }
  SECTION("a list is read") {
    auto c = Parse({"--config", WriteFile(dir, tls + "operator_identities = [\"reft-operator\", "
                                                     "\"spiffe://example.org/ops\"]\n")});
    INFO(c.status().message());
    REQUIRE(c.ok());
    CHECK(c->security.operator_identities ==
          std::vector<std::string>{"reft-operator", "spiffe://example.org/ops"});
  }
  SECTION("this node's own id: its certificate would open Admin everywhere") {
    auto c = Parse({"--node-id", "gpu01", "--config",
                    WriteFile(dir, tls + "operator_identities = [\"gpu01\"]\n")});
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.status().message(),
               Catch::Contains("security.operator_identities") && Catch::Contains("'gpu01'"));
  }
  SECTION("an empty name, or not a list") {
    for (const char* bad : {"operator_identities = [\"\"]\n", "operator_identities = \"x\"\n"}) {
      INFO(bad);
      auto c = Parse({"--config", WriteFile(dir, tls + bad)});
      REQUIRE_FALSE(c.ok());
      CHECK_THAT(c.status().message(), Catch::Contains("security.operator_identities"));
    }
  }
  SECTION("without TLS the list is not needed") {
    CHECK(Parse({"--config", WriteFile(dir, "[security]\nallow_insecure = false\n")}).ok());
  }
}

TEST_CASE("security: a host name that only looks like loopback is refused without TLS",
          "[config][security]") {
  reft::testing::TempDir dir;
  for (const char* listen : {"127.attacker.invalid:0", "127.0.0.1.nip.io:7070",
                             "localhost.evil:7070"}) {
    INFO(listen);
    auto c = Parse({"--listen", listen, "--shm-dir", dir.path() + "/shm"});
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(c.status().message(), Catch::Contains(std::string("'") + listen + "'") &&
                                         Catch::Contains("not resolved"));
  }
  for (const char* listen : {"127.0.0.1:7070", "127.5.6.7:7070", "[::1]:7070", "localhost:7070"}) {
    INFO(listen);
    auto c = Parse({"--listen", listen});
    INFO(c.status().message());
    CHECK(c.ok());
  }
}

TEST_CASE("jobs.forget_after_s is read and bounded", "[config]") {
  reft::testing::TempDir dir;
  CHECK(DaemonConfig{}.jobs_forget_after_s == 600);
  auto c = Parse({"--config", WriteFile(dir, "[jobs]\nforget_after_s = 2\n")});
  INFO(c.status().message());
  REQUIRE(c.ok());
  CHECK(c->jobs_forget_after_s == 2);
  for (const char* bad : {"0", "-1", "99999999"}) {
    auto b = Parse({"--config", WriteFile(dir, std::string("[jobs]\nforget_after_s = ") + bad + "\n")});
    REQUIRE_FALSE(b.ok());
    CHECK_THAT(b.status().message(), Catch::Contains("jobs.forget_after_s"));
  }
}

TEST_CASE("etcd.mass_expiry_fraction is a fraction in (0, 1]", "[config]") {
  reft::testing::TempDir dir;
  CHECK(DaemonConfig{}.etcd_mass_expiry_fraction == 0.05);
  for (const auto& [text, value] : std::vector<std::pair<std::string, double>>{{"0.2", 0.2}, {"1", 1.0}}) {
    auto c = Parse({"--config", WriteFile(dir, "[etcd]\nmass_expiry_fraction = " + text + "\n")});
    INFO(c.status().message());
    REQUIRE(c.ok());
    CHECK(c->etcd_mass_expiry_fraction == value);
  }
  for (const char* bad : {"0", "-0.1", "1.5", "\"5%\""}) {
    auto b = Parse({"--config", WriteFile(dir, std::string("[etcd]\nmass_expiry_fraction = ") + bad + "\n")});
    REQUIRE_FALSE(b.ok());
    CHECK_THAT(b.status().message(), Catch::Contains("etcd.mass_expiry_fraction"));
  }
}

TEST_CASE("coordinator.aggregate_from_nodes is a node count, 0 turning aggregation off",
          "[config]") {
  reft::testing::TempDir dir;
  CHECK(DaemonConfig{}.coordinator_aggregate_from_nodes == 64);
  for (const auto& [text, value] : std::vector<std::pair<std::string, uint32_t>>{{"0", 0}, {"4096", 4096}}) {
    auto c = Parse({"--config", WriteFile(dir, "[coordinator]\naggregate_from_nodes = " + text + "\n")});
    INFO(c.status().message());
    REQUIRE(c.ok());
    CHECK(c->coordinator_aggregate_from_nodes == value);
  }
  for (const char* bad : {"-1", "1000001", "\"many\"", "2.5"}) {
    auto b = Parse({"--config", WriteFile(dir, std::string("[coordinator]\naggregate_from_nodes = ") + bad + "\n")});
    REQUIRE_FALSE(b.ok());
    CHECK_THAT(b.status().message(), Catch::Contains("coordinator.aggregate_from_nodes"));
  }
}

TEST_CASE("local.aor_* keys are read and bounded", "[config]") {
  reft::testing::TempDir dir;
  const DaemonConfig d;
  CHECK(d.aor_threads == 2);
  CHECK(d.aor_resync_steps == 1000);
  CHECK(d.aor_probation_steps == 3);
  CHECK_FALSE(d.aor_device_optimizers);
  auto c =
      Parse({"--config", WriteFile(dir,
                                   "[local]\naor_threads = 4\naor_resync_steps = 0\n"
                                   "aor_probation_steps = 10\naor_device_optimizers = true\n")});
  INFO(c.status().message());
  REQUIRE(c.ok());
  CHECK(c->aor_threads == 4);
  CHECK(c->aor_resync_steps == 0);
  CHECK(c->aor_probation_steps == 10);
  CHECK(c->aor_device_optimizers);
  auto bad = Parse({"--config", WriteFile(dir, "[local]\naor_threads = 0\n")});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("local.aor_threads"));
  bad = Parse({"--config", WriteFile(dir, "[local]\naor_probation_steps = -1\n")});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("local.aor_probation_steps"));
}

TEST_CASE("local.max_sessions_per_uid is read and bounded", "[config]") {
  reft::testing::TempDir dir;
  CHECK(DaemonConfig{}.max_sessions_per_uid == 64);
  auto c = Parse({"--config", WriteFile(dir, "[local]\nmax_sessions_per_uid = 8\n")});
  INFO(c.status().message());
  REQUIRE(c.ok());
  CHECK(c->max_sessions_per_uid == 8);
  auto zero = Parse({"--config", WriteFile(dir, "[local]\nmax_sessions_per_uid = 0\n")});
  REQUIRE_FALSE(zero.ok());
  CHECK_THAT(zero.status().message(), Catch::Contains("local.max_sessions_per_uid"));
}
