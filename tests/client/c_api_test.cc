// The C ABI: versioned options, integer codes equal to reft::StatusCode, thread-local errors.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <thread>

#include "reft/reft.h"
#include "server_fixture.h"

extern "C" int reft_c_header_check(const char* socket_path);

using reft::testing::RandomBytes;
using reft::testing::ServerFixture;

TEST_CASE("C ABI codes mirror reft::StatusCode") {
  CHECK(REFT_CORRUPTED == static_cast<int>(reft::StatusCode::kCorrupted));
  CHECK(REFT_INTERNAL == static_cast<int>(reft::StatusCode::kInternal));
  CHECK(std::string(reft_status_name(REFT_OUT_OF_MEMORY)) == "out_of_memory");
  CHECK(std::string(reft_status_name(99)) == "unknown");
}

TEST_CASE("C ABI round trip, errors and thread-local messages") {
  ServerFixture f;
  CHECK(reft_c_header_check(f.socket.c_str()) == REFT_OK);

  reft_options o;
  reft_options_init(&o);
  o.socket_path = f.socket.c_str();
  o.job = "c-job";
  o.protection = "arc17";
  reft_client* c = nullptr;
  CHECK(reft_connect(&o, &c) == REFT_INVALID_ARGUMENT);
  CHECK(c == nullptr);
  CHECK(std::string(reft_last_error()).find("arc17") != std::string::npos);
  // Another thread has its own last error.
  std::string other;
  std::thread([&] { other = reft_last_error(); }).join();
  CHECK(other.empty());

  o.protection = nullptr;
  REQUIRE(reft_connect(&o, &c) == REFT_OK);
  CHECK(std::string(reft_last_error()).empty());
  std::vector<uint8_t> buf = RandomBytes(12346, 3);  // whole bf16 elements
  const std::vector<uint8_t> want = buf;
  reft_buffer_options bo;
  reft_buffer_options_init(&bo);
  bo.kind = REFT_KIND_UNIQUE;
  bo.dtype = "bfloat16";
  bo.layer = 2;
  REQUIRE(reft_register(c, "opt", buf.data(), buf.size(), &bo) == REFT_OK);
  CHECK(reft_register(c, "opt", buf.data(), buf.size(), nullptr) == REFT_ALREADY_EXISTS);
  bo.kind = 7;
  CHECK(reft_register(c, "bad", buf.data(), buf.size(), &bo) == REFT_INVALID_ARGUMENT);
  bo.struct_size = 4;  // a caller compiled against a struct that cannot be this old
  CHECK(reft_register(c, "bad", buf.data(), buf.size(), &bo) == REFT_INVALID_ARGUMENT);
  REQUIRE(reft_snapshot(c, 9) == REFT_OK);
  REQUIRE(reft_fence(c) == REFT_OK);
  int committed = 0;
  REQUIRE(reft_wait_committed(c, 9, 10000, &committed) == REFT_OK);
  CHECK(committed == 1);
  REQUIRE(reft_wait_committed(c, 10, 20, &committed) == REFT_OK);
  CHECK(committed == 0);
  std::memset(buf.data(), 0, buf.size());
  int64_t step = -2;
  REQUIRE(reft_restore(c, &step) == REFT_OK);
  CHECK(step == 9);
  CHECK(buf == want);
  CHECK(reft_close(c) == REFT_OK);
  CHECK(reft_close(nullptr) == REFT_OK);
  CHECK(reft_snapshot(nullptr, 1) == REFT_INVALID_ARGUMENT);
}
