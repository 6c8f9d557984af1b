#pragma once
/// \file json_integer.h
/// \brief Reads an integer out of a JSON value without trusting the value's type or range.
///
/// nlohmann's `get<T>()` converts whatever number it holds with a C++ cast: a float out of T's
/// range (`1e44` read as uint64_t) is undefined behaviour and an integer too large for T is
/// silently truncated. Manifests, slot metadata and etcd records are written by other processes
/// and read back after crashes, so every integer field goes through JsonInteger instead.
/// Header-only and generic over the JSON type, so reft_base does not depend on nlohmann.

#include <cstdint>
#include <limits>
#include <type_traits>

namespace reft {

/// \brief Stores `v` in `*out` when it is an integral JSON number (not a float, string or bool)
/// that T can hold; returns false and leaves `*out` alone otherwise.
template <typename T, typename Json>
bool JsonInteger(const Json& v, T* out) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "T must be an integer type");
  using Limits = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.template get<uint64_t>();
    if (u > static_cast<uint64_t>(Limits::max())) return false;
    *out = static_cast<T>(u);
    return true;
  }
  if (!v.is_number_integer()) return false;
  const int64_t s = v.template get<int64_t>();
  if constexpr (std::is_signed_v<T>) {
    if (s < static_cast<int64_t>(Limits::min()) || s > static_cast<int64_t>(Limits::max())) {
      return false;
    }
  } else {
    if (s < 0 || static_cast<uint64_t>(s) > static_cast<uint64_t>(Limits::max())) return false;
  }
  *out = static_cast<T>(s);
  return true;
}

}  // namespace reft
