#include "config.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <set>
#include <thread>
#include <sstream>
#include <toml++/toml.h>

#include "reft/replan/planner_mode.h"
#include "reft/peer/peer_options.h"
#include "reft/units.h"

namespace reft::app {

int ChecksumThreads(const DaemonConfig& c) {
  if (c.checksum_threads > 0) return c.checksum_threads;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores / 2, 1, 8);
}

namespace {

Status KeyError(const std::string& key, const std::string& what) {
  return Status::InvalidArgument("config key '" + key + "': " + what);
}

// Sizes may be written as integers (bytes) or strings with a suffix ("8G"). The node's type is
// checked before any value<>() call: toml++ converts a float to an integer without a range check,
// which is undefined behaviour for a value like 4.5e61.
Status ReadSize(const toml::node& node, const std::string& key, uint64_t* out) {
  if (const auto* i = node.as_integer()) {
    if (i->get() < 0) return KeyError(key, "must not be negative");
    *out = static_cast<uint64_t>(i->get());
    return Status::OK();
  }
  if (const auto* s = node.as_string()) {
    auto parsed = ParseByteSize(s->get());
    if (!parsed.ok()) return KeyError(key, parsed.status().message());
    *out = *parsed;
    return Status::OK();
  }
  return KeyError(key, "expected a byte size (integer or string like \"8G\")");
}

Status ReadString(const toml::node& node, const std::string& key, std::string* out) {
  const auto* s = node.as_string();
  if (!s) return KeyError(key, "expected a string");
  *out = s->get();
  return Status::OK();
}

Status ReadInt(const toml::node& node, const std::string& key, int64_t lo, int64_t hi,
               int64_t* out) {
  if (!node.is_integer()) return KeyError(key, "expected an integer");
  int64_t v = *node.value<int64_t>();
  if (v < lo || v > hi) {
    return KeyError(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = v;
  return Status::OK();
}

// A fraction in (0, 1]; TOML integers 1 (and 0, refused) read as numbers too.
Status ReadFraction(const toml::node& node, const std::string& key, double* out) {
  if (!node.is_number()) return KeyError(key, "expected a number in (0, 1]");
  const double v = node.is_integer() ? static_cast<double>(*node.value<int64_t>())
                                     : *node.value<double>();
  if (!(v > 0.0 && v <= 1.0)) return KeyError(key, "must be in (0, 1]");
  *out = v;
  return Status::OK();
}

Status ReadBool(const toml::node& node, const std::string& key, bool* out) {
  if (!node.is_boolean()) return KeyError(key, "expected true or false");
  *out = *node.value<bool>();
  return Status::OK();
}

Status ReadStringList(const toml::node& node, const std::string& key,
                      std::vector<std::string>* out) {
  const toml::array* arr = node.as_array();
  if (!arr) return KeyError(key, "expected an array of strings");
  out->clear();
  for (const auto& el : *arr) {
    const auto* s = el.as_string();
    if (!s) return KeyError(key, "expected an array of strings");
    out->push_back(s->get());
  }
  return Status::OK();
}

Status ReadIdList(const toml::node& node, const std::string& key, std::vector<uint32_t>* out) {
  const toml::array* arr = node.as_array();
  if (!arr) return KeyError(key, "expected an array of integers");
  out->clear();
  for (const auto& el : *arr) {
    if (!el.is_integer() || *el.value<int64_t>() < 0 || *el.value<int64_t>() > UINT32_MAX) {
      return KeyError(key, "expected an array of non-negative integers");
    }
    out->push_back(static_cast<uint32_t>(*el.value<int64_t>()));
  }
  return Status::OK();
}

Status ParseFileMode(const std::string& text, const std::string& key, mode_t* out) {
  if (text == "0600" || text == "600") *out = 0600;
  else if (text == "0640" || text == "640") *out = 0640;
  else return KeyError(key, "must be \"0600\" or \"0640\", got \"" + text + "\"");
  return Status::OK();
}

// Splits "host:port" (host may be [v6]); returns false when malformed.
bool ValidHostPort(const std::string& addr) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= addr.size()) return false;
  const std::string port = addr.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5) return false;
  return std::stoul(port) <= 65535;
}

