#pragma once
/// \file units.h
/// \brief Byte sizes as humans write them ("64M", "1.5G") and as logs print them.

#include <cstdint>
#include <string>

#include "reft/result.h"

namespace reft {

/// \brief Parses "123", "64K", "64KiB", "1.5G", "2T" (binary multiples; case-insensitive).
/// \return the size in bytes, or InvalidArgument naming the text.
Result<uint64_t> ParseByteSize(const std::string& text);

/// \brief "512 B", "1.5 KiB", "3.0 GiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace reft
