/// \file restore_stats.cc
#include "reft/recovery/restore_stats.h"

#include "reft/recovery/restore_check.h"

namespace reft::recovery {

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kLocate:
      return "locate";
    case Phase::kFetch:
      return "fetch";
    case Phase::kDecode:
      return "decode";
    case Phase::kDeliver:
      return "deliver";
    case Phase::kRebuild:
      return "rebuild";
  }
  return "unknown";
}

void RestoreStats::Add(const RestoreStats& o) {
  locate += o.locate;
  allocate += o.allocate;
  fetch += o.fetch;
  decode += o.decode;
  deliver += o.deliver;
  rebuild += o.rebuild;
  agreement += o.agreement;
  if (agreement_detail.empty()) agreement_detail = o.agreement_detail;
  bytes_local += o.bytes_local;
  bytes_peer += o.bytes_peer;
  bytes_shard += o.bytes_shard;
  bytes_replica += o.bytes_replica;
  bytes_parity += o.bytes_parity;
  bytes_unique += o.bytes_unique;
  bytes_other += o.bytes_other;
  bytes_rebuilt += o.bytes_rebuilt;
  bytes_persistent += o.bytes_persistent;
  bytes_own_local += o.bytes_own_local;
  bytes_own_peer += o.bytes_own_peer;
  bytes_staged += o.bytes_staged;
  retries += o.retries;
  warnings.insert(warnings.end(), o.warnings.begin(), o.warnings.end());
}

std::string RestoreCheck::Summary() const {
  if (step < 0) return "job '" + job + "': nothing committed";
  const std::string head = "job '" + job + "' step " + std::to_string(step) + ": ";
  if (!recoverable) {
    std::string lost;
    for (const auto& g : groups) {
      if (g.recoverable) continue;
      lost += (lost.empty() ? "" : "; ") +
              ("SG pp" + std::to_string(g.pp) + "-tp" + std::to_string(g.tp) + ": " + g.lost);
    }
    if (lost.empty()) lost = "no slot of the step is left";
    if (undecided()) {
      std::string who;
      for (const auto& n : waiting) who += (who.empty() ? "" : ", ") + n;
      return head + "UNDECIDED: node(s) " + who +
             " are alive but did not answer; without them: " + lost;
    }
    return head + "LOST: " + lost;
  }
  int rebuilt = 0;
  int slots_lost = 0;
  for (const auto& g : groups) {
    for (const auto& s : g.shards) rebuilt += s.state == "rebuilt";
    for (const auto& r : g.ranks) slots_lost += r.nodes.empty();
  }
  return head + "recoverable (" + std::to_string(rebuilt) + " shard(s) rebuilt from redundancy, " +
         std::to_string(slots_lost) + " slot(s) to regenerate)";
}

}  // namespace reft::recovery
