#include "copy_engine.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "reft/kernels/emulated.h"
#include "reft/mutex.h"

namespace reft::kernels {
namespace {

// Layout of the counter page: the 64-bit value, then a 32-bit generation that Store() bumps
// so waiters can sleep on it with a (shared, cross-process) futex.
struct CounterPage {
  uint64_t value;
  uint32_t generation;
};
constexpr size_t kCounterBytes = 4096;
constexpr uint64_t kPaceChunk = 1ull << 20;

uint32_t* GenerationWord(uint64_t* word) {
  return &reinterpret_cast<CounterPage*>(word)->generation;
}

}  // namespace

Result<std::shared_ptr<SharedCounter>> SharedCounter::Create() {
  int fd = memfd_create("reft-event", MFD_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "memfd_create(reft-event)");
  if (ftruncate(fd, kCounterBytes) != 0) {
    int err = errno;
    close(fd);
    return Status::FromErrno(err, "ftruncate(reft-event)");
  }
  void* p = mmap(nullptr, kCounterBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return Status::FromErrno(err, "mmap(reft-event)");
  }
  return std::shared_ptr<SharedCounter>(new SharedCounter(fd, static_cast<uint64_t*>(p)));
}

Result<std::shared_ptr<SharedCounter>> SharedCounter::Open(int fd) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(CounterPage)) {
    return Status::InvalidArgument("event fd is not a reft event counter");
  }
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return Status::FromErrno(errno, "dup(event fd)");
  void* p = mmap(nullptr, kCounterBytes, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(own);
    return Status::FromErrno(err, "mmap(event fd)");
  }
  return std::shared_ptr<SharedCounter>(new SharedCounter(own, static_cast<uint64_t*>(p)));
}

SharedCounter::~SharedCounter() {
  munmap(word_, kCounterBytes);
  close(fd_);
}

void SharedCounter::Store(uint64_t value) {
  __atomic_store_n(word_, value, __ATOMIC_RELEASE);
  __atomic_add_fetch(GenerationWord(word_), 1, __ATOMIC_RELEASE);
  syscall(SYS_futex, GenerationWord(word_), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

uint64_t SharedCounter::Load() const { return __atomic_load_n(word_, __ATOMIC_ACQUIRE); }

Status SharedCounter::WaitAtLeast(uint64_t target, int64_t timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    uint32_t gen = __atomic_load_n(GenerationWord(word_), __ATOMIC_ACQUIRE);
    if (Load() >= target) return Status::OK();
    timespec ts{0, 100 * 1000 * 1000};  // re-check at least every 100 ms
    if (timeout_ms >= 0) {
      auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds(0)) {
        return Status::Timeout("event not reached after " + std::to_string(timeout_ms) + " ms");
      }
      auto ns = std::min<int64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(left).count(), 100000000);
      ts = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    }
    syscall(SYS_futex, GenerationWord(word_), FUTEX_WAIT, gen, &ts, nullptr, 0);
  }
}

std::string EncodeEventTarget(uint64_t target) {
  std::string out(sizeof(target), '\0');
  std::memcpy(out.data(), &target, sizeof(target));
  return out;
}

Result<uint64_t> DecodeEventTarget(const std::string& handle) {
  if (handle.size() != sizeof(uint64_t)) {
    return Status::InvalidArgument("emulated event handle must be 8 bytes, got " +
                                   std::to_string(handle.size()));
  }
  uint64_t target;
  std::memcpy(&target, handle.data(), sizeof(target));
  return target;
}

Result<EventExport> RecordHostReadyEvent() {
  static Mutex mu;
  static std::shared_ptr<SharedCounter> counter;
  static uint64_t last = 0;
  MutexLock lock(mu);
  if (!counter) {
    REFT_ASSIGN_OR_RETURN(counter, SharedCounter::Create());
  }
  counter->Store(++last);
  EventExport out;
  out.ipc_handle = EncodeEventTarget(last);
  out.fd = counter->fd();  // borrowed: lives as long as the process
  return out;
}

