#pragma once
/// \file etcd_job_coordinator.h
/// \brief Job-wide agreement in etcd (docs/coordination.md): the commit point, the generation,
/// where every rank's slot lives, which node coordinates the job, and how the job restores.
///
/// Commit. A rank that sealed step S reports it to its daemon (Complete); the daemon sends ONE
/// report per step for all its ranks of the job, once every rank of the job connected to it
/// completed S (or `completion_linger` after the first did; a later one sends it again). The
/// job's coordinator — one node, elected with a key bound to its lease — is where the reports
/// go: straight to it over the Peer service (ReportStepCompletion), or, when it cannot be
/// reached or this node is the coordinator, as a key in etcd (`completions/<S>/<node>`,
/// guarded by the job's generation) that the coordinator watches. Once the reports cover every
/// rank of the layout it commits S in one transaction that succeeds only if the generation,
/// the restore epoch, the layout and the previous commit point are unchanged (a completion counts
/// only in the generation, restore epoch and layout revision it was made in: timeline.h); the
/// same transaction records
/// the slot locations that changed and deletes the completion keys up to S. Every node watches
/// `committed` (one event per step) and then commits its local slots of S, which frees the
/// older ones. So etcd sees O(1) writes per step per job, a node sends O(1) messages and
/// receives O(1) events, and only the coordinator receives O(nodes) reports. A report held only
/// in the coordinator's memory is sent again to the next coordinator (its key changes).
///
/// Generations. Falling back to the persistent tier starts generation g+1 with base P in one
/// compare-and-swap on the generation key (StartGeneration): committed becomes P, completions
/// are cleared and the restore decision {g+1, P, "tier"} is recorded with it. Every node
/// watching the key rolls back (drops its slots newer than P). Completion writes and commits of
/// generation g fail from then on (they compare the generation key's revision).
///
/// Offline. When etcd cannot be reached, snapshots go on locally (Complete only queues), the
/// commit waits, and no restore can read a commit point; queued completions are written when
/// etcd answers again. Thread-safe; owns one worker thread (Start/Stop), which sleeps until
/// there is work or a retry is due (never a periodic wake-up while idle).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "reft/coord/etcd_client.h"
#include "reft/coord/timeline.h"
#include "reft/coord/etcd_node_directory.h"
#include "reft/coord/persist_hold.h"
#include "reft/coord/records.h"
#include "reft/mutex.h"
#include "reft/coord/job_book.h"
#include "reft/coord/job_coordinator.h"
#include "reft/peer/peer_client.h"
#include "reft/store/snapshot_store.h"
#include "reft/thread.h"

