// Why adoption is slow on some machines: the cost of the first read of every page of a fresh
// MAP_SHARED mapping of an existing tmpfs file, with and without MADV_POPULATE_READ/WRITE
// first. Reports, per variant, the first XXH3 pass over the mapping as a ratio of a second pass
// over the same (now warm) mapping in the same run. JSON lines.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "reft/checksum.h"
#include "bench_util.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

using reft::bench::SecondsOf;

namespace {

}  // namespace

int main(int argc, char** argv) {
  uint64_t bytes = 256ull << 20;
  int runs = 3;
  std::string base = "/dev/shm";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bytes" && i + 1 < argc) {
      bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--dir" && i + 1 < argc) {
      base = argv[++i];
    } else {
      std::fprintf(stderr, "usage: first_access_bench [--bytes N] [--runs R] [--dir TMPFS_DIR]\n");
      return 2;
    }
  }
  if (runs < 1 || bytes < 4096) return 2;
  const std::string path = base + "/reft-first-access-" + std::to_string(::getpid());
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::perror("first_access_bench: create");
    return 1;
  }
  {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return 1;
    std::memset(p, 7, bytes);  // the file's pages exist from here on, as after a daemon crash
    ::munmap(p, bytes);
  }
  struct Variant {
    const char* name;
    int advice;  // 0: none
  };
  const Variant variants[] = {{"none", 0},
                              {"populate_read", MADV_POPULATE_READ},
                              {"populate_write", MADV_POPULATE_WRITE}};
  volatile uint64_t sink = 0;
  for (const auto& v : variants) {
    std::vector<double> ratio, populate_s, first_gbps;
    for (int r = 0; r < runs; ++r) {
      auto* p = static_cast<uint8_t*>(
          ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      if (p == MAP_FAILED) return 1;
      double tp = SecondsOf([&] {
        if (v.advice != 0) (void)::madvise(p, bytes, v.advice);
      });
      double t1 = SecondsOf([&] { sink = sink + reft::Checksum64(p, bytes); });
      double t2 = SecondsOf([&] { sink = sink + reft::Checksum64(p, bytes); });
      ::munmap(p, bytes);
      ratio.push_back(t2 / t1);  // first-pass throughput relative to the warm pass
      populate_s.push_back(tp);
      first_gbps.push_back(static_cast<double>(bytes) / t1 / 1e9);
    }
    std::sort(ratio.begin(), ratio.end());
    std::sort(populate_s.begin(), populate_s.end());
    std::sort(first_gbps.begin(), first_gbps.end());
    std::printf(
        "{\"bench\":\"first_read_after_mmap_vs_warm_read\",\"advice\":\"%s\",\"bytes\":%llu,"
        "\"runs\":%d,\"ratio_min\":%.3f,\"ratio_med\":%.3f,\"ratio_max\":%.3f,"
        "\"first_pass_gbps_med\":%.2f,\"populate_s_med\":%.4f}\n",
        v.name, static_cast<unsigned long long>(bytes), runs, ratio.front(),
        ratio[ratio.size() / 2], ratio.back(), first_gbps[first_gbps.size() / 2],
        populate_s[populate_s.size() / 2]);
  }
  ::close(fd);
  ::unlink(path.c_str());
  return 0;
}
