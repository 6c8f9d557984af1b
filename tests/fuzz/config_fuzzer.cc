// Fuzz target: reftd's configuration file (daemon/app config.h): LoadConfigFile + ValidateConfig
// on the input as a TOML file, and ParseDaemonArgs("--config FILE --node-id N") on the same file.
//
// The input is written to a memfd and read through /proc/self/fd/N (a real path, no disk I/O).
// Properties: toml++ throws on malformed input internally; LoadConfigFile must turn every
// problem into an InvalidArgument status with a message (an escaping exception is a crash);
// ValidateConfig fails only with InvalidArgument; ParseDaemonArgs agrees with
// LoadConfigFile + ValidateConfig (docs/protocol.md: a config error is a clear one-line error).
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "config.h"

using namespace reft;
using reft::fuzz::Bytes;

namespace {

const char kNodeId[] = "fuzz-node";

void CheckError(const Status& s, const char* what) {
  FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument, "%s failed with %s", what,
             s.ToString().c_str());
  FUZZ_CHECK(!s.message().empty(), "%s: error without a message", what);
}

Bytes Text(const std::string& s) { return Bytes(s.begin(), s.end()); }

void WriteSeeds(const reft::fuzz::SeedSink& sink) {
  // The shipped example configuration, verbatim (deploy/config/reftd.toml).
  const std::string example = std::string(REFT_FUZZ_SOURCE_DIR) + "/deploy/config/reftd.toml";
  FILE* f = std::fopen(example.c_str(), "rb");
  FUZZ_CHECK(f != nullptr, "cannot read %s", example.c_str());
  Bytes text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.insert(text.end(), buf, buf + n);
  std::fclose(f);
  sink("reftd_example.toml", text);
  // Every key of every section (values valid), so mutations start from each one.
  sink("all_keys.toml", Text(R"(node_id = "node-1"
listen = "10.0.0.1:7070"
socket = "/run/reft/reftd.sock"
shm_dir = "/dev/shm/reft"
persist_dir = "/mnt/pfs/reft"
peers = ["10.0.0.2:7070", "[::1]:7071"]
memory_limit = "256G"
log_level = "debug"
metrics_listen = "127.0.0.1:9400"
[store]
chunk_size = 4194304
shard_alignment = "64K"
slots_per_rank = 3
file_mode = "0640"
file_group = "reft"
checksum_threads = 4
prefault = false
[local]
allowed_uids = [0, 1000]
allowed_gids = [100]
max_message_bytes = "1M"
copy_threads = 2
peer_copy_timeout_ms = 30000
aor_threads = 2
aor_resync_steps = 1000
aor_probation_steps = 3
aor_device_optimizers = false
[emulated]
bandwidth = "10G"
[admin]
max_grpc_message_bytes = "16MiB"
[peer]
advertise = "10.0.0.1:7070"
probe_interval_ms = 500
probe_timeout_ms = 250
indirect_probes = 2
suspicion_timeout_ms = 2000
bandwidth = "1G"
[restore]
concurrency = 4
piece_size = "8M"
piece_timeout_ms = 30000
timeout_ms = 300000
rebuild_on_restore = true
[persist]
every_steps = 100
bandwidth = "500M"
keep = 2
[security]
tls_cert = "/etc/reft/tls/node.crt"
tls_key = "/etc/reft/tls/node.key"
tls_ca = "/etc/reft/tls/ca.crt"
allow_insecure = false
operator_group = "root"
)"));
  // Inline tables, dotted keys, arrays of tables, dates, floats, escapes: toml++ paths the
  // loader must reject cleanly.
  sink("odd_types.toml", Text(R"(store = { chunk_size = 4.5e6, prefault = 1 }
local.allowed_uids = [1, -2, 3.0]
[[peer]]
advertise = 1979-05-27T07:32:00Z
memory_limit = "\u00e9G"
)"));
  sink("unknown_key.toml", Text("listen = \"127.0.0.1:7070\"\n[store]\nchunk_sise = 4096\n"));
  sink("bad_syntax.toml", Text("listen = \"127.0.0.1:7070\n[store\nchunk_size = = 1\n"));
  sink("sizes.toml", Text("memory_limit = \"1.5T\"\n[store]\nchunk_size = \"0x1000\"\n"
                          "[restore]\npiece_size = \"18446744073709551615\"\n"));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  reft::fuzz::MaybeWriteSeeds(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = reft::fuzz::MemfdWith(data, size, "reftd.toml");
  FUZZ_CHECK(fd >= 0, "memfd");
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  app::DaemonConfig config;
  Status loaded = app::LoadConfigFile(path, &config);
  bool valid = false;
  if (loaded.ok()) {
    config.node_id = kNodeId;  // what --node-id sets below (the default is the hostname)
    Status v = app::ValidateConfig(config);
    if (!v.ok()) CheckError(v, "ValidateConfig");
    valid = v.ok();
  } else {
    CheckError(loaded, "LoadConfigFile");
  }

  const char* argv[] = {"reftd", "--config", path.c_str(), "--node-id", kNodeId};
  auto parsed = app::ParseDaemonArgs(5, argv);
  FUZZ_CHECK(parsed.ok() == valid, "ParseDaemonArgs says %s, LoadConfigFile+ValidateConfig %s",
             parsed.ok() ? "ok" : parsed.status().ToString().c_str(),
             valid ? "ok" : "invalid");
  if (!parsed.ok()) CheckError(parsed.status(), "ParseDaemonArgs");
  ::close(fd);
  return 0;
}
