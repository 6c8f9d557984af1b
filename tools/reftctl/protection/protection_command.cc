/// \file protection_command.cc
/// \brief `reftctl plan protection`: per-rank slot layouts, bytes and the guaranteed node-failure
/// tolerance of each sharding group (reft_protect does all the work).

#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "reft/protect/json_io.h"
#include "reft/protect/tolerance.h"
#include "reft/units.h"

namespace reft::ctl {
namespace {

struct Options {
  std::string input;
  std::string scheme;  ///< overrides the document's "scheme" when set
  bool ranks = true;
};

void PrintTable(const nlohmann::json& doc) {
  if (doc.contains("recommendation")) {
    const auto& r = doc["recommendation"];
    std::cout << "recommended: " << r["scheme"].get<std::string>() << " ("
              << r["reason"].get<std::string>() << ")\n";
  }
  std::cout << "scheme " << doc["scheme"].get<std::string>() << ": job survives "
            << doc["node_failures"].get<int>() << " node failure(s) in every sharding group\n";
  for (const auto& w : doc["warnings"]) std::cout << "warning: " << w.get<std::string>() << "\n";
  for (const auto& g : doc["groups"]) {
    std::cout << "SG pp" << g["pp"].get<int>() << "-tp" << g["tp"].get<int>() << ": "
              << g["members"].get<int>() << " members on " << g["nodes"].get<int>() << " nodes, W "
              << FormatBytes(g["replicated_bytes"].get<uint64_t>()) << ", max per rank "
              << FormatBytes(g["max_rank_bytes"].get<uint64_t>()) << " (redundancy "
              << FormatBytes(g["max_rank_redundancy_bytes"].get<uint64_t>()) << "), survives "
              << g["node_failures"].get<int>() << (g["exact"].get<bool>() ? "" : " (lower bound)")
              << " (replicated shards alone: " << g["replicated_node_failures"].get<int>() << ")";
    if (!g["first_fatal"].empty()) {
      std::cout << "; fatal e.g. {";
      bool first = true;
      for (const auto& n : g["first_fatal"]) {
        std::cout << (first ? "" : ", ") << n.get<std::string>();
        first = false;
      }
      std::cout << "}";
    }
    std::cout << "\n";
  }
}

void Run(CtlContext& ctx, const Options& opt) {
  std::string text;
  if (opt.input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream f(opt.input);
    if (!f) {
      ctx.Fail(kExitUsage, "plan protection: cannot read input '" + opt.input + "'");
      return;
    }
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    ctx.Fail(kExitUsage, "plan protection: '" + opt.input + "' is not valid JSON");
    return;
  }
  // --scheme a,b,c (or "schemes": [...] in the input) compares several configurations.
  std::vector<std::string> schemes;
  if (!opt.scheme.empty()) {
    std::stringstream list(opt.scheme);
    for (std::string one; std::getline(list, one, ',');) schemes.push_back(one);
  } else if (doc.is_object() && doc.contains("schemes") && doc["schemes"].is_array()) {
    for (const auto& one : doc["schemes"]) {
      if (!one.is_string()) {
        ctx.Fail(kExitUsage,
                 "plan protection: schemes: every entry must be a string like \"arc1+aec\"");
        return;
      }
      schemes.push_back(one.get<std::string>());
    }
  }
  nlohmann::json recommendation;
  if (doc.is_object() && doc.contains("io")) {
    auto in = protect::ShardingInputFromJson(doc);
    auto rec =
        in.ok() ? protect::RecommendationJson(doc, *in) : Result<nlohmann::json>(in.status());
    if (!rec.ok()) {
      ctx.Fail(kExitUsage, "plan protection: " + rec.status().message());
      return;
    }
    recommendation = *rec;
  }
  if (schemes.empty()) {
    // No scheme given but an io section: plan the recommended one.
    if (doc.is_object() && !doc.contains("scheme") && recommendation.is_object()) {
      schemes.push_back(recommendation["scheme"].get<std::string>());
    } else {
      schemes.push_back(doc.is_object() ? doc.value("scheme", std::string("none")) : "none");
    }
  }
  nlohmann::json plans = nlohmann::json::array();
  for (const auto& scheme : schemes) {
    if (doc.is_object()) doc["scheme"] = scheme;
    auto in = protect::ShardingInputFromJson(doc);
    if (!in.ok()) {
      ctx.Fail(kExitUsage, "plan protection: " + in.status().message());
      return;
    }
    auto rep = protect::PlanProtection(*in);
    if (!rep.ok()) {
      ctx.Fail(rep.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed,
               "plan protection: " + rep.status().message());
      return;
    }
    auto out = protect::ToJson(*rep, in->scheme);
    if (!recommendation.is_null()) out["recommendation"] = recommendation;
    if (!opt.ranks) {
      for (auto& g : out["groups"]) g.erase("ranks");
    }
    plans.push_back(std::move(out));
  }
  if (plans.size() == 1) {
    ctx.Emit(plans[0], PrintTable);
    return;
  }
  ctx.Emit(nlohmann::json{{"plans", plans}}, [](const nlohmann::json& d) {
    for (const auto& p : d["plans"]) PrintTable(p);
  });
}

}  // namespace

void RegisterProtectionPlanCommand(CLI::App& plan, CtlContext& ctx) {
  auto opt = std::make_shared<Options>();
  auto* cmd = plan.add_subcommand(
      "protection",
      "per-rank slot layout and bytes, and guaranteed node failures per sharding group "
      "(input JSON: layout, scheme, buffers; see docs/protection.md)");
  cmd->add_option("-i,--input", opt->input, "input JSON file, '-' = stdin")->required();
  cmd->add_option("--scheme", opt->scheme,
                  "override the scheme, e.g. arc1+aec; a comma-separated list compares several "
                  "(output {\"plans\": [...]})");
  cmd->add_flag("!--no-ranks", opt->ranks, "omit the per-rank layouts from the output");
  cmd->callback([&ctx, opt] { Run(ctx, *opt); });
}

}  // namespace reft::ctl
