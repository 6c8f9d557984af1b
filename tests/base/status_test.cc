#include <catch2/catch.hpp>

#include "reft/result.h"

using reft::Result;
using reft::Status;
using reft::StatusCode;

namespace {
Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}
Status Quarter(int x, int* out) {
  REFT_ASSIGN_OR_RETURN(int h, Half(x));
  REFT_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::OK();
}
}  // namespace

TEST_CASE("Status carries code and message", "[base]") {
  Status ok;
  CHECK(ok.ok());
  CHECK(ok.ToString() == "ok");
  Status st = Status::OutOfMemory("limit reached");
  CHECK_FALSE(st.ok());
  CHECK(st.code() == StatusCode::kOutOfMemory);
  CHECK(st.ToString() == "out_of_memory: limit reached");
  CHECK(st.WithContext("snapshot").message() == "snapshot: limit reached");
}

TEST_CASE("Result propagates errors through the macros", "[base]") {
  int q = 0;
  CHECK(Quarter(8, &q).ok());
  CHECK(q == 2);
  Status st = Quarter(6, &q);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message() == "odd: 3");
  Result<int> from_ok_status{Status::OK()};
  CHECK(from_ok_status.status().code() == StatusCode::kInternal);
}
