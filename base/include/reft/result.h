#pragma once
/// \file result.h
/// \brief Result<T>: a value or a non-OK Status.

#include <cassert>
#include <optional>
#include <utility>

#include "reft/status.h"

namespace reft {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("Result constructed from an OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T ValueOr(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace reft

#define REFT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                               \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

/// `REFT_ASSIGN_OR_RETURN(auto x, Foo());` assigns the value or returns the error.
#define REFT_ASSIGN_OR_RETURN(lhs, rexpr) \
  REFT_ASSIGN_OR_RETURN_IMPL(REFT_CONCAT(_reft_result_, __LINE__), lhs, rexpr)
