// `reftctl reliability`: REFT eqs. 5–6 (corrected) with an optional Monte-Carlo check; offline.
#include <memory>

#include "reft/planner/api.h"
#include "run_planner.h"

namespace reft::ctl {

void RegisterReliabilityCommands(CLI::App& root, CtlContext& ctx) {
  struct Flags {
    std::string path;
    double shape = 0, lambda_hw = -1, lambda_sw = -1, threshold = 0;
    int nodes = 0, sg_size = 0, trials = -1;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = root.add_subcommand("reliability", "REFT survival model: days until survival drops to a threshold");
  cmd->add_option("-i,--input", f->path, "parameters file (JSON or TOML); flags override it");
  cmd->add_option("--nodes", f->nodes, "k: nodes (devices)");
  cmd->add_option("--sg-size", f->sg_size, "g: sharding-group size (DP degree)");
  cmd->add_option("--lambda-hw", f->lambda_hw, "hardware Weibull rate per day^c");
  cmd->add_option("--lambda-sw", f->lambda_sw, "software Weibull rate per day^c");
  cmd->add_option("--shape", f->shape, "Weibull shape c");
  cmd->add_option("--threshold", f->threshold, "survival threshold (default 0.9)");
  cmd->add_option("--trials", f->trials, "Monte-Carlo trials (0 = none)");
  cmd->callback([&ctx, f] {
    nlohmann::json patch = nlohmann::json::object();
    if (f->nodes) patch["nodes"] = f->nodes;
    if (f->sg_size) patch["sg_size"] = f->sg_size;
    if (f->lambda_hw >= 0) patch["lambda_hw"] = f->lambda_hw;
    if (f->lambda_sw >= 0) patch["lambda_sw"] = f->lambda_sw;
    if (f->shape > 0) patch["shape"] = f->shape;
    if (f->threshold > 0) patch["threshold"] = f->threshold;
    if (f->trials >= 0) patch["trials"] = f->trials;
    RunPlanner(ctx, f->path, patch, planner::Reliability);
  });
}

}  // namespace reft::ctl
