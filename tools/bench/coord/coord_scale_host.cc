// coord_scale_host: one process of the control-plane scale bench (coord_scale.py drives it),
// hosting --count members — simulated nodes — of one job of --nodes nodes x --ranks ranks.
//
// Every member is a real peer::PeerNode over an in-memory store (the data plane is stubbed:
// memory_store.h). With --backend etcd its control plane is the etcd one; the members of this
// process share one EtcdClient (one connection, one keep-alive stream, one watch stream: what
// they send and receive is what N separate daemons would, the threads and connections are
// pooled); member 0 (the job's coordinator) runs a Peer server, which takes the other members'
// completion reports, and so does every member that aggregates reports on their way to it
// (docs/coordination.md "Reports aggregate on the way": the lowest id of each group of
// ceil(sqrt(N)) by id, from --aggregate-from-nodes nodes on, reftd's
// coordinator.aggregate_from_nodes); the others advertise the process's one responder server,
// which answers every call UNIMPLEMENTED: a held death's probe (any answer is a live process)
// finds the member alive exactly while its process runs, as it would find a reftd. Member 0
// also runs reftd's planner (replan::JobPlanner) over a model of the job (its layout, ranks on
// their nodes, four layers): a death it hears is a recovery started — a decision published in
// etcd (/reft/v1/jobs/<job>/plan), which coord_scale.py counts after the run. With --backend
// gossip each member runs the gossip control plane (SWIM membership + completion-set
// exchange) and its own Peer gRPC server on loopback, as in the in-process tests.
//
// Commands on stdin, one per line; answers on stdout (times are steady-clock nanoseconds, one
// clock for every process of the machine):
//   (at start)  -> ready ADDR          ADDR: the first member's address (a gossip seed)
//   lead        -> lead 0|1           whether the first member here coordinates the job (etcd)
//   complete S  -> completed S T_FIRST T_LAST   every rank here sealed S and reported it
//               -> visible S T_FIRST T_LAST     every member here committed S (asynchronously)
//   stats       -> stats {json}   counters, and the deaths this process saw (`departed`:
//                                  [[node, unix ms]] heard by its first member's departure
//                                  listener; `lease_lost`: [[node, unix ms]] of its own members
//                                  whose lease lapsed and who registered again)
//   quit
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "memory_store.h"
#include "reft/coord/gossip_control_plane.h"
#include "reft/coord/etcd_control_plane.h"
#include "reft/coord/etcd_node_directory.h"
#include "reft/job_layout.h"
#include "reft/mutex.h"
#include "reft/peer/peer_node.h"
#include "reft/peer/peer_service.h"
#include "reft/replan/job_planner.h"
#include "rpc_counter.h"

using namespace reft;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string backend = "etcd";
  std::string etcd;
  std::vector<std::string> seeds;
  int first = 0;
  int count = 1;
  int nodes = 1;
  int ranks = 8;
  int lease_ttl_s = 5;
  double lease_renewals_per_s = coord::LeaseSizing{}.renewals_per_s;
  size_t aggregate_from_nodes = coord::EtcdCoordinatorOptions{}.aggregate_from_nodes;
  std::string job = "scale";
};

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::mutex out_mu;
void Say(const std::string& line) {
  std::lock_guard<std::mutex> lock(out_mu);
  std::cout << line << std::endl;
}

/// Threads and resident memory of this process, from /proc.
std::pair<long, long> ThreadsAndRssKib() {
  std::ifstream f("/proc/self/status");
  std::string key;
  long threads = 0, rss = 0;
  while (f >> key) {
    if (key == "Threads:") f >> threads;
    if (key == "VmRSS:") f >> rss;
    f.ignore(1 << 20, '\n');
  }
  return {threads, rss};
}

/// When each member first committed each step; reports a step once every member here did.
class Visibility {
 public:
  explicit Visibility(int members) : members_(members), newest_(members, -1) {}
  void OnCommit(int member, int64_t step) {
    const int64_t t = Now();
    std::string line;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (step <= newest_[member]) return;  // the member's other ranks of the step
      newest_[member] = step;
      Step& s = steps_[step];
      if (s.count++ == 0) s.first = t;
      s.last = t;
      if (s.count < members_) return;
      line = "visible " + std::to_string(step) + " " + std::to_string(s.first) + " " +
             std::to_string(s.last);
      steps_.erase(step);
    }
    Say(line);
  }

 private:
  struct Step {
    int count = 0;
    int64_t first = 0, last = 0;
  };
  const int members_;
  std::mutex mu_;
  std::vector<int64_t> newest_;
  std::map<int64_t, Step> steps_;
};

