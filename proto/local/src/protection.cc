#include "reft/local_proto/protection.h"

#include <cctype>
#include <string>

namespace reft::local_proto {
namespace {

constexpr int kMaxR = 16;

Status BadTerm(const std::string& text, const std::string& term, const std::string& why) {
  return Status::InvalidArgument("protection '" + text + "': term '" + term + "' " + why +
                                 " (expected none | arcR | aec | rsR joined with '+')");
}

// Parses the R of "arcR"/"rsR": 1..16, digits only.
Result<int> ParseR(const std::string& text, const std::string& term, size_t prefix) {
  std::string digits = term.substr(prefix);
  if (digits.empty() || digits.size() > 2) return BadTerm(text, term, "needs a count R in 1..16");
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return BadTerm(text, term, "has a bad count");
  }
  int r = std::stoi(digits);
  if (r < 1 || r > kMaxR) return BadTerm(text, term, "needs a count R in 1..16");
  return r;
}

}  // namespace

std::string ProtectionSpec::ToString() const {
  if (none()) return "none";
  std::string out;
  auto add = [&](const std::string& t) { out += (out.empty() ? "" : "+") + t; };
  if (arc) add("arc" + std::to_string(arc));
  if (aec) add("aec");
  if (rs) add("rs" + std::to_string(rs));
  return out;
}

Result<ProtectionSpec> ParseProtection(const std::string& text) {
  if (text.empty()) return Status::InvalidArgument("protection is empty (use \"none\")");
  if (text.size() > 64) return Status::InvalidArgument("protection string longer than 64 bytes");
  ProtectionSpec spec;
  bool saw_none = false;
  int terms = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('+', start);
    if (end == std::string::npos) end = text.size();
    std::string term = text.substr(start, end - start);
    ++terms;
    if (term == "none") {
      saw_none = true;
    } else if (term == "aec") {
      if (spec.aec) return BadTerm(text, term, "appears twice");
      spec.aec = true;
    } else if (term.rfind("arc", 0) == 0) {
      if (spec.arc) return BadTerm(text, term, "appears twice");
      REFT_ASSIGN_OR_RETURN(spec.arc, ParseR(text, term, 3));
    } else if (term.rfind("rs", 0) == 0) {
      if (spec.rs) return BadTerm(text, term, "appears twice");
      REFT_ASSIGN_OR_RETURN(spec.rs, ParseR(text, term, 2));
    } else {
      return BadTerm(text, term, "is not a protection scheme");
    }
    start = end + 1;
  }
  if (saw_none && terms > 1) {
    return Status::InvalidArgument("protection '" + text + "': 'none' cannot be combined");
  }
  return spec;
}

}  // namespace reft::local_proto
