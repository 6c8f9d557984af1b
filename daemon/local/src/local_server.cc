#include "reft/local/local_server.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "reft/mutex.h"
#include "reft/thread.h"
#include "session.h"

namespace reft::local {

struct LocalServer::Impl {
  LocalServerOptions options;
  store::SnapshotStore* store = nullptr;
  CommitCoordinator* coordinator = nullptr;
  ServerCounters counters;
  std::unique_ptr<JobOwners> own_owners;  // when the options name none
  StreamRings rings;
  HeldRanks held;
  SessionContext ctx;

  UniqueFd listen_fd, epoll_fd, wake_fd;
  reft::Thread loop;
  bool started = false;
  bool stopped = false;

  mutable Mutex mu;  // sessions + work queue
  std::condition_variable work_cv;
  std::vector<reft::Thread> workers REFT_GUARDED_BY(mu);
  std::deque<std::shared_ptr<Session>> work REFT_GUARDED_BY(mu);
  bool workers_exit REFT_GUARDED_BY(mu) = false;
  std::map<int, std::shared_ptr<Session>> by_fd REFT_GUARDED_BY(mu);  // sessions still in epoll
  // Sessions until their hang-up was processed.
  std::map<uint64_t, std::shared_ptr<Session>> alive REFT_GUARDED_BY(mu);
  // The uid of each session in `alive` and how many each uid holds (max_sessions_per_uid).
  std::map<uint64_t, uid_t> uid_of REFT_GUARDED_BY(mu);
  std::map<uid_t, uint32_t> sessions_of_uid REFT_GUARDED_BY(mu);
  uint64_t next_id REFT_GUARDED_BY(mu) = 1;
  std::atomic<bool> loop_exit{false};

