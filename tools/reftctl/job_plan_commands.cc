// reftctl plan attach | show: the planner over a daemon's running job (docs/planner.md "The
// online path"). The decision is computed by reftd (planner::online::Decide); this file only
// sends the profile and renders the answer.
#include <cstdio>
#include <memory>
#include <sstream>

#include "admin_client.h"
#include "last_recovery.h"
#include "command.h"
#include "reft/planner/profile.h"
#include "table.h"
#include "time_text.h"

namespace reft::ctl {
namespace {

std::string Str(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", v.get<double>());
    return buf;
  }
  return v.dump();
}

std::string Layers(const nlohmann::json& l) {
  return l["first"].is_null() ? "-" : Str(l["first"]) + ".." + Str(l["last"]);
}

void RunAttach(CtlContext& ctx, const std::string& job, const std::string& path) {
  auto doc = planner::LoadDocument(path);
  if (!doc.ok()) return ctx.Fail(kExitUsage, doc.status().message());
  auto stub = MakeAdminStub(ctx);
  v1::AttachPlanProfileRequest req;
  req.set_job(job);
  req.set_profile_json(doc->dump());
  v1::AttachPlanProfileResponse resp;
  auto call = MakeCallContext(ctx, 60);
  if (!call) return;
  if (!CheckRpc(ctx, stub->AttachPlanProfile(call.get(), req, &resp), "plan attach")) return;
  nlohmann::json out = {{"job", resp.job()}, {"layers", resp.layers()}, {"layers_checked", resp.layers_checked()}};
  ctx.Emit(out, [](const nlohmann::json& d) {
    std::printf("attached a %u-layer profile to job '%s'%s\n", d["layers"].get<unsigned>(),
                d["job"].get<std::string>().c_str(),
                d["layers_checked"].get<bool>() ? " (matches the job's layers)"
                                                : " (the job's layers are not known yet: checked at show)");
  });
}

void PrintPublication(const nlohmann::json& d) {
  const auto& p = d["publication"];
  if (p.is_null()) {
    std::printf("published: no (planner mode %s): the decision below is this node's view\n",
                Str(d["planner_mode"]).c_str());
    return;
  }
  std::string line = "published: " + Str(p["state"]) + " by " + Str(p["planner"]) + " (version " +
                     Str(p["version"]) + ", generation " + Str(p["generation"]) + ", step " + Str(p["step"]) +
                     (Str(p["basis"]).rfind('+', 0) == 0 ? ", nodes that came " + Str(p["basis"]).substr(1)
                                                         : ", lost " + Str(p["basis"])) +
                     ")";
  // Times as local time and distance from now (the JSON keeps the unix ms).
  const int64_t now = NowUnixMs();
  std::string when;
  if (p["decided_at_ms"].is_number() && p["decided_at_ms"].get<int64_t>() > 0) {
    when = "at " + FormatUnixMs(p["decided_at_ms"].get<int64_t>(), now);
  }
  if (!p["wait_until_ms"].is_null()) {
    when += std::string(when.empty() ? "" : "; ") +
            (p["state"] == "waiting_for_spare" ? "waits for a spare until " : "waited for a spare until ") +
            FormatUnixMs(p["wait_until_ms"].get<int64_t>(), now);
  }
  if (!when.empty()) line += "\n  " + when;
  if (!p["current"].get<bool>()) line += "\n  not current (older step or generation): the decision below is this node's view";
  std::printf("%s\n", line.c_str());
}

// "; started <time>, finished <time>" of a transfer's execution, as far as it got.
std::string TransferTimes(const nlohmann::json& t) {
  const int64_t now = NowUnixMs();
  std::string out;
  for (const char* key : {"started_at_ms", "finished_at_ms"}) {
    if (!t.contains(key) || !t[key].is_number()) continue;
    out += std::string(out.empty() ? "; " : ", ") + (key[0] == 's' ? "started " : "finished ") +
           FormatUnixMs(t[key].get<int64_t>(), now);
  }
  return out;
}

// A candidate's score, or why it cannot run (restart_on_spare without spares also has the score it
// would have with them).
std::string CandidateVerdict(const nlohmann::json& c) {
  if (c["feasible"].get<bool>()) return Str(c["score"]);
  return Str(c["why"]) + (c.contains("score") ? "; score with a spare " + Str(c["score"]) : "");
}

void PrintPlan(const nlohmann::json& d) {
  const auto& lay = d["layout"];
  std::printf("job %s  step %s  layout dp=%s,tp=%s,pp=%s\n", Str(d["job"]).c_str(), Str(d["step"]).c_str(),
              Str(lay["dp"]).c_str(), Str(lay["tp"]).c_str(), Str(lay["pp"]).c_str());
  PrintPublication(d);
  std::printf("profile: %s (%s)\n", Str(d["profile"]["source"]).c_str(), Str(d["profile"]["note"]).c_str());
  const auto& model = d["model"];
  std::printf("measured step: %s ms over %s snapshot interval(s); state %s bytes\n\n", Str(model["step_ms"]).c_str(),
              Str(model["step_samples"]).c_str(), Str(model["total_bytes"]).c_str());
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : d["ranks"])
    rows.push_back({"pp" + Str(r["pp"]) + "-tp" + Str(r["tp"]) + "-dp" + Str(r["dp"]), Str(r["node"]), Str(r["state"])});
  PrintTable({"RANK", "NODE", "STATE"}, rows);
  rows.clear();
  for (const auto& l : model["layers"])
    rows.push_back({Str(l["layer"]), Str(l["stage"]), Str(l["param_bytes"]), Str(l["optimizer_bytes"]), Str(l["bytes"])});
  std::printf("\n");
  PrintTable({"LAYER", "STAGE", "PARAM BYTES", "OPTIMIZER BYTES", "BYTES"}, rows);
  const auto& dec = d["decision"];
  std::printf("\ndecision: %s — %s\n", Str(dec["policy"]).c_str(), Str(dec["reason"]).c_str());
  if (dec.contains("spare_wait")) {
    const auto& w = dec["spare_wait"];
    std::printf("spare wait: %s ms waited — %s\n", Str(w["waited_ms"]).c_str(), Str(w["reason"]).c_str());
  }
  if (dec.contains("candidates") && !dec["candidates"].empty()) {
    rows.clear();
    for (const auto& c : dec["candidates"])
      rows.push_back({Str(c["policy"]), c["feasible"].get<bool>() ? "yes" : "no",
                      c.contains("step_ms") ? Str(c["step_ms"]) : "-",
                      c.contains("transition_ms") ? Str(c["transition_ms"]) : "-",
                      CandidateVerdict(c)});
    PrintTable({"CANDIDATE", "FEASIBLE", "STEP MS", "TRANSITION MS", "SCORE / WHY NOT"}, rows);
  }
  if (dec.contains("new_layout")) {
    rows.clear();
    int p = 0;
    for (const auto& pipe : dec["new_layout"]["pipelines"]) {
      int s = 0;
      for (const auto& st : pipe["stages"])
        rows.push_back({std::to_string(p), std::to_string(s++), st.contains("rerouted") ? "(rerouted)" : Str(st["node"]),
                        Layers(st["layers"])});
      ++p;
    }
    std::printf("\nnew layout (step %s ms):\n", Str(dec["new_layout"]["step_ms"]).c_str());
    PrintTable({"PIPELINE", "STAGE", "NODE", "LAYERS"}, rows);
  }
  if (dec.contains("restore_fetch_bytes")) {
    std::string onto;
    for (const auto& n : dec["joining_nodes"]) onto += (onto.empty() ? "" : ", ") + Str(n);
    std::printf("\ngrows onto %s; the new positions read %s bytes they lack from the holders as they restore\n",
                onto.c_str(), Str(dec["restore_fetch_bytes"]).c_str());
  }
  if (dec.contains("transfer")) {
    // The moves as executed when the publication has them (their state), else as planned.
    const auto& pub = d["publication"];
    const bool executing = pub.is_object() && pub["current"].get<bool>() && pub["transfer"].is_object();
    const auto& moves = executing ? pub["transfer"]["moves"] : dec["transfer"]["moves"];
    rows.clear();
    for (const auto& mv : moves) {
      std::vector<std::string> row = {Str(mv["layer"]), Str(mv["from_node"]), Str(mv["to_node"]), Str(mv["bytes"])};
      if (executing) row.push_back(Str(mv["state"]) + (mv.contains("error") ? ": " + Str(mv["error"]) : ""));
      rows.push_back(std::move(row));
    }
    std::string state = "not executed yet";
    if (executing) {
      const auto& t = pub["transfer"];
      state = Str(t["state"]) + " (attempt " + Str(t["attempts"]) + "; " + Str(t["bytes_staged"]) + " bytes staged, " +
              Str(t["bytes_fetched"]) + " read, " + Str(t["bytes_from_peers"]) + " from peers" + TransferTimes(t) + ")";
    }
    std::printf("\ntransfer plan, %s bytes moved between stages: %s\n", Str(dec["transfer"]["total_bytes"]).c_str(),
                state.c_str());
    if (!rows.empty()) {
      if (executing) {
        PrintTable({"LAYER", "FROM", "TO", "BYTES", "STATE"}, rows);
      } else {
        PrintTable({"LAYER", "FROM", "TO", "BYTES"}, rows);
      }
    }
    // Every node of the new layout stages what it lacks of its layers (the moves above, and the
    // other members' shards of the layers it keeps).
    const auto& hosts = executing && pub["transfer"].contains("hosts") ? pub["transfer"]["hosts"]
                                                                       : dec["transfer"].value("hosts", nlohmann::json::array());
    rows.clear();
    for (const auto& h : hosts) {
      std::string layers;
      for (const auto& l : h["layers"]) layers += (layers.empty() ? "" : ",") + Str(l);
      std::vector<std::string> row = {Str(h["node"]), layers};
      if (executing) {
        row.push_back(h.contains("bytes_staged") ? Str(h["bytes_staged"]) : "-");
        row.push_back(Str(h["state"]) + (h.contains("error") ? ": " + Str(h["error"]) : ""));
      }
      rows.push_back(std::move(row));
    }
    if (!rows.empty()) {
      std::printf("\nnodes of the new layout, staging what they lack of their layers:\n");
      if (executing) {
        PrintTable({"NODE", "LAYERS", "STAGED", "STATE"}, rows);
      } else {
        PrintTable({"NODE", "LAYERS"}, rows);
      }
    }
  }
  if (d.contains("last_recovery")) PrintLastRecovery(d["last_recovery"]);
}

