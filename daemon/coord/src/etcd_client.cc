#include "reft/coord/etcd_client.h"

#include <algorithm>
#include <deque>

#include "etcd/rpc.grpc.pb.h"

namespace reft::coord {

namespace pb = etcdserverpb;
using Clock = std::chrono::steady_clock;

namespace {
constexpr int kMaxAnswerBytes = 256 << 20;
}  // namespace

struct EtcdClient::Endpoint {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
};

struct EtcdClient::WatchState {
  std::string key;
  std::string range_end;
  WatchEvents events = WatchEvents::kAll;
  int64_t next_revision = 0;  // resume point (0 = from now); the watch thread's
  WatchCallback callback;
  int64_t server_id = -1;     // etcd's watch id on the live stream (watch_mu_)
  bool cancelled = false;     // (watch_mu_)
};

// One Watch stream: the watch thread reads it; creates and cancels are written by whoever adds
// or cancels a watch, serialised by write_mu.
struct EtcdClient::WatchStream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> rw;
  reft::Mutex write_mu;
  // Creates written and not yet answered, in the order written (watch_mu_): etcd answers
  // "created" in that order, which is how an answer's watch id is matched to its watch.
  std::deque<std::shared_ptr<WatchState>> pending;
};

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

namespace {

KeyValue FromPb(const pb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

RangeResult FromPb(const pb::RangeResponse& r) {
  RangeResult out;
  out.count = r.count();
  out.revision = r.header().revision();
  out.kvs.reserve(r.kvs_size());
  for (const auto& kv : r.kvs()) out.kvs.push_back(FromPb(kv));
  return out;
}

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  const std::string m = "etcd " + what + ": " + s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::OK: return Status::OK();
    case grpc::StatusCode::DEADLINE_EXCEEDED: return Status::Timeout(m);
    case grpc::StatusCode::UNAVAILABLE: return Status::Unavailable(m);
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE: return Status::InvalidArgument(m);
    case grpc::StatusCode::NOT_FOUND: return Status::NotFound(m);
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED: return Status::PermissionDenied(m);
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return Status::Busy(m);
    case grpc::StatusCode::CANCELLED: return Status::Cancelled(m);
    default: return Status::Unavailable(m);
  }
}

// Worth trying another member: it is unreachable, or it could not reach its quorum in time.
bool Retriable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         s.error_code() == grpc::StatusCode::UNKNOWN;
}

void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds d) {
  ctx->set_deadline(std::chrono::system_clock::now() + d);
}

}  // namespace

// ---- EtcdClient ----

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return Status::InvalidArgument("etcd: no endpoints given");
  for (const auto& e : options.endpoints) {
    if (e.empty() || e.find(':') == std::string::npos) {
      return Status::InvalidArgument("etcd endpoint '" + e + "' is not host:port");
    }
  }
  if (options.request_timeout.count() <= 0) {
    return Status::InvalidArgument("etcd: request timeout must be > 0");
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options)));
}

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {
  auto creds = options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials();
  for (const auto& address : options_.endpoints) {
    grpc::ChannelArguments args;
    // Reconnect soon after a member comes back. (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is also the
    // time one connection attempt may take: left at its default, a busy member still gets in.)
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // A job's slot locations are one range read: ~90 bytes per rank, past gRPC's default
    // 4 MiB answer at ~45,000 ranks.
    args.SetMaxReceiveMessageSize(kMaxAnswerBytes);
    auto e = std::make_unique<Endpoint>();
    e->address = address;
    e->channel = grpc::CreateCustomChannel(address, creds, args);
    e->kv = pb::KV::NewStub(e->channel);
    e->watch = pb::Watch::NewStub(e->channel);
    e->lease = pb::Lease::NewStub(e->channel);
    endpoints_.push_back(std::move(e));
  }
  keepalive_thread_ = reft::Thread("reft-etcd-alive", [this] { KeepAliveLoop(); });
  lease_lost_thread_ = reft::Thread("reft-etcd-lost", [this] { LeaseLostLoop(); });
  watch_thread_ = reft::Thread("reft-etcd-watch", [this] { WatchLoop(); });
}