  bool PeerAllowed(const PeerCredentials& c) const;
  /// Busy when the server, or the connecting uid, holds as many sessions as it may.
  Status RoomForSessionLocked(uid_t uid) const REFT_REQUIRES(mu);
  void AddSessionLocked(const std::shared_ptr<Session>& s, uid_t uid) REFT_REQUIRES(mu);
  void ForgetSessionLocked(uint64_t id) REFT_REQUIRES(mu);
  void Accept() REFT_EXCLUDES(mu);
  void OnReadable(const std::shared_ptr<Session>& s) REFT_EXCLUDES(mu);
  void HangUp(const std::shared_ptr<Session>& s) REFT_EXCLUDES(mu);  // loop thread
  void Schedule(const std::shared_ptr<Session>& s) REFT_EXCLUDES(mu);
  void LoopMain() REFT_EXCLUDES(mu);
  void WorkerMain() REFT_EXCLUDES(mu);
  void StartWorkerLocked() REFT_REQUIRES(mu);
};

bool LocalServer::Impl::PeerAllowed(const PeerCredentials& c) const {
  if (c.uid == 0 || c.uid == ::geteuid()) return true;
  if (std::find(options.allowed_uids.begin(), options.allowed_uids.end(), c.uid) !=
      options.allowed_uids.end()) {
    return true;
  }
  return std::find(options.allowed_gids.begin(), options.allowed_gids.end(), c.gid) !=
         options.allowed_gids.end();
}

Status LocalServer::Impl::RoomForSessionLocked(uid_t uid) const {
  if (alive.size() >= options.max_sessions) {
    return Status::Busy("reftd serves at most " + std::to_string(options.max_sessions) +
                        " clients");
  }
  auto it = sessions_of_uid.find(uid);
  if (it != sessions_of_uid.end() && it->second >= options.max_sessions_per_uid) {
    return Status::Busy("uid " + std::to_string(uid) + " already has " +
                        std::to_string(it->second) + " clients on this reftd, the most one uid "
                        "may have (local.max_sessions_per_uid = " +
                        std::to_string(options.max_sessions_per_uid) + ")");
  }
  return Status::OK();
}

void LocalServer::Impl::AddSessionLocked(const std::shared_ptr<Session>& s, uid_t uid) {
  alive[s->id()] = s;
  uid_of[s->id()] = uid;
  sessions_of_uid[uid]++;
}

void LocalServer::Impl::ForgetSessionLocked(uint64_t id) {
  alive.erase(id);
  auto it = uid_of.find(id);
  if (it == uid_of.end()) return;
  if (--sessions_of_uid[it->second] == 0) sessions_of_uid.erase(it->second);
  uid_of.erase(it);
}

void LocalServer::Impl::Schedule(const std::shared_ptr<Session>& s) {
  {
    MutexLock lock(mu);
    work.push_back(s);
  }
  work_cv.notify_one();
}

void LocalServer::Impl::Accept() {
  for (;;) {
    UniqueFd fd(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) return;  // EAGAIN (listen socket is non-blocking) or a transient error
    auto read = ReadPeerCredentials(fd.get());
    if (!read.ok()) {
      counters.rejected_peers++;
      continue;
    }
    const PeerCredentials& cred = *read;
    Status refuse;
    if (!PeerAllowed(cred)) {
      refuse = Status::PermissionDenied("uid " + std::to_string(cred.uid) + " gid " +
                                        std::to_string(cred.gid) +
                                        " is not allowed to use this reftd socket: an "
                                        "operator of the node lets it in with "
                                        "local.allowed_uids (or its group with "
                                        "local.allowed_gids) in reftd.toml");
    } else {
      MutexLock lock(mu);
      refuse = RoomForSessionLocked(cred.uid);
    }
    if (!refuse.ok()) {
      counters.rejected_peers++;
      // Tell the peer why, then hang up; a non-blocking send so a peer cannot stall the loop.
      if (!local_proto::SendFrame(fd.get(), local_proto::MessageType::kError, 0,
                                  local_proto::EncodeError(refuse))
               .ok()) {
        counters.failed_replies++;
      }
      continue;
    }
    timeval tv{options.send_timeout_ms / 1000, (options.send_timeout_ms % 1000) * 1000};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int raw = fd.get();
    std::shared_ptr<Session> s;
    {
      MutexLock lock(mu);
      s = std::make_shared<Session>(next_id++, std::move(fd), cred, ctx);
      by_fd[raw] = s;
      AddSessionLocked(s, cred.uid);
      // A strand may wait for another session of this node (a peer copy between ring
      // neighbours waits for the neighbour's publication, which its own strand makes): with
      // fewer workers than sessions they could all wait for strands that never get a worker.
      if (workers.size() < alive.size()) StartWorkerLocked();
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = raw;
    if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, raw, &ev) != 0) {
      HangUp(s);
      continue;
    }
    counters.accepted++;
  }
}

void LocalServer::Impl::HangUp(const std::shared_ptr<Session>& s) {
  ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, s->fd(), nullptr);
  {
    MutexLock lock(mu);
    by_fd.erase(s->fd());
  }
  if (s->EnqueueHangup()) Schedule(s);
}

void LocalServer::Impl::OnReadable(const std::shared_ptr<Session>& s) {
  auto frame = local_proto::RecvFrame(s->fd(), options.limits, 0);
  if (frame.ok()) {
    if (s->Enqueue(std::move(*frame))) Schedule(s);
    return;
  }
  const Status& st = frame.status();
  if (st.code() == StatusCode::kProtocol) {
    // Named, so that a client of another release can say which reftd refused it.
    if (!s->RejectFrame(st.WithContext("reftd " + options.daemon_version))) HangUp(s);
    return;
  }
  if (st.code() == StatusCode::kTimeout) return;  // spurious wake-up
  HangUp(s);  // EOF, reset or an I/O error: the client is gone
}

