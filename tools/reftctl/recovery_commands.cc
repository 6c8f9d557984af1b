// reftctl persist | restore-check | rebuild: the recovery operations of one job, run by the
// daemon reftctl talks to (for persist: on every live node through it). Each streams progress
// (a bar on stderr when it is a terminal) and then one result.
#include <cstdio>
#include <optional>

#include "admin_client.h"
#include "command.h"
#include "last_recovery.h"
#include "progress.h"
#include "reft/units.h"
#include "reshape_check.h"
#include "table.h"

namespace reft::ctl {
namespace {

nlohmann::json RankJson(const v1::RankId& r) {
  return {{"job", r.job()}, {"pp", r.pp()}, {"tp", r.tp()}, {"dp", r.dp()}};
}

std::string RankLabel(const nlohmann::json& r) {
  return "pp" + std::to_string(r["pp"].get<int>()) + "-tp" + std::to_string(r["tp"].get<int>()) +
         "-dp" + std::to_string(r["dp"].get<int>());
}

template <typename T>
nlohmann::json Strings(const T& repeated) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : repeated) out.push_back(s);
  return out;
}

std::string Join(const nlohmann::json& list, const char* sep = ", ") {
  std::string out;
  for (const auto& s : list) {
    if (!out.empty()) out += sep;
    out += s.is_string() ? s.get<std::string>() : s.dump();
  }
  return out;
}

// Reads a server stream of progress events and one result. False (exit code set) when the call
// failed or no result came. A failure the daemon reported itself (it sets the "reft-code"
// trailer) is an operation failure (exit 1) even when its gRPC code is UNAVAILABLE; only
// transport failures mean the daemon cannot be reached (exit 3).
template <typename Event>
bool ReadStream(CtlContext& ctx, grpc::ClientContext* call,
                grpc::ClientReaderInterface<Event>* reader, Event* result,
                const std::string& what) {
  ProgressBar bar;
  bool got = false;
  Event ev;
  while (reader->Read(&ev)) {
    if (ev.has_progress()) {
      const auto& p = ev.progress();
      bar.Update(p.phase(), p.done(), p.total(), p.unit(), p.message());
    } else if (ev.has_result()) {
      *result = ev;
      got = true;
    }
  }
  bar.Finish();
  grpc::Status st = reader->Finish();
  if (!st.ok()) {
    if (call->GetServerTrailingMetadata().count("reft-code") > 0) {
      ctx.Fail(kExitFailed, what + ": " + st.error_message());
      return false;
    }
    return CheckRpc(ctx, st, what);
  }
  if (!got) {
    ctx.Fail(kExitFailed, what + ": the daemon sent no result");
    return false;
  }
  return true;
}

// ---------------------------------------------------------------- persist

void RunPersist(CtlContext& ctx, const std::string& job, std::optional<int64_t> step,
                double timeout_s) {
  auto stub = MakeAdminStub(ctx);
  v1::PersistRequest req;
  req.set_job(job);
  if (step) {
    req.set_has_step(true);
    req.set_step(*step);
  }
  auto call = MakeCallContext(ctx, timeout_s);
  if (!call) return;
  auto reader = stub->Persist(call.get(), req);
  v1::PersistEvent ev;
  if (!ReadStream(ctx, call.get(), reader.get(), &ev, "persist")) return;
  const v1::PersistResponse& r = ev.result();
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : r.nodes()) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& k : n.ranks()) ranks.push_back(RankJson(k));
    nodes.push_back({{"node_id", n.node_id()},
                     {"ok", n.code() == v1::OK},
                     {"code", v1::ErrorCode_Name(n.code())},
                     {"message", n.message()},
                     {"skipped", n.skipped()},
                     {"skipped_reason", n.skipped_reason()},
                     {"ranks", ranks},
                     {"bytes_written", n.bytes_written()},
                     {"seconds", n.seconds()}});
  }
  nlohmann::json doc = {
      {"job", r.job()},
      {"step", r.step()},
      {"ok", r.ok()},
      {"complete", r.complete()},
      {"newest_complete_step", r.has_newest_complete() ? r.newest_complete() : -1},
      {"nodes", nodes},
      {"problems", Strings(r.problems())},
      {"warnings", Strings(r.warnings())}};
  ctx.Emit(doc, [](const nlohmann::json& d) {
    std::printf("job %s step %lld: %s\n", d["job"].get<std::string>().c_str(),
                static_cast<long long>(d["step"].get<int64_t>()),
                d["ok"].get<bool>()         ? "persisted (complete in the tier)"
                : d["complete"].get<bool>() ? "complete in the tier, but some node failed"
                                            : "NOT complete in the tier");
    std::vector<std::vector<std::string>> rows;
    for (const auto& n : d["nodes"]) {
      std::string outcome =
          n["ok"].get<bool>()
              ? (n["skipped"].get<bool>() ? "skipped: " + n["skipped_reason"].get<std::string>()
                                          : "ok")
              : n["code"].get<std::string>() + ": " + n["message"].get<std::string>();
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%.2f", n["seconds"].get<double>());
      rows.push_back({n["node_id"], std::to_string(n["ranks"].size()),
                      FormatBytes(n["bytes_written"]), secs, outcome});
    }
    PrintTable({"NODE", "RANKS", "WRITTEN", "SECONDS", "OUTCOME"}, rows);
    for (const auto& p : d["problems"]) std::printf("problem: %s\n", p.get<std::string>().c_str());
    for (const auto& w : d["warnings"]) std::printf("warning: %s\n", w.get<std::string>().c_str());
    const int64_t newest = d["newest_complete_step"];
    std::printf("newest complete persisted step: %s\n",
                newest < 0 ? "none" : std::to_string(newest).c_str());
  });
  if (!r.ok()) ctx.exit_code = kExitFailed;
}