namespace reft::coord {

struct EtcdCoordinatorOptions {
  /// Operations per transaction (etcd's default limit is 128).
  size_t max_txn_ops = 100;
  /// A failed etcd write (etcd unreachable) is retried this often.
  std::chrono::milliseconds retry_interval{200};
  /// A step's completion record waits at most this long for the node's other connected ranks
  /// of the job before it is written without them (they rewrite it when they complete).
  std::chrono::milliseconds completion_linger{100};
  /// A rank joining with another layout than etcd's waits at most this long for the old
  /// layout's ranks to leave (a launcher restarts a job at another scale the moment its
  /// trainers exit, and their nodes delete their joined keys right after) before it is refused.
  std::chrono::milliseconds departed_wait{2000};
  /// Send completions to the job's coordinator over the Peer service (needs a PeerClient);
  /// false: always through etcd (one transaction per node and step).
  bool report_to_coordinator = true;
  /// Deadline of one report to the coordinator.
  std::chrono::milliseconds report_timeout{1000};
  /// After a report to a coordinator failed, its completions go through etcd for this long
  /// (or until another node coordinates) before the direct path is tried again; each further
  /// failure doubles the pause, up to report_retry_max.
  std::chrono::milliseconds report_retry{1000};
  std::chrono::milliseconds report_retry_max{30000};
  /// A report that timed out at a live coordinator (or its aggregator) is sent to it again
  /// after a jittered report_retry, doubling, not written to etcd: a coordinator too busy to
  /// answer in time is usually still counting, and etcd is what every node shares
  /// (docs/coordination.md "A slow coordinator is waited for"). Only once its reports have
  /// been late for this long (or two lease TTLs, if longer) do they go through etcd as for an
  /// unreachable one.
  std::chrono::milliseconds report_patience{10000};
  /// Uncommitted steps the coordinator keeps reports of; a report of a further step is refused
  /// (Busy) and written to etcd by its sender.
  size_t max_pending_steps = 1024;
  /// Jobs on at least this many nodes aggregate their completion reports on the way to the
  /// coordinator (docs/coordination.md "Reports aggregate on the way"): the coordinator names
  /// each reporter's aggregator in its answer (groups of ceil(sqrt(nodes)) by node id); 0: never.
  size_t aggregate_from_nodes = 64;
};

/// \brief How this node's completions travelled, and what it received as a coordinator.
struct CompletionTraffic {
  uint64_t reported = 0;         ///< reports the coordinator took over the Peer service
  uint64_t report_failures = 0;  ///< reports it did not take (refused, unreachable or late)
  uint64_t reports_late = 0;     ///< of those, late ones waited out instead of going to etcd
  uint64_t written = 0;          ///< completion records written to etcd
  uint64_t received = 0;         ///< reports taken as the job's coordinator
  uint64_t messages = 0;   ///< report RPCs taken as the coordinator (a batch counts one)
  uint64_t forwarded = 0;  ///< other nodes' reports this node carried to a coordinator
  uint64_t via_aggregator = 0;  ///< of `reported`: taken through an aggregator
};

class ReportForwarder;

class EtcdJobCoordinator final : public JobCoordinator {
 public:
  /// `store`, `nodes` and `peers` must outlive the coordinator. Without `peers` completions
  /// always go through etcd.
  EtcdJobCoordinator(store::SnapshotStore* store, std::shared_ptr<EtcdClient> etcd,
                     EtcdNodeDirectory* nodes, EtcdCoordinatorOptions options = {},
                     peer::PeerClient* peers = nullptr);
  ~EtcdJobCoordinator() override;

  /// Starts the worker and follows every job this node holds slots of.
  Status Start() override;
  void Stop() override;

  // local::CommitCoordinator
  /// Records the layout in etcd (InvalidArgument when the job runs with another layout on
  /// some node) and the rank as joined on this node (a key bound to this node's lease).
  /// Works offline: without etcd the layout and the joined key are written later.
  using local::CommitCoordinator::Join;
  Status Join(const store::RankKey& rank, const JobLayout& layout,
              const local::Joiner& who) override;
  /// Read the other groups' declarations, check, write ours (with this node's lease), and
  /// read again: of two groups that declare conflicting buffers at once, at least the later
  /// one sees the other. Etcd unreachable: no check (snapshots never wait for etcd).
  Status DeclareReplicated(const store::RankKey& rank,
                           const local::ReplicatedBuffers& buffers) override;
  void Leave(const store::RankKey& rank) override;
  /// Cancelled (StaleEpoch) when `epoch` is not the job's current restore epoch: the revision
  /// of its restore decision key; Cancelled too when the job's layout record changed since the
  /// rank joined (a reshape: its completions belong to the old layout).
  Status Complete(const store::RankKey& rank, int64_t step, int64_t epoch) override;
  int64_t RestoreEpoch(const std::string& job) override;
  std::optional<int64_t> NewestCommitted(const std::string& job) override;
  bool WaitCommitted(const std::string& job, int64_t step,
                     std::chrono::milliseconds timeout) override;

