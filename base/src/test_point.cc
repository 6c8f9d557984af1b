/// \file test_point.cc
/// \brief Named test points: the hook a unit test installs, and the pause of a real process at
/// the points its environment names (a FIFO the test opens to release it).

#include "reft/test_point.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace reft::test_point {

namespace internal {
// 1 until the first arrival read the environment: the first Reach always comes in.
std::atomic<uint8_t> g_maybe_armed{1};
}  // namespace internal

namespace {

struct Registry {
  Mutex mu;
  bool env_read REFT_GUARDED_BY(mu) = false;
  std::set<std::string, std::less<>> env_points REFT_GUARDED_BY(mu);
  std::string env_dir REFT_GUARDED_BY(mu);
  std::shared_ptr<const Hook> hook REFT_GUARDED_BY(mu);

  void UpdateArmedLocked() REFT_REQUIRES(mu) {
    const bool armed = !env_read || hook != nullptr || !env_points.empty();
    internal::g_maybe_armed.store(armed ? 1 : 0, std::memory_order_relaxed);
  }
};

Registry& TheRegistry() {
  static Registry* r = new Registry();  // never destroyed: threads may arrive during exit
  return *r;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "reft test point: %s\n", what.c_str());
  std::abort();
}

void ReadEnvironmentLocked(Registry& r) REFT_REQUIRES(r.mu) {
  r.env_read = true;
  const char* at = std::getenv("REFT_TEST_PAUSE_AT");
  if (at == nullptr || *at == '\0') return;
  const char* dir = std::getenv("REFT_TEST_PAUSE_DIR");
  if (dir == nullptr || *dir == '\0') Die("REFT_TEST_PAUSE_AT is set without REFT_TEST_PAUSE_DIR");
  r.env_dir = dir;
  std::string list = at;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    if (end > begin) r.env_points.insert(list.substr(begin, end - begin));
    begin = end + 1;
  }
}

// Blocks the calling thread at `point` until the test opens `<dir>/<point>.resume` for writing.
void PauseProcess(const std::string& dir, const Arrival& a) {
  const std::string base = dir + "/" + std::string(a.point);
  const std::string resume = base + ".resume", reached = base + ".reached";
  if (mkfifo(resume.c_str(), 0600) != 0 && errno != EEXIST) {
    Die("cannot create " + resume + ": " + std::strerror(errno));
  }
  // Written whole, then renamed: a test that sees `.reached` reads what it says.
  const std::string tmp = reached + ".tmp" + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) Die("cannot write " + tmp + ": " + std::strerror(errno));
  std::fprintf(f, "%d %.*s\n", static_cast<int>(getpid()), static_cast<int>(a.job.size()),
               a.job.data());
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), reached.c_str()) != 0) {
    Die("cannot write " + reached + ": " + std::strerror(errno));
  }
  int fd;
  do {
    fd = open(resume.c_str(), O_RDONLY);  // returns once the test opens it for writing
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) Die("cannot open " + resume + ": " + std::strerror(errno));
  close(fd);
}

}  // namespace

void internal::Arrive(const Arrival& arrival) {
  Registry& r = TheRegistry();
  std::shared_ptr<const Hook> hook;
  std::string pause_dir;
  {
    MutexLock lock(r.mu);
    if (!r.env_read) {
      ReadEnvironmentLocked(r);
      r.UpdateArmedLocked();
    }
    hook = r.hook;
    if (r.env_points.count(arrival.point) != 0) pause_dir = r.env_dir;
  }
  if (hook) (*hook)(arrival);
  if (!pause_dir.empty()) PauseProcess(pause_dir, arrival);
}

ScopedHook::ScopedHook(Hook hook) {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  previous_ = std::move(r.hook);
  r.hook = std::make_shared<const Hook>(std::move(hook));
  r.UpdateArmedLocked();
}

ScopedHook::~ScopedHook() {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  r.hook = std::move(previous_);
  r.UpdateArmedLocked();
}

}  // namespace reft::test_point
