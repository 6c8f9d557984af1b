#include "pipeline.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "reft/client.h"

namespace reft::has_bench {

namespace {

double Now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void SleepFor(double s) {
  if (s <= 0) return;
  timespec ts{static_cast<time_t>(s), static_cast<long>((s - static_cast<double>(static_cast<time_t>(s))) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One stage process. `prev`/`next` are the socketpair ends towards stage i-1 / i+1 (-1 at the
// ends). Returns its result (error set on failure).
StageResult RunStage(const PipelineOptions& o, int stage, int prev, int next) {
  StageResult r;
  r.stage = stage;
  auto fail = [&](const std::string& what) {
    r.error = what;
    return r;
  };
  ClientOptions co;
  co.socket_path = o.socket;
  co.job = o.job;
  co.pp = stage;
  co.layout.pp = o.stages;
  std::unique_ptr<Client> client;
  for (int attempt = 0;; ++attempt) {
    auto c = Client::Connect(co);
    if (c.ok()) {
      client = std::move(*c);
      break;
    }
    if (attempt > 100) return fail("connect: " + c.status().ToString());
    SleepFor(0.05);
  }
  std::unique_ptr<EmulatedBuffer> buf;
  if (o.mode != Mode::kNone) {
    auto b = EmulatedBuffer::Create(o.bytes);
    if (!b.ok()) return fail("emulated buffer: " + b.status().ToString());
    buf = std::move(*b);
    std::memset(buf->data(), stage + 1, o.bytes);
    BufferOptions bo;
    bo.memory = MemoryLocation::kEmulated;
    Status st = client->Register("params", buf->data(), o.bytes, bo);
    if (!st.ok()) return fail("register: " + st.ToString());
    // Every snapshot mode uses the hint page (for the `copying` flag of the contention model);
    // only HAS sends bubble hints and the pipeline description, so the others are ungated.
    HasPipelineHint hint;
    if (o.mode == Mode::kHas) {
      hint = {o.stages, stage, o.micro_batches, o.forward_s, o.backward_s};
    }
    st = client->EnableHas(hint);
    if (!st.ok()) return fail("enable HAS: " + st.ToString());
  }
  const bool hints = o.mode == Mode::kHas;
  auto copying = [&] {
    if (!buf) return false;
    auto c = client->has_counters();
    return c.ok() && c->copying;
  };
  // Timed compute on the emulated device, stretched while a copy is in flight.
  auto compute = [&](double seconds) {
    double end = Now() + seconds;
    for (;;) {
      const double t = Now();
      if (t >= end) break;
      const double slice = std::min(0.0005, end - t);
      const bool busy = copying();
      SleepFor(slice);
      if (busy) end += o.interference * slice;
    }
  };
  // A blocking receive; the wait is a device bubble (hinted in HAS mode).
  auto recv = [&](int fd) {
    char byte;
    pollfd p{fd, POLLIN, 0};
    const bool would_wait = ::poll(&p, 1, 0) == 0;
    if (hints && would_wait) (void)client->BubbleBegin();
    const bool ok = ReadAll(fd, &byte, 1);
    if (hints && would_wait) (void)client->BubbleEnd();
    return ok;
  };
  auto send = [&](int fd) {
    char byte = 1;
    return WriteAll(fd, &byte, 1);
  };
  HasCounters base{};
  double sum_iter = 0, sum_wait = 0;
  const int total = o.warmup + o.iterations;
  for (int it = 0; it < total; ++it) {
    if (it == o.warmup && buf) base = *client->has_counters();
    const bool measured = it >= o.warmup;
    const double t0 = Now();
    double wait = 0;
    if (o.mode != Mode::kNone) {
      Status st = client->Snapshot(it);
      if (!st.ok()) return fail("snapshot: " + st.ToString());
      if (o.mode == Mode::kBlocking) {
        const double tf = Now();
        st = client->Fence();
        wait = Now() - tf;
        if (!st.ok()) return fail("fence: " + st.ToString());
      }
    }
    // 1F1B: warm-up forwards, steady one-forward-one-backward, drain backwards.
    const int warm = std::min(o.stages - stage - 1, o.micro_batches);
    int f = 0, b = 0;
    auto forward = [&] {
      if (prev >= 0 && !recv(prev)) return false;
      compute(o.forward_s);
      if (next >= 0 && !send(next)) return false;
      ++f;
      return true;
    };
    auto backward = [&] {
      if (next >= 0 && !recv(next)) return false;
      compute(o.backward_s);
      if (prev >= 0 && !send(prev)) return false;
      ++b;
      return true;
    };
    for (int i = 0; i < warm; ++i)
      if (!forward()) return fail("p2p closed in warm-up");
    while (f < o.micro_batches) {
      if (!forward() || !backward()) return fail("p2p closed in steady state");
    }
    while (b < o.micro_batches)
      if (!backward()) return fail("p2p closed in drain");
    // Optimizer-step sync: stage 0 ends last; its token runs down the pipeline.
    if (prev >= 0 && !recv(prev)) return fail("step token lost");
    if (next >= 0 && !send(next)) return fail("step token not sent");
    if (o.mode == Mode::kNaive || o.mode == Mode::kHas) {
      const double tf = Now();
      Status st = client->Fence();  // the deadline: the optimizer is about to modify the buffer
      wait = Now() - tf;
      if (!st.ok()) return fail("fence: " + st.ToString());
      if (measured && wait > o.miss_threshold_s) r.deadline_misses++;
    }
    compute(o.optimizer_s);
    if (buf) std::memcpy(buf->data(), &it, sizeof(it));  // the optimizer modifies the state
    if (measured) {
      sum_iter += Now() - t0;
      sum_wait += wait;
      r.max_fence_wait = std::max(r.max_fence_wait, wait);
      if (buf) r.snapshot_bytes += o.bytes;
    }
  }
  if (buf) {
    (void)client->Fence();
    HasCounters c = *client->has_counters();
    r.bubble_bytes = c.bubble_bytes - base.bubble_bytes;
    r.compute_bytes = c.compute_bytes - base.compute_bytes;
    r.landed_in_bubble_bytes = c.landed_in_bubble_bytes - base.landed_in_bubble_bytes;
  }
  r.t_iter = sum_iter / o.iterations;
  r.fence_wait = sum_wait / o.iterations;
  (void)client->Close();
  return r;
}

std::string Serialize(const StageResult& r) {
  std::ostringstream s;
  s.precision(17);
  s << r.stage << ' ' << r.t_iter << ' ' << r.fence_wait << ' ' << r.max_fence_wait << ' '
    << r.deadline_misses << ' ' << r.snapshot_bytes << ' ' << r.bubble_bytes << ' '
    << r.compute_bytes << ' ' << r.landed_in_bubble_bytes << ' ' << (r.error.empty() ? "-" : r.error);
  return s.str();
}

bool Deserialize(const std::string& line, StageResult* r) {
  std::istringstream s(line);
  s >> r->stage >> r->t_iter >> r->fence_wait >> r->max_fence_wait >> r->deadline_misses >>
      r->snapshot_bytes >> r->bubble_bytes >> r->compute_bytes >> r->landed_in_bubble_bytes;
  std::getline(s, r->error);
  if (!r->error.empty() && r->error[0] == ' ') r->error.erase(0, 1);
  if (r->error == "-") r->error.clear();
  return !s.fail() || s.eof();
}

}  // namespace

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kNone: return "none";
    case Mode::kBlocking: return "blocking";
    case Mode::kNaive: return "naive_async";
    case Mode::kHas: return "has";
  }
  return "?";
}

Result<Mode> ParseMode(const std::string& s) {
  for (Mode m : {Mode::kNone, Mode::kBlocking, Mode::kNaive, Mode::kHas}) {
    if (s == ModeName(m)) return m;
  }
  if (s == "naive") return Mode::kNaive;
  return Status::InvalidArgument("mode '" + s + "' is none|blocking|naive_async|has");
}

Result<std::vector<StageResult>> RunPipeline(const PipelineOptions& o) {
  if (o.stages < 1 || o.micro_batches < 1 || o.iterations < 1) {
    return Status::InvalidArgument("stages, micro_batches and iterations must be >= 1");
  }
  std::vector<int> left(o.stages, -1), right(o.stages, -1);  // stage i's ends towards i-1, i+1
  for (int i = 0; i + 1 < o.stages; ++i) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      return Status::IoError(std::string("socketpair: ") + std::strerror(errno));
    }
    right[i] = sv[0];
    left[i + 1] = sv[1];
  }
  std::vector<int> pids, outs;
  for (int s = 0; s < o.stages; ++s) {
    int pfd[2];
    if (::pipe2(pfd, O_CLOEXEC) != 0) return Status::IoError("pipe2 failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pfd[0]);
      for (int i = 0; i < o.stages; ++i) {
        if (i != s) {
          if (left[i] >= 0 && i != s + 1) ::close(left[i]);
          if (right[i] >= 0 && i != s - 1) ::close(right[i]);
        }
      }
      StageResult r = RunStage(o, s, left[s], right[s]);
      const std::string line = Serialize(r) + "\n";
      (void)WriteAll(pfd[1], line.data(), line.size());
      ::_exit(r.error.empty() ? 0 : 1);
    }
    ::close(pfd[1]);
    pids.push_back(pid);
    outs.push_back(pfd[0]);
  }
  for (int i = 0; i < o.stages; ++i) {
    if (left[i] >= 0) ::close(left[i]);
    if (right[i] >= 0) ::close(right[i]);
  }
  std::vector<StageResult> results;
  Status first;
  for (int s = 0; s < o.stages; ++s) {
    std::string line;
    char c;
    while (::read(outs[s], &c, 1) == 1 && c != '\n') line.push_back(c);
    ::close(outs[s]);
    int status = 0;
    ::waitpid(pids[s], &status, 0);
    StageResult r;
    if (line.empty() || !Deserialize(line, &r)) {
      if (first.ok()) first = Status::Internal("stage " + std::to_string(s) + " died (status " + std::to_string(status) + ")");
      continue;
    }
    if (!r.error.empty() && first.ok()) first = Status::Internal("stage " + std::to_string(s) + ": " + r.error);
    results.push_back(r);
  }
  if (!first.ok()) return first;
  return results;
}

Result<std::unique_ptr<ReftdProcess>> ReftdProcess::Start(const std::string& reftd,
                                                          const std::string& root,
                                                          uint64_t copy_bytes_per_second,
                                                          uint64_t has_chunk_bytes) {
  std::unique_ptr<ReftdProcess> p(new ReftdProcess());
  p->socket_ = root + "/reftd.sock";
  const std::string shm = root + "/shm", persist = root + "/persist";
  ::mkdir(shm.c_str(), 0700);
  ::mkdir(persist.c_str(), 0700);
  const std::string bw = std::to_string(copy_bytes_per_second);
  const std::string chunk = std::to_string(has_chunk_bytes);
  const std::string log = root + "/reftd.log";
  // reftd's config sets the copy engine's bandwidth (it overrides REFT_EMULATED_BANDWIDTH).
  const std::string config = root + "/reftd.toml";
  {
    FILE* f = std::fopen(config.c_str(), "w");
    if (f == nullptr) return Status::IoError("cannot write " + config);
    std::fprintf(f, "[emulated]\nbandwidth = %llu\n", static_cast<unsigned long long>(copy_bytes_per_second));
    std::fclose(f);
  }
  // A free loopback port for the (unused here) peer listener.
  int port = 0;
  {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd >= 0) ::close(fd);
      return Status::IoError("no free loopback port");
    }
    port = ntohs(a.sin_port);
    ::close(fd);
  }
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IoError("fork failed");
  if (pid == 0) {
    ::setenv("REFT_EMULATED_BANDWIDTH", bw.c_str(), 1);
    ::setenv("REFT_HAS_CHUNK", chunk.c_str(), 1);
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    ::execl(reftd.c_str(), reftd.c_str(), "--node-id", "has0", "--listen", listen.c_str(),
            "--socket", p->socket_.c_str(), "--shm-dir", shm.c_str(), "--persist-dir",
            persist.c_str(), "--log-level", "warn", "--config", config.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  p->pid_ = pid;
  for (int i = 0; i < 400; ++i) {
    struct stat st {};
    if (::stat(p->socket_.c_str(), &st) == 0) return p;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      p->pid_ = -1;
      return Status::Unavailable("reftd exited (status " + std::to_string(status) + "), see " + log);
    }
    SleepFor(0.025);
  }
  return Status::Timeout("reftd did not create " + p->socket_ + " within 10 s, see " + log);
}

ReftdProcess::~ReftdProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

}  // namespace reft::has_bench
