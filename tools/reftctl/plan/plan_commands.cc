// `reftctl plan templates|instantiate|failover|transfer`: offline, no daemon. Schemas: docs/planner.md.
#include <memory>

#include "reft/planner/api.h"
#include "reft/planner/profile.h"
#include "run_planner.h"

namespace reft::ctl {

void RunPlanner(CtlContext& ctx, const std::string& path, const nlohmann::json& patch, const PlannerFn& fn) {
  nlohmann::json in = nlohmann::json::object();
  if (!path.empty()) {
    auto doc = planner::LoadDocument(path);
    if (!doc.ok()) {
      ctx.Fail(kExitUsage, doc.status().message());
      return;
    }
    in = *doc;
  }
  if (in.is_object() && patch.is_object()) in.merge_patch(patch);
  auto out = fn(in);
  if (!out.ok()) {
    const bool bad_input = out.status().code() == StatusCode::kInvalidArgument ||
                           out.status().code() == StatusCode::kNotFound;
    ctx.Fail(bad_input ? kExitUsage : kExitFailed, out.status().message());
    return;
  }
  ctx.Emit(*out, nullptr);
}

void RegisterPlanCommands(CLI::App& plan, CtlContext& ctx) {
  struct Verb {
    const char* name;
    const char* help;
    PlannerFn fn;
  };
  const Verb verbs[] = {
      {"templates", "Oobleck pipeline templates n0..N-f*n0 (input: model, cluster, job)",
       planner::PlanTemplates},
      {"instantiate", "Oobleck instantiation options with batch distribution (adds job.global_batch)",
       planner::PlanInstantiate},
      {"failover", "recovery decision after a failure: mode odyssey (reroute/reconfigure/restart) or oobleck",
       planner::PlanFailover},
      {"transfer", "Kuhn-Munkres weight-transfer plan: sender and receiver of every layer",
       planner::PlanTransferJson},
  };
  for (const auto& v : verbs) {
    auto* cmd = plan.add_subcommand(v.name, v.help);
    auto path = std::make_shared<std::string>();
    cmd->add_option("-i,--input", *path, "input file (JSON or TOML)")->required();
    PlannerFn fn = v.fn;
    cmd->callback([&ctx, path, fn] { RunPlanner(ctx, *path, nlohmann::json::object(), fn); });
  }
}

}  // namespace reft::ctl