EtcdClient::~EtcdClient() {
  {
    // Under the lock: a loop between its predicate check and its wait must not miss the wake.
    reft::MutexLock lock(lease_mu_);
    stopping_ = true;
  }
  lease_cv_.notify_all();
  lost_cv_.notify_all();
  {
    reft::MutexLock lock(watch_mu_);
    if (stream_) stream_->ctx.TryCancel();
  }
  watch_cv_.notify_all();
  if (keepalive_thread_.joinable()) keepalive_thread_.join();
  if (lease_lost_thread_.joinable()) lease_lost_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
}

void EtcdClient::Count(uint64_t sent_msgs, uint64_t sent_bytes, uint64_t recv_msgs,
                       uint64_t recv_bytes) {
  reft::MutexLock lock(traffic_mu_);
  traffic_.requests += sent_msgs;
  traffic_.bytes_sent += sent_bytes;
  traffic_.responses += recv_msgs;
  traffic_.bytes_received += recv_bytes;
}

EtcdTraffic EtcdClient::traffic() const {
  reft::MutexLock lock(traffic_mu_);
  return traffic_;
}

void EtcdClient::AddAnswerObserver(std::function<void(const EtcdAnswer&)> observer) {
  reft::MutexLock lock(observers_mu_);
  observers_.push_back(std::move(observer));
}

void EtcdClient::Observe(std::chrono::steady_clock::time_point start, bool answered) {
  EtcdAnswer a;
  a.latency = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  a.answered = answered;
  a.raft_term = raft_term_.load();
  reft::MutexLock lock(observers_mu_);
  for (const auto& o : observers_) o(a);
}

std::string EtcdClient::current_endpoint() const {
  return endpoints_[current_.load() % endpoints_.size()]->address;
}

template <typename Call>
Status EtcdClient::Unary(const char* what, Call&& call) {
  grpc::Status last;
  const size_t n = endpoints_.size();
  const size_t first = current_.load();
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    const size_t idx = (first + i) % n;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options_.request_timeout);
    last = call(*endpoints_[idx], &ctx);
    if (last.ok()) {
      current_ = idx;  // stay on a member that answers
      reachable_ = true;
      Observe(start, true);
      return Status::OK();
    }
    if (!Retriable(last)) break;
  }
  if (Retriable(last)) reachable_ = false;
  Observe(start, !Retriable(last));  // an answer that refuses is still an answer
  {
    reft::MutexLock lock(traffic_mu_);
    ++traffic_.failed_calls;
  }
  std::string all;
  for (const auto& e : endpoints_) all += (all.empty() ? "" : ",") + e->address;
  return FromGrpc(last, std::string(what) + " (endpoints " + all + ")");
}

Result<std::optional<KeyValue>> EtcdClient::Get(const std::string& key) {
  pb::RangeRequest req;
  req.set_key(key);
  pb::RangeResponse resp;
  REFT_RETURN_NOT_OK(Unary("get", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->Range(c, req, &resp);
  }));
  Count(1, req.ByteSizeLong(), 1, resp.ByteSizeLong());
  if (resp.kvs_size() == 0) return std::optional<KeyValue>();
  return std::optional<KeyValue>(FromPb(resp.kvs(0)));
}

Result<RangeResult> EtcdClient::GetPrefix(const std::string& prefix, int64_t limit) {
  pb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  req.set_limit(limit);
  pb::RangeResponse resp;
  REFT_RETURN_NOT_OK(Unary("range", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->Range(c, req, &resp);
  }));
  Count(1, req.ByteSizeLong(), 1, resp.ByteSizeLong());
  return FromPb(resp);
}

Result<int64_t> EtcdClient::CountPrefix(const std::string& prefix) {
  pb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  req.set_count_only(true);
  pb::RangeResponse resp;
  REFT_RETURN_NOT_OK(Unary("count", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->Range(c, req, &resp);
  }));
  Count(1, req.ByteSizeLong(), 1, resp.ByteSizeLong());
  return resp.count();
}

Result<int64_t> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  pb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  pb::PutResponse resp;
  REFT_RETURN_NOT_OK(Unary("put", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->Put(c, req, &resp);
  }));
  Count(1, req.ByteSizeLong(), 1, resp.ByteSizeLong());
  return resp.header().revision();
}

Result<int64_t> EtcdClient::Delete(const std::string& key) {
  pb::DeleteRangeRequest req;
  req.set_key(key);
  pb::DeleteRangeResponse resp;
  REFT_RETURN_NOT_OK(Unary("delete", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->DeleteRange(c, req, &resp);
  }));
  Count(1, req.ByteSizeLong(), 1, resp.ByteSizeLong());
  return resp.deleted();
}

