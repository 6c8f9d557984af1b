/// \file scheme.cc
/// \brief Scheme parsing and canonical text.

#include "reft/protect/scheme.h"

#include <cctype>
#include <sstream>

namespace reft::protect {
namespace {

Result<int> ParseCount(const std::string& part, size_t prefix) {
  if (part.size() == prefix) return 1;
  int v = 0;
  for (size_t i = prefix; i < part.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(part[i])) || v > 1000) {
      return Status::InvalidArgument("scheme component '" + part + "': expected a count after '" +
                                     part.substr(0, prefix) + "'");
    }
    v = v * 10 + (part[i] - '0');
  }
  if (v < 1) return Status::InvalidArgument("scheme component '" + part + "': count must be >= 1");
  return v;
}

}  // namespace

Result<Scheme> Scheme::Parse(const std::string& text) {
  Scheme s;
  std::string lower;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) lower += static_cast<char>(std::tolower(c));
  }
  if (lower.empty() || lower == "none") return s;
  std::stringstream in(lower);
  std::string part;
  while (std::getline(in, part, '+')) {
    if (part.rfind("arc", 0) == 0) {
      if (s.arc != 0) return Status::InvalidArgument("scheme '" + text + "': arc given twice");
      REFT_ASSIGN_OR_RETURN(s.arc, ParseCount(part, 3));
    } else if (part == "aec") {
      if (s.aec) return Status::InvalidArgument("scheme '" + text + "': aec given twice");
      s.aec = true;
    } else if (part.rfind("rs", 0) == 0) {
      if (s.rs != 0) return Status::InvalidArgument("scheme '" + text + "': rs given twice");
      REFT_ASSIGN_OR_RETURN(s.rs, ParseCount(part, 2));
    } else if (part == "aor") {
      s.aor = true;
    } else {
      return Status::InvalidArgument("scheme '" + text + "': unknown component '" + part +
                                     "' (expected arc<r>, aec, rs<r>, aor, none)");
    }
  }
  return s;
}

std::string Scheme::ToString() const {
  std::string out;
  auto add = [&](const std::string& p) { out += (out.empty() ? "" : "+") + p; };
  if (arc > 0) add("arc" + std::to_string(arc));
  if (aec) add("aec");
  if (rs > 0) add("rs" + std::to_string(rs));
  if (aor) add("aor");
  return out.empty() ? "none" : out;
}

}  // namespace reft::protect