Status ApplyTopLevel(const toml::table& root, DaemonConfig* c) {
  static const std::set<std::string> kSections = {"store",   "local",   "emulated", "admin",
                                                  "peer",    "restore", "persist",  "security",
                                                  "etcd",    "planner", "jobs", "coordinator"};
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    if (kSections.count(key)) {
      if (!node.is_table()) return KeyError(key, "expected a table [" + key + "]");
      continue;
    }
    if (key == "node_id") REFT_RETURN_NOT_OK(ReadString(node, key, &c->node_id));
    else if (key == "listen") REFT_RETURN_NOT_OK(ReadString(node, key, &c->listen));
    else if (key == "socket") REFT_RETURN_NOT_OK(ReadString(node, key, &c->socket));
    else if (key == "shm_dir") REFT_RETURN_NOT_OK(ReadString(node, key, &c->shm_dir));
    else if (key == "persist_dir") REFT_RETURN_NOT_OK(ReadString(node, key, &c->persist_dir));
    else if (key == "peers") REFT_RETURN_NOT_OK(ReadStringList(node, key, &c->peers));
    else if (key == "memory_limit") REFT_RETURN_NOT_OK(ReadSize(node, key, &c->memory_limit));
    else if (key == "log_level") REFT_RETURN_NOT_OK(ReadString(node, key, &c->log_level));
    else if (key == "metrics_listen") REFT_RETURN_NOT_OK(ReadString(node, key, &c->metrics_listen));
    else return KeyError(key, "unknown key");
  }
  return Status::OK();
}

