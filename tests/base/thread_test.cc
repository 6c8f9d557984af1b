#include <pthread.h>

#include <string>

#include <catch2/catch.hpp>

#include "reft/thread.h"

namespace {
std::string CurrentName() {
  char name[32] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}
}  // namespace

TEST_CASE("reft::Thread names its thread before running the function", "[base]") {
  std::string seen;
  reft::Thread t("reft-test-name", [&] { seen = CurrentName(); });
  t.join();
  CHECK(seen == "reft-test-name");
  CHECK(CurrentName() != "reft-test-name");  // the caller's name is left alone
}

TEST_CASE("reft::Thread cuts a run-time name to the kernel's 15 characters", "[base]") {
  std::string seen;
  reft::Thread t(std::string("reft-copy-") + "123456789", [&] { seen = CurrentName(); });
  REQUIRE(t.joinable());
  t.join();
  CHECK(seen == "reft-copy-12345");
}

TEST_CASE("reft::Async names its thread and hands back the result", "[base]") {
  auto f = reft::Async("reft-test-async", [] { return CurrentName(); });
  CHECK(f.get() == "reft-test-async");
}
