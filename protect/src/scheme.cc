/// \file scheme.cc
/// \brief Scheme parsing and canonical text. This is the one parser of the protection string
/// (docs/protocol.md): the client checks it early with it and reftd again on hello.

#include "reft/protect/scheme.h"

#include <algorithm>
#include <cctype>

namespace reft::protect {
namespace {

constexpr int kMaxCount = 16;       ///< r of arcR / rsR; more is never a sensible overhead
constexpr size_t kMaxText = 64;

Status BadTerm(const std::string& text, const std::string& term, const std::string& why) {
  return Status::InvalidArgument("protection '" + text + "': term '" + term + "' " + why +
                                 " (expected none | arcR | aec | rsR | aor joined with '+')");
}

/// The R of "arcR"/"rsR": digits only, 1..16; no digits at all means 1 ("arc" = "arc1").
Result<int> ParseCount(const std::string& text, const std::string& term, size_t prefix) {
  if (term.size() == prefix) return 1;
  if (term.size() > prefix + 2) return BadTerm(text, term, "needs a count R in 1..16");
  int v = 0;
  for (size_t i = prefix; i < term.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(term[i]))) {
      return BadTerm(text, term, "has a bad count after '" + term.substr(0, prefix) + "'");
    }
    v = v * 10 + (term[i] - '0');
  }
  if (v < 1 || v > kMaxCount) return BadTerm(text, term, "needs a count R in 1..16");
  return v;
}

}  // namespace

Result<Scheme> Scheme::Parse(const std::string& text) {
  if (text.size() > kMaxText) {
    return Status::InvalidArgument("protection string longer than " + std::to_string(kMaxText) +
                                   " bytes");
  }
  std::string lower;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) lower += static_cast<char>(std::tolower(c));
  }
  if (lower.empty()) return Status::InvalidArgument("protection is empty (use \"none\")");
  Scheme s;
  bool saw_none = false;
  int terms = 0;
  for (size_t start = 0; start <= lower.size();) {
    size_t end = lower.find('+', start);
    if (end == std::string::npos) end = lower.size();
    const std::string term = lower.substr(start, end - start);
    start = end + 1;
    ++terms;
    if (term == "none") {
      saw_none = true;
    } else if (term == "aec") {
      if (s.aec) return BadTerm(text, term, "appears twice");
      s.aec = true;
    } else if (term == "aor") {
      if (s.aor) return BadTerm(text, term, "appears twice");
      s.aor = true;
    } else if (term.rfind("arc", 0) == 0) {
      if (s.arc != 0) return BadTerm(text, term, "appears twice");
      REFT_ASSIGN_OR_RETURN(s.arc, ParseCount(text, term, 3));
    } else if (term.rfind("rs", 0) == 0) {
      if (s.rs != 0) return BadTerm(text, term, "appears twice");
      REFT_ASSIGN_OR_RETURN(s.rs, ParseCount(text, term, 2));
    } else if (term.empty()) {
      return Status::InvalidArgument("protection '" + text + "': empty term around '+'");
    } else {
      return BadTerm(text, term, "is not a protection scheme (unknown component '" + term + "')");
    }
  }
  if (saw_none && terms > 1) {
    return Status::InvalidArgument("protection '" + text + "': 'none' cannot be combined");
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

Status Scheme::CheckFits(int dp) const {
  std::string why;
  int needs = 1;
  auto need = [&](const std::string& part, int members) {
    if (dp >= members) return;
    why += (why.empty() ? "" : ", ") + part + " needs dp >= " + std::to_string(members);
    needs = std::max(needs, members);
  };
  if (arc > 0) need("arc" + std::to_string(arc), arc + 1);
  if (aec) need("aec", 2);
  if (rs > 0) need("rs" + std::to_string(rs), rs + 1);
  if (why.empty()) return Status::OK();
  Scheme fits = *this;  // the strongest scheme of the same kinds this dp can hold
  fits.arc = std::min(arc, std::max(dp - 1, 0));
  fits.rs = std::min(rs, std::max(dp - 1, 0));
  fits.aec = aec && dp >= 2;
  return Status::InvalidArgument(
      "protection '" + ToString() + "' does not fit a layout with dp=" + std::to_string(dp) +
      ": " + why + " (a rank's state is protected by the other members of its data-parallel "
      "group); use protection='" + fits.ToString() + "' or a layout with dp >= " +
      std::to_string(needs));
}

}  // namespace reft::protect