Result<int64_t> EtcdClient::DeletePrefix(const std::string& prefix) {
  pb::DeleteRangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  pb::DeleteRangeResponse resp;
  REFT_RETURN_NOT_OK(Unary("delete", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->DeleteRange(c, req, &resp);
  }));
  Count(1, req.ByteSizeLong(), 1, resp.ByteSizeLong());
  return resp.deleted();
}

Result<TxnResult> EtcdClient::Commit(const Txn& txn) {
  pb::TxnResponse resp;
  REFT_RETURN_NOT_OK(Unary("txn", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->Txn(c, txn.request(), &resp);
  }));
  Count(1, txn.request().ByteSizeLong(), 1, resp.ByteSizeLong());
  TxnResult out;
  out.succeeded = resp.succeeded();
  out.revision = resp.header().revision();
  for (const auto& r : resp.responses()) {
    if (r.has_response_range()) out.gets.push_back(FromPb(r.response_range()));
  }
  return out;
}

// ---- leases ----

Result<int64_t> EtcdClient::GrantLease(std::chrono::seconds ttl, LeaseLostCallback on_lost) {
  if (ttl.count() <= 0) return Status::InvalidArgument("etcd lease TTL must be > 0 s");
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl.count());
  pb::LeaseGrantResponse resp;
  REFT_RETURN_NOT_OK(Unary("lease grant", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.lease->LeaseGrant(c, req, &resp);
  }));
  Count(1, req.ByteSizeLong(), 1, resp.ByteSizeLong());
  if (!resp.error().empty()) return Status::Unavailable("etcd lease grant: " + resp.error());
  {
    reft::MutexLock lock(lease_mu_);
    leases_[resp.id()] = {std::chrono::seconds(std::max<int64_t>(resp.ttl(), 1)),
                          std::move(on_lost)};
    lease_added_ = true;  // its TTL may be shorter than the period the loop waits now
  }
  lease_cv_.notify_all();
  return resp.id();
}

void EtcdClient::ForgetLease(int64_t lease) {
  reft::MutexLock lock(lease_mu_);
  ForgetLeaseLocked(lease);
}

void EtcdClient::ForgetLeaseLocked(int64_t lease) {
  leases_.erase(lease);
  // A loss reported before and not called back yet is not called back: its owner let go.
  lost_.erase(std::remove_if(lost_.begin(), lost_.end(),
                             [&](const auto& l) { return l.first == lease; }),
              lost_.end());
}

Status EtcdClient::RevokeLease(int64_t lease) {
  {
    reft::MutexLock lock(lease_mu_);
    ForgetLeaseLocked(lease);
  }
  pb::LeaseRevokeRequest req;
  req.set_id(lease);
  pb::LeaseRevokeResponse resp;
  Status s = Unary("lease revoke", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.lease->LeaseRevoke(c, req, &resp);
  });
  Count(1, req.ByteSizeLong(), 1, resp.ByteSizeLong());
  // A lease etcd no longer knows is revoked already.
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  return s;
}

bool EtcdClient::RenewOnStream(Endpoint& e, const int64_t* ids, size_t n,
                              std::vector<int64_t>* gone, size_t* answered) {
  // Requests are pipelined a window at a time (every answer is read before the next window is
  // written, so neither side's flow-control window can fill up).
  constexpr size_t kWindow = 64;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.request_timeout);
  auto stream = e.lease->LeaseKeepAlive(&ctx);
  bool ok = true;
  uint64_t sent = 0, sent_bytes = 0, received = 0, received_bytes = 0;
  for (size_t first = 0; first < n && ok; first += kWindow) {
    const size_t last = std::min(n, first + kWindow);
    for (size_t i = first; i < last && ok; ++i) {
      pb::LeaseKeepAliveRequest req;
      req.set_id(ids[i]);
      ok = stream->Write(req);
      ++sent;
      sent_bytes += req.ByteSizeLong();
    }
    for (size_t i = first; i < last && ok; ++i) {
      pb::LeaseKeepAliveResponse resp;
      ok = stream->Read(&resp);
      if (!ok) break;
      ++received;
      *answered = i + 1;
      received_bytes += resp.ByteSizeLong();
      if (resp.ttl() <= 0) gone->push_back(resp.id());
      raft_term_ = resp.header().raft_term();
    }
  }
  stream->WritesDone();
  (void)stream->Finish();
  Count(sent, sent_bytes, received, received_bytes);
  reft::MutexLock lock(traffic_mu_);
  traffic_.keepalive_messages += sent + received;
  traffic_.keepalive_bytes += sent_bytes + received_bytes;
  return ok;
}