// ---------------------------------------------------------------- restore-check

nlohmann::json RestoreCheckJson(const v1::RestoreCheckResponse& r) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : r.groups()) {
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& s : g.shards()) {
      shards.push_back(
          {{"dp", s.dp()}, {"state", s.state()}, {"node", s.node()}, {"detail", s.detail()}});
    }
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& k : g.ranks()) {
      ranks.push_back({{"rank", RankJson(k.rank())},
                       {"nodes", Strings(k.nodes())},
                       {"unique", k.unique()},
                       {"rebuildable", k.rebuildable()}});
    }
    nlohmann::json alive = nlohmann::json::array();
    for (int d : g.alive()) alive.push_back(d);
    groups.push_back({{"pp", g.pp()},
                      {"tp", g.tp()},
                      {"members", g.members()},
                      {"scheme", g.scheme()},
                      {"alive", alive},
                      {"recoverable", g.recoverable()},
                      {"lost", g.lost()},
                      {"shards", shards},
                      {"ranks", ranks}});
  }
  const auto& p = r.persistent();
  nlohmann::json steps = nlohmann::json::array();
  for (int64_t s : p.steps()) steps.push_back(s);
  return {{"job", r.job()},
          {"step", r.step()},
          {"recoverable", r.recoverable()},
          {"dcp", r.dcp()},
          {"summary", r.summary()},
          {"restore_source", r.restore_source()},
          {"restore_step", r.restore_step()},
          {"generation", r.generation()},
          {"base_step", r.has_base() ? r.base_step() : -1},
          {"fallback_reason", r.fallback_reason()},
          {"groups", groups},
          {"unreachable", Strings(r.unreachable())},
          {"warnings", Strings(r.warnings())},
          {"persistent",
           {{"enabled", p.enabled()},
            {"dir", p.dir()},
            {"error", p.error()},
            {"newest_complete_step", p.has_newest_complete() ? p.newest_complete() : -1},
            {"step_complete", p.step_complete()},
            {"steps", steps},
            {"problems", Strings(p.problems())}}}};
}