  // JobCoordinator
  Status SyncNow(const std::string& job, std::chrono::milliseconds timeout) override;
  std::optional<JobLayout> Layout(const std::string& job) override;
  std::vector<std::string> Jobs() override;
  JobGeneration Generation(const std::string& job) override;
  JobGeneration StartGeneration(const std::string& job, const GenerationStart& start) override;
  void AddGenerationListener(GenerationListener listener) override;
  void AddLeadershipListener(LeadershipListener listener) override;
  void SetStateDir(std::string dir) override;
  std::vector<store::RankKey> JoinedRanks(const std::optional<std::string>& job) override;
  bool IsJoined(const store::RankKey& rank) override;
  Result<std::vector<std::string>> JobNodes(const std::string& job) override;
  std::optional<std::string> SlotLocation(const store::RankKey& rank) override;
  std::optional<std::string> JoinedNode(const store::RankKey& rank) override;
  bool LeadsJob(const std::string& job) override;
  std::optional<int64_t> LastHeardFrom(const std::string& job, const std::string& node) override;
  Result<std::optional<RestoreDecision>> Decision(const std::string& job) override;
  Result<RestoreDecision> ProposeDecision(const std::string& job, const RestoreDecision& decision,
                                          int64_t expected_version) override;
  bool HasConsensus() const override { return true; }
  Status RecordSlot(const store::RankKey& rank, int64_t step) override;
  /// Protocol when this node does not coordinate the job (now); Cancelled when the report was
  /// made under another layout revision than the job's (Unavailable when this node has not
  /// read that revision yet: the sender writes to etcd, whose compare decides); InvalidArgument
  /// naming a rank the job's layout does not have; Busy beyond `max_pending_steps` uncommitted
  /// steps.
  /// On a node that follows the job but does not coordinate it (it knows the coordinator's
  /// address for its term), the report is forwarded there (an aggregator: ReportForwarder) and
  /// the coordinator's answer returned; Protocol when this node cannot.
  Status ReceiveCompletion(const StepCompletionReport& report) override;
  /// A batch an aggregator forwarded: each report as ReceiveCompletion takes one as the
  /// coordinator (never forwarded again: Protocol when this node does not coordinate).
  std::vector<Status> ReceiveForwarded(const std::vector<StepCompletionReport>& reports) override;
  /// The aggregator of `node` for `job` (report_tree.h), while this node coordinates the job.
  std::optional<ReportRoute> RouteFor(const std::string& job, const std::string& node) override;
  Result<std::optional<PublishedPlan>> PublishedPlanOf(const std::string& job) override;
  /// Compares the plan key's revision and the generation key's (Busy when the generation
  /// moved: a plan of an older generation never replaces anything); as the coordinator, the
  /// coordinator key's create revision too (Busy when this node's term ended).
  Result<PublishedPlan> PublishPlan(const std::string& job, const PublishedPlan& plan,
                                    int64_t expected_version, PlanPublisher publisher) override;

  CompletionTraffic completion_traffic() const;
  /// \brief Persist holds of the jobs this node coordinates, and this node's own (the persister).
  PersistHold& persist_hold() { return persist_hold_; }
  const PersistHold& persist_hold() const { return persist_hold_; }

  /// \brief The owner this node last read or claimed for `job`, while it follows the job.
  std::optional<local::JobOwner> KnownOwner(const std::string& job) const;
  /// \brief Jobs this node keeps state (and watches) for: bounded by the jobs in use here,
  /// not by the names ever seen (a job whose records were deleted is forgotten).
  size_t followed_jobs() const;
  /// \brief Called (on the worker thread) with each job this node forgot, so that what the
  /// daemon keeps per job (step cadence, staged layers) goes with it. Set before Start().
  void SetForgetListener(std::function<void(const std::string& job)> listener) {
    on_forget_ = std::move(listener);
  }