bool EtcdClient::RenewLeases(Endpoint& e, const std::vector<int64_t>& ids,
                             std::vector<int64_t>* gone, size_t* answered) {
  // etcd renews the leases of one stream one after the other, and each renewal first waits
  // for etcd to apply what it has committed (a linearizable renewal): behind a write backlog,
  // a stream of 256 renewals took seconds — the TTL's slack. So a client holding many leases
  // (the scale bench pools many nodes' leases in one) renews them on parallel streams, as that
  // many daemons would; a daemon's single lease takes one stream on this thread.
  constexpr size_t kLeasesPerStream = 16;
  const size_t streams = (ids.size() + kLeasesPerStream - 1) / kLeasesPerStream;
  struct Part {
    std::vector<int64_t> gone;
    size_t answered = 0;
    bool ok = false;
  };
  std::vector<Part> parts(streams);
  auto renew = [&](size_t k) {
    const size_t first = k * kLeasesPerStream;
    const size_t n = std::min(kLeasesPerStream, ids.size() - first);
    parts[k].ok = RenewOnStream(e, ids.data() + first, n, &parts[k].gone, &parts[k].answered);
  };
  std::vector<reft::Thread> helpers;
  for (size_t k = 1; k < streams; ++k)
    helpers.emplace_back("reft-etcd-renew", [&renew, k] { renew(k); });
  if (streams > 0) renew(0);
  for (auto& t : helpers) t.join();
  bool ok = true;
  *answered = 0;
  for (size_t k = 0; k < streams; ++k) {
    gone->insert(gone->end(), parts[k].gone.begin(), parts[k].gone.end());
    if (ok) *answered = k * kLeasesPerStream + parts[k].answered;  // up to the first gap
    ok = ok && parts[k].ok;
  }
  return ok;
}

void EtcdClient::KeepAliveLoop() {
  reft::MutexLock lock(lease_mu_);
  while (!stopping_) {
    if (leases_.empty()) {
      lock.Wait(lease_cv_,
                [&]() REFT_REQUIRES(lease_mu_) { return stopping_ || !leases_.empty(); });
      continue;
    }
    // Renew every lease a third of the shortest TTL: two renewals may be lost before expiry.
    // A round that fails part-way (etcd too slow for the deadline) is resumed where it stopped,
    // so that no lease of a client holding many is starved by the ones before it.
    std::chrono::milliseconds period = std::chrono::hours(1);
    std::vector<int64_t> ids;
    for (const auto& [id, l] : leases_) {
      ids.push_back(id);
      period = std::min<std::chrono::milliseconds>(period, l.first / 3);
    }
    lease_added_ = false;
    std::rotate(ids.begin(), std::lower_bound(ids.begin(), ids.end(), renew_from_), ids.end());
    period = std::max(period, std::chrono::milliseconds(100));
    // Rounds start a period apart, however long one takes: a round of many leases on a busy
    // etcd can take a second, and waiting a full period after it would stretch the time
    // between two renewals of the same lease towards its TTL.
    const auto round_start = std::chrono::steady_clock::now();
    lock.Unlock();

    std::vector<int64_t> lost;
    bool renewed = false;
    const size_t n = endpoints_.size();
    size_t answered = 0;
    for (size_t attempt = 0; attempt < n && !renewed && !stopping_; ++attempt) {
      const size_t idx = (current_.load() + attempt) % n;
      std::vector<int64_t> gone;
      answered = 0;
      if (RenewLeases(*endpoints_[idx], ids, &gone, &answered)) {
        renewed = true;
        current_ = idx;
      }  // else this member failed; the next one is tried in this round
      lost.insert(lost.end(), gone.begin(), gone.end());
    }

    reachable_ = renewed;
    Observe(round_start, renewed);
    lock.Lock();
    if (renewed) {
      renew_from_ = 0;
    } else if (answered > 0) {
      renew_from_ = ids[answered % ids.size()];
    }
    // The callbacks run on their own thread: one that registers again takes a few etcd round
    // trips (seconds while etcd is overloaded), and a client holding many leases (a pooled
    // client) must not let the others expire meanwhile — that turns one expiry into a cascade.
    bool queued = false;
    for (int64_t id : lost) {
      auto it = leases_.find(id);
      if (it == leases_.end()) continue;
      if (it->second.second) {
        lost_.emplace_back(id, std::move(it->second.second));
        queued = true;
      }
      leases_.erase(it);
    }
    if (queued) lost_cv_.notify_one();
    // A failed round is retried sooner: a lease must not expire because one member is down.
    const auto wait = renewed ? period : std::min(period, std::chrono::milliseconds(200));
    lock.WaitUntil(lease_cv_, round_start + wait,
                   [&]() REFT_REQUIRES(lease_mu_) { return stopping_ || lease_added_; });
  }
}

