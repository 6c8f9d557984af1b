// reft_bench_peer: FetchRegion throughput over loopback (sealed slot in shared memory ->
// checksummed 4 MiB chunks -> client buffer) against a raw TCP transfer of the same bytes from
// the same mapping in the same run (1 MiB send()s, recv() straight into the destination).
// --transport bulk (reftd's default on a plain-text Peer channel) or grpc (its choice under
// TLS). Prints JSON lines; the ratio tcp time / fetch time is the figure to compare across
// machines.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "reft/peer/peer_options.h"
#include "reft/store/snapshot_store.h"
#include "reft/units.h"
#include "bench_util.h"
#include "loopback_peer.h"

using namespace reft;
using Clock = std::chrono::steady_clock;

using bench::Die;
using bench::LoopbackPeer;
using bench::Median;

namespace {

// One raw TCP transfer of `size` bytes from `src` to `dst` over 127.0.0.1; returns seconds.
double TcpOnce(const uint8_t* src, uint8_t* dst, uint64_t size, uint64_t chunk) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, reinterpret_cast<sockaddr*>(&a), &al) != 0) {
    Die("tcp listen", Status::FromErrno(errno, "bind/listen"));
  }
  auto t0 = Clock::now();
  std::thread sender([&] {
    int s = accept(ls, nullptr, nullptr);
    for (uint64_t off = 0; off < size;) {
      ssize_t n = send(s, src + off, std::min(chunk, size - off), 0);
      if (n <= 0) Die("tcp send", Status::FromErrno(errno, "send"));
      off += static_cast<uint64_t>(n);
    }
    close(s);
  });
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    Die("tcp connect", Status::FromErrno(errno, "connect"));
  }
  for (uint64_t off = 0; off < size;) {
    ssize_t n = recv(c, dst + off, size - off, 0);
    if (n <= 0) Die("tcp recv", Status::FromErrno(errno, "recv"));
    off += static_cast<uint64_t>(n);
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  sender.join();
  close(c);
  close(ls);
  return secs;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size = 256ull << 20;
  int reps = 5;
  int streams = 1;
  bool tune_malloc = true;
  std::string transport = "bulk";
  std::string shm_root = "/dev/shm";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) {
      auto r = ParseByteSize(argv[++i]);
      if (!r.ok()) Die("--size", r.status());
      size = *r;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--no-malloc-tuning") {
      tune_malloc = false;
    } else if (a == "--streams" && i + 1 < argc) {
      streams = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--shm-dir" && i + 1 < argc) {
      shm_root = argv[++i];
    } else if (a == "--transport" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "bulk" || std::string(argv[i + 1]) == "grpc")) {
      transport = argv[++i];
    } else {
      std::fprintf(stderr, "usage: reft_bench_peer [--size BYTES] [--reps N] [--streams N] [--transport bulk|grpc] [--no-malloc-tuning] [--shm-dir DIR]\n");
      return 2;
    }
  }
  // Before any thread exists (see TuneMallocForPeerStreams; reftd should do the same).
  if (tune_malloc && !peer::TuneMallocForPeerStreams()) {
    std::fprintf(stderr, "reft_bench_peer: mallopt refused a setting\n");
  }
  std::string dir = shm_root + "/reft-bench-peer-" + std::to_string(getpid());
  store::StoreOptions so;
  so.shm_dir = dir;
  so.chunk_size = peer::kMaxWireChunk;  // sealed chunks == wire chunks: the server hashes nothing
  auto st = store::SnapshotStore::Open(so);
  if (!st.ok()) Die("open store", st.status());
  store::RankKey rank{"bench", 0, 0, 0};
  if (Status s = (*st)->ConfigureRank(rank, {{"params", size}}); !s.ok()) Die("configure", s);
  {
    auto w = (*st)->BeginWrite(rank, 1);
    if (!w.ok()) Die("begin write", w.status());
    std::mt19937_64 rng(42);
    auto* p = reinterpret_cast<uint64_t*>((*w)->region_data(0));
    for (uint64_t i = 0; i < size / 8; ++i) p[i] = rng();
  }
  if (Status s = (*st)->Seal(rank, 1); !s.ok()) Die("seal", s);
  auto slot = (*st)->Get(rank, 1);
  if (!slot.ok()) Die("get", slot.status());

  LoopbackPeer source(st->get(), transport == "bulk");
  peer::PeerClient& client = source.client();
  const std::string& addr = source.address();

  std::vector<uint8_t> dst(size);
  std::memset(dst.data(), 0, size);  // pre-fault
  const uint8_t* src_bytes = (*slot)->region_data(0);
  std::vector<double> fetch_s, tcp_s;
  for (int r = 0; r <= reps; ++r) {  // r == 0 is the warm-up
    auto t0 = Clock::now();
    // `streams` concurrent FetchRegion calls on disjoint byte ranges (the restore path's
    // bounded concurrency), sharing the peer's channel.
    std::vector<Status> results(streams);
    std::vector<std::thread> workers;
    const uint64_t part = (size / streams + 4095) & ~uint64_t{4095};
    for (int k = 0; k < streams; ++k) {
      uint64_t b0 = std::min(size, part * k), b1 = std::min(size, part * (k + 1));
      workers.emplace_back([&, k, b0, b1] {
        results[k] = client.FetchRegion(addr, rank, 1, "params", dst.data() + b0, b1 - b0, b0);
      });
    }
    for (auto& w : workers) w.join();
    Status s;
    for (auto& rs : results) if (!rs.ok() && s.ok()) s = rs;
    double g = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!s.ok()) Die("FetchRegion", s);
    if (std::memcmp(dst.data(), src_bytes, size) != 0) Die("verify", Status::Corrupted("mismatch"));
    double t = TcpOnce(src_bytes, dst.data(), size, 1ull << 20);
    if (r == 0) continue;
    fetch_s.push_back(g);
    tcp_s.push_back(t);
  }
  const double gb = static_cast<double>(size) / 1e9;
  for (int r = 0; r < reps; ++r) {
    std::printf("{\"bench\":\"peer_fetch\",\"transport\":\"%s\",\"rep\":%d,\"streams\":%d,"
                "\"bytes\":%llu,\"fetch_gb_per_s\":%.3f,\"tcp_gb_per_s\":%.3f,\"ratio\":%.3f}\n",
                transport.c_str(), r, streams, static_cast<unsigned long long>(size),
                gb / fetch_s[r], gb / tcp_s[r], tcp_s[r] / fetch_s[r]);
  }
  double gm = Median(fetch_s), tm = Median(tcp_s);
  std::printf("{\"bench\":\"peer_fetch_median\",\"transport\":\"%s\",\"streams\":%d,"
              "\"malloc_tuning\":%s,\"bytes\":%llu,\"reps\":%d,\"fetch_gb_per_s\":%.3f,"
              "\"tcp_gb_per_s\":%.3f,\"ratio\":%.3f}\n",
              transport.c_str(), streams, tune_malloc ? "true" : "false",
              static_cast<unsigned long long>(size), reps, gb / gm, gb / tm, tm / gm);
  slot->reset();
  source.Stop();
  (void)(*st)->RemoveJob("bench");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
