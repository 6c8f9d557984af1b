// reftctl snapshots list | verify | drop
#include <cstdio>

#include "admin_client.h"
#include "command.h"
#include "reft/units.h"
#include "table.h"

namespace reft::ctl {
namespace {

std::string RankLabel(const nlohmann::json& r) {
  return "pp" + std::to_string(r["pp"].get<int>()) + "-tp" + std::to_string(r["tp"].get<int>()) +
         "-dp" + std::to_string(r["dp"].get<int>());
}

nlohmann::json RankJson(const v1::RankId& r) {
  return {{"job", r.job()}, {"pp", r.pp()}, {"tp", r.tp()}, {"dp", r.dp()}};
}

void RunList(CtlContext& ctx, const std::string& job) {
  auto stub = MakeAdminStub(ctx);
  v1::ListSnapshotsRequest req;
  req.set_job(job);
  v1::ListSnapshotsResponse resp;
  auto call = MakeCallContext(ctx);
  if (!call) return;
  if (!CheckRpc(ctx, stub->ListSnapshots(call.get(), req, &resp), "snapshots list")) return;
  nlohmann::json doc = {{"snapshots", nlohmann::json::array()}};
  for (const auto& s : resp.snapshots()) {
    nlohmann::json regions = nlohmann::json::array();
    for (const auto& r : s.regions()) regions.push_back({{"name", r.name()}, {"size", r.size()}});
    doc["snapshots"].push_back({{"rank", RankJson(s.rank())},
                                {"slot", s.slot()},
                                {"state", s.state()},
                                {"step", s.step()},
                                {"payload_bytes", s.payload_bytes()},
                                {"segment_bytes", s.segment_bytes()},
                                {"regions", regions}});
  }
  ctx.Emit(doc, [](const nlohmann::json& d) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& s : d["snapshots"]) {
      rows.push_back({s["rank"]["job"], RankLabel(s["rank"]), std::to_string(s["step"].get<int64_t>()),
                      s["state"], std::to_string(s["slot"].get<int>()),
                      FormatBytes(s["payload_bytes"]), std::to_string(s["regions"].size())});
    }
    PrintTable({"JOB", "RANK", "STEP", "STATE", "SLOT", "BYTES", "REGIONS"}, rows);
  });
}

void RunVerify(CtlContext& ctx, const std::string& job, const std::optional<int64_t>& step) {
  auto stub = MakeAdminStub(ctx);
  v1::VerifySnapshotRequest req;
  req.set_job(job);
  if (step) {
    req.set_step(*step);
    req.set_has_step(true);
  }
  v1::VerifySnapshotResponse resp;
  auto call = MakeCallContext(ctx, 600);
  if (!call) return;
  if (!CheckRpc(ctx, stub->VerifySnapshot(call.get(), req, &resp), "snapshots verify")) return;
  nlohmann::json doc = {{"job", resp.job()},
                        {"step", resp.step()},
                        {"ok", resp.ok()},
                        {"ranks_checked", resp.ranks_checked()},
                        {"chunks_checked", resp.chunks_checked()},
                        {"bad", nlohmann::json::array()}};
  for (const auto& b : resp.bad()) {
    doc["bad"].push_back({{"rank", RankJson(b.rank())},
                          {"region", b.region()},
                          {"chunk", b.chunk()},
                          {"offset", b.offset()}});
  }
  ctx.Emit(doc, [](const nlohmann::json& d) {
    std::printf("job %s step %lld: %s (%u ranks, %llu chunks checked)\n",
                d["job"].get<std::string>().c_str(), static_cast<long long>(d["step"].get<int64_t>()),
                d["ok"].get<bool>() ? "OK" : "CORRUPTED", d["ranks_checked"].get<unsigned>(),
                static_cast<unsigned long long>(d["chunks_checked"].get<uint64_t>()));
    for (const auto& b : d["bad"]) {
      std::printf("  bad chunk: rank %s region %s chunk %llu (offset %llu)\n",
                  RankLabel(b["rank"]).c_str(), b["region"].get<std::string>().c_str(),
                  static_cast<unsigned long long>(b["chunk"].get<uint64_t>()),
                  static_cast<unsigned long long>(b["offset"].get<uint64_t>()));
    }
  });
  if (!resp.ok()) ctx.exit_code = kExitFailed;  // corruption found: the operation "failed"
}

void RunDrop(CtlContext& ctx, const std::string& job, int64_t step, bool force) {
  auto stub = MakeAdminStub(ctx);
  v1::DropSnapshotRequest req;
  req.set_job(job);
  req.set_step(step);
  req.set_force(force);
  v1::DropSnapshotResponse resp;
  auto call = MakeCallContext(ctx);
  if (!call) return;
  if (!CheckRpc(ctx, stub->DropSnapshot(call.get(), req, &resp), "snapshots drop")) return;
  nlohmann::json doc = {{"job", job}, {"step", step}, {"slots_freed", resp.slots_freed()}};
  ctx.Emit(doc, [](const nlohmann::json& d) {
    std::printf("dropped step %lld of job %s (%u slots freed)\n",
                static_cast<long long>(d["step"].get<int64_t>()), d["job"].get<std::string>().c_str(),
                d["slots_freed"].get<unsigned>());
  });
}

}  // namespace

// Parsed arguments live for the whole process: CLI11 binds options by reference.
struct SnapshotsArgs {
  std::string list_job;
  std::string verify_job;
  int64_t verify_step = -1;
  std::string drop_job;
  int64_t drop_step = -1;
  bool drop_force = false;
};

void RegisterSnapshotsCommands(CLI::App& root, CtlContext& ctx) {
  static SnapshotsArgs args;
  auto* snapshots = root.add_subcommand("snapshots", "snapshots held on the node");
  snapshots->require_subcommand(1);

  auto* list = snapshots->add_subcommand("list", "list slots and their states");
  list->add_option("--job", args.list_job, "only this job");
  list->callback([&ctx] { RunList(ctx, args.list_job); });

  auto* verify = snapshots->add_subcommand("verify", "re-check every chunk checksum of a step");
  verify->add_option("--job", args.verify_job, "job id")->required();
  auto* step_opt = verify->add_option("--step", args.verify_step, "step (default: newest committed)");
  verify->callback([&ctx, step_opt] {
    RunVerify(ctx, args.verify_job,
              step_opt->count() ? std::optional<int64_t>(args.verify_step) : std::nullopt);
  });

  auto* drop = snapshots->add_subcommand("drop", "free every slot of a step on this node");
  drop->add_option("--job", args.drop_job, "job id")->required();
  drop->add_option("--step", args.drop_step, "step")->required();
  drop->add_flag("--force", args.drop_force, "allow dropping the newest committed step");
  drop->callback([&ctx] { RunDrop(ctx, args.drop_job, args.drop_step, args.drop_force); });
}

}  // namespace reft::ctl