void EtcdClient::LeaseLostLoop() {
  reft::MutexLock lock(lease_mu_);
  for (;;) {
    lock.Wait(lost_cv_, [&]() REFT_REQUIRES(lease_mu_) { return stopping_ || !lost_.empty(); });
    if (stopping_) return;
    auto [id, callback] = std::move(lost_.front());
    lost_.pop_front();
    lock.Unlock();
    callback(id);
    lock.Lock();
  }
}

// ---- watches ----

Result<int64_t> EtcdClient::Watch(const std::string& key, bool prefix, int64_t start_revision,
                                  WatchCallback callback, WatchEvents events) {
  if (!callback) return Status::InvalidArgument("etcd watch: no callback");
  auto w = std::make_shared<WatchState>();
  w->key = key;
  w->range_end = prefix ? PrefixEnd(key) : "";
  w->events = events;
  w->next_revision = start_revision;
  w->callback = std::move(callback);
  int64_t handle;
  std::shared_ptr<WatchStream> live;
  {
    reft::MutexLock lock(watch_mu_);
    handle = next_watch_handle_++;
    watches_[handle] = w;
    // A stream that is live now did not include this watch when it was built: create it there.
    // Otherwise the next stream the watch thread builds includes it.
    live = stream_;
  }
  watch_cv_.notify_all();
  if (live) (void)SendCreate(*live, w);  // a failure breaks the stream: it is rebuilt with it
  return handle;
}

void EtcdClient::CancelWatch(int64_t handle) {
  std::shared_ptr<WatchStream> live;
  int64_t server_id = -1;
  {
    reft::MutexLock lock(watch_mu_);
    auto it = watches_.find(handle);
    if (it == watches_.end()) return;
    it->second->cancelled = true;
    server_id = it->second->server_id;
    watches_.erase(it);
    live = stream_;
  }
  // Not created yet: the watch thread cancels it when etcd answers the create.
  if (live && server_id >= 0) (void)SendCancel(*live, server_id);
  if (std::this_thread::get_id() != watch_thread_.get_id()) {
    reft::MutexLock wait_for_callback(callback_mu_);
  }
}

bool EtcdClient::SendCreate(WatchStream& s, const std::shared_ptr<WatchState>& w) {
  pb::WatchRequest req;
  auto* c = req.mutable_create_request();
  c->set_key(w->key);
  if (!w->range_end.empty()) c->set_range_end(w->range_end);
  c->set_start_revision(w->next_revision);
  if (w->events == WatchEvents::kPutsOnly) c->add_filters(pb::WatchCreateRequest::NODELETE);
  if (w->events == WatchEvents::kDeletesOnly) c->add_filters(pb::WatchCreateRequest::NOPUT);
  reft::MutexLock write(s.write_mu);
  {
    reft::MutexLock lock(watch_mu_);
    if (w->cancelled) return true;
    s.pending.push_back(w);
  }
  if (!s.rw->Write(req)) return false;
  Count(1, req.ByteSizeLong(), 0, 0);
  return true;
}

bool EtcdClient::SendCancel(WatchStream& s, int64_t server_id) {
  pb::WatchRequest req;
  req.mutable_cancel_request()->set_watch_id(server_id);
  reft::MutexLock write(s.write_mu);
  if (!s.rw->Write(req)) return false;
  Count(1, req.ByteSizeLong(), 0, 0);
  return true;
}