Status ApplySection(const toml::table& root, const std::string& section, DaemonConfig* c) {
  const toml::table* t = root[section].as_table();
  if (!t) return Status::OK();
  for (const auto& [k, node] : *t) {
    const std::string key = section + "." + std::string(k.str());
    int64_t v = 0;
    if (key == "store.chunk_size") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->chunk_size));
    } else if (key == "store.shard_alignment") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->shard_alignment));
    } else if (key == "store.slots_per_rank") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 2, 16, &v));
      c->slots_per_rank = static_cast<uint32_t>(v);
    } else if (key == "store.file_mode") {
      std::string s;
      REFT_RETURN_NOT_OK(ReadString(node, key, &s));
      REFT_RETURN_NOT_OK(ParseFileMode(s, key, &c->file_mode));
    } else if (key == "store.file_group") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->file_group));
    } else if (key == "store.checksum_threads") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 256, &v));
      c->checksum_threads = static_cast<int>(v);
    } else if (key == "store.prefault") {
      REFT_RETURN_NOT_OK(ReadBool(node, key, &c->prefault));
    } else if (key == "local.allowed_uids") {
      REFT_RETURN_NOT_OK(ReadIdList(node, key, &c->allowed_uids));
    } else if (key == "local.allowed_gids") {
      REFT_RETURN_NOT_OK(ReadIdList(node, key, &c->allowed_gids));
    } else if (key == "local.max_message_bytes") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->max_message_bytes));
    } else if (key == "local.copy_threads") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 1, 64, &v));
      c->copy_threads = static_cast<int>(v);
    } else if (key == "local.max_sessions_per_uid") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 1, 65536, &v));
      c->max_sessions_per_uid = static_cast<uint32_t>(v);
    } else if (key == "local.peer_copy_timeout_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 1, 3600000, &v));
      c->peer_copy_timeout_ms = static_cast<uint32_t>(v);
    } else if (key == "local.aor_threads") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 1, 256, &v));
      c->aor_threads = static_cast<int>(v);
    } else if (key == "local.aor_resync_steps") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 1000000000, &v));
      c->aor_resync_steps = static_cast<uint32_t>(v);
    } else if (key == "local.aor_probation_steps") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 1000000, &v));
      c->aor_probation_steps = static_cast<uint32_t>(v);
    } else if (key == "local.aor_device_optimizers") {
      REFT_RETURN_NOT_OK(ReadBool(node, key, &c->aor_device_optimizers));
    } else if (key == "restore.concurrency") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 1, 64, &v));
      c->restore_concurrency = static_cast<int>(v);
    } else if (key == "restore.piece_size") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->restore_piece_bytes));
    } else if (key == "restore.piece_timeout_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 10, 3600000, &v));
      c->restore_piece_timeout_ms = static_cast<uint32_t>(v);
    } else if (key == "restore.timeout_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 100, 86400000, &v));
      c->restore_timeout_ms = static_cast<uint32_t>(v);
    } else if (key == "restore.agreement_timeout_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 86400000, &v));
      c->restore_agreement_timeout_ms = static_cast<uint32_t>(v);
    } else if (key == "restore.staged_grace_s") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 1, 604800, &v));
      c->restore_staged_grace_s = static_cast<uint32_t>(v);
    } else if (key == "restore.rebuild_on_restore") {
      REFT_RETURN_NOT_OK(ReadBool(node, key, &c->rebuild_on_restore));
    } else if (key == "persist.every_steps") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 1000000000, &v));
      c->persist_every_steps = v;
    } else if (key == "persist.bandwidth") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->persist_bandwidth));
    } else if (key == "persist.read_bandwidth") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->persist_read_bandwidth));
    } else if (key == "persist.keep") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 1000000, &v));
      c->persist_keep = static_cast<uint32_t>(v);
    } else if (key == "persist.commit_hold_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 600000, &v));
      c->persist_commit_hold_ms = static_cast<uint32_t>(v);
    } else if (key == "planner.mode") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->planner_mode));
      if (auto mode = replan::ParsePlannerMode(c->planner_mode); !mode.ok()) return mode.status();
    } else if (key == "planner.spare_wait_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 86400000, &v));
      c->planner_spare_wait_ms = static_cast<uint32_t>(v);
    } else if (key == "emulated.bandwidth") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->emulated_bandwidth));
    } else if (key == "admin.max_grpc_message_bytes") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->max_grpc_message_bytes));
    } else if (key == "peer.advertise") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->advertise));
    } else if (key == "peer.probe_interval_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 10, 600000, &v));
      c->probe_interval_ms = static_cast<uint32_t>(v);
    } else if (key == "peer.probe_timeout_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 5, 600000, &v));
      c->probe_timeout_ms = static_cast<uint32_t>(v);
    } else if (key == "peer.indirect_probes") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 16, &v));
      c->indirect_probes = static_cast<uint32_t>(v);
    } else if (key == "peer.suspicion_timeout_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 10, 3600000, &v));
      c->suspicion_timeout_ms = static_cast<uint32_t>(v);
    } else if (key == "peer.bandwidth") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->peer_bandwidth));
    } else if (key == "peer.link_bandwidth") {
      REFT_RETURN_NOT_OK(ReadSize(node, key, &c->link_bandwidth));
    } else if (key == "peer.bulk_transport") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->bulk_transport));
    } else if (key == "peer.bulk_port") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 65535, &v));
      c->bulk_port = static_cast<uint32_t>(v);
    } else if (key == "etcd.endpoints") {
      REFT_RETURN_NOT_OK(ReadStringList(node, key, &c->etcd_endpoints));
    } else if (key == "etcd.lease_ttl_s") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 1, 3600, &v));
      c->etcd_lease_ttl_s = static_cast<uint32_t>(v);
    } else if (key == "jobs.forget_after_s") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 1, 30 * 86400, &v));
      c->jobs_forget_after_s = static_cast<uint32_t>(v);
    } else if (key == "etcd.lease_renewals_per_s") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 10000000, &v));
      c->etcd_lease_renewals_per_s = static_cast<uint32_t>(v);
    } else if (key == "etcd.mass_expiry_fraction") {
      REFT_RETURN_NOT_OK(ReadFraction(node, key, &c->etcd_mass_expiry_fraction));
    } else if (key == "etcd.request_timeout_ms") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 10, 600000, &v));
      c->etcd_request_timeout_ms = static_cast<uint32_t>(v);
    } else if (key == "coordinator.aggregate_from_nodes") {
      REFT_RETURN_NOT_OK(ReadInt(node, key, 0, 1000000, &v));
      c->coordinator_aggregate_from_nodes = static_cast<uint32_t>(v);
    } else if (key == "etcd.tls_ca") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->etcd_tls_ca));
    } else if (key == "etcd.tls_cert") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->etcd_tls_cert));
    } else if (key == "etcd.tls_key") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->etcd_tls_key));
    } else if (key == "security.tls_cert") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->security.tls_cert));
    } else if (key == "security.tls_key") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->security.tls_key));
    } else if (key == "security.tls_ca") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->security.tls_ca));
    } else if (key == "security.token_file") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->security.token_file));
    } else if (key == "security.allow_insecure") {
      REFT_RETURN_NOT_OK(ReadBool(node, key, &c->security.allow_insecure));
    } else if (key == "security.operator_group") {
      REFT_RETURN_NOT_OK(ReadString(node, key, &c->security.operator_group));
    } else if (key == "security.operator_identities") {
      REFT_RETURN_NOT_OK(ReadStringList(node, key, &c->security.operator_identities));
    } else {
      return KeyError(key, "unknown key");
    }
  }
  return Status::OK();
}

}  // namespace

Status LoadConfigFile(const std::string& path, DaemonConfig* config) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << "config file '" << path << "': " << e.description();
    const auto& where = e.source().begin;
    if (where.line) msg << " (line " << where.line << ", column " << where.column << ")";
    return Status::InvalidArgument(msg.str());
  }
  REFT_RETURN_NOT_OK(ApplyTopLevel(root, config));
  for (const char* section : {"store", "local", "emulated", "admin", "peer", "security", "restore",
                              "persist", "etcd", "planner", "jobs", "coordinator"}) {
    REFT_RETURN_NOT_OK(ApplySection(root, section, config));
  }
  return Status::OK();
}

