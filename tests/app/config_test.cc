#include <catch2/catch.hpp>

#include <fstream>

#include "reft/app/config.h"
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
}

TEST_CASE("bad config names the key", "[config]") {
  reft::testing::TempDir dir;
  struct Case {
    const char* toml;
    const char* needle;
  } cases[] = {
      {"bogus = 1\n", "'bogus': unknown key"},
      {"[store]\nchunk_size = \"3K\"\n", "store.chunk_size"},
      {"[store]\nslots_per_rank = 1\n", "store.slots_per_rank"},
      {"[store]\nfile_mode = \"0777\"\n", "store.file_mode"},
      {"memory_limit = \"lots\"\n", "memory_limit"},
      {"listen = \"nohostport\"\n", "listen"},
      {"peers = [\"a:1\", 3]\n", "peers"},
      {"[local]\nallowed_uids = [-1]\n", "local.allowed_uids"},
      {"log_level = \"chatty\"\n", "log_level"},
      {"node_id = \n", "line 1"},
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
