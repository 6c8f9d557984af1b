/// \file plan_transfer.cc
/// \brief RunTransfer: a transfer plan, one stage call per node of the new layout.

#include "reft/replan/plan_transfer.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <set>
#include <thread>

#include "reft/mutex.h"
#include "reft/thread.h"
#include "reft/unix_time.h"
#include "json_text.h"

namespace reft::replan {

using nlohmann::json;

namespace {

struct NodeResult {
  std::string node;
  Result<StageOutcome> outcome;
};

void Apply(json* progress, const NodeResult& r) {
  json& p = *progress;
  auto settle = [&](json& entry) {
    if (r.outcome.ok()) {
      entry["state"] = "done";
      entry.erase("error");
    } else {
      entry["state"] = "failed";
      entry["error"] = r.outcome.status().ToString();
    }
  };
  for (json& h : p["hosts"]) {
    if (h["node"] != r.node) continue;
    settle(h);
    if (r.outcome.ok()) h["bytes_staged"] = r.outcome->bytes_staged;
  }
  for (json& mv : p["moves"]) {
    if (mv["to_node"] == r.node && mv["state"] != "done") settle(mv);
  }
  if (r.outcome.ok()) {
    p["bytes_staged"] = p.value("bytes_staged", uint64_t{0}) + r.outcome->bytes_staged;
    p["bytes_fetched"] = p.value("bytes_fetched", uint64_t{0}) + r.outcome->bytes_fetched;
    p["bytes_from_peers"] = p.value("bytes_from_peers", uint64_t{0}) + r.outcome->bytes_peer;
  }
}

}  // namespace

json StoredProgress(const std::string& transfer_json) {
  if (transfer_json.empty()) return nullptr;
  json p = json::parse(transfer_json, nullptr, false);
  return p.is_object() ? p : json(nullptr);
}

json NewTransferProgress(const TransferPlan& transfer) {
  json moves = json::array();
  for (const LayerMove& mv : transfer.moves) {
    moves.push_back({{"layer", mv.layer}, {"from_node", mv.from_node}, {"to_node", mv.to_node},
                     {"bytes", mv.bytes}, {"state", "pending"}});
  }
  json hosts = json::array();
  if (!transfer.hosts.empty()) {
    for (const HostedLayers& h : transfer.hosts) hosts.push_back({{"node", h.node}, {"layers", h.layers}});
  } else {  // a decision published before hosts were: its moves' receivers
    std::map<std::string, std::set<int>> layers;
    for (const LayerMove& mv : transfer.moves) layers[mv.to_node].insert(mv.layer);
    for (const auto& [node, ls] : layers) hosts.push_back({{"node", node}, {"layers", ls}});
  }
  for (json& h : hosts) h["state"] = "pending";
  return {{"state", "pending"}, {"attempts", 0},      {"started_at_ms", nullptr},
          {"finished_at_ms", nullptr}, {"bytes_staged", 0}, {"bytes_fetched", 0},
          {"bytes_from_peers", 0},  {"hosts", hosts},   {"moves", moves}};
}

bool TransferWanted(const json& progress, int max_attempts) {
  if (!progress.is_object()) return true;
  const std::string state = TextOr(progress, "state");
  if (state == "done") return false;
  if (state == "failed") return progress.value("attempts", 0) < max_attempts;
  return true;  // pending, or running when its coordinator stopped midway
}

json RunTransfer(json progress, const std::string& job, int64_t step, const Stager& stage,
                 int concurrency, const std::function<bool(const json&)>& publish) {
  // The hosts not done yet, each with every layer it will host.
  std::vector<std::pair<std::string, std::vector<int>>> work;
  for (const json& h : progress["hosts"]) {
    if (TextOr(h, "state") == "done") continue;
    work.emplace_back(TextOr(h, "node"), h.value("layers", std::vector<int>{}));
  }
  progress["state"] = "running";
  progress["attempts"] = progress.value("attempts", 0) + 1;
  if (progress["started_at_ms"].is_null()) progress["started_at_ms"] = UnixMs();
  progress["finished_at_ms"] = nullptr;
  bool in_force = publish(progress);

  // Up to `concurrency` receiving nodes stage at once; results are applied and published here,
  // one at a time, as they come.
  Mutex mu;
  std::condition_variable cv;
  std::vector<NodeResult> results;  // guarded by mu
  size_t next = 0;
  size_t running = 0;
  size_t applied = 0;
  std::vector<reft::Thread> threads;
  const size_t width = static_cast<size_t>(std::max(1, concurrency));
  while (applied < next || (in_force && next < work.size())) {
    while (in_force && next < work.size() && running < width) {
      const auto& [node, layers] = work[next++];
      ++running;
      threads.emplace_back("reft-plan-stage", [&, node = node, layers = layers] {
        NodeResult r{node, stage(node, job, step, layers)};
        MutexLock lock(mu);
        results.push_back(std::move(r));
        cv.notify_all();
      });
    }
    std::vector<NodeResult> done;
    {
      MutexLock lock(mu);
      lock.Wait(cv, [&] { return !results.empty(); });
      done.swap(results);
    }
    for (const NodeResult& r : done) {
      --running;
      ++applied;
      Apply(&progress, r);
      if (in_force) in_force = publish(progress);
    }
  }
  for (auto& t : threads) t.join();

  const json& hosts = progress["hosts"];
  const bool all_done = std::all_of(hosts.begin(), hosts.end(),
                                    [](const json& h) { return TextOr(h, "state") == "done"; });
  progress["state"] = all_done ? "done" : "failed";
  progress["finished_at_ms"] = UnixMs();
  if (in_force) publish(progress);
  return progress;
}

}  // namespace reft::replan