struct Member {
  std::string id;
  std::unique_ptr<bench::MemoryStore> store;
  std::unique_ptr<peer::PeerNode> peer;
  std::unique_ptr<grpc::Server> server;  // gossip, and the coordinator under etcd
  std::vector<store::RankKey> ranks;
};

using NodeTimes = std::vector<std::pair<std::string, int64_t>>;  // (node, unix ms)

std::string JsonPairs(const NodeTimes& list) {
  std::string out = "[";
  for (const auto& [node, ms] : list) {
    if (out.size() > 1) out += ",";
    out += "[\"" + node + "\"," + std::to_string(ms) + "]";
  }
  return out + "]";
}

/// Membership events of the whole process (false failure detections under a stall).
class Detections {
 public:
  std::atomic<uint64_t> dead{0}, suspect{0}, self{0};

  /// A departure a member heard (etcd: the first member's departure listener, a lapse declared
  /// at once or after a hold; gossip: any member's SWIM dead event).
  void Departed(const std::string& node) {
    reft::MutexLock lock(mu_);
    departed_.emplace_back(node, UnixMs());
  }
  /// A member of this process whose own lease lapsed (it registered again, a new epoch).
  void LeaseLost(const std::string& node) {
    reft::MutexLock lock(mu_);
    lease_lost_.emplace_back(node, UnixMs());
  }
  /// `"departed":[[node, ms], ...],"lease_lost":[...]` for the stats line.
  std::string Json() const {
    reft::MutexLock lock(mu_);
    return "\"departed\":" + JsonPairs(departed_) + ",\"lease_lost\":" + JsonPairs(lease_lost_);
  }

 private:
  mutable reft::Mutex mu_;
  NodeTimes departed_ REFT_GUARDED_BY(mu_);
  NodeTimes lease_lost_ REFT_GUARDED_BY(mu_);
};

std::string NodeId(int i) {
  char b[32];
  std::snprintf(b, sizeof(b), "n%05d", i);
  return b;
}

// Whether member `index` aggregates its group's reports under the coordinator's rule (member 0,
// the first to join, coordinates; every member is joined; node ids sort as their indexes).
bool Aggregates(const Args& a, int index) {
  const size_t threshold = a.aggregate_from_nodes;
  if (threshold == 0 || static_cast<size_t>(a.nodes) < threshold) return false;
  const int group = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(a.nodes))));
  return index % group == 0 && index / group != 0;
}

Result<std::unique_ptr<Member>> MakeMember(const Args& a, int index, Visibility* vis,
                                           int local_index,
                                           const peer::ControlPlaneFactory& etcd,
                                           const std::string& responder,
                                           bench::RpcCounts* counts) {
  auto m = std::make_unique<Member>();
  m->id = NodeId(index);
  m->store = std::make_unique<bench::MemoryStore>(
      [vis, local_index](const store::RankKey&, int64_t step) { vis->OnCommit(local_index, step); });
  // Production timings (reftd's defaults): the figures are about today's behaviour.
  peer::PeerOptions po;
  po.node_id = m->id;
  po.seeds = a.seeds;
  // The bench measures the gossip path past its bound: the figures are why the bound is there.
  po.max_gossip_nodes = static_cast<uint32_t>(std::max(a.nodes, 2));
  if (a.backend == "etcd") {
    REFT_ASSIGN_OR_RETURN(m->peer, peer::PeerNode::Create(po, m->store.get(), {}, etcd));
  } else {
    REFT_ASSIGN_OR_RETURN(m->peer, peer::PeerNode::Create(po, m->store.get(), {},
                                                          coord::MakeGossipControlPlane()));
  }
  if (a.backend == "etcd" && index != 0 && !Aggregates(a, index)) {
    // Only the coordinator and the aggregators take reports (no data plane): the others are
    // dialled only to probe them (a held death), which the process's responder answers.
    REFT_RETURN_NOT_OK(m->peer->Start(responder));
  } else {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    m->peer->Register(&b);
    peer::PeerService::ConfigureServerBuilder(po, &b);
    b.experimental().SetInterceptorCreators(bench::CountingInterceptors(counts));
    m->server = b.BuildAndStart();
    if (!m->server || port == 0) return Status::Unavailable("cannot start a Peer server");
    REFT_RETURN_NOT_OK(m->peer->Start("127.0.0.1:" + std::to_string(port)));
  }
  for (int r = 0; r < a.ranks; ++r) m->ranks.push_back({a.job, 0, r, index});
  return m;
}

