// reftctl status: health, memory used and limit, newest committed step and coordinator per job,
// sessions, peers, and the control plane (etcd's members: healthy, leader).
#include <cstdio>
#include <map>

#include "admin_client.h"
#include "command.h"
#include "reft/units.h"
#include "table.h"
#include "time_text.h"

namespace reft::ctl {
namespace {

nlohmann::json RankJson(const v1::RankId& r) {
  return {{"job", r.job()}, {"pp", r.pp()}, {"tp", r.tp()}, {"dp", r.dp()}};
}

nlohmann::json OrNull(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

nlohmann::json ControlPlaneJson(const v1::ControlPlaneStatus& cp) {
  nlohmann::json endpoints = nlohmann::json::array();
  for (const auto& e : cp.endpoints()) {
    endpoints.push_back({{"address", e.address()},
                         {"healthy", e.healthy()},
                         {"leader", e.leader()},
                         {"error", OrNull(e.error())}});
  }
  const v1::DeathHolds& d = cp.deaths();
  nlohmann::json deaths = {
      {"suspect", d.suspect()},
      {"since_unix_ms", d.suspect() ? nlohmann::json(d.since_unix_ms()) : nlohmann::json(nullptr)},
      {"reason", OrNull(d.reason())},
      {"held", d.held()},
      {"held_total", d.held_total()},
      {"released_total", d.released_total()},
      {"declared_total", d.declared_total()},
      {"reregistrations_total", d.reregistrations_total()},
      {"deaths_declared_total", d.deaths_declared_total()}};
  // A daemon that predates the field reports no kind.
  nlohmann::json out = {{"kind", cp.kind().empty() ? "unknown" : cp.kind()},
                        {"endpoints", endpoints},
                        {"error", OrNull(cp.error())}};
  if (cp.kind() == "etcd") out["deaths"] = deaths;  // only etcd's leases lapse
  return out;
}

// "deaths held: control plane suspect since 10:31:02 (2 s ago), etcd did not answer (3000 ms);
// held: node-3, node-5"; nothing while the control plane is trusted and nothing is held.
void PrintDeathHolds(const nlohmann::json& d) {
  if (!d.value("suspect", false) && d["held"].empty()) return;
  std::string line = "deaths held: ";
  if (d["suspect"].get<bool>()) {
    const int64_t now = NowUnixMs();
    line += "control plane suspect since " + FormatUnixMs(d["since_unix_ms"].get<int64_t>(), now) +
            ", " + d["reason"].get<std::string>();
  } else {
    line += "control plane trusted again, confirming";
  }
  std::string held;
  for (const auto& n : d["held"]) held += (held.empty() ? "" : ", ") + n.get<std::string>();
  if (!held.empty()) line += "; held: " + held;
  std::printf("          %s\n", line.c_str());
}

// "etcd 10.0.0.1:2379 (leader), 10.0.0.2:2379 (DOWN: connection refused)"; "gossip between
// the peers"; "none (one node)"; then the control plane's own error, if any.
void PrintControlPlane(const nlohmann::json& cp) {
  const std::string kind = cp["kind"];
  std::string line = kind;
  if (kind == "gossip") line += " between the peers (no consensus)";
  if (kind == "none") line += " (one node, no peers)";
  std::string members;
  bool any_healthy = false;
  for (const auto& e : cp["endpoints"]) {
    any_healthy |= e["healthy"].get<bool>();
    std::string m = e["address"].get<std::string>() + " (";
    if (e["healthy"].get<bool>()) {
      m += e["leader"].get<bool>() ? "leader" : "follower";
    } else {
      m += "DOWN" + (e["error"].is_null() ? "" : ": " + e["error"].get<std::string>());
    }
    members += (members.empty() ? " " : ", ") + m + ")";
  }
  line += members;
  if (!cp["error"].is_null()) {
    line += std::string("\n          ") + (any_healthy ? "DEGRADED: " : "UNREACHABLE: ") +
            cp["error"].get<std::string>();
  }
  std::printf("control   %s\n", line.c_str());
  if (cp.contains("deaths")) PrintDeathHolds(cp["deaths"]);
}

void RunStatus(CtlContext& ctx) {
  auto stub = MakeAdminStub(ctx);
  v1::StatusResponse resp;
  auto call = MakeCallContext(ctx);
  if (!call) return;
  if (!CheckRpc(ctx, stub->Status(call.get(), v1::StatusRequest(), &resp), "status")) return;

  nlohmann::json doc = {
      {"node_id", resp.node_id()},
      {"health", resp.health()},
      {"version", resp.build().version()},
      {"protocol_version", resp.build().protocol_version()},
      {"device_kinds", std::vector<std::string>(resp.build().device_kinds().begin(),
                                                resp.build().device_kinds().end())},
      {"memory", {{"used", resp.memory_used()}, {"limit", resp.memory_limit()}, {"slots", resp.slots()}}},
      {"listen", resp.listen()},
      {"socket", resp.socket()},
      {"shm_dir", resp.shm_dir()},
      {"uptime_seconds", resp.uptime_seconds()},
      {"peers", std::vector<std::string>(resp.peers().begin(), resp.peers().end())},
      {"jobs", nlohmann::json::array()},
      {"sessions", nlohmann::json::array()}};
  for (const auto& j : resp.jobs()) {
    nlohmann::json owner = nullptr;
    if (j.has_owner()) {
      const auto& o = j.owner();
      owner = {{"uid", o.uid()},
               {"gid", o.has_gid() ? nlohmann::json(o.gid()) : nlohmann::json(nullptr)},
               {"group", o.group()}};
    }
    doc["jobs"].push_back({{"job", j.job()},
                           {"ranks", j.ranks()},
                           {"newest_committed_step", j.newest_committed_step()},
                           {"generation", j.generation()},
                           {"owner", owner},
                           {"coordinator", OrNull(j.coordinator())}});
  }
  doc["control_plane"] = ControlPlaneJson(resp.control_plane());
  const auto& p = resp.persist();
  nlohmann::json persisted = nlohmann::json::array();
  for (const auto& pj : p.jobs()) {
    persisted.push_back({{"job", pj.job()}, {"newest_complete_step", pj.newest_complete_step()}});
  }
  doc["persist"] = {{"enabled", p.enabled()},
                    {"dir", p.dir()},
                    {"healthy", p.healthy()},
                    {"last_error", p.last_error()},
                    {"every_steps", p.every_steps()},
                    {"jobs", persisted}};
  for (const auto& s : resp.sessions()) {
    doc["sessions"].push_back(
        {{"rank", RankJson(s.rank())}, {"pid", s.pid()}, {"uid", s.uid()}, {"buffers", s.buffers()}});
  }
  ctx.Emit(doc, [](const nlohmann::json& d) {
    const uint64_t limit = d["memory"]["limit"];
    std::printf("node      %s (%s)\n", d["node_id"].get<std::string>().c_str(),
                d["health"].get<std::string>().c_str());
    std::printf("version   %s, protocol %d, devices:", d["version"].get<std::string>().c_str(),
                d["protocol_version"].get<int>());
    for (const auto& k : d["device_kinds"]) std::printf(" %s", k.get<std::string>().c_str());
    std::printf("\nmemory    %s used of %s in %llu slots\n",
                FormatBytes(d["memory"]["used"]).c_str(),
                limit ? FormatBytes(limit).c_str() : "unlimited",
                static_cast<unsigned long long>(d["memory"]["slots"].get<uint64_t>()));
    std::printf("listen    %s   socket %s\n", d["listen"].get<std::string>().c_str(),
                d["socket"].get<std::string>().c_str());
    std::string peers;
    for (const auto& p : d["peers"]) peers += (peers.empty() ? "" : ",") + p.get<std::string>();
    std::printf("peers     %s\n", peers.empty() ? "(none)" : peers.c_str());
    PrintControlPlane(d["control_plane"]);
    const auto& p = d["persist"];
    if (!p["enabled"].get<bool>()) {
      std::printf("persist   not configured\n\n");
    } else {
      const int64_t every = p["every_steps"];
      std::printf("persist   %s: %s%s\n\n", p["dir"].get<std::string>().c_str(),
                  p["healthy"].get<bool>() ? "healthy"
                                           : ("FAILING: " + p["last_error"].get<std::string>())
                                                 .c_str(),
                  every > 0 ? (", every " + std::to_string(every) + " steps").c_str()
                            : ", on demand");
    }
    std::map<std::string, int64_t> persisted;
    for (const auto& pj : p["jobs"]) persisted[pj["job"]] = pj["newest_complete_step"];
    std::vector<std::vector<std::string>> rows;
    for (const auto& j : d["jobs"]) {
      int64_t step = j["newest_committed_step"];
      auto it = persisted.find(j["job"].get<std::string>());
      const int64_t ps = it == persisted.end() ? -1 : it->second;
      rows.push_back({j["job"], std::to_string(j["ranks"].get<int>()),
                      step < 0 ? "-" : std::to_string(step), ps < 0 ? "-" : std::to_string(ps),
                      std::to_string(j["generation"].get<uint64_t>()),
                      j["coordinator"].is_null() ? "-" : j["coordinator"].get<std::string>(),
                      OwnerText(j["owner"])});
    }
    PrintTable({"JOB", "RANKS", "COMMITTED", "PERSISTED", "GENERATION", "COORDINATOR", "OWNER"},
               rows);
    if (!d["sessions"].empty()) {
      std::printf("\n");
      rows.clear();
      for (const auto& s : d["sessions"]) {
        const auto& r = s["rank"];
        rows.push_back({r["job"], "pp" + std::to_string(r["pp"].get<int>()) + "-tp" +
                                      std::to_string(r["tp"].get<int>()) + "-dp" +
                                      std::to_string(r["dp"].get<int>()),
                        std::to_string(s["pid"].get<int>()), std::to_string(s["buffers"].get<int>())});
      }
      PrintTable({"SESSION JOB", "RANK", "PID", "BUFFERS"}, rows);
    }
  });
}

}  // namespace

void RegisterStatusCommand(CLI::App& root, CtlContext& ctx) {
  auto* cmd = root.add_subcommand(
      "status", "health, memory, committed steps, sessions, peers, control plane");
  cmd->callback([&ctx] { RunStatus(ctx); });
}

}  // namespace reft::ctl
