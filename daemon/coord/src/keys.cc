#include "keys.h"

#include <cstdio>
#include <cstdlib>

namespace reft::coord::keys {

namespace {
std::string RankSuffix(const store::RankKey& r) {
  return std::to_string(r.pp) + "/" + std::to_string(r.tp) + "/" + std::to_string(r.dp);
}
}  // namespace

std::string NodesPrefix() { return kRoot + "nodes/"; }
std::string Node(const std::string& node_id) { return NodesPrefix() + node_id; }
std::string NodeIdOf(const std::string& key) {
  const std::string p = NodesPrefix();
  return key.rfind(p, 0) == 0 ? key.substr(p.size()) : "";
}

std::string KnownPrefix() { return kRoot + "known/"; }
std::string Known(const std::string& node_id) { return KnownPrefix() + node_id; }

std::string JobsPrefix() { return kRoot + "jobs/"; }
std::string JobOf(const std::string& key) {
  const std::string p = JobsPrefix();
  if (key.rfind(p, 0) != 0) return "";
  const size_t end = key.find('/', p.size());
  return end == std::string::npos ? "" : key.substr(p.size(), end - p.size());
}
std::string JobPrefix(const std::string& job) { return JobsPrefix() + job + "/"; }
std::string Owner(const std::string& job) { return JobPrefix(job) + "owner"; }
std::string Layout(const std::string& job) { return JobPrefix(job) + "layout"; }
std::string Generation(const std::string& job) { return JobPrefix(job) + "generation"; }
std::string Committed(const std::string& job) { return JobPrefix(job) + "committed"; }
std::string Coordinator(const std::string& job) { return JobPrefix(job) + "coordinator"; }
std::string Restore(const std::string& job) { return JobPrefix(job) + "restore"; }
std::string Plan(const std::string& job) { return JobPrefix(job) + "plan"; }
std::string Persisted(const std::string& job) { return JobPrefix(job) + "persisted"; }

std::string OperatorPrefix(const std::string& job) { return JobPrefix(job) + "operator/"; }
std::string Operator(const std::string& job, const std::string& node) {
  return OperatorPrefix(job) + node;
}
std::string Sweeper() { return kRoot + "sweeper"; }

std::string StepKey(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020lld", static_cast<long long>(step < 0 ? 0 : step));
  return buf;
}

std::string CompletionsPrefix(const std::string& job) { return JobPrefix(job) + "completions/"; }
std::string Completion(const std::string& job, int64_t step, const std::string& node) {
  return CompletionsPrefix(job) + StepKey(step) + "/" + node;
}
std::string CompletionsEnd(const std::string& job, int64_t step) {
  return CompletionsPrefix(job) + StepKey(step + 1);
}
int64_t CompletionStep(const std::string& job, const std::string& key) {
  const std::string p = CompletionsPrefix(job);
  if (key.rfind(p, 0) != 0 || key.size() < p.size() + 20) return -1;
  return std::strtoll(key.substr(p.size(), 20).c_str(), nullptr, 10);
}

std::string LocationsPrefix(const std::string& job) { return JobPrefix(job) + "locations/"; }
std::string GroupLocationsPrefix(const std::string& job, int32_t pp, int32_t tp) {
  return LocationsPrefix(job) + std::to_string(pp) + "/" + std::to_string(tp) + "/";
}
std::string Location(const store::RankKey& rank) {
  return LocationsPrefix(rank.job) + RankSuffix(rank);
}
std::string JoinedPrefix(const std::string& job) { return JobPrefix(job) + "joined/"; }
std::string Joined(const store::RankKey& rank) { return JoinedPrefix(rank.job) + RankSuffix(rank); }
std::string ReplicatedPrefix(const std::string& job) { return JobPrefix(job) + "replicated/"; }
std::string Replicated(const store::RankKey& rank) {
  return ReplicatedPrefix(rank.job) + RankSuffix(rank);
}

bool ParseRankKey(const std::string& job, const std::string& kind, const std::string& key,
                  store::RankKey* rank) {
  const std::string p = JobPrefix(job) + kind + "/";
  if (key.rfind(p, 0) != 0) return false;
  int pp = 0, tp = 0, dp = 0, n = 0;
  const std::string rest = key.substr(p.size());
  if (std::sscanf(rest.c_str(), "%d/%d/%d%n", &pp, &tp, &dp, &n) != 3 ||
      static_cast<size_t>(n) != rest.size()) {
    return false;
  }
  *rank = store::RankKey{job, pp, tp, dp};
  return true;
}

}  // namespace reft::coord::keys
