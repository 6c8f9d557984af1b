#include "table.h"

#include <algorithm>
#include <cstdio>

namespace reft::ctl {

void PrintTable(const std::vector<std::string>& headers,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) width[i] = headers[i].size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < width.size(); ++i) {
      std::string cell = i < cells.size() ? cells[i] : "";
      if (i + 1 < width.size()) cell.resize(width[i] + 2, ' ');
      line += cell;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  };
  print_row(headers);
  for (const auto& row : rows) print_row(row);
}

std::string OwnerText(const nlohmann::json& owner) {
  if (owner.is_null()) return "-";
  std::string s = "uid " + std::to_string(owner["uid"].get<uint32_t>());
  if (!owner["gid"].is_null()) {
    const std::string group = owner["group"];
    s += "+" + (group.empty() ? "gid " + std::to_string(owner["gid"].get<uint32_t>()) : group);
  }
  return s;
}

}  // namespace reft::ctl
