#pragma once
/// \file table.h
/// \brief Aligned plain-text tables for reftctl's human output.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace reft::ctl {

/// \brief Prints `rows` under `headers` with columns padded to their widest cell.
void PrintTable(const std::vector<std::string>& headers,
                const std::vector<std::vector<std::string>>& rows);

/// \brief A job's owner as JSON ({uid, gid, group}) in a table cell: "uid 1000", or
/// "uid 1000+team" with the group sharing the job; "-" for null (no owner recorded).
std::string OwnerText(const nlohmann::json& owner);

}  // namespace reft::ctl
