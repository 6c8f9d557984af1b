#include "etcd_fixture.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "keys.h"
#include "reft/coord/etcd_client.h"
#include "reft/coord/etcd_control_plane.h"
#include "reft/coord/records.h"

namespace reft::testing {

namespace {

std::string EtcdBinary() {
  if (access("/usr/bin/etcd", X_OK) == 0) return "/usr/bin/etcd";
  return "etcd";  // execvp searches PATH
}

}  // namespace

namespace {

bool BindableOnLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// Ports from 10000 up that the kernel never picks for a bind to port 0 or an outgoing
// connection: etcd starts a moment after the port is chosen, and in that moment a bulk
// listener (which binds port 0) or any connection may otherwise take an ephemeral one.
std::vector<int> PortsOutsideTheEphemeralRange() {
  int low = 0, high = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  std::vector<int> ports;
  if (!(range >> low >> high)) return ports;
  for (int p = 10000; p < 65536; ++p) {
    if (p < low || p > high) ports.push_back(p);
  }
  return ports;
}

// Test processes running at once must not hand out the same port: each port handed out holds
// a lock on byte `port` of one file for as long as the process lives (record locks go away
// with their process). The Python harness takes the same locks (tools/localcluster).
bool ClaimAmongTestProcesses(int port) {
  static const int fd = [] {
    const char* tmp = getenv("TMPDIR");
    const std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/reft-test-ports.lock";
    return open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  }();
  if (fd < 0) return true;  // no lock file: only the bind check protects the port
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  l.l_start = port;
  l.l_len = 1;
  return fcntl(fd, F_SETLK, &l) == 0;
}

}  // namespace

int FreeLoopbackPort() {
  static std::mutex mu;
  static std::set<int> handed_out;  // two calls in a row must not return the same port
  static const std::vector<int> candidates = PortsOutsideTheEphemeralRange();
  static std::mt19937 random(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  for (int attempt = 0; attempt < 1000 && !candidates.empty(); ++attempt) {
    int port = candidates[random() % candidates.size()];
    if (handed_out.count(port) == 0 && BindableOnLoopback(port) &&
        ClaimAmongTestProcesses(port)) {
      handed_out.insert(port);
      return port;
    }
  }
  throw std::runtime_error("no free loopback port outside the ephemeral range");
}

namespace {

coord::EtcdControlPlaneOptions TestTimings(const EtcdCluster& etcd) {
  coord::EtcdControlPlaneOptions o;
  o.etcd.endpoints = etcd.endpoints();
  o.etcd.request_timeout = std::chrono::milliseconds(1000);
  o.lease.floor = std::chrono::seconds(2);
  o.coordinator.retry_interval = std::chrono::milliseconds(50);
  // On a loaded test machine a loopback RPC can take over a second; the tests that check which
  // path completions take must not see a fall-back to etcd for that reason.
  o.coordinator.report_timeout = std::chrono::seconds(10);
  return o;
}

peer::ControlPlaneFactory Make(const coord::EtcdControlPlaneOptions& o) {
  auto f = coord::MakeEtcdControlPlane(o);
  if (!f.ok()) throw std::runtime_error(f.status().ToString());
  return *f;
}

}  // namespace

peer::ControlPlaneFactory EtcdControlPlane(const EtcdCluster& etcd) {
  return Make(TestTimings(etcd));
}

peer::ControlPlaneFactory EtcdControlPlane(const EtcdCluster& etcd, const coord::LeaseSizing& lease) {
  coord::EtcdControlPlaneOptions o = TestTimings(etcd);
  o.lease = lease;
  return Make(o);
}

peer::ControlPlaneFactory EtcdControlPlane(
    const EtcdCluster& etcd, const std::function<void(coord::EtcdControlPlaneOptions&)>& adjust) {
  coord::EtcdControlPlaneOptions o = TestTimings(etcd);
  adjust(o);
  return Make(o);
}

// On tmpfs: etcd fsyncs every write, and on a disk shared with a loaded build (the test
// command runs tests in parallel) one fsync can take seconds: leases expire and commits stall
// for reasons that have nothing to do with what is tested.
EtcdCluster::EtcdCluster(int members)
    : dir_("reft-etcd", std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "") {
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = "e" + std::to_string(i);
    m.client_port = FreeLoopbackPort();
    m.peer_port = FreeLoopbackPort();
    m.data_dir = dir_.path() + "/" + m.name + ".data";
    m.log_path = dir_.path() + "/" + m.name + ".log";
    initial_cluster_ += (i ? "," : "") + m.name + "=http://127.0.0.1:" + std::to_string(m.peer_port);
    members_.push_back(m);
  }
  for (auto& m : members_) Spawn(m, true);
  if (!WaitHealthy()) {
    std::string logs;
    for (int i = 0; i < size(); ++i) logs += "---- " + members_[i].name + "\n" + Log(i);
    throw std::runtime_error("etcd did not become healthy (" + last_error_ + "):\n" + logs);
  }
}

EtcdCluster::~EtcdCluster() {
  for (auto& m : members_) {
    if (m.pid > 0) {
      kill(m.pid, SIGCONT);
      kill(m.pid, SIGKILL);
      waitpid(m.pid, nullptr, 0);
    }
  }
}

void EtcdCluster::Spawn(Member& m, bool new_cluster) {
  const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
  const std::string client = "http://127.0.0.1:" + std::to_string(m.client_port);
  std::vector<std::string> args = {
      EtcdBinary(), "--name", m.name, "--data-dir", m.data_dir,
      "--listen-client-urls", client, "--advertise-client-urls", client,
      "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
      "--initial-cluster", initial_cluster_,
      "--initial-cluster-state", new_cluster ? "new" : "existing",
      "--initial-cluster-token", "reft-test",
      // Fast elections and 1 s minimum leases, so failure tests take seconds, not tens.
      "--heartbeat-interval", "50", "--election-timeout", "500",
      "--logger", "zap", "--log-outputs", m.log_path};
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    setpgid(0, 0);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  m.pid = pid;
}

std::vector<std::string> EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (const auto& m : members_) out.push_back("127.0.0.1:" + std::to_string(m.client_port));
  return out;
}