Status WaitCounterEvent(const EventExport& event, int64_t timeout_ms) {
  if (event.fd < 0) return Status::OK();
  REFT_ASSIGN_OR_RETURN(uint64_t target, DecodeEventTarget(event.ipc_handle));
  REFT_ASSIGN_OR_RETURN(auto counter, SharedCounter::Open(event.fd));
  return counter->WaitAtLeast(target, timeout_ms);
}

Result<std::unique_ptr<HostCopyStream>> HostCopyStream::Create(bool paced,
                                                               const std::string& name) {
  REFT_ASSIGN_OR_RETURN(auto done, SharedCounter::Create());
  std::unique_ptr<HostCopyStream> stream(new HostCopyStream(paced, std::move(done)));
  stream->worker_ = std::thread([s = stream.get(), name] { s->Run(name); });
  return stream;
}

HostCopyStream::HostCopyStream(bool paced, std::shared_ptr<SharedCounter> done)
    : paced_(paced), done_(std::move(done)) {}

HostCopyStream::~HostCopyStream() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void HostCopyStream::Run(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  MutexLock lock(mu_);
  for (;;) {
    lock.Wait(cv_, [&]() REFT_REQUIRES(mu_) { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ with nothing left: pending work always drains first
    auto op = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    Status st = op();
    lock.Lock();
    if (!st.ok() && first_error_.ok()) first_error_ = st;
    ++finished_;
    cv_.notify_all();
  }
}

void HostCopyStream::EnqueueWork(std::function<Status()> work) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(work));
    ++enqueued_;
  }
  cv_.notify_all();
}

void PacedCopy(void* dst, const void* src, uint64_t size, uint64_t bytes_per_second) {
  if (bytes_per_second == 0) {
    std::memcpy(dst, src, size);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t done = 0; done < size;) {
    uint64_t n = std::min(kPaceChunk, size - done);
    std::memcpy(static_cast<uint8_t*>(dst) + done, static_cast<const uint8_t*>(src) + done, n);
    done += n;
    std::this_thread::sleep_until(
        start + std::chrono::nanoseconds(static_cast<int64_t>(1e9 * done / bytes_per_second)));
  }
}

void HostCopyStream::EnqueueCopy(void* dst, const void* src, uint64_t size) {
  const bool paced = paced_;
  EnqueueWork([dst, src, size, paced] {
    PacedCopy(dst, src, size, paced ? EmulatedCopyBandwidth() : 0);
    return Status::OK();
  });
}

Status HostCopyStream::Synchronize() {
  MutexLock lock(mu_);
  const uint64_t target = enqueued_;
  lock.Wait(cv_, [&]() REFT_REQUIRES(mu_) { return finished_ >= target; });
  Status st = first_error_;
  first_error_ = Status::OK();
  return st;
}

Status HostCopyStream::WaitEvent(const EventExport& event) {
  if (event.fd < 0) return Status::OK();
  REFT_ASSIGN_OR_RETURN(uint64_t target, DecodeEventTarget(event.ipc_handle));
  REFT_ASSIGN_OR_RETURN(auto counter, SharedCounter::Open(event.fd));
  // A trainer that never signals must not wedge the daemon's stream forever.
  EnqueueWork([counter, target] { return counter->WaitAtLeast(target, 60000); });
  return Status::OK();
}

Result<EventExport> HostCopyStream::RecordEvent() {
  uint64_t target;
  {
    // Target and queue position are taken together so targets are stored in increasing order.
    MutexLock lock(mu_);
    target = ++recorded_;
    auto done = done_;
    queue_.push_back([done, target] {
      done->Store(target);
      return Status::OK();
    });
    ++enqueued_;
  }
  cv_.notify_all();
  EventExport out;
  out.ipc_handle = EncodeEventTarget(target);
  out.fd = done_->fd();  // borrowed: valid while the stream lives (SCM_RIGHTS dups it)
  return out;
}

}  // namespace reft::kernels