std::string Stats(const std::vector<std::unique_ptr<Member>>& members,
                  const std::shared_ptr<coord::EtcdClient>& etcd, const bench::RpcCounts& c,
                  const Detections& d, const Args& a) {
  auto [threads, rss] = ThreadsAndRssKib();
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const double cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                        (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  std::ostringstream o;
  o << "{\"members\":" << members.size() << ",\"threads\":" << threads << ",\"rss_kib\":" << rss
    << ",\"cpu_ms\":" << cpu_ms
    << ",\"dead_events\":" << d.dead << ",\"suspect_events\":" << d.suspect
    << ",\"self_declared_dead\":" << d.self;
  o << "," << d.Json();
  if (etcd) {
    const coord::EtcdTraffic t = etcd->traffic();
    // Completion reports to the coordinator (Peer.ReportStepCompletion): counted by the
    // coordinator's server, where they arrive; the senders count how many they sent.
    uint64_t reports = 0, report_failures = 0, reports_late = 0, completion_writes = 0;
    uint64_t received = 0;
    uint64_t report_messages = 0, forwarded = 0, via_aggregator = 0;
    for (const auto& m : members) {
      if (auto* co = dynamic_cast<coord::EtcdJobCoordinator*>(m->peer->coordinator())) {
        const coord::CompletionTraffic ct = co->completion_traffic();
        reports += ct.reported + ct.report_failures;
        report_failures += ct.report_failures;
        reports_late += ct.reports_late;
        completion_writes += ct.written;
        received += ct.received;
        report_messages += ct.messages;
        forwarded += ct.forwarded;
        via_aggregator += ct.via_aggregator;
      }
    }
    // The members' lease TTLs (sized by the cluster: they move to longer ones as it grows;
    // the job's coordinator keeps the lease it has).
    int64_t ttl_min = 0, ttl_max = 0;
    for (const auto& m : members) {
      auto* dir = dynamic_cast<coord::EtcdNodeDirectory*>(&m->peer->membership());
      if (dir == nullptr || m->peer->coordinator()->LeadsJob(a.job)) continue;
      const int64_t ttl = dir->lease_ttl().count();
      ttl_min = ttl_min == 0 ? ttl : std::min(ttl_min, ttl);
      ttl_max = std::max(ttl_max, ttl);
    }
    // What reftd's sizing chooses for the whole job's nodes (members move towards it).
    coord::LeaseSizing sizing;
    sizing.floor = std::chrono::seconds(a.lease_ttl_s);
    sizing.renewals_per_s = a.lease_renewals_per_s;
    o << ",\"lease_ttl_min_s\":" << ttl_min << ",\"lease_ttl_max_s\":" << ttl_max
      << ",\"lease_ttl_sized_s\":" << coord::SizedLeaseTtl(sizing, a.nodes).count();
    o << ",\"messages\":" << t.requests + t.responses
      << ",\"bytes\":" << t.bytes_sent + t.bytes_received
      << ",\"reports_sent\":" << reports << ",\"report_failures\":" << report_failures
      << ",\"reports_late\":" << reports_late
      << ",\"completion_writes\":" << completion_writes << ",\"reports_received\":" << received
      << ",\"report_messages_received\":" << report_messages
      << ",\"reports_forwarded\":" << forwarded << ",\"reports_via_aggregator\":" << via_aggregator
      << ",\"peer_server_messages\":" << c.commit_messages + c.other_messages
      << ",\"peer_server_bytes\":" << c.commit_bytes + c.other_bytes
      << ",\"watch_events\":" << t.watch_events
      << ",\"background_messages\":" << t.keepalive_messages
      << ",\"background_bytes\":" << t.keepalive_bytes;
    // Lapses held while this process's etcd client found the control plane suspect, and what
    // became of them (docs/coordination.md "Deaths held while the control plane is suspect").
    uint64_t held = 0, released = 0, declared = 0, reregistrations = 0;
    for (const auto& m : members) {
      const peer::DeathHoldStatus h = m->peer->membership().DeathHolds();
      held += h.held_total;
      released += h.released_total;
      declared += h.declared_total;
      reregistrations += h.reregistrations_total;
    }
    o << ",\"aggregate_from_nodes\":" << a.aggregate_from_nodes << ",\"deaths_held\":" << held
      << ",\"deaths_held_released\":" << released << ",\"deaths_held_declared\":" << declared
      << ",\"reregistrations\":" << reregistrations;
  } else {
    o << ",\"messages\":" << c.commit_messages + c.membership_messages + c.other_messages
      << ",\"bytes\":" << c.commit_bytes + c.membership_bytes + c.other_bytes
      << ",\"background_messages\":" << c.membership_messages
      << ",\"background_bytes\":" << c.membership_bytes;
  }
  o << "}";
  return o.str();
}

/// The job as the planner of member 0 would read it from the committed step's slots (the bench
/// stubs the data plane): every rank on its node, four layers of 1 GiB of parameters and 2 GiB
/// of optimizer state each, the bench's step time. NotFound before the first commit.
Result<planner::online::JobModelView> BenchJobModel(const Args& a, coord::JobCoordinator* co) {
  const std::optional<int64_t> step = co->NewestCommitted(a.job);
  if (!step) return Status::NotFound("no committed step of job " + a.job);
  planner::online::JobModelView m;
  m.job = a.job;
  m.dp = a.nodes;
  m.tp = a.ranks;
  m.pp = 1;
  m.step = *step;
  m.step_ms = 200;
  m.step_samples = 10;
  for (int dp = 0; dp < a.nodes; ++dp) {
    for (int tp = 0; tp < a.ranks; ++tp) m.ranks.push_back({0, tp, dp, NodeId(dp)});
  }
  for (int l = 0; l < 4; ++l) m.layers.push_back({l, 0, 1ull << 30, 2ull << 30});
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  reft::peer::DisableAbslLockGraph();  // as reftd does: 256 members' threads in one process
  Args a;
  CLI::App app{"one process of the control-plane scale bench (see coord_scale.py)"};
  app.add_option("--backend", a.backend, "etcd | gossip")->check(CLI::IsMember({"etcd", "gossip"}));
  app.add_option("--etcd", a.etcd, "etcd endpoints H:P,...");
  app.add_option("--seeds", a.seeds, "gossip seeds H:P")->delimiter(',');
  app.add_option("--first", a.first, "index of the first member hosted here");
  app.add_option("--count", a.count, "members hosted here")->check(CLI::PositiveNumber);
  app.add_option("--nodes", a.nodes, "nodes of the job (its dp)")->check(CLI::PositiveNumber);
  app.add_option("--ranks", a.ranks, "ranks per node (the job's tp)")->check(CLI::PositiveNumber);
  app.add_option("--lease-ttl", a.lease_ttl_s, "etcd lease TTL of a small cluster, seconds");
  app.add_option("--lease-renewals", a.lease_renewals_per_s,
                 "renewals/s the cluster may ask of etcd (longer TTLs past it; 0: fixed TTL)");
  app.add_option("--aggregate-from-nodes", a.aggregate_from_nodes,
                 "reftd's coordinator.aggregate_from_nodes: jobs on this many nodes aggregate "
                 "their completion reports (0: never, every report goes to the coordinator)");
  CLI11_PARSE(app, argc, argv);
  // stdout carries the protocol with coord_scale.py; the daemon's log goes to stderr, whose
  // tail the driver reports when a host fails.
  spdlog::set_default_logger(spdlog::stderr_color_mt("coord_scale_host"));

  std::shared_ptr<coord::EtcdClient> etcd;
  peer::ControlPlaneFactory factory;
  if (a.backend == "etcd") {
    coord::EtcdOptions eo;
    std::stringstream ss(a.etcd);
    for (std::string e; std::getline(ss, e, ',');) eo.endpoints.push_back(e);
    auto client = coord::EtcdClient::Create(eo);
    if (!client.ok()) {
      std::cerr << client.status().ToString() << "\n";
      return 2;
    }
    etcd = std::move(*client);
    coord::EtcdControlPlaneOptions co;
    co.lease.floor = std::chrono::seconds(a.lease_ttl_s);
    co.lease.renewals_per_s = a.lease_renewals_per_s;
    co.coordinator.aggregate_from_nodes = a.aggregate_from_nodes;
    factory = coord::MakeEtcdControlPlane(etcd, co);
  }
  // The members without a Peer server of their own advertise this one (see the file comment).
  v1::Peer::Service unimplemented;
  std::unique_ptr<grpc::Server> responder;
  std::string responder_address;
  if (a.backend == "etcd" && (a.first != 0 || a.count > 1)) {  // member 0 serves by itself
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&unimplemented);
    responder = b.BuildAndStart();
    if (!responder || port == 0) {
      std::cerr << "cannot start the responder server\n";
      return 2;
    }
    responder_address = "127.0.0.1:" + std::to_string(port);
  }
  bench::RpcCounts counts;
  Detections detections;
  Visibility vis(a.count);
  JobLayout layout;
  layout.dp = a.nodes;
  layout.tp = a.ranks;

  std::vector<std::unique_ptr<Member>> members;
  for (int i = 0; i < a.count; ++i) {
    auto m = MakeMember(a, a.first + i, &vis, i, factory, responder_address, &counts);
    if (!m.ok()) {
      std::cerr << "member " << a.first + i << ": " << m.status().ToString() << "\n";
      return 1;
    }
    (*m)->peer->membership().AddListener(
        [&detections](const peer::MemberInfo& info, peer::MemberState) {
          if (info.self) {
            ++detections.self;
            detections.LeaseLost(info.node_id);
          } else if (info.state == peer::MemberState::kDead) {
            ++detections.dead;  // gossip: every member's SWIM view (etcd: never, see below)
            detections.Departed(info.node_id);
          } else if (info.state == peer::MemberState::kSuspect) {
            ++detections.suspect;
          }
        });
    if (i == 0 && a.backend == "etcd") {
      // The etcd directory tells listeners of its own re-registration only; departures need a
      // watch. One per process (every reftd has one: its planner's): without a departure
      // listener a directory neither holds nor declares deaths.
      (*m)->peer->membership().AddDepartureListener([&detections](const std::string& node) {
        detections.Departed(node);
      });
    }
    for (const auto& r : (*m)->ranks) {
      Status s = (*m)->peer->coordinator()->Join(r, layout);
      if (!s.ok()) {
        std::cerr << "join " << r.ToString() << ": " << s.ToString() << "\n";
        return 1;
      }
    }
    members.push_back(std::move(*m));
  }
  // reftd's planner on the job's coordinator (member 0 joins first and keeps its lease).
  std::unique_ptr<replan::JobPlanner> planner;
  if (a.backend == "etcd" && a.first == 0) {
    replan::JobPlannerOptions jpo;
    jpo.lease_ttl = std::chrono::seconds(a.lease_ttl_s);
    coord::JobCoordinator* co = members[0]->peer->coordinator();
    planner = std::make_unique<replan::JobPlanner>(
        members[0]->id, jpo, &members[0]->peer->membership(), replan::PlannerAgreement::Of(co),
        nullptr, [&a, co](const std::string&) { return BenchJobModel(a, co); });
    planner->Start();
  }
  Say("ready " + members[0]->peer->membership().SelfCaller().address());

  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "complete") {
      int64_t step = 0;
      in >> step;
      const int64_t first = Now();
      for (auto& m : members) {
        for (const auto& r : m->ranks) {
          (void)m->store->Seal(r, step);
          auto* co = m->peer->coordinator();
          (void)co->Complete(r, step, co->RestoreEpoch(r.job));
        }
      }
      Say("completed " + std::to_string(step) + " " + std::to_string(first) + " " +
          std::to_string(Now()));
    } else if (cmd == "lead") {
      Say(std::string("lead ") + (members[0]->peer->coordinator()->LeadsJob(a.job) ? "1" : "0"));
    } else if (cmd == "live") {
      // Gossip convergence: the fewest live members any member here sees.
      size_t fewest = SIZE_MAX;
      for (auto& m : members) fewest = std::min(fewest, m->peer->membership().LiveMembers().size());
      Say("live " + std::to_string(fewest));
    } else if (cmd == "stats") {
      Say("stats " + Stats(members, etcd, counts, detections, a));
    } else if (cmd == "quit") {
      break;
    }
  }
  if (planner) planner->Stop();
  for (auto& m : members) {
    m->peer->Stop();
    if (m->server) m->server->Shutdown(std::chrono::system_clock::now());
  }
  if (responder) responder->Shutdown(std::chrono::system_clock::now());
  return 0;
}
