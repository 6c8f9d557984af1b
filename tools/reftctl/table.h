#pragma once
/// \file table.h
/// \brief Aligned plain-text tables for reftctl's human output.

#include <string>
#include <vector>

namespace reft::ctl {

/// \brief Prints `rows` under `headers` with columns padded to their widest cell.
void PrintTable(const std::vector<std::string>& headers,
                const std::vector<std::vector<std::string>>& rows);

}  // namespace reft::ctl