void EtcdClient::WatchLoop() {
  size_t endpoint = current_.load();
  while (!stopping_) {
    {
      reft::MutexLock lock(watch_mu_);
      lock.Wait(watch_cv_,
                [&]() REFT_REQUIRES(watch_mu_) { return stopping_ || !watches_.empty(); });
      if (stopping_) return;
    }
    auto s = std::make_shared<WatchStream>();
    // etcd's "require leader": a member cut off from its quorum closes the stream instead of
    // keeping it open and silent, so the watch moves to a member that has a leader.
    s->ctx.AddMetadata("hasleader", "true");
    s->rw = endpoints_[endpoint % endpoints_.size()]->watch->Watch(&s->ctx);
    std::vector<std::shared_ptr<WatchState>> active;
    {
      // Every watch registered from here on creates itself on this stream (Watch); every one
      // registered before is created below.
      reft::MutexLock lock(watch_mu_);
      if (!stopping_) {
        stream_ = s;
        for (auto& [h, w] : watches_) {
          w->server_id = -1;
          active.push_back(w);
        }
      }
    }
    if (!stopping_) ServeWatchStream(*s, active);
    {
      reft::MutexLock lock(watch_mu_);
      stream_.reset();
    }
    s->ctx.TryCancel();
    (void)s->rw->Finish();
    if (stopping_) return;
    // The stream broke: the next member, after a short pause so a dead cluster is not spun on.
    ++endpoint;
    reft::MutexLock lock(watch_mu_);
    lock.WaitFor(watch_cv_, std::chrono::milliseconds(100), [&] { return stopping_.load(); });
  }
}

void EtcdClient::ServeWatchStream(WatchStream& s,
                                  const std::vector<std::shared_ptr<WatchState>>& active) {
  for (const auto& w : active) {
    if (!SendCreate(s, w)) return;
  }
  std::map<int64_t, std::shared_ptr<WatchState>> by_id;
  pb::WatchResponse resp;
  while (!stopping_ && s.rw->Read(&resp)) {
    Count(0, 0, 1, resp.ByteSizeLong());
    if (resp.created()) {
      std::shared_ptr<WatchState> w;
      bool cancelled = false;
      {
        reft::MutexLock lock(watch_mu_);
        if (s.pending.empty()) continue;
        w = s.pending.front();
        s.pending.pop_front();
        w->server_id = resp.watch_id();
        cancelled = w->cancelled;
      }
      // "From now" becomes a revision, so a rebuilt stream resumes without a gap.
      if (w->next_revision == 0) w->next_revision = resp.header().revision() + 1;
      by_id[resp.watch_id()] = w;
      if (cancelled && !SendCancel(s, resp.watch_id())) return;
    }
    auto it = by_id.find(resp.watch_id());
    if (it == by_id.end()) continue;
    const std::shared_ptr<WatchState> w = it->second;
    if (resp.canceled()) {
      by_id.erase(it);
      bool cancelled;
      {
        reft::MutexLock lock(watch_mu_);
        cancelled = w->cancelled;
        w->server_id = -1;
      }
      if (resp.compact_revision() > 0 && !cancelled) {
        // The history to resume from is gone: tell the watcher (it re-reads what it watches)
        // and watch again from now.
        WatchUpdate u;
        u.reset = true;
        u.revision = resp.header().revision();
        {
          reft::MutexLock cb(callback_mu_);
          w->callback(u);
        }
        w->next_revision = 0;
        if (!SendCreate(s, w)) return;
      }
      continue;
    }
    if (resp.events_size() == 0) continue;
    WatchUpdate u;
    u.revision = resp.header().revision();
    for (const auto& ev : resp.events()) {
      WatchEvent we;
      we.type = ev.type() == pb::Event::DELETE ? WatchEvent::Type::kDelete
                                               : WatchEvent::Type::kPut;
      we.kv = FromPb(ev.kv());
      u.events.push_back(std::move(we));
    }
    w->next_revision = resp.events(resp.events_size() - 1).kv().mod_revision() + 1;
    {
      reft::MutexLock lock(traffic_mu_);
      traffic_.watch_events += u.events.size();
    }
    reft::MutexLock cb(callback_mu_);
    bool cancelled;
    {
      reft::MutexLock lock(watch_mu_);
      cancelled = w->cancelled;
    }
    if (!cancelled) w->callback(u);
  }
}

}  // namespace reft::coord