void PrintRestoreCheck(const nlohmann::json& d) {
  std::printf("%s\n", d["summary"].get<std::string>().c_str());
  const std::string source = d["restore_source"];
  const int64_t rs = d["restore_step"];
  if (source == "memory") {
    std::printf("restore:  step %lld from memory\n", static_cast<long long>(rs));
  } else if (source == "persistent") {
    std::printf("restore:  step %lld from the persistent tier\n", static_cast<long long>(rs));
  } else if (source == "fallback") {
    std::printf(
        "restore:  FALLBACK: every rank restores persisted step %lld (memory cannot "
        "rebuild step %lld)\n",
        static_cast<long long>(rs), static_cast<long long>(d["step"].get<int64_t>()));
  } else {
    std::printf("restore:  NOT POSSIBLE (nothing in memory or in the persistent tier)\n");
  }
  if (d["generation"].get<uint64_t>() > 0) {
    std::printf("generation %llu: restarted from persisted step %lld: %s\n",
                static_cast<unsigned long long>(d["generation"].get<uint64_t>()),
                static_cast<long long>(d["base_step"].get<int64_t>()),
                d["fallback_reason"].get<std::string>().c_str());
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& g : d["groups"]) {
    const std::string sg =
        "pp" + std::to_string(g["pp"].get<int>()) + "-tp" + std::to_string(g["tp"].get<int>());
    for (const auto& s : g["shards"]) {
      rows.push_back({sg, g["scheme"], std::to_string(s["dp"].get<int>()), s["state"], s["node"],
                      s["detail"]});
    }
  }
  if (!rows.empty()) {
    std::printf("\n");
    PrintTable({"SG", "SCHEME", "DP", "SHARD", "NODE", "DETAIL"}, rows);
  }
  rows.clear();
  for (const auto& g : d["groups"]) {
    for (const auto& k : g["ranks"]) {
      rows.push_back({RankLabel(k["rank"]), k["nodes"].empty() ? "(lost)" : Join(k["nodes"]),
                      k["unique"], k["rebuildable"].get<bool>() ? "yes" : "-"});
    }
  }
  if (!rows.empty()) {
    std::printf("\n");
    PrintTable({"RANK", "NODES", "UNIQUE BUFFERS FROM", "REBUILDABLE"}, rows);
  }
  for (const auto& g : d["groups"]) {
    if (!g["recoverable"].get<bool>()) {
      std::printf("lost in SG pp%d-tp%d: %s\n", g["pp"].get<int>(), g["tp"].get<int>(),
                  g["lost"].get<std::string>().c_str());
    }
  }
  const auto& p = d["persistent"];
  std::printf("\npersistent tier: ");
  if (!p["enabled"].get<bool>()) {
    std::printf("not configured\n");
  } else if (!p["error"].get<std::string>().empty()) {
    std::printf("%s: %s\n", p["dir"].get<std::string>().c_str(),
                p["error"].get<std::string>().c_str());
  } else {
    const int64_t newest = p["newest_complete_step"];
    std::printf("%s: newest complete step %s, committed step complete there: %s\n",
                p["dir"].get<std::string>().c_str(),
                newest < 0 ? "none" : std::to_string(newest).c_str(),
                p["step_complete"].get<bool>() ? "yes" : "no");
    for (const auto& pr : p["problems"]) std::printf("  %s\n", pr.get<std::string>().c_str());
  }
  for (const auto& u : d["unreachable"]) {
    std::printf("unreachable: %s\n", u.get<std::string>().c_str());
  }
  for (const auto& w : d["warnings"]) std::printf("warning: %s\n", w.get<std::string>().c_str());
  PrintLastRecovery(d.value("last_recovery", nlohmann::json()));
}

void RunRestoreCheck(CtlContext& ctx, const std::string& job, double timeout_s,
                     const std::string& layout) {
  std::optional<JobLayout> to;
  if (!layout.empty()) {
    auto parsed = ParseLayoutArg(layout);
    if (!parsed.ok()) {
      std::fprintf(stderr, "reftctl: %s\n", parsed.status().message().c_str());
      ctx.exit_code = kExitUsage;
      return;
    }
    to = *parsed;
  }
  auto stub = MakeAdminStub(ctx);
  v1::RestoreCheckRequest req;
  req.set_job(job);
  auto call = MakeCallContext(ctx, timeout_s);
  if (!call) return;
  auto reader = stub->RestoreCheck(call.get(), req);
  v1::RestoreCheckEvent ev;
  if (!ReadStream(ctx, call.get(), reader.get(), &ev, "restore-check")) return;
  const auto& r = ev.result();
  nlohmann::json doc = RestoreCheckJson(r);
  // The job's last recovery, by phase (null when none was published or the daemon cannot say).
  doc["last_recovery"] = FetchLastRecovery(ctx, job);
  if (to) {
    // Exit 0 exactly when the reshape into `to` is possible.
    doc["reshape"] = ReshapeCheckJson(doc, *to);
    ctx.Emit(doc, [](const nlohmann::json& d) {
      PrintRestoreCheck(d);
      PrintReshapeCheck(d["reshape"]);
    });
    if (!doc["reshape"]["possible"].get<bool>()) ctx.exit_code = kExitFailed;
    return;
  }
  ctx.Emit(doc, PrintRestoreCheck);
  // Restorable: a restore now delivers the newest committed step (from memory or the tier).
  if (r.restore_source() != "memory" && r.restore_source() != "persistent") {
    ctx.exit_code = kExitFailed;
  }
}

// ---------------------------------------------------------------- rebuild