void RunShow(CtlContext& ctx, const std::string& job) {
  auto stub = MakeAdminStub(ctx);
  v1::ShowPlanRequest req;
  req.set_job(job);
  v1::ShowPlanResponse resp;
  auto call = MakeCallContext(ctx, 120);
  if (!call) return;
  if (!CheckRpc(ctx, stub->ShowPlan(call.get(), req, &resp), "plan show")) return;
  auto doc = nlohmann::json::parse(resp.plan_json(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return ctx.Fail(kExitFailed, "plan show: the daemon's answer is not JSON");
  ctx.Emit(doc, PrintPlan);
}

void RunConfirm(CtlContext& ctx, const std::string& job, int64_t version) {
  auto stub = MakeAdminStub(ctx);
  v1::ConfirmPlanRequest req;
  req.set_job(job);
  req.set_version(version);
  v1::ConfirmPlanResponse resp;
  auto call = MakeCallContext(ctx, 60);
  if (!call) return;
  if (!CheckRpc(ctx, stub->ConfirmPlan(call.get(), req, &resp), "plan confirm")) return;
  nlohmann::json out = {{"job", resp.job()}, {"version", resp.version()}, {"state", resp.state()}};
  ctx.Emit(out, [](const nlohmann::json& d) {
    std::printf("confirmed the decision of job '%s' (now version %s)\n", d["job"].get<std::string>().c_str(),
                Str(d["version"]).c_str());
  });
}

}  // namespace

void RegisterJobPlanCommands(CLI::App& plan, CtlContext& ctx) {
  auto job = std::make_shared<std::string>();
  auto path = std::make_shared<std::string>();
  auto* attach = plan.add_subcommand("attach", "attach a per-layer time profile to a running job (on a daemon)");
  attach->add_option("--job", *job, "job name")->required();
  attach->add_option("-i,--input", *path, "profile: {model, cluster?, job?, policy?} (JSON or TOML)")->required();
  attach->callback([&ctx, job, path] { RunAttach(ctx, *job, *path); });
  auto* show = plan.add_subcommand(
      "show", "a running job's model and the planner's decision for its current membership (on a daemon)");
  show->add_option("--job", *job, "job name")->required();
  show->callback([&ctx, job] { RunShow(ctx, *job); });
  auto version = std::make_shared<int64_t>(0);
  auto* confirm = plan.add_subcommand(
      "confirm", "confirm a job's published decision (planner.mode = \"confirm\"; on a daemon)");
  confirm->add_option("--job", *job, "job name")->required();
  confirm->add_option("--version", *version, "the publication's version as shown (default: whichever is published)")
      ->check(CLI::NonNegativeNumber);
  confirm->callback([&ctx, job, version] { RunConfirm(ctx, *job, *version); });
}

}  // namespace reft::ctl
