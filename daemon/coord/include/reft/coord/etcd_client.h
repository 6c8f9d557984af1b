#pragma once
/// \file etcd_client.h
/// \brief A small client of etcd's v3 API over gRPC: linearizable reads, puts, deletes,
/// transactions (compare-and-swap), leases with a keep-alive stream, and watches.
///
/// Endpoints fail over: a call that cannot reach one member (UNAVAILABLE, or a timeout from a
/// member that lost its quorum) is tried on the next, once round the list. Reads are
/// linearizable (etcd answers them through its leader), so every reftd that reads a key after a
/// write succeeded sees that write. A transaction whose answer was lost in transit may or may not
/// have been applied: callers read back what they compared before trying again.
///
/// One background thread keeps the granted leases alive (one keep-alive stream per round for all
/// of them, requests pipelined); one more serves the watches: a single bidirectional stream for
/// all of them, on which watches are added and cancelled while it runs, re-created on another
/// endpoint only when it breaks (resumed from the last revision seen). So a client costs two
/// threads and one connection per etcd member however many keys it watches and leases it holds.
/// Thread-safe.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "reft/mutex.h"
#include "reft/result.h"
#include "reft/thread.h"

namespace etcdserverpb {
class TxnRequest;
class KV;
}  // namespace etcdserverpb

namespace reft::coord {

struct EtcdOptions {
  std::vector<std::string> endpoints;              ///< host:port of the etcd members
  std::chrono::milliseconds request_timeout{3000};  ///< one unary call on one endpoint
  /// Channel credentials (client TLS); nullptr = plain text.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

/// \brief One key as etcd stores it.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  ///< 0: the key does not exist
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeResult {
  std::vector<KeyValue> kvs;
  int64_t count = 0;     ///< keys in the range (all of them, also beyond `limit`)
  int64_t revision = 0;  ///< the store's revision the answer reflects
};

/// \brief The end of the key range holding every key that starts with `prefix`.
std::string PrefixEnd(const std::string& prefix);

enum class Compare { kEqual, kGreater, kLess, kNotEqual };

/// \brief An etcd transaction: if every comparison holds, the `Then` operations run, else the
/// `Else` ones, atomically at one revision.
class Txn {
 public:
  Txn();
  ~Txn();
  Txn(Txn&&) noexcept;
  Txn& operator=(Txn&&) noexcept;

  /// The key's modification revision (0: the key does not exist).
  Txn& IfModRevision(const std::string& key, Compare op, int64_t revision);
  /// Every key under `prefix` (none: the comparison holds as for one absent key, revision 0):
  /// e.g. `kLess, R + 1` holds when nothing under the prefix was written after revision R.
  Txn& IfPrefixModRevision(const std::string& prefix, Compare op, int64_t revision);
  /// The key's creation revision (0: the key does not exist).
  Txn& IfCreateRevision(const std::string& key, Compare op, int64_t revision);
  Txn& IfValue(const std::string& key, Compare op, const std::string& value);

  Txn& ThenPut(const std::string& key, const std::string& value, int64_t lease = 0);
  Txn& ThenDelete(const std::string& key);
  Txn& ThenDeleteRange(const std::string& key, const std::string& range_end);
  Txn& ThenGet(const std::string& key);
  Txn& ThenGetPrefix(const std::string& prefix);
  Txn& ElsePut(const std::string& key, const std::string& value, int64_t lease = 0);
  Txn& ElseGet(const std::string& key);
  Txn& ElseGetPrefix(const std::string& prefix);

  size_t operations() const;
  const etcdserverpb::TxnRequest& request() const { return *request_; }

