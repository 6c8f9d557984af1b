// Named test points (base/include/reft/test_point.h): the in-process hook and Pause a unit test
// arms, and the pause of a real process armed from its environment and released through a FIFO
// (a child process, test_point_probe.cc).
#include "reft/test_point.h"
#include "test_point_pause.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "reft/thread.h"

extern char** environ;

using namespace std::chrono_literals;
namespace tp = reft::test_point;

namespace {

constexpr const char* kPoint = "test-point-under-test";

// The test's side of REFT_TEST_PAUSE_DIR: waits for `<point>.reached` (an inotify event, not
// a poll with sleeps) and releases the process held there.
class PauseDir {
 public:
  PauseDir() {
    char tmpl[] = "/tmp/reft-test-point-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    inotify_ = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    REQUIRE(inotify_ >= 0);
    REQUIRE(inotify_add_watch(inotify_, dir_.c_str(), IN_MOVED_TO | IN_CREATE) >= 0);
  }
  ~PauseDir() {
    close(inotify_);
    std::filesystem::remove_all(dir_);
  }
  const std::string& dir() const { return dir_; }
  std::string Reached(const std::string& point) const { return dir_ + "/" + point + ".reached"; }

  bool WaitReached(const std::string& point, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!std::filesystem::exists(Reached(point))) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{inotify_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) < 0) return false;
      char events[4096];
      while (read(inotify_, events, sizeof(events)) > 0) {
      }
    }
    return true;
  }
  // Takes the marker away (the next arrival writes it anew) and lets the process go on.
  void Release(const std::string& point) {
    REQUIRE(unlink(Reached(point).c_str()) == 0);
    const int fd = open((dir_ + "/" + point + ".resume").c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    close(fd);
  }

 private:
  std::string dir_;
  int inotify_ = -1;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What the child wrote so far without waiting (its stdout is a non-blocking pipe).
std::string Drain(int fd) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Reads the child's stdout until it holds `want` (or ends).
std::string ReadUntil(int fd, const std::string& want) {
  std::string out;
  while (out.find(want) == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 30000) <= 0) break;
    std::string more = Drain(fd);
    if (more.empty()) break;  // end of file
    out += more;
  }
  return out;
}

}  // namespace

TEST_CASE("a test point with nothing armed passes at once and calls nothing", "[base][test_point]") {
  int calls = 0;
  {
    tp::ScopedHook hook([&](const tp::Arrival&) { ++calls; });
  }
  tp::Reach(kPoint, "job");
  CHECK(calls == 0);
}

TEST_CASE("a scoped hook sees every arrival with its point, job and reaching object", "[base][test_point]") {
  std::vector<std::string> seen;
  const int self = 0;
  {
    tp::ScopedHook outer([&](const tp::Arrival& a) { seen.push_back("outer " + std::string(a.point)); });
    {
      tp::ScopedHook inner([&](const tp::Arrival& a) {
        seen.push_back(std::string(a.point) + " " + std::string(a.job) + (a.who == &self ? " self" : ""));
      });
      tp::Reach(kPoint, "job-a", &self);
      tp::Reach("other-point");
    }
    tp::Reach(kPoint, "job-b");  // the outer hook is back
  }
  CHECK(seen == std::vector<std::string>{std::string(kPoint) + " job-a self", "other-point ", "outer " + std::string(kPoint)});
}

TEST_CASE("a pause holds the first matching arrival until it is released", "[base][test_point]") {
  const int node_a = 0, node_b = 0;
  tp::Pause pause(kPoint, "job", &node_b);
  std::atomic<bool> passed{false};
  tp::Reach(kPoint, "job", &node_a);   // another node: passes
  tp::Reach(kPoint, "other", &node_b);  // another job: passes
  reft::Thread t("reft-test-tp", [&] {
    tp::Reach(kPoint, "job", &node_b);
    passed = true;
  });
  REQUIRE(pause.WaitHeld(30s));
  CHECK_FALSE(passed.load());
  tp::Reach(kPoint, "job", &node_b);  // while one is held, later arrivals pass
  pause.Release();
  t.join();
  CHECK(passed.load());
}

TEST_CASE("a pause that is never reached says so, and going releases a held thread", "[base][test_point]") {
  {
    tp::Pause pause(kPoint, "job");
    CHECK_FALSE(pause.WaitHeld(10ms));
  }
  std::atomic<bool> passed{false};
  reft::Thread t;
  {
    tp::Pause pause(kPoint, "job");
    t = reft::Thread("reft-test-tp", [&] {
      tp::Reach(kPoint, "job");
      passed = true;
    });
    REQUIRE(pause.WaitHeld(30s));
    CHECK_FALSE(passed.load());
  }
  t.join();
  CHECK(passed.load());
}

TEST_CASE("a process stops at the points its environment arms until the test opens the FIFO",
          "[base][test_point]") {
  PauseDir dir;
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("REFT_TEST_PAUSE_", 0) != 0) env.push_back(*e);
  }
  env.push_back("REFT_TEST_PAUSE_AT=probe-a,probe-b");
  env.push_back("REFT_TEST_PAUSE_DIR=" + dir.dir());
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = {REFT_TEST_POINT_PROBE, "probe-a", "probe-c", "probe-b"};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out[2];
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  pid_t child = -1;
  REQUIRE(posix_spawn(&child, argv[0], &actions, nullptr, argv.data(), envp.data()) == 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  REQUIRE(fcntl(out[0], F_SETFL, O_NONBLOCK) == 0);

  REQUIRE(dir.WaitReached("probe-a", 30s));
  CHECK(ReadFile(dir.Reached("probe-a")) == std::to_string(child) + " job-x\n");
  CHECK(Drain(out[0]).empty());  // held before it said anything
  dir.Release("probe-a");

  // probe-c is not armed: passed without a stop, up to probe-b.
  REQUIRE(dir.WaitReached("probe-b", 30s));
  CHECK(ReadUntil(out[0], "passed probe-c\n") == "passed probe-a\npassed probe-c\n");
  CHECK(Drain(out[0]).empty());
  dir.Release("probe-b");

  CHECK(ReadUntil(out[0], "passed probe-b\n") == "passed probe-b\n");
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  close(out[0]);
}