Status ValidateConfig(const DaemonConfig& c) {
  if (c.node_id.empty() || c.node_id.size() > 64 ||
      c.node_id.find_first_of("/ \t\n") != std::string::npos) {
    return KeyError("node_id", "must be 1..64 characters without '/' or whitespace");
  }
  if (!ValidHostPort(c.listen)) return KeyError("listen", "expected HOST:PORT, got '" + c.listen + "'");
  if (!c.advertise.empty() && !ValidHostPort(c.advertise)) {
    return KeyError("peer.advertise", "expected HOST:PORT, got '" + c.advertise + "'");
  }
  if (c.bulk_transport != "auto" && c.bulk_transport != "tcp" && c.bulk_transport != "grpc") {
    return KeyError("peer.bulk_transport",
                    "expected \"auto\", \"tcp\" or \"grpc\", got '" + c.bulk_transport + "'");
  }
  if (c.probe_timeout_ms >= c.probe_interval_ms) {
    return KeyError("peer.probe_timeout_ms", "must be shorter than peer.probe_interval_ms");
  }
  if (!c.metrics_listen.empty() && !ValidHostPort(c.metrics_listen)) {
    return KeyError("metrics_listen", "expected HOST:PORT, got '" + c.metrics_listen + "'");
  }
  for (const auto& e : c.etcd_endpoints) {
    if (!ValidHostPort(e)) return KeyError("etcd.endpoints", "expected HOST:PORT, got '" + e + "'");
  }
  const bool etcd_tls = !c.etcd_tls_ca.empty() || !c.etcd_tls_cert.empty() || !c.etcd_tls_key.empty();
  if (etcd_tls && (c.etcd_tls_ca.empty() || c.etcd_tls_cert.empty() || c.etcd_tls_key.empty())) {
    return KeyError("etcd.tls_ca", "etcd.tls_ca, etcd.tls_cert and etcd.tls_key go together "
                                   "(etcd client TLS with a client certificate)");
  }
  // etcd holds the commit decisions: in plain text beyond loopback anyone on the path could
  // read or forge them, as for the token rule of ValidateSecurity.
  for (const auto& e : c.etcd_endpoints) {
    if (!etcd_tls && !c.security.allow_insecure && !security::IsLoopbackAddress(e)) {
      return KeyError("etcd.endpoints",
                      "'" + e + "' is not a loopback address and there is no etcd TLS: anyone "
                      "on the network could read or forge the commit decisions; configure "
                      "etcd.tls_ca/tls_cert/tls_key, or set security.allow_insecure = true");
    }
  }
  std::set<std::string> others;
  for (const auto& p : c.peers) {
    if (!ValidHostPort(p)) return KeyError("peers", "expected HOST:PORT, got '" + p + "'");
    if (p != c.listen && p != c.advertise) others.insert(p);
  }
  if (c.etcd_endpoints.empty() && others.size() + 1 > peer::kMaxGossipNodes) {
    return KeyError("peers", std::to_string(others.size()) + " peers without [etcd] endpoints: "
                    "the gossip control plane serves at most " +
                    std::to_string(peer::kMaxGossipNodes) +
                    " nodes; give the daemons an etcd (--etcd, docs/coordination.md)");
  }
  if (c.socket.empty() || c.socket.size() >= 108) {
    return KeyError("socket", "must be a path shorter than 108 bytes");
  }
  if (c.shm_dir.empty() || c.shm_dir[0] != '/') return KeyError("shm_dir", "must be an absolute path");
  if (!c.persist_dir.empty() && c.persist_dir[0] != '/') {
    return KeyError("persist_dir", "must be an absolute path");
  }
  std::vector<std::string> addresses = c.peers;
  addresses.push_back(c.listen);
  if (!c.advertise.empty()) addresses.push_back(c.advertise);
  REFT_RETURN_NOT_OK(security::ValidateSecurity(c.security, addresses));
  // This node's own certificate names its node id: listed as an operator, the node's key
  // would open Admin on every node of the cluster.
  const auto& operators = c.security.operator_identities;
  if (std::find(operators.begin(), operators.end(), c.node_id) != operators.end()) {
    return KeyError("security.operator_identities",
                    "lists this node's id '" + c.node_id + "': node certificates name their "
                    "node, so every node could make Admin calls; give operators names of "
                    "their own");
  }
  if (!c.security.token_file.empty()) {
    REFT_RETURN_NOT_OK(security::ReadTokenFile(c.security.token_file).status());
  }
  static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn",
                                                "error", "critical", "off"};
  if (!kLevels.count(c.log_level)) {
    return KeyError("log_level", "must be one of trace|debug|info|warn|error|critical|off");
  }
  if (c.chunk_size < 4096 || (c.chunk_size & (c.chunk_size - 1)) != 0 ||
      c.chunk_size > (1ull << 30)) {
    return KeyError("store.chunk_size", "must be a power of two between 4K and 1G");
  }
  if (c.shard_alignment < 4096 || (c.shard_alignment & (c.shard_alignment - 1)) != 0 ||
      c.shard_alignment > (64ull << 20)) {
    return KeyError("store.shard_alignment", "must be a power of two between 4K and 64M");
  }
  if (c.restore_piece_bytes < (64ull << 10) || c.restore_piece_bytes > (1ull << 30)) {
    return KeyError("restore.piece_size", "must be between 64K and 1G");
  }
  if (!c.persist_dir.empty() && c.persist_dir.front() != '/') {
    return KeyError("persist_dir", "must be an absolute path");
  }
  if (c.max_message_bytes < 4096 || c.max_message_bytes > (64ull << 20)) {
    return KeyError("local.max_message_bytes", "must be between 4K and 64M");
  }
  if (c.max_grpc_message_bytes < (64ull << 10) || c.max_grpc_message_bytes > (1ull << 30)) {
    return KeyError("admin.max_grpc_message_bytes", "must be between 64K and 1G");
  }
  return Status::OK();
}