  /// \brief Called with each step of a job that this node sees committed job-wide, when its
  /// watch (or its own commit) delivers it: every commit of a job this node follows, in order,
  /// whether or not a trainer here asks. Runs under the coordinator's lock: keep it short and
  /// call nothing of the coordinator from it.
  using CommitListener = std::function<void(const std::string& job, int64_t step)>;
  void AddCommitListener(CommitListener listener);

  /// \brief Named test point (reft/test_point.h; reached with no lock held, on the worker
  /// thread, by this coordinator for `job`). kReportBuilt: the worker built this round's
  /// completion reports of `job` and is about to send them (a node cut off right there sends
  /// them late).
  static constexpr const char* kReportBuilt = "completion-report-built";
  /// kKeyEvent: a watch event of one of `job`'s keys (layout, generation, committed step,
  /// coordinator, restore decision) arrived and is about to be applied to this node's view (a
  /// node whose watch is behind acts on its older view meanwhile).
  static constexpr const char* kKeyEvent = "job-key-event";
  /// kForwardBatch: an aggregator is about to send a batch of other nodes' reports of `job` to
  /// the coordinator (its reporters wait for the answer; an aggregator lost right there fails
  /// their calls).
  static constexpr const char* kForwardBatch = "completion-forward-batch";
  /// kReportArrived: a completion report of `job` (sent directly or in a batch) arrived at
  /// this node as the job's coordinator and is about to be counted (a coordinator stalled
  /// there answers late).
  static constexpr const char* kReportArrived = "completion-report-arrived";

 private:
  using Clock = std::chrono::steady_clock;
  /// This node's ranks that completed one step, not committed yet.
  struct PendingStep {
    std::set<store::RankKey> ranks;
    /// The layout revision its ranks joined under (nullopt: re-entered at start, or joined
    /// while etcd was unreachable: the revision the node reads first).
    std::optional<int64_t> layout_rev;
    Clock::time_point since{};  ///< first completion (epoch: adopted at start, write at once)
    size_t written = 0;         ///< how many of them the coordinator has (or etcd)
  };
  struct JobState {
    bool tracked = false;           // state read from etcd and watches set
    bool stale = false;             // a compare failed or a watch lost events: re-read
    std::vector<int64_t> watches;   // etcd watch handles
    bool has_layout = false;
    bool records_deleted = false;   // its layout key was deleted (the job was forgotten)
    std::optional<local::JobOwner> owner;  // as last read or claimed here
    JobLayout layout;
    int64_t layout_rev = 0;         // mod revision of the layout key (0: absent)
    GenerationRecord gen;
    int64_t gen_rev = 0;
    bool gen_loaded = false;        // the local generation record was read
    std::optional<int64_t> committed;
    int64_t committed_rev = 0;
    TimelineStamp committed_in;  // the timeline `committed` was committed in
    // The restore epoch: mod revision of the job's restore decision key (0: none yet), and the
    // step that decision restored. Every pending completion belongs to this epoch.
    int64_t decision_rev = 0;
    int connected = 0;              // trainer sessions on this node
    std::map<int64_t, PendingStep> pending;  // this node's completions not yet committed
    // Coordination of the job.
    std::string coordinator;        // the node holding the coordinator key ("" = none)
    std::string coordinator_address;  // its Peer address, looked up once per term
    int64_t coordinator_rev = 0;    // the key's create revision: one per coordinator term
    // Pause of the direct path after this term's coordinator did not take a report (0: the
    // last report went), and when it ends; a new term starts without one.
    std::chrono::milliseconds report_backoff{0};
    Clock::time_point report_retry_at{};
    // Since when this term's reports time out at a live coordinator (unset: the last one was
    // answered); while set and within report_patience, the pause holds completions back
    // instead of sending them through etcd.
    std::optional<Clock::time_point> late_since;
    // The aggregator the coordinator of term `route_term` named for this node's reports.
    std::optional<ReportRoute> route;
    int64_t route_term = 0;
    // The leader's report tree (report_tree.h), recomputed once per committed step at most,
    // or when the number of joined or located ranks changes; aggregator addresses looked up
    // once per node set.
    struct Tree {
      bool computed = false;
      std::optional<int64_t> committed;
      size_t joined = 0, located = 0;
      std::set<std::string> nodes;
      std::map<std::string, std::string> aggregator_of;
      std::map<std::string, std::string> address;
    } tree;
    bool want_lead = false;         // campaign when the coordinator key is free
    bool leader = false;
    int64_t completions_watch = 0;
    // The leader's view: every node's records by step, sources named by node id.
    PendingCompletions completions;
    // When each node's completion report last reached this node as the coordinator (unix ms,
    // direct, forwarded or through etcd): LastHeardFrom, a recovery's `lost_at`.
    std::map<std::string, int64_t> last_heard_ms;
    std::map<store::RankKey, std::string> locations;
    // The leader's view of where each rank is joined (a watch on the joined keys).
    std::map<store::RankKey, std::string> joined_at;
    int64_t joined_watch = 0;
    // The newest revision each watched key was read or heard of at (Refresh, watch events): a
    // read that waited for etcd while an event moved on never takes the key back.
    std::map<std::string, int64_t> seen;
  };