 private:
  std::unique_ptr<etcdserverpb::TxnRequest> request_;
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;
  /// The answers of the Get operations of the branch that ran, in their order.
  std::vector<RangeResult> gets;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  ///< for a delete: the key and the revision of the delete
};

/// \brief What a watch delivers: events in revision order, or `reset` when events may have
/// been missed (the stream broke and the history it would resume from was compacted): the
/// watcher re-reads what it watches.
struct WatchUpdate {
  std::vector<WatchEvent> events;
  int64_t revision = 0;
  bool reset = false;
};

/// \brief Which events a watch delivers.
enum class WatchEvents {
  kAll,
  kPutsOnly,     ///< etcd leaves deletes out (its NODELETE filter): nothing is sent for them
  kDeletesOnly,  ///< etcd leaves puts out (its NOPUT filter)
};

/// \brief Traffic counters, for the control-plane scale figures. Bytes are protobuf payloads
/// (without HTTP/2 and TLS framing).
struct EtcdTraffic {
  uint64_t requests = 0;        ///< unary calls and stream messages sent
  uint64_t bytes_sent = 0;
  uint64_t responses = 0;       ///< unary answers and stream messages received
  uint64_t bytes_received = 0;
  uint64_t watch_events = 0;
  uint64_t failed_calls = 0;    ///< unary calls no member answered (not in the counts above)
  /// The lease keep-alive part of the above (both directions): it depends on time, not steps.
  uint64_t keepalive_messages = 0;
  uint64_t keepalive_bytes = 0;
};

/// \brief How one exchange with etcd went (a unary call, a keep-alive round): what the
/// control plane judges etcd's health by (control_plane_suspicion.h).
struct EtcdAnswer {
  std::chrono::milliseconds latency{0};
  bool answered = false;   ///< false: no member answered
  uint64_t raft_term = 0;  ///< the raft term etcd's last keep-alive answer carried (0: none yet)
};

class EtcdClient {
 public:
  using WatchCallback = std::function<void(const WatchUpdate&)>;
  /// Called (on the client's lease-lost thread, never the keep-alive thread: a callback that
  /// registers again can take a while, and the client's other leases must be renewed
  /// meanwhile) when a lease expired or was revoked by etcd.
  using LeaseLostCallback = std::function<void(int64_t lease)>;

  /// Channels to every endpoint; no call is made yet. InvalidArgument without endpoints.
  static Result<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  /// \brief Linearizable read of one key; std::nullopt when it does not exist.
  Result<std::optional<KeyValue>> Get(const std::string& key);
  /// \brief Linearizable read of every key with `prefix` (at most `limit`, 0 = all).
  Result<RangeResult> GetPrefix(const std::string& prefix, int64_t limit = 0);
  /// \brief Number of keys with `prefix`, without their values.
  Result<int64_t> CountPrefix(const std::string& prefix);
  /// \brief Returns the revision of the write.
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  /// \brief Returns the number of keys deleted.
  Result<int64_t> Delete(const std::string& key);
  Result<int64_t> DeletePrefix(const std::string& prefix);
  Result<TxnResult> Commit(const Txn& txn);

  /// \brief A lease of `ttl` (etcd may round it up to its minimum). It is kept alive in the
  /// background until RevokeLease or destruction; when etcd reports it gone, `on_lost` runs.
  Result<int64_t> GrantLease(std::chrono::seconds ttl, LeaseLostCallback on_lost = nullptr);
  /// \brief Stops keeping the lease alive and revokes it (its keys are deleted now).
  Status RevokeLease(int64_t lease);
  /// \brief Stops keeping the lease alive without revoking it: its keys are deleted when it
  /// lapses, a TTL from its last renewal.
  void ForgetLease(int64_t lease);

  /// \brief Watches `key` (or every key under it when `prefix`) from `start_revision` (0 = from
  /// now). The callback runs on the watch thread, in revision order; it must not block long
  /// and must not call CancelWatch. Returns a handle for CancelWatch.
  Result<int64_t> Watch(const std::string& key, bool prefix, int64_t start_revision,
                        WatchCallback callback, WatchEvents events = WatchEvents::kAll);
  /// \brief Stops the watch; once it returns, its callback does not run again (so it waits
  /// for a callback in progress: the caller must not hold a lock that callback takes).
  void CancelWatch(int64_t handle);

