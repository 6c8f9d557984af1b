/// \file reshape_check.cc
/// \brief restore-check --layout: the reshape verdict from the saved layout's restore check.

#include "reshape_check.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "table.h"

namespace reft::ctl {

Result<JobLayout> ParseLayoutArg(const std::string& text) {
  JobLayout l;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto eq = part.find('=');
    int32_t* field = nullptr;
    const std::string key = part.substr(0, eq);
    if (key == "dp") field = &l.dp;
    if (key == "tp") field = &l.tp;
    if (key == "pp") field = &l.pp;
    if (key == "zero") field = &l.zero;
    if (eq == std::string::npos || field == nullptr) {
      return Status::InvalidArgument("--layout: '" + part + "' is not dp=N, tp=N, pp=N or zero=N");
    }
    try {
      size_t used = 0;
      *field = std::stoi(part.substr(eq + 1), &used);
      if (used != part.size() - eq - 1) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      return Status::InvalidArgument("--layout: '" + part + "' is not a number");
    }
  }
  REFT_RETURN_NOT_OK(l.Validate().WithContext("--layout"));
  return l;
}

nlohmann::json ReshapeCheckJson(const nlohmann::json& check, const JobLayout& to) {
  // A DCP checkpoint (every buffer under "dcp/", reserved to reft.torch.dcp) is loaded by reads
  // of saved byte ranges that DCP's planner chooses for the new mesh: any layout may follow.
  const bool dcp = check.value("dcp", false);
  nlohmann::json out = {{"to_layout", to.ToString()}, {"from_layout", ""}, {"possible", false},
                        {"dcp", dcp}, {"reason", ""}, {"sources", nlohmann::json::array()},
                        {"ranks", nlohmann::json::array()}};
  const auto& groups = check["groups"];
  if (check["step"].get<int64_t>() < 0 || groups.empty()) {
    out["reason"] = "nothing of the job is committed in memory";
    return out;
  }
  JobLayout from;
  from.dp = groups[0]["members"].get<int>();
  from.pp = from.tp = 1;
  // Per saved rank: where its per-rank (unique, unsharded) state comes from.
  std::map<std::tuple<int, int, int>, std::string> per_rank;
  for (const auto& g : groups) {
    from.pp = std::max(from.pp, g["pp"].get<int>() + 1);
    from.tp = std::max(from.tp, g["tp"].get<int>() + 1);
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& s : g["shards"]) {
      shards.push_back({{"dp", s["dp"]}, {"state", s["state"]}, {"node", s["node"]},
                        {"detail", s["detail"]}});
    }
    out["sources"].push_back({{"pp", g["pp"]}, {"tp", g["tp"]}, {"recoverable", g["recoverable"]},
                              {"shards", shards}});
    for (const auto& k : g["ranks"]) {
      const auto& r = k["rank"];
      per_rank[{r["pp"].get<int>(), r["tp"].get<int>(), r["dp"].get<int>()}] = k["unique"];
    }
  }
  std::string text = from.ToString();
  out["from_layout"] = text.substr(0, text.find(",zero="));  // the check does not know zero
  const std::string step = std::to_string(check["step"].get<int64_t>());
  std::string reason;
  if (to.tp != from.tp && !dcp) {
    reason = "tp cannot change in a reshape (saved with tp=" + std::to_string(from.tp) + ")";
  } else if (!check["recoverable"].get<bool>()) {
    reason = "memory cannot rebuild step " + step +
             " of the saved layout (a reshape reads memory only): " +
             check["summary"].get<std::string>();
  }
  out["possible"] = reason.empty();
  if (!reason.empty()) {
    out["reason"] = reason;
  } else if (dcp) {
    out["reason"] = std::string("a DCP checkpoint: DCP's planner reshards on load; ") +
                    "every saved byte range of step " + step + " can be read from memory";
  } else {
    out["reason"] =
        "every replicated and sharded buffer of step " + step + " can be assembled from memory";
  }
  for (int pp = 0; pp < to.pp; ++pp) {
    for (int tp = 0; tp < to.tp; ++tp) {
      for (int dp = 0; dp < to.dp; ++dp) {
        auto it = per_rank.find({pp, tp, dp});
        std::string state;
        if (dcp) {
          // A DCP job's slots hold its "dcp/" buffers only: each new rank reads the byte
          // ranges its load plan needs, from whichever saved rank wrote them.
          state = reason.empty() ? "read by range (no per-rank state besides the dcp/ buffers)"
                                 : "not readable from memory";
        } else if (it == per_rank.end()) {
          state = "untouched (no such rank in the saved layout)";
        } else {
          state = it->second == "lost" ? "lost" : "from " + it->second;
        }
        out["ranks"].push_back(
            {{"rank", {{"pp", pp}, {"tp", tp}, {"dp", dp}}}, {"per_rank_state", state}});
      }
    }
  }
  return out;
}

void PrintReshapeCheck(const nlohmann::json& r) {
  std::printf("\nreshape into %s (saved under %s): %s\n  %s\n",
              r["to_layout"].get<std::string>().c_str(),
              r["from_layout"].get<std::string>().c_str(),
              r["possible"].get<bool>() ? "POSSIBLE from memory" : "NOT POSSIBLE",
              r["reason"].get<std::string>().c_str());
  std::vector<std::vector<std::string>> rows;
  for (const auto& k : r["ranks"]) {
    const auto& c = k["rank"];
    rows.push_back({"pp" + std::to_string(c["pp"].get<int>()) + "-tp" +
                        std::to_string(c["tp"].get<int>()) + "-dp" +
                        std::to_string(c["dp"].get<int>()),
                    r.value("dcp", false) ? "dcp/: the byte ranges DCP's load plan asks for"
                                          : "replicated + sharded: by name from the groups above",
                    k["per_rank_state"].get<std::string>()});
  }
  if (!rows.empty()) {
    std::printf("\n");
    PrintTable({"NEW RANK", "BUFFERS", "PER-RANK STATE"}, rows);
  }
}

}  // namespace reft::ctl