Result<DaemonConfig> ParseDaemonArgs(int argc, const char* const* argv) {
  CLI::App app{"reftd: per-node checkpoint agent (keeps training state in host memory)"};
  app.set_version_flag("--version", std::string("reftd ") + REFT_VERSION);
  std::string config_path, node_id, listen, socket, shm_dir, persist_dir, peers, memory_limit,
      log_level, metrics_listen, etcd;
  app.add_option("--config", config_path, "TOML configuration file")->check(CLI::ExistingFile);
  app.add_option("--node-id", node_id, "node identity (default: hostname)");
  app.add_option("--listen", listen, "gRPC address HOST:PORT for peers and admin");
  app.add_option("--socket", socket, "local channel Unix socket path");
  app.add_option("--shm-dir", shm_dir, "directory for snapshot segments (tmpfs)");
  app.add_option("--persist-dir", persist_dir, "persistent tier directory");
  app.add_option("--peers", peers, "comma-separated seed peers HOST:PORT,...");
  app.add_option("--etcd", etcd, "comma-separated etcd endpoints HOST:PORT,... (control plane)");
  app.add_option("--memory-limit", memory_limit, "snapshot memory limit (bytes, K/M/G suffixes)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off");
  app.add_option("--metrics-listen", metrics_listen, "Prometheus endpoint HOST:PORT (off when empty)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion& e) {  // derives from CLI::Success: catch it first
    return Status::Cancelled(e.what());
  } catch (const CLI::Success&) {
    return Status::Cancelled(app.help());
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (what.empty()) what = e.get_name();
    return Status::InvalidArgument(what + " (see reftd --help)");
  }

  DaemonConfig config;
  if (!config_path.empty()) REFT_RETURN_NOT_OK(LoadConfigFile(config_path, &config));
  if (!node_id.empty()) config.node_id = node_id;
  if (!listen.empty()) config.listen = listen;
  if (!socket.empty()) config.socket = socket;
  if (!shm_dir.empty()) config.shm_dir = shm_dir;
  if (!persist_dir.empty()) config.persist_dir = persist_dir;
  auto split = [](const std::string& csv, std::vector<std::string>* out) {
    out->clear();
    std::stringstream ss(csv);
    for (std::string p; std::getline(ss, p, ',');) {
      if (!p.empty()) out->push_back(p);
    }
  };
  if (!peers.empty()) split(peers, &config.peers);
  if (!etcd.empty()) split(etcd, &config.etcd_endpoints);
  if (!memory_limit.empty()) {
    auto parsed = ParseByteSize(memory_limit);
    if (!parsed.ok()) return Status::InvalidArgument("--memory-limit: " + parsed.status().message());
    config.memory_limit = *parsed;
  }
  if (!log_level.empty()) config.log_level = log_level;
  if (!metrics_listen.empty()) config.metrics_listen = metrics_listen;
  if (config.node_id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    config.node_id = host;
  }
  REFT_RETURN_NOT_OK(ValidateConfig(config));
  return config;
}

}  // namespace reft::app