  EtcdTraffic traffic() const;
  /// \brief Called (on the calling or keep-alive thread: it must be quick) after every unary
  /// call and keep-alive round. Add observers before the client is used from other threads.
  void AddAnswerObserver(std::function<void(const EtcdAnswer&)> observer);
  /// False since the last call or keep-alive round that no member answered, until one is
  /// answered again.
  bool reachable() const { return reachable_.load(); }
  /// The endpoint the next call goes to (for logs).
  std::string current_endpoint() const;

 private:
  struct Endpoint;
  struct WatchState;
  struct WatchStream;
  explicit EtcdClient(EtcdOptions options);

  /// Runs `call(stub, context)` on the current endpoint, failing over as documented above.
  template <typename Call>
  Status Unary(const char* what, Call&& call);
  void KeepAliveLoop();
  void ForgetLeaseLocked(int64_t lease) REFT_REQUIRES(lease_mu_);
  /// Runs the callbacks of lost leases, one at a time, in the order they were lost.
  void LeaseLostLoop();
  /// One keep-alive round for `ids` on one member: false when the stream failed; the leases
  /// etcd no longer knows go to `gone`; `*answered` = how many of `ids`, in order, etcd
  /// answered.
  bool RenewLeases(Endpoint& e, const std::vector<int64_t>& ids, std::vector<int64_t>* gone,
                   size_t* answered);
  /// One stream's part of a round: `n` leases from `ids`, as RenewLeases.
  bool RenewOnStream(Endpoint& e, const int64_t* ids, size_t n, std::vector<int64_t>* gone,
                     size_t* answered);
  void WatchLoop();
  /// Reads one stream until it breaks or the client stops.
  void ServeWatchStream(WatchStream& s, const std::vector<std::shared_ptr<WatchState>>& active);
  /// Sends the create request of `w` on `s`, in the order etcd answers "created".
  bool SendCreate(WatchStream& s, const std::shared_ptr<WatchState>& w);
  bool SendCancel(WatchStream& s, int64_t server_id);
  void Count(uint64_t sent_msgs, uint64_t sent_bytes, uint64_t recv_msgs, uint64_t recv_bytes);
  void Observe(std::chrono::steady_clock::time_point start, bool answered);

  EtcdOptions options_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::atomic<size_t> current_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> reachable_{true};

  // Leases kept alive: id -> (ttl, callback).
  reft::Mutex lease_mu_;
  std::condition_variable lease_cv_;
  std::map<int64_t, std::pair<std::chrono::seconds, LeaseLostCallback>> leases_
      REFT_GUARDED_BY(lease_mu_);
  // The next round starts at this lease (one a failed round missed).
  int64_t renew_from_ REFT_GUARDED_BY(lease_mu_) = 0;
  // A lease was granted since the current round was planned.
  bool lease_added_ REFT_GUARDED_BY(lease_mu_) = false;
  reft::Thread keepalive_thread_;
  // Lost leases whose callbacks have not run yet.
  std::deque<std::pair<int64_t, LeaseLostCallback>> lost_ REFT_GUARDED_BY(lease_mu_);
  std::condition_variable lost_cv_;
  reft::Thread lease_lost_thread_;

  // Watches: handle -> state. The watch thread builds the stream (again after a failure);
  // Watch and CancelWatch write their requests on the live one directly.
  // Lock order: callback_mu_, then a stream's write mutex, then watch_mu_.
  reft::Mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::map<int64_t, std::shared_ptr<WatchState>> watches_ REFT_GUARDED_BY(watch_mu_);
  int64_t next_watch_handle_ REFT_GUARDED_BY(watch_mu_) = 1;
  // The live stream; nullptr while there is none.
  std::shared_ptr<WatchStream> stream_ REFT_GUARDED_BY(watch_mu_);
  reft::Mutex callback_mu_;  // held by the watch thread while a callback runs
  reft::Thread watch_thread_;

  std::atomic<uint64_t> raft_term_{0};
  reft::Mutex observers_mu_;
  std::vector<std::function<void(const EtcdAnswer&)>> observers_ REFT_GUARDED_BY(observers_mu_);

  mutable reft::Mutex traffic_mu_;
  EtcdTraffic traffic_ REFT_GUARDED_BY(traffic_mu_);
};

}  // namespace reft::coord
