#pragma once
/// \file fuzz_util.h
/// \brief Shared helpers of the libFuzzer targets in tests/fuzz (see docs/fuzzing.md).
///
/// - FUZZ_CHECK: a property violation aborts with a message, so libFuzzer reports a crash and
///   saves the input (ASan/UBSan reports and uncaught exceptions do the same on their own).
/// - Seed-writer mode: with REFT_FUZZ_WRITE_SEEDS=DIR in the environment, a fuzzer writes its
///   seed inputs (made with reft's own encoders) into DIR and exits instead of fuzzing;
///   tests/fuzz/write_seeds.sh uses it to regenerate tests/fuzz/corpus/<target>/.
/// - Helpers for building inputs: a little-endian byte reader for harness parameters.

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#define FUZZ_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "\nFUZZ_CHECK failed: %s\n  at %s:%d\n  ", #cond, __FILE__,     \
                   __LINE__);                                                              \
      std::fprintf(stderr, __VA_ARGS__);                                                   \
      std::fputc('\n', stderr);                                                            \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

namespace reft::fuzz {

using Bytes = std::vector<uint8_t>;

/// \brief Receives one seed: a file name (no directories) and its bytes.
using SeedSink = std::function<void(const std::string& name, const Bytes& bytes)>;

/// \brief Called from LLVMFuzzerInitialize: when REFT_FUZZ_WRITE_SEEDS is set, runs `write`
/// with a sink that stores each seed in that directory, then exits the process.
inline void MaybeWriteSeeds(const std::function<void(const SeedSink&)>& write) {
  const char* dir = std::getenv("REFT_FUZZ_WRITE_SEEDS");
  if (dir == nullptr || *dir == '\0') return;
  int count = 0;
  write([&](const std::string& name, const Bytes& bytes) {
    const std::string path = std::string(dir) + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "cannot write seed %s\n", path.c_str());
      std::exit(1);
    }
    ++count;
  });
  std::fprintf(stderr, "wrote %d seeds to %s\n", count, dir);
  std::exit(0);
}

/// \brief Named counters printed at exit when REFT_FUZZ_STATS is set: how many inputs reached
/// each stage of a target (to check that a harness gets past the early refusals), e.g.
/// `REFT_FUZZ_STATS=1 ./segment_fuzzer -runs=0 DIR` replays DIR once and prints them.
inline void Count(const char* what) {
  using Counts = std::vector<std::pair<std::string, uint64_t>>;
  static Counts* counts = [] {
    if (std::getenv("REFT_FUZZ_STATS") == nullptr) return static_cast<Counts*>(nullptr);
    static Counts c;
    std::atexit([] {
      for (const auto& [name, n] : c) std::fprintf(stderr, "stat %-32s %lu\n", name.c_str(), (unsigned long)n);
    });
    return &c;
  }();
  if (counts == nullptr) return;
  for (auto& [name, n] : *counts) {
    if (name == what) {
      ++n;
      return;
    }
  }
  counts->emplace_back(what, 1);
}

/// \brief Appends little-endian integers (seed construction).
inline void PutLe(Bytes* out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

/// \brief Consumes harness parameters from the front of the input; reads past the end give 0.
class Params {
 public:
  Params(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  uint64_t Le(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n && left_ > 0; ++i, ++p_, --left_) v |= uint64_t{*p_} << (8 * i);
    return v;
  }
  uint8_t U8() { return static_cast<uint8_t>(Le(1)); }
  /// The next `n` bytes (fewer at the end).
  Bytes Take(size_t n) {
    n = n < left_ ? n : left_;
    Bytes out(p_, p_ + n);
    p_ += n;
    left_ -= n;
    return out;
  }
  const uint8_t* data() const { return p_; }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

/// \brief An anonymous memory file (memfd) holding `bytes`; -1 on failure. The caller closes it.
inline int MemfdWith(const uint8_t* data, size_t size, const char* name = "reft-fuzz") {
  int fd = ::memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) {
      ::close(fd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

/// \brief The lowest free descriptor number: equal before and after an input means the code
/// under test leaked no fd (a leak takes the lowest free number first).
inline int LowestFreeFd() {
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
  return fd;
}

/// \brief A fresh directory under $REFT_FUZZ_TMPDIR, else /dev/shm (tmpfs, like reftd's
/// shm_dir), else $TMPDIR or /tmp; removed with its contents on destruction (static instances:
/// at exit).
class TempDir {
 public:
  explicit TempDir(const char* prefix) {
    const char* env = std::getenv("REFT_FUZZ_TMPDIR");
    const char* tmp = std::getenv("TMPDIR");
    std::string base = env && *env ? env
                       : ::access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : tmp && *tmp ? tmp : "/tmp";
    std::string tmpl = base + "/" + prefix + "-XXXXXX";
    FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp %s", tmpl.c_str());
    path_ = tmpl;
  }
  ~TempDir() {
    Clean();
    ::rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  /// Removes everything inside the directory (recursively), keeping the directory.
  void Clean() const { RemoveContents(path_); }
  static void RemoveContents(const std::string& dir) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return;
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      const std::string p = dir + "/" + n;
      if (::unlink(p.c_str()) != 0) {
        RemoveContents(p);
        ::rmdir(p.c_str());
      }
    }
    ::closedir(d);
  }

 private:
  std::string path_;
};

}  // namespace reft::fuzz