  /// Reads the job's state from etcd once and watches it; afterwards watches keep it current.
  Status Track(const std::string& job);
  using Apply = void (EtcdJobCoordinator::*)(const std::string&, JobState&,
                                             const std::optional<KeyValue>&);
  /// Whether what is known of `key` at `revision` is new (and notes it as seen).
  bool SeenLocked(JobState& st, const std::string& key, int64_t revision) REFT_REQUIRES(mu_);
  /// A linearizable read of layout, generation, committed, coordinator and restore
  /// decision, applied.
  Status Refresh(const std::string& job, bool start_watches);
  // Apply one key's value (std::nullopt: deleted) to the job's state; ignore stale revisions.
  void ApplyLayoutLocked(const std::string& job, JobState& st, const std::optional<KeyValue>& kv)
      REFT_REQUIRES(mu_);
  void ApplyGenerationLocked(const std::string& job, JobState& st,
                             const std::optional<KeyValue>& kv) REFT_REQUIRES(mu_);
  void ApplyCommittedLocked(const std::string& job, JobState& st, const std::optional<KeyValue>& kv)
      REFT_REQUIRES(mu_);
  void ApplyCoordinatorLocked(const std::string& job, JobState& st,
                              const std::optional<KeyValue>& kv) REFT_REQUIRES(mu_);
  void ApplyDecisionLocked(const std::string& job, JobState& st, const std::optional<KeyValue>& kv)
      REFT_REQUIRES(mu_);
  void AdoptGenerationLocked(const std::string& job, JobState& st, const GenerationRecord& rec)
      REFT_REQUIRES(mu_);
  /// Writes the job's generation and restore epoch to the state dir (a restarted daemon must
  /// know which epoch its sealed, unreported slots were completed in).
  void SaveStateLocked(const std::string& job, const JobState& st) REFT_REQUIRES(mu_);
  /// Drops this node's slots of `job` newer than `step` (writing ones too; locally committed
  /// ones only when `committed_too`: a new generation abandons them, while a new restore epoch
  /// keeps whatever this node committed); returns how many slots.
  int DropSlotsAfter(const std::string& job, int64_t step, bool committed_too,
                     const char* whose);
  void LoadLocalStateLocked(const std::string& job, JobState& st) REFT_REQUIRES(mu_);
  void CommitLocalLocked(const std::string& job, int64_t step) REFT_REQUIRES(mu_);
  JobGeneration InfoLocked(const JobState& st) const REFT_REQUIRES(mu_);
  void OnCompletionEvent(const std::string& job, const WatchUpdate& u);
  void OnJoinedEvent(const std::string& job, const WatchUpdate& u);
  /// Moves the watches only a leader holds to `out` (to be cancelled off the watch thread).
  void TakeLeaderWatchesLocked(JobState& st, std::vector<int64_t>* out) REFT_REQUIRES(mu_);
  /// The timeline completions count in now: the job's current generation, restore epoch and
  /// layout revision.
  static TimelineStamp CountingTimeline(const JobState& st);
  /// Why a completion of `rank` made under layout revision `joined_under` never counts.
  static Status LayoutMoved(const store::RankKey& rank, int64_t step, int64_t joined_under,
                            int64_t current);
  /// The ranks of `report` that etcd ties to the reporting node although the leader's view
  /// does not (yet); NotTied names one that neither does.
  Result<std::set<store::RankKey>> ConfirmTied(const StepCompletionReport& report);
  static Status NotTied(const StepCompletionReport& report, const store::RankKey& rank);
  /// ReceiveCompletion as the job's coordinator; `direct`: one RPC of its own (counted as a
  /// message; a batch counts once by its caller).
  Status TakeCompletion(const StepCompletionReport& report, bool direct);
  /// Sends a batch of forwarded reports to the coordinator at `address` (ReportForwarder::Send).
  Result<std::vector<Status>> SendBatch(const std::string& address,
                                        const std::vector<StepCompletionReport>& batch);
  void NotifyGenerations();
  /// Drops the state and watches of a job whose records were deleted, once nothing of it is
  /// left on this node (no trainer, no completion to send, no slot); true when it did.
  bool ForgetIfGoneLocked(const std::string& job, std::vector<int64_t>* cancel) REFT_REQUIRES(mu_);

