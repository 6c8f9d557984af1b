// The dashboard, the alert rules and docs/metrics.md use exactly the metric names reftd
// exports: every reft_* name they mention exists, and every exported family is documented.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "reft/observability/metrics.h"

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  INFO(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Families from "# TYPE name kind" lines of the real exposition.
std::set<std::string> ExportedFamilies() {
  auto m = reft::observability::Metrics::Create("");
  REQUIRE(m.ok());
  std::set<std::string> out;
  std::istringstream in((*m)->Serialize());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) out.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  return out;
}

// reft_* identifiers in `text`, with the histogram series suffixes mapped to their family.
std::set<std::string> MentionedFamilies(const std::string& text) {
  static const std::regex kName("reft_[a-z0-9_]+");
  std::set<std::string> out;
  for (std::sregex_iterator it(text.begin(), text.end(), kName), end; it != end; ++it) {
    std::string name = it->str();
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        name.resize(name.size() - s.size());
      }
    }
    out.insert(name);
  }
  return out;
}

}  // namespace

TEST_CASE("monitoring files reference only exported metrics", "[names]") {
  const auto exported = ExportedFamilies();
  REQUIRE(exported.size() >= 12);
  for (const char* file : {"/deploy/monitoring/reft-alerts.yaml",
                           "/deploy/monitoring/reft-dashboard.json"}) {
    const auto mentioned = MentionedFamilies(ReadAll(std::string(REFT_SOURCE_DIR) + file));
    CHECK(mentioned.size() >= 5);
    for (const auto& name : mentioned) {
      INFO(file << " mentions " << name);
      CHECK(exported.count(name) == 1);
    }
  }
}

TEST_CASE("docs/metrics.md documents every exported family and no other", "[names]") {
  const auto exported = ExportedFamilies();
  const std::string doc = ReadAll(std::string(REFT_SOURCE_DIR) + "/docs/metrics.md");
  for (const auto& name : exported) {
    INFO(name);
    CHECK(doc.find("`" + name + "`") != std::string::npos);
  }
  for (const auto& name : MentionedFamilies(doc)) {
    INFO("docs/metrics.md mentions " << name);
    CHECK(exported.count(name) == 1);
  }
}
