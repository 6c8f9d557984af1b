// reftctl nodes list: this daemon's view of the cluster membership.
#include <cstdio>

#include "admin_client.h"
#include "command.h"
#include "table.h"

namespace reft::ctl {
namespace {

void RunNodesList(CtlContext& ctx) {
  auto stub = MakeAdminStub(ctx);
  v1::ListNodesResponse resp;
  auto call = MakeCallContext(ctx);
  if (!call) return;
  if (!CheckRpc(ctx, stub->ListNodes(call.get(), v1::ListNodesRequest(), &resp), "nodes list")) {
    return;
  }
  nlohmann::json doc = {{"nodes", nlohmann::json::array()}};
  for (const auto& n : resp.nodes()) {
    doc["nodes"].push_back({{"node_id", n.node_id()},
                            {"address", n.address()},
                            {"state", n.state()},
                            {"epoch", n.epoch()},
                            {"incarnation", n.incarnation()},
                            {"self", n.self()}});
  }
  ctx.Emit(doc, [](const nlohmann::json& d) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& n : d["nodes"]) {
      rows.push_back({n["node_id"].get<std::string>() + (n["self"].get<bool>() ? " *" : ""),
                      n["address"], n["state"], std::to_string(n["epoch"].get<uint64_t>()),
                      std::to_string(n["incarnation"].get<uint64_t>())});
    }
    PrintTable({"NODE", "ADDRESS", "STATE", "EPOCH", "INCARNATION"}, rows);
  });
}

}  // namespace

void RegisterNodesCommands(CLI::App& root, CtlContext& ctx) {
  auto* nodes = root.add_subcommand("nodes", "cluster membership as this daemon sees it");
  nodes->require_subcommand(1);
  nodes->add_subcommand("list", "every known node: address, state, epoch")
      ->callback([&ctx] { RunNodesList(ctx); });
}

}  // namespace reft::ctl