std::string EtcdCluster::endpoints_csv() const {
  std::string out;
  for (const auto& e : endpoints()) out += (out.empty() ? "" : ",") + e;
  return out;
}

void EtcdCluster::Kill(int i) {
  Member& m = members_.at(i);
  if (m.pid <= 0) return;
  kill(m.pid, SIGCONT);
  kill(m.pid, SIGKILL);
  waitpid(m.pid, nullptr, 0);
  m.pid = -1;
}

void EtcdCluster::Restart(int i) {
  Kill(i);
  Spawn(members_.at(i), false);
  if (!WaitHealthy()) throw std::runtime_error("etcd did not recover:\n" + Log(i));
}

namespace {
// Whether every thread of `pid` is stopped (state T or t in /proc/<pid>/task/<tid>/stat).
bool AllThreadsStopped(pid_t pid) {
  std::error_code ec;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  bool any = false;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');  // the name may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= line.size()) return false;
    const char state = line[close + 2];
    if (state != 'T' && state != 't') return false;
    any = true;
  }
  return any && !ec;
}
}  // namespace

void EtcdCluster::Pause(int i) {
  const pid_t pid = members_.at(i).pid;
  kill(pid, SIGSTOP);
  // kill() returns before the signal stops every thread: a call made right after could still
  // be answered. Paused means no thread of etcd runs any more.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!AllThreadsStopped(pid)) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("etcd member " + std::to_string(i) + " did not stop on SIGSTOP");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
void EtcdCluster::Resume(int i) { kill(members_.at(i).pid, SIGCONT); }
bool EtcdCluster::running(int i) const { return members_.at(i).pid > 0; }

bool EtcdCluster::WaitHealthy(double seconds) const {
  coord::EtcdOptions o;
  o.endpoints = endpoints();
  o.request_timeout = std::chrono::milliseconds(500);
  auto client = coord::EtcdClient::Create(o);
  if (!client.ok()) return false;
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < end) {
    auto r = (*client)->Get("/reft-test/health");
    if (r.ok()) return true;
    last_error_ = r.status().ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string EtcdCluster::Log(int i) const {
  std::ifstream f(members_.at(i).log_path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void TakeCoordinatorKey(const EtcdCluster& etcd, const std::string& job, const std::string& holder) {
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto client = coord::EtcdClient::Create(eo);
  if (!client.ok()) throw std::runtime_error(client.status().ToString());
  const std::string key = coord::keys::Coordinator(job);
  Status s = (*client)->Delete(key).status();
  if (s.ok()) s = (*client)->Put(key, coord::Encode(coord::NodeRef{holder, -1})).status();
  if (!s.ok()) throw std::runtime_error("taking the coordinator key of " + job + ": " + s.ToString());
}

}  // namespace reft::testing
