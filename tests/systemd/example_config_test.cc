// deploy/config/reftd.toml: the shipped example must load, validate, list every key, and
// state the real defaults (so the comments cannot drift from config.cc/config.h).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "config.h"
#include "test_support.h"

using reft::app::DaemonConfig;

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("example config loads, validates and equals the built-in defaults", "[deploy]") {
  DaemonConfig loaded;
  // Start from values that differ from every default, so each key must really be read.
  loaded.listen = "x";
  loaded.socket = "x";
  loaded.shm_dir = "x";
  loaded.persist_dir = "x";
  loaded.peers = {"x"};
  loaded.memory_limit = 1;
  loaded.log_level = "x";
  loaded.chunk_size = 1;
  loaded.slots_per_rank = 99;
  loaded.file_mode = 0640;
  loaded.file_group = "x";
  loaded.checksum_threads = 99;
  loaded.prefault = false;
  loaded.allowed_uids = {1};
  loaded.allowed_gids = {1};
  loaded.max_message_bytes = 1;
  loaded.copy_threads = 99;
  loaded.emulated_bandwidth = 1;
  loaded.max_grpc_message_bytes = 1;
  loaded.shard_alignment = 1;
  loaded.peer_copy_timeout_ms = 1;
  loaded.aor_threads = 99;
  loaded.aor_resync_steps = 1;
  loaded.aor_probation_steps = 99;
  loaded.aor_device_optimizers = true;
  loaded.advertise = "x";
  loaded.probe_interval_ms = 1;
  loaded.probe_timeout_ms = 1;
  loaded.indirect_probes = 99;
  loaded.suspicion_timeout_ms = 1;
  loaded.peer_bandwidth = 1;
  loaded.link_bandwidth = 1;
  loaded.security.tls_cert = "x";
  loaded.security.tls_key = "x";
  loaded.security.tls_ca = "x";
  loaded.security.token_file = "x";
  loaded.security.allow_insecure = true;
  loaded.security.operator_group = "x";
  loaded.security.operator_identities = {"x"};
  loaded.max_sessions_per_uid = 1;
  loaded.restore_concurrency = 99;
  loaded.restore_piece_bytes = 1;
  loaded.restore_piece_timeout_ms = 1;
  loaded.restore_timeout_ms = 1;
  loaded.rebuild_on_restore = false;
  loaded.persist_every_steps = 1;
  loaded.persist_bandwidth = 1;
  loaded.persist_read_bandwidth = 1;
  loaded.persist_keep = 99;
  loaded.persist_commit_hold_ms = 1;
  loaded.restore_agreement_timeout_ms = 1;
  loaded.restore_staged_grace_s = 1;
  loaded.etcd_endpoints = {"x"};
  loaded.etcd_lease_ttl_s = 99;
  loaded.jobs_forget_after_s = 99;
  loaded.etcd_lease_renewals_per_s = 99;
  loaded.etcd_mass_expiry_fraction = 0.99;
  loaded.etcd_request_timeout_ms = 1;
  loaded.etcd_tls_ca = "x";
  loaded.etcd_tls_cert = "x";
  loaded.etcd_tls_key = "x";
  loaded.planner_mode = "x";
  loaded.planner_spare_wait_ms = 1;
  auto st = reft::app::LoadConfigFile(REFT_EXAMPLE_CONFIG, &loaded);
  INFO(st.message());
  REQUIRE(st.ok());

  const DaemonConfig d;
  CHECK(loaded.listen == d.listen);
  CHECK(loaded.socket == d.socket);
  CHECK(loaded.shm_dir == d.shm_dir);
  CHECK(loaded.persist_dir == d.persist_dir);
  CHECK(loaded.peers == d.peers);
  CHECK(loaded.memory_limit == d.memory_limit);
  CHECK(loaded.log_level == d.log_level);
  CHECK(loaded.chunk_size == d.chunk_size);
  CHECK(loaded.slots_per_rank == d.slots_per_rank);
  CHECK(loaded.file_mode == d.file_mode);
  CHECK(loaded.file_group == d.file_group);
  CHECK(loaded.checksum_threads == d.checksum_threads);
  CHECK(loaded.prefault == d.prefault);
  CHECK(loaded.allowed_uids == d.allowed_uids);
  CHECK(loaded.allowed_gids == d.allowed_gids);
  CHECK(loaded.max_message_bytes == d.max_message_bytes);
  CHECK(loaded.copy_threads == d.copy_threads);
  CHECK(loaded.emulated_bandwidth == d.emulated_bandwidth);
  CHECK(loaded.max_grpc_message_bytes == d.max_grpc_message_bytes);
  CHECK(loaded.shard_alignment == d.shard_alignment);
  CHECK(loaded.peer_copy_timeout_ms == d.peer_copy_timeout_ms);
  CHECK(loaded.aor_threads == d.aor_threads);
  CHECK(loaded.aor_resync_steps == d.aor_resync_steps);
  CHECK(loaded.aor_probation_steps == d.aor_probation_steps);
  CHECK(loaded.aor_device_optimizers == d.aor_device_optimizers);
  CHECK(loaded.advertise == d.advertise);
  CHECK(loaded.probe_interval_ms == d.probe_interval_ms);
  CHECK(loaded.probe_timeout_ms == d.probe_timeout_ms);
  CHECK(loaded.indirect_probes == d.indirect_probes);
  CHECK(loaded.suspicion_timeout_ms == d.suspicion_timeout_ms);
  CHECK(loaded.peer_bandwidth == d.peer_bandwidth);
  CHECK(loaded.link_bandwidth == d.link_bandwidth);
  CHECK(loaded.planner_mode == d.planner_mode);
  CHECK(loaded.planner_spare_wait_ms == d.planner_spare_wait_ms);
  CHECK(loaded.security.tls_cert == d.security.tls_cert);
  CHECK(loaded.security.tls_key == d.security.tls_key);
  CHECK(loaded.security.tls_ca == d.security.tls_ca);
  CHECK(loaded.security.token_file == d.security.token_file);
  CHECK(loaded.security.allow_insecure == d.security.allow_insecure);
  CHECK(loaded.security.operator_group == d.security.operator_group);
  CHECK(loaded.security.operator_identities == d.security.operator_identities);
  CHECK(loaded.max_sessions_per_uid == d.max_sessions_per_uid);
  CHECK(loaded.restore_concurrency == d.restore_concurrency);
  CHECK(loaded.restore_piece_bytes == d.restore_piece_bytes);
  CHECK(loaded.restore_piece_timeout_ms == d.restore_piece_timeout_ms);
  CHECK(loaded.restore_timeout_ms == d.restore_timeout_ms);
  CHECK(loaded.rebuild_on_restore == d.rebuild_on_restore);
  CHECK(loaded.persist_every_steps == d.persist_every_steps);
  CHECK(loaded.persist_bandwidth == d.persist_bandwidth);
  CHECK(loaded.persist_read_bandwidth == d.persist_read_bandwidth);
  CHECK(loaded.persist_keep == d.persist_keep);
  CHECK(loaded.persist_commit_hold_ms == d.persist_commit_hold_ms);
  CHECK(loaded.restore_agreement_timeout_ms == d.restore_agreement_timeout_ms);
  CHECK(loaded.restore_staged_grace_s == d.restore_staged_grace_s);
  CHECK(loaded.etcd_endpoints == d.etcd_endpoints);
  CHECK(loaded.etcd_lease_ttl_s == d.etcd_lease_ttl_s);
  CHECK(loaded.jobs_forget_after_s == d.jobs_forget_after_s);
  CHECK(loaded.etcd_lease_renewals_per_s == d.etcd_lease_renewals_per_s);
  CHECK(loaded.etcd_mass_expiry_fraction == d.etcd_mass_expiry_fraction);
  CHECK(loaded.etcd_request_timeout_ms == d.etcd_request_timeout_ms);
  CHECK(loaded.etcd_tls_ca == d.etcd_tls_ca);
  CHECK(loaded.etcd_tls_cert == d.etcd_tls_cert);
  CHECK(loaded.etcd_tls_key == d.etcd_tls_key);

  loaded.node_id = "example-node";  // default is the hostname, filled in by ParseDaemonArgs
  auto valid = reft::app::ValidateConfig(loaded);
  INFO(valid.message());
  CHECK(valid.ok());
}