void LocalServer::Impl::LoopMain() {
  epoll_event events[64];
  while (!loop_exit.load()) {
    int n = ::epoll_wait(epoll_fd.get(), events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd.get()) continue;
      if (fd == listen_fd.get()) {
        Accept();
        continue;
      }
      std::shared_ptr<Session> s;
      {
        MutexLock lock(mu);
        auto it = by_fd.find(fd);
        if (it == by_fd.end()) continue;
        s = it->second;
      }
      // Read what is queued first (a last frame may precede the hang-up), then hang up.
      if (events[i].events & EPOLLIN) OnReadable(s);
      if (events[i].events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
        MutexLock lock(mu);
        if (by_fd.count(fd) == 0) continue;
      }
      if (events[i].events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
        // Drain whatever frames remain before the hang-up, bounded by the error budget.
        for (int k = 0; k < 64; ++k) {
          auto f = local_proto::RecvFrame(s->fd(), options.limits, 0);
          if (!f.ok()) break;
          if (s->Enqueue(std::move(*f))) Schedule(s);
        }
        HangUp(s);
      }
    }
  }
}

void LocalServer::Impl::WorkerMain() {
  for (;;) {
    std::shared_ptr<Session> s;
    {
      MutexLock lock(mu);
      lock.Wait(work_cv, [&]() REFT_REQUIRES(mu) { return workers_exit || !work.empty(); });
      if (work.empty()) return;  // workers_exit and nothing left
      s = std::move(work.front());
      work.pop_front();
    }
    if (s->Drain()) {
      MutexLock lock(mu);
      ForgetSessionLocked(s->id());
    }
  }
}

void LocalServer::Impl::StartWorkerLocked() {
  const size_t i = workers.size();
  workers.emplace_back("reft-copy-" + std::to_string(i), [this] { WorkerMain(); });
}

