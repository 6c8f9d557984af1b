#include "reft/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace reft {

Result<uint64_t> ParseByteSize(const std::string& text) {
  auto bad = [&] {
    return Status::InvalidArgument("bad byte size '" + text +
                                   "': expected a number with an optional K/M/G/T suffix");
  };
  if (text.empty()) return bad();
  char* end = nullptr;
  errno = 0;
  double number = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || errno != 0 || !(number >= 0) || std::isinf(number)) return bad();
  std::string suffix;
  for (const char* p = end; *p; ++p) {
    if (!std::isspace(static_cast<unsigned char>(*p))) {
      suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
    }
  }
  if (suffix.size() > 1 && (suffix.substr(1) == "IB" || suffix.substr(1) == "B")) suffix.resize(1);
  double mult = 1;
  if (suffix.empty() || suffix == "B") mult = 1;
  else if (suffix == "K") mult = 1024.0;
  else if (suffix == "M") mult = 1024.0 * 1024;
  else if (suffix == "G") mult = 1024.0 * 1024 * 1024;
  else if (suffix == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else return bad();
  double bytes = number * mult;
  if (bytes >= 18446744073709551615.0) return bad();
  if (suffix.empty() && std::floor(number) != number) return bad();
  return static_cast<uint64_t>(bytes);
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  return buf;
}

}  // namespace reft
