#include "last_recovery.h"

#include <cstdio>
#include <vector>

#include "admin_client.h"
#include "table.h"
#include "time_text.h"

namespace reft::ctl {

nlohmann::json FetchLastRecovery(CtlContext& ctx, const std::string& job) {
  auto stub = MakeAdminStub(ctx);
  v1::ShowPlanRequest req;
  req.set_job(job);
  v1::ShowPlanResponse resp;
  // Reading the job's model asks its holders: bounded, so that a check of a job whose nodes do
  // not answer is not held up by it.
  auto call = MakeCallContext(ctx, 15);
  if (!call || !stub->ShowPlan(call.get(), req, &resp).ok()) return nullptr;
  auto doc = nlohmann::json::parse(resp.plan_json(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("last_recovery")) return nullptr;
  return doc["last_recovery"];
}

void PrintLastRecovery(const nlohmann::json& last_recovery) {
  if (!last_recovery.is_object()) return;
  const int64_t now = NowUnixMs();
  std::vector<std::vector<std::string>> rows;
  int64_t previous = -1;
  for (const char* phase : {"lost_at", "declared_at", "decided_at", "staged_at", "reconnected_at",
                            "restore_started_at", "restore_ended_at"}) {
    const auto& mark = last_recovery["phases"].value(phase, nlohmann::json());
    if (!mark.is_object()) continue;
    const int64_t at = mark["at_ms"].get<int64_t>();
    std::string since = "-";
    if (previous >= 0) since = (at >= previous ? "+" : "-") + FormatDuration(at >= previous ? at - previous : previous - at);
    rows.push_back({phase, FormatUnixMs(at, now), mark["node"].get<std::string>(), since});
    previous = at;
  }
  std::printf("\nlast recovery (times of different nodes are subject to clock skew):\n");
  if (!rows.empty()) PrintTable({"PHASE", "AT", "NODE", "SINCE PREVIOUS"}, rows);
  const auto& step = last_recovery["first_commit_step"];
  const auto& at = last_recovery["first_commit_at"];
  if (step.is_number() && at.is_object()) {
    std::printf("first commit after it: step %lld, %s (seen by %s)\n", static_cast<long long>(step.get<int64_t>()),
                FormatUnixMs(at["at_ms"].get<int64_t>(), now).c_str(), at["node"].get<std::string>().c_str());
  } else {
    std::printf("first commit after it: none yet\n");
  }
}

}  // namespace reft::ctl