Result<std::unique_ptr<LocalServer>> LocalServer::Create(const LocalServerOptions& options,
                                                         store::SnapshotStore* store,
                                                         CommitCoordinator* coordinator,
                                                         ClusterHooks hooks) {
  if (store == nullptr || coordinator == nullptr || hooks.copier == nullptr ||
      hooks.restorer == nullptr) {
    return Status::InvalidArgument("LocalServer needs a store, a commit coordinator, a peer "
                                   "copier and a restore provider");
  }
  if (options.socket_path.empty()) return Status::InvalidArgument("socket path is empty");
  if (options.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::InvalidArgument("socket path '" + options.socket_path + "' is longer than " +
                                   std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
  }
  if (options.copy_threads < 1 || options.copy_threads > 64) {
    return Status::InvalidArgument("copy_threads must be between 1 and 64");
  }
  if (options.limits.max_fds_per_frame > 253 || options.limits.max_payload_bytes < 1024 ||
      options.limits.max_payload_bytes > (16u << 20)) {
    return Status::InvalidArgument("local channel limits out of range (fds <= 253, payload "
                                   "between 1 KiB and 16 MiB)");
  }
  std::unique_ptr<LocalServer> server(new LocalServer());
  server->impl_ = std::make_unique<Impl>();
  server->impl_->options = options;
  if (options.shard_chunk == 0 || options.peer_copy_timeout_ms <= 0) {
    return Status::InvalidArgument("shard_chunk and peer_copy_timeout_ms must be > 0");
  }
  Impl& d = *server->impl_;
  d.store = store;
  d.coordinator = coordinator;
  JobOwnership* owners = options.job_owners;
  if (owners == nullptr) {  // ownership is always enforced; without a record it lasts a run
    REFT_ASSIGN_OR_RETURN(d.own_owners, JobOwners::Open(""));
    owners = d.own_owners.get();
  }
  d.ctx = SessionContext{&d.options, store,        coordinator, hooks.copier, hooks.restorer,
                         &d.counters, owners, &d.rings,        &d.held};
  d.ctx.plans = hooks.plans;
  d.ctx.failures = hooks.failures;
  return server;
}

LocalServer::~LocalServer() { Stop(); }

Status LocalServer::Start() {
  Impl& d = *impl_;
  if (d.started) return Status::InvalidArgument("LocalServer already started");
  REFT_RETURN_NOT_OK(d.rings.Warm(d.options.stream_ring_bytes)
                         .WithContext("making the restore stream's ring ahead"));
  const std::string& path = d.options.socket_path;
  // A socket file nobody answers on is stale (a crashed reftd): replace it. One that answers
  // belongs to a running daemon: refuse rather than steal its clients.
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::AlreadyExists("'" + path + "' exists and is not a socket");
    }
    auto probe = local_proto::ConnectSeqpacket(path);
    if (probe.ok()) return Status::AlreadyExists("another reftd is serving '" + path + "'");
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno(errno, "removing stale socket '" + path + "'");
    }
  }
  d.listen_fd.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!d.listen_fd.valid()) return Status::FromErrno(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  mode_t mode = d.options.socket_mode;
  if (mode == 0) {
    mode = !d.options.allowed_uids.empty() ? 0666 : !d.options.allowed_gids.empty() ? 0660 : 0600;
  }
  // Bind under a umask that already yields the final mode: no window with a wider mode.
  mode_t old = ::umask(static_cast<mode_t>(~mode & 0777));
  int r = ::bind(d.listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  ::umask(old);
  if (r != 0) return Status::FromErrno(err, "binding '" + path + "'");
  if (::chmod(path.c_str(), mode) != 0) return Status::FromErrno(errno, "chmod '" + path + "'");
  if (::listen(d.listen_fd.get(), 128) != 0) return Status::FromErrno(errno, "listen");
  d.epoll_fd.reset(::epoll_create1(EPOLL_CLOEXEC));
  d.wake_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!d.epoll_fd.valid() || !d.wake_fd.valid()) return Status::FromErrno(errno, "epoll/eventfd");
  for (int fd : {d.listen_fd.get(), d.wake_fd.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(d.epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return Status::FromErrno(errno, "epoll_ctl");
    }
  }
  d.started = true;
  {
    MutexLock lock(d.mu);
    for (int i = 0; i < d.options.copy_threads; ++i) d.StartWorkerLocked();
  }
  d.loop = reft::Thread("reft-local", [&d] { d.LoopMain(); });
  return Status::OK();
}

void LocalServer::Stop() {
  if (!impl_) return;
  Impl& d = *impl_;
  if (!d.started || d.stopped) return;
  d.stopped = true;
  d.loop_exit = true;
  uint64_t one = 1;
  (void)!::write(d.wake_fd.get(), &one, sizeof(one));
  d.loop.join();
  // Hang up every session still connected; the workers run their cleanups.
  std::vector<std::shared_ptr<Session>> open;
  {
    MutexLock lock(d.mu);
    for (auto& [fd, s] : d.by_fd) open.push_back(s);
  }
  for (auto& s : open) d.HangUp(s);
  std::vector<reft::Thread> workers;
  {
    MutexLock lock(d.mu);
    d.workers_exit = true;
    workers.swap(d.workers);
  }
  d.work_cv.notify_all();
  for (auto& t : workers) t.join();
  ::unlink(d.options.socket_path.c_str());
  d.listen_fd.reset();
  d.epoll_fd.reset();
  d.wake_fd.reset();
}

std::vector<SessionInfo> LocalServer::Sessions() const {
  std::vector<std::shared_ptr<Session>> list;
  {
    MutexLock lock(impl_->mu);
    for (auto& [id, s] : impl_->alive) list.push_back(s);
  }
  std::vector<SessionInfo> out;
  for (auto& s : list) out.push_back(s->Info());
  return out;
}

LocalServerStats LocalServer::Stats() const {
  const ServerCounters& c = impl_->counters;
  return {c.accepted.load(), c.rejected_peers.load(), c.rejected_frames.load(),
          c.closed_sessions.load(), c.failed_replies.load()};
}

const std::string& LocalServer::socket_path() const { return impl_->options.socket_path; }

}  // namespace reft::local
