#pragma once
/// \file profile.h
/// \brief Planner inputs: per-layer profile, cluster and job, parsed from JSON or TOML with
/// errors that name the bad field. Plain value types; no shared state.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reft/result.h"

namespace reft::planner {

/// \brief Profiled costs of one model layer on one GPU (eq. 14 memory terms in bytes).
struct LayerProfile {
  double forward = 0;         ///< F_{l,1} (ms)
  double backward = 0;        ///< B_{l,1} (ms)
  uint64_t param_bytes = 0;   ///< m_p (gradients m_g = m_p)
  uint64_t optimizer_bytes = 0;   ///< m_o
  uint64_t activation_bytes = 0;  ///< m_a per micro-batch
};

struct ModelProfile {
  std::vector<LayerProfile> layers;
  /// Efficiency of splitting one stage over d GPUs of a node (FSDP/TP): F_{l,d} = F_l/(d·e) for d>1.
  double intra_stage_efficiency = 0.9;
  double F(int l, int d) const;
  double B(int l, int d) const;
  /// Bytes of layer l's state that moves on a transfer (parameters + optimizer state).
  uint64_t StateBytes(int l) const { return layers[l].param_bytes * 2 + layers[l].optimizer_bytes; }
};

/// \brief Links of the data-parallel gradient all-reduce (see allreduce.h for the cost model).
struct NetworkSpec {
  double bandwidth_bytes_per_ms = 12.5e6;  ///< β per device: 100 Gbit/s
  double latency_ms = 0.005;               ///< α per ring hop: 5 µs
  /// \brief No synchronisation cost (infinitely fast links): pure compute estimates.
  static NetworkSpec Free() { return {0, 0}; }
  bool free() const { return bandwidth_bytes_per_ms <= 0; }
};

struct ClusterSpec {
  int nodes = 0;
  int gpus_per_node = 1;
  uint64_t device_memory_bytes = 0;  ///< 0 = memory not checked
  double memory_margin = 0.10;       ///< eq. 14 safety margin
  NetworkSpec network;               ///< gradient all-reduce links
};

struct JobSpec {
  int f = 1;                 ///< failures to tolerate (Oobleck)
  int global_batch = 0;      ///< samples
  int micro_batch = 1;       ///< samples per micro-batch
  int n0 = 0;                ///< 0 = derived from memory
  int template_cap = 0;      ///< user cap on template size (0 = none), must be >= 2·n0−1
};

/// \brief Reads a file as JSON (".json") or TOML (anything else that parses as TOML).
Result<nlohmann::json> LoadDocument(const std::string& path);
/// \brief Parses TOML text into the equivalent JSON value.
Result<nlohmann::json> TomlToJson(const std::string& text, const std::string& source);

/// Field readers: every error message names the full field path.
Result<double> GetNumber(const nlohmann::json& j, const std::string& path, const char* key,
                         bool required, double def, double min_value);
Result<int> GetInt(const nlohmann::json& j, const std::string& path, const char* key, bool required,
                   int def, int min_value);
Result<uint64_t> GetBytes(const nlohmann::json& j, const std::string& path, const char* key,
                          bool required, uint64_t def);

/// \brief "model": {"layers": [...]} or {"num_layers": L, "layer": {...}} (uniform).
Result<ModelProfile> ParseModel(const nlohmann::json& j, const std::string& path = "model");
/// \brief "cluster": nodes, gpus_per_node, device_memory, memory_margin, network_gbps (100; 0 =
/// no all-reduce cost), network_latency_us (5).
Result<ClusterSpec> ParseCluster(const nlohmann::json& j, const std::string& path = "cluster");
/// \brief The network fields of a cluster object (also read alone by `plan failover`).
Result<NetworkSpec> ParseNetwork(const nlohmann::json& j, const std::string& path = "cluster");
Result<JobSpec> ParseJob(const nlohmann::json& j, const std::string& path = "job");

/// \brief Synthetic transformer-like profile used by tests and benchmarks: embedding-heavier
/// first and last layers, deterministic jitter from `seed`.
ModelProfile SyntheticModel(int layers, uint64_t seed, double jitter = 0.1);

}  // namespace reft::planner
