// reftctl jobs list | release: the records the control plane keeps of each job (its owner, state,
// nodes, last activity), and an operator's release of one (docs/reftctl.md "jobs").
#include <algorithm>
#include <cstdio>
#include <memory>

#include "admin_client.h"
#include "command.h"
#include "table.h"
#include "time_text.h"

namespace reft::ctl {
namespace {

std::string StepText(const nlohmann::json& step) {
  return step.is_null() ? "-" : std::to_string(step.get<int64_t>());
}

// A failure the daemon reported itself (it sets the "reft-code" trailer: etcd unreachable, the
// tier unreadable) is an operation failure, exit 1, whatever its gRPC code; only a daemon that
// cannot be reached is exit 3.
bool CheckCall(CtlContext& ctx, grpc::ClientContext* call, const grpc::Status& st,
               const std::string& what) {
  if (!st.ok() && call->GetServerTrailingMetadata().count("reft-code") > 0) {
    ctx.Fail(kExitFailed, what + ": " + st.error_message());
    return false;
  }
  return CheckRpc(ctx, st, what);
}

void RunList(CtlContext& ctx) {
  auto stub = MakeAdminStub(ctx);
  v1::ListJobsResponse resp;
  auto call = MakeCallContext(ctx, 30);
  if (!call) return;
  if (!CheckCall(ctx, call.get(), stub->ListJobs(call.get(), v1::ListJobsRequest(), &resp),
                 "jobs list")) {
    return;
  }
  nlohmann::json doc = {{"now_ms", resp.now_ms()},
                        {"forget_after_s", resp.forget_after_s()},
                        {"jobs", nlohmann::json::array()}};
  for (const auto& j : resp.jobs()) {
    nlohmann::json owner = nullptr;
    if (j.has_owner()) {
      const auto& o = j.owner();
      owner = {{"uid", o.uid()},
               {"gid", o.has_gid() ? nlohmann::json(o.gid()) : nlohmann::json(nullptr)},
               {"group", o.group()},
               {"claimed_at_ms", o.claimed_at_ms() > 0 ? nlohmann::json(o.claimed_at_ms())
                                                       : nlohmann::json(nullptr)},
               {"claimed_on", o.claimed_on().empty() ? nlohmann::json(nullptr)
                                                     : nlohmann::json(o.claimed_on())}};
    }
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : j.nodes()) nodes.push_back(n);
    auto opt = [](bool has, int64_t v) { return has ? nlohmann::json(v) : nlohmann::json(nullptr); };
    doc["jobs"].push_back(
        {{"job", j.job()},
         {"owner", owner},
         {"state", j.state()},
         {"nodes", nodes},
         {"trainers", j.trainers()},
         {"committed_step", opt(j.has_committed_step(), j.committed_step())},
         {"persisted_step", opt(j.has_persisted_step(), j.persisted_step())},
         {"last_activity_ms", opt(j.last_activity_ms() > 0, j.last_activity_ms())},
         {"forget_in_ms", opt(j.state() == "gone" && j.forget_in_ms() >= 0, j.forget_in_ms())}});
  }
  ctx.Emit(doc, [](const nlohmann::json& d) {
    const int64_t now = d["now_ms"].get<int64_t>();
    std::vector<std::vector<std::string>> rows;
    for (const auto& j : d["jobs"]) {
      std::string nodes;
      for (const auto& n : j["nodes"]) nodes += (nodes.empty() ? "" : ",") + n.get<std::string>();
      const auto& at = j["last_activity_ms"];
      const auto& forget = j["forget_in_ms"];
      rows.push_back({j["job"], OwnerText(j["owner"]), j["state"], nodes.empty() ? "-" : nodes,
                      std::to_string(j["trainers"].get<int>()), StepText(j["committed_step"]),
                      at.is_null() ? "-" : FormatDuration(now - at.get<int64_t>()) + " ago",
                      forget.is_null() ? "-" : FormatDuration(forget.get<int64_t>())});
    }
    PrintTable({"JOB", "OWNER", "STATE", "NODES", "TRAINERS", "COMMITTED", "LAST ACTIVITY",
                "FORGET IN"},
               rows);
  });
}

void RunRelease(CtlContext& ctx, const std::string& job, bool force) {
  auto stub = MakeAdminStub(ctx);
  v1::ReleaseJobRequest req;
  req.set_job(job);
  req.set_force(force);
  v1::ReleaseJobResponse resp;
  auto call = MakeCallContext(ctx, 30);
  if (!call) return;
  if (!CheckCall(ctx, call.get(), stub->ReleaseJob(call.get(), req, &resp), "jobs release")) {
    return;
  }
  nlohmann::json doc = {{"job", resp.job()}, {"released", true}, {"forced", resp.forced()}};
  ctx.Emit(doc, [](const nlohmann::json& d) {
    std::printf("released job %s%s: the next trainer to open it claims it\n",
                d["job"].get<std::string>().c_str(), d["forced"].get<bool>() ? " (forced)" : "");
  });
}

}  // namespace

void RegisterJobsCommands(CLI::App& root, CtlContext& ctx) {
  auto* jobs = root.add_subcommand("jobs", "the records kept of each job: owner, state, activity");
  jobs->require_subcommand(1);
  jobs->add_subcommand("list", "every job with records: owner, state, nodes, last activity")
      ->callback([&ctx] { RunList(ctx); });
  auto job = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  auto* release = jobs->add_subcommand(
      "release", "delete a job's records (its owner) now, so the next trainer claims the name");
  release->add_option("--job", *job, "job id")->required();
  release->add_flag("--force", *force,
                    "release even while trainers of the job are connected, nodes hold its "
                    "snapshots or the persistent tier holds a step of it (an abandoned job only)");
  release->callback([&ctx, job, force] { RunRelease(ctx, *job, *force); });
}

}  // namespace reft::ctl
