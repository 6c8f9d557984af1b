#include "reft/fault_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace reft {
namespace {

constexpr int kMaxRanges = 65536;

struct Range {
  std::atomic<uintptr_t> begin{0};  // 0 = free
  std::atomic<uintptr_t> end{0};
  std::atomic<uint64_t> faults{0};
};

Range g_ranges[kMaxRanges];
std::atomic<int> g_used{0};  // ranges [0, g_used) may be in use
std::atomic<uint64_t> g_repaired{0};
struct sigaction g_previous {};
std::once_flag g_installed;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  const int used = g_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    Range& r = g_ranges[i];
    const uintptr_t begin = r.begin.load(std::memory_order_acquire);
    const uintptr_t end = r.end.load(std::memory_order_acquire);
    if (begin <= 1 || addr < begin || addr >= end) continue;  // 1: being registered
    // The file under the mapping was shrunk: the whole range becomes private zero pages (one
    // mapping, however many pages were lost), and the access is retried on return.
    void* p = mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      r.faults.fetch_add(1, std::memory_order_relaxed);
      g_repaired.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    break;  // cannot repair: the default action below
  }
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL);  // returning re-executes the access: the process dies as before
}

void Install() {
  std::call_once(g_installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous);
  });
}

}  // namespace

FaultGuardedRange::FaultGuardedRange(void* addr, size_t len) {
  if (addr == nullptr || len == 0) return;
  Install();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  for (int i = 0; i < kMaxRanges; ++i) {
    uintptr_t expected = 0;
    // begin = 1 reserves the slot; the handler ignores it until the real bounds are stored.
    if (!g_ranges[i].begin.compare_exchange_strong(expected, 1)) continue;
    g_ranges[i].faults.store(0);
    g_ranges[i].end.store(begin + len, std::memory_order_release);
    g_ranges[i].begin.store(begin, std::memory_order_release);
    int used = g_used.load();
    while (used < i + 1 && !g_used.compare_exchange_weak(used, i + 1)) {
    }
    slot_ = i;
    return;
  }
}

FaultGuardedRange::~FaultGuardedRange() { Reset(); }

FaultGuardedRange::FaultGuardedRange(FaultGuardedRange&& o) noexcept : slot_(o.slot_) {
  o.slot_ = -1;
}

FaultGuardedRange& FaultGuardedRange::operator=(FaultGuardedRange&& o) noexcept {
  if (this != &o) {
    Reset();
    slot_ = o.slot_;
    o.slot_ = -1;
  }
  return *this;
}

bool FaultGuardedRange::Damaged() const {
  return slot_ >= 0 && g_ranges[slot_].faults.load(std::memory_order_relaxed) > 0;
}

void FaultGuardedRange::Reset() {
  if (slot_ < 0) return;
  g_ranges[slot_].end.store(0, std::memory_order_release);
  g_ranges[slot_].begin.store(0, std::memory_order_release);
  slot_ = -1;
}

uint64_t RepairedFaults() { return g_repaired.load(std::memory_order_relaxed); }

}  // namespace reft