TEST_CASE("example config passes through reftd's own argument parsing", "[deploy]") {
  const char* argv[] = {"reftd", "--config", REFT_EXAMPLE_CONFIG};
  auto parsed = reft::app::ParseDaemonArgs(3, argv);
  INFO(parsed.status().message());
  REQUIRE(parsed.ok());
  CHECK_FALSE(parsed->node_id.empty());
}

TEST_CASE("example config documents node_id, the one key without a fixed default", "[deploy]") {
  const std::string text = ReadAll(REFT_EXAMPLE_CONFIG);
  CHECK(text.find("\n# node_id = ") != std::string::npos);
}

TEST_CASE("the Kubernetes ConfigMap embeds a config reftd accepts", "[deploy]") {
  // Extract the block scalar under `reftd.toml: |` (indented by 4 spaces) into a file.
  std::istringstream in(ReadAll(REFT_K8S_CONFIGMAP));
  std::string line, toml;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside) {
      inside = line.find("reftd.toml: |") != std::string::npos;
      continue;
    }
    if (!line.empty() && line.rfind("    ", 0) != 0) break;  // dedent ends the block
    toml += (line.size() >= 4 ? line.substr(4) : std::string()) + "\n";
  }
  REQUIRE(inside);
  REQUIRE(toml.find("[store]") != std::string::npos);
  reft::testing::TempDir dir;
  const std::string path = dir.path() + "/reftd.toml";
  std::ofstream(path) << toml;

  DaemonConfig config;
  auto st = reft::app::LoadConfigFile(path, &config);
  INFO(st.message());
  REQUIRE(st.ok());
  CHECK(config.memory_limit == (200ull << 30));
  CHECK(config.allowed_uids == std::vector<uint32_t>{1000});
  config.node_id = "k8s-node";  // the DaemonSet passes --node-id $(NODE_NAME)
  // A non-loopback listen address: mutual TLS with the certificate the DaemonSet's init
  // container obtains from cert-manager for this node, and no token in clear text.
  CHECK(config.security.tls());
  CHECK(config.security.tls_cert == "/run/reft-tls/tls.crt");
  CHECK(config.security.tls_key == "/run/reft-tls/tls.key");
  CHECK(config.security.tls_ca == "/run/reft-tls/ca.crt");
  CHECK(config.security.token_file.empty());
  CHECK_FALSE(config.security.allow_insecure);
  // Admin over TCP for tls.yaml's operator certificate, not for the nodes' certificates.
  CHECK(config.security.operator_identities == std::vector<std::string>{"reft-operator"});
  auto valid = reft::app::ValidateConfig(config);
  INFO(valid.message());
  CHECK(valid.ok());
}