  // Worker: everything that writes to etcd in the background.
  void Run();
  void FlushCompletions(const std::string& job);
  /// What became of one report sent to the job's coordinator.
  enum class ReportOutcome {
    kTaken,        ///< the coordinator (or its aggregator for it) took it
    kLate,         ///< it timed out at a live coordinator: sent again later, not to etcd
    kThroughEtcd,  ///< not taken: the caller writes it to etcd
  };
  /// Sends one report to the job's coordinator `node` (term `term`).
  ReportOutcome ReportToCoordinator(const std::string& job, const std::string& node, int64_t term,
                                    const StepCompletionReport& report);
  /// Whether `s`, the failure of a report to `node`, is lateness: a deadline at a node this
  /// node has not heard is dead (NodeDirectory::HeardDead, no etcd read). Call with no lock held.
  bool LateAtLiveNode(const std::string& node, const Status& s) const REFT_EXCLUDES(mu_);
  /// How long reports may be late before they go through etcd: report_patience, or two of
  /// this node's lease TTLs if longer. Reads the membership: call with no lock held.
  std::chrono::milliseconds ReportPatience() const REFT_EXCLUDES(mu_);
  /// Whether the reports of `st`'s current term have been late for less than `patience` (or
  /// are not late at all): a late one is then waited out.
  bool WithinPatienceLocked(const JobState& st, std::chrono::milliseconds patience) const
      REFT_REQUIRES(mu_);
  /// The direct path's pause after a failed report: report_retry, then doubling up to
  /// report_retry_max (whether the report then goes to etcd or waits).
  void DoubleBackoffLocked(JobState& st) const REFT_REQUIRES(mu_);
  /// Records a late report: the next try is after a jittered, doubling pause.
  void PauseAfterLateLocked(JobState& st, const std::string& job, const std::string& node,
                            const Status& s, std::chrono::milliseconds patience)
      REFT_REQUIRES(mu_);
  /// Looks the coordinator's address up and starts connecting to it (once per term).
  void ConnectToCoordinator(const std::string& job, const std::string& node, int64_t term);
  void Campaign(const std::string& job);
  void MaybeResign(const std::string& job);
  void BecomeLeader(const std::string& job);
  void TryCommit(const std::string& job);
  void SyncJoined();
  /// Writes `rank`'s joined key unless another node holds it (then marks the rank stale here).
  void ClaimJoined(const store::RankKey& rank, int64_t lease);
  /// Checks the caller against the job's owner (claiming the job when it has none), the rank's
  /// layout against etcd's and that no other node holds the rank, and writes what it may: the
  /// revision of the rank's joined key when the write included it, else 0 (the worker writes it).
  Result<int64_t> RecordJoin(const store::RankKey& rank, const JobLayout& layout,
                             const local::Joiner& who);
  /// InvalidArgument naming the ranks of the `running` layout still joined (on any node).
  Status CheckNoneJoined(const store::RankKey& rank, const JobLayout& layout,
                         const JobLayout& running, const std::vector<KeyValue>& joined);
  void OnReregistered(int64_t lease);
  /// This node moved to a lease of another TTL (EtcdNodeDirectory::SizeLease).
  void OnLeaseMoved(int64_t lease);
  bool LeadsAnyJob();
  /// What this node bound to its lease is put under the current one (by the worker, or at
  /// the next snapshot): after a move or a re-registration.
  void RebindLeasedKeysLocked() REFT_REQUIRES(mu_);
  void Wake();
  /// The worker runs again at `t` at the latest (a retry, a linger running out).
  void WakeAtLocked(Clock::time_point t) REFT_REQUIRES(mu_);
  /// etcd could not be reached: the worker tries again after retry_interval.
  void RetryLaterLocked() REFT_REQUIRES(mu_);