void RunRebuild(CtlContext& ctx, const std::string& job, double timeout_s) {
  auto stub = MakeAdminStub(ctx);
  v1::RebuildRequest req;
  req.set_job(job);
  auto call = MakeCallContext(ctx, timeout_s);
  if (!call) return;
  auto reader = stub->Rebuild(call.get(), req);
  v1::RebuildEvent ev;
  if (!ReadStream(ctx, call.get(), reader.get(), &ev, "rebuild")) return;
  const auto& r = ev.result();
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& k : r.ranks()) {
    ranks.push_back({{"rank", RankJson(k.rank())},
                     {"ok", k.code() == v1::OK},
                     {"code", v1::ErrorCode_Name(k.code())},
                     {"message", k.message()},
                     {"detail", k.detail()}});
  }
  nlohmann::json doc = {{"job", r.job()},
                        {"step", r.step()},
                        {"ok", r.ok()},
                        {"ranks", ranks},
                        {"bytes_local", r.bytes_local()},
                        {"bytes_peer", r.bytes_peer()},
                        {"bytes_rebuilt", r.bytes_rebuilt()},
                        {"seconds", r.seconds()},
                        {"warnings", Strings(r.warnings())}};
  ctx.Emit(doc, [](const nlohmann::json& d) {
    const size_t n = d["ranks"].size();
    std::printf("job %s step %lld: %s\n", d["job"].get<std::string>().c_str(),
                static_cast<long long>(d["step"].get<int64_t>()),
                n == 0 ? "nothing to rebuild (every rank's slot is held by a live node)"
                : d["ok"].get<bool>() ? "every lost rank regenerated on this node"
                                      : "REBUILD FAILED for some rank");
    std::vector<std::vector<std::string>> rows;
    for (const auto& k : d["ranks"]) {
      rows.push_back({RankLabel(k["rank"]),
                      k["ok"].get<bool>()
                          ? "ok"
                          : k["code"].get<std::string>() + ": " + k["message"].get<std::string>(),
                      k["detail"]});
    }
    if (!rows.empty()) PrintTable({"RANK", "OUTCOME", "FROM"}, rows);
    std::printf("read %s here, %s from peers, %s decoded\n", FormatBytes(d["bytes_local"]).c_str(),
                FormatBytes(d["bytes_peer"]).c_str(), FormatBytes(d["bytes_rebuilt"]).c_str());
    for (const auto& w : d["warnings"]) std::printf("warning: %s\n", w.get<std::string>().c_str());
  });
  if (!r.ok()) ctx.exit_code = kExitFailed;
}

}  // namespace

// Parsed arguments live for the whole process: CLI11 binds options by reference.
struct RecoveryArgs {
  std::string persist_job;
  int64_t persist_step = -1;
  double persist_timeout = 6 * 3600;
  std::string check_job;
  std::string check_layout;
  double check_timeout = 600;
  std::string rebuild_job;
  double rebuild_timeout = 3600;
};

void RegisterRecoveryCommands(CLI::App& root, CtlContext& ctx) {
  static RecoveryArgs args;
  auto* persist = root.add_subcommand(
      "persist", "write a committed step of a job to the persistent tier (all its nodes)");
  persist->add_option("--job", args.persist_job, "job id")->required();
  auto* step_opt =
      persist->add_option("--step", args.persist_step, "step (default: newest committed)")
          ->check(CLI::NonNegativeNumber);
  persist->add_option("--timeout", args.persist_timeout, "seconds to wait for the result")
      ->check(CLI::PositiveNumber);
  persist->callback([&ctx, step_opt] {
    RunPersist(ctx, args.persist_job,
               step_opt->count() ? std::optional<int64_t>(args.persist_step) : std::nullopt,
               args.persist_timeout);
  });

  auto* check = root.add_subcommand(
      "restore-check", "can the newest committed step be rebuilt, from what, or what is lost");
  check->add_option("--job", args.check_job, "job id")->required();
  check->add_option("--timeout", args.check_timeout, "seconds to wait for the result")
      ->check(CLI::PositiveNumber);
  check->add_option("--layout", args.check_layout,
                    "target layout, e.g. dp=3,pp=2,tp=1: can the step be reshaped into it")
      ->check([](const std::string& v) {
        auto l = ParseLayoutArg(v);
        return l.ok() ? std::string() : l.status().message();
      });
  check->callback([&ctx] {
    RunRestoreCheck(ctx, args.check_job, args.check_timeout, args.check_layout);
  });

  auto* rebuild = root.add_subcommand(
      "rebuild", "regenerate on this node the slots of ranks no live node holds");
  rebuild->add_option("--job", args.rebuild_job, "job id")->required();
  rebuild->add_option("--timeout", args.rebuild_timeout, "seconds to wait for the result")
      ->check(CLI::PositiveNumber);
  rebuild->callback([&ctx] { RunRebuild(ctx, args.rebuild_job, args.rebuild_timeout); });
}

}  // namespace reft::ctl
