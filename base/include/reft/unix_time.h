#pragma once
/// \file unix_time.h
/// \brief Wall-clock time as unix milliseconds, the unit of every timestamp reft records or
/// publishes (etcd records, health reports).

#include <chrono>
#include <cstdint>

namespace reft {

inline int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace reft