  store::SnapshotStore* store_;
  std::shared_ptr<EtcdClient> etcd_;
  EtcdNodeDirectory* nodes_;
  EtcdCoordinatorOptions options_;
  peer::PeerClient* peers_;

  reft::Mutex track_mu_;  // serialises Track/Refresh I/O (never held with mu_ while waiting on it)
  mutable reft::Mutex mu_;
  std::condition_variable cv_;  // commits (waiters) and work (the worker)
  std::map<std::string, JobState> jobs_ REFT_GUARDED_BY(mu_);
  JoinedSessions joined_ REFT_GUARDED_BY(mu_);
  // rank -> revision of its replicated key
  std::map<store::RankKey, int64_t> declared_in_etcd_ REFT_GUARDED_BY(mu_);
  // rank -> revision of its joined key (0: none)
  std::map<store::RankKey, int64_t> joined_in_etcd_ REFT_GUARDED_BY(mu_);
  // rank -> revision of the layout record its session joined under (absent: not known)
  std::map<store::RankKey, int64_t> joined_layout_rev_ REFT_GUARDED_BY(mu_);
  std::string state_dir_ REFT_GUARDED_BY(mu_);
  bool work_ REFT_GUARDED_BY(mu_) = false;
  // The worker's next timed round, if any.
  std::optional<Clock::time_point> wake_at_ REFT_GUARDED_BY(mu_);
  bool running_ REFT_GUARDED_BY(mu_) = false;
  reft::Thread worker_;
  GenerationEvents generation_events_;
  // Cancelled by the worker (not from a watch callback).
  std::vector<int64_t> cancel_watches_ REFT_GUARDED_BY(mu_);
  CompletionTraffic traffic_ REFT_GUARDED_BY(mu_);
  // Carries other nodes' reports as an aggregator; made at the first one.
  std::shared_ptr<ReportForwarder> forwarder_ REFT_GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_forget_;
  reft::Mutex listeners_mu_;
  std::vector<LeadershipListener> leadership_listeners_ REFT_GUARDED_BY(listeners_mu_);
  std::vector<CommitListener> commit_listeners_ REFT_GUARDED_BY(listeners_mu_);  // after mu_
  // Last: its watches (which wake the worker) end before anything else goes.
  PersistHold persist_hold_{etcd_, nodes_, [this] { Wake(); }};
};

}  // namespace reft::coord
