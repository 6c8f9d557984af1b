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
// ceil(sqrt(N)) by id, from EtcdCoordinatorOptions::aggregate_from_nodes nodes on); the others
// have none (nothing else calls them). With --backend
// gossip each member runs the gossip control plane (SWIM membership + completion-set
// exchange) and its own Peer gRPC server on loopback, as in the in-process tests.
//
// Commands on stdin, one per line; answers on stdout (times are steady-clock nanoseconds, one
// clock for every process of the machine):
//   (at start)  -> ready ADDR          ADDR: the first member's address (a gossip seed)
//   lead        -> lead 0|1           whether the first member here coordinates the job (etcd)
//   complete S  -> completed S T_FIRST T_LAST   every rank here sealed S and reported it
//               -> visible S T_FIRST T_LAST     every member here committed S (asynchronously)
//   stats       -> stats {json}
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
#include "reft/peer/peer_node.h"
#include "reft/peer/peer_service.h"
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
  std::string job = "scale";
};

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

/// Membership events of the whole process (false failure detections under a stall).
struct Detections {
  std::atomic<uint64_t> dead{0}, suspect{0}, self{0};
};

std::string NodeId(int i) {
  char b[32];
  std::snprintf(b, sizeof(b), "n%05d", i);
  return b;
}

// Whether member `index` aggregates its group's reports under the coordinator's rule (member 0,
// the first to join, coordinates; every member is joined; node ids sort as their indexes).
bool Aggregates(const Args& a, int index) {
  const auto threshold = coord::EtcdCoordinatorOptions{}.aggregate_from_nodes;
  if (threshold == 0 || static_cast<size_t>(a.nodes) < threshold) return false;
  const int group = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(a.nodes))));
  return index % group == 0 && index / group != 0;
}

Result<std::unique_ptr<Member>> MakeMember(const Args& a, int index, Visibility* vis,
                                           int local_index,
                                           const peer::ControlPlaneFactory& etcd,
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
    // Never dialled: the bench has no data plane, and only the coordinator and the aggregators
    // take reports.
    REFT_RETURN_NOT_OK(m->peer->Start("127.0.0.1:1"));
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
  if (etcd) {
    const coord::EtcdTraffic t = etcd->traffic();
    // Completion reports to the coordinator (Peer.ReportStepCompletion): counted by the
    // coordinator's server, where they arrive; the senders count how many they sent.
    uint64_t reports = 0, report_failures = 0, completion_writes = 0, received = 0;
    uint64_t report_messages = 0, forwarded = 0, via_aggregator = 0;
    for (const auto& m : members) {
      if (auto* co = dynamic_cast<coord::EtcdJobCoordinator*>(m->peer->coordinator())) {
        const coord::CompletionTraffic ct = co->completion_traffic();
        reports += ct.reported + ct.report_failures;
        report_failures += ct.report_failures;
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
      << ",\"completion_writes\":" << completion_writes << ",\"reports_received\":" << received
      << ",\"report_messages_received\":" << report_messages
      << ",\"reports_forwarded\":" << forwarded << ",\"reports_via_aggregator\":" << via_aggregator
      << ",\"peer_server_messages\":" << c.commit_messages + c.other_messages
      << ",\"peer_server_bytes\":" << c.commit_bytes + c.other_bytes
      << ",\"watch_events\":" << t.watch_events
      << ",\"background_messages\":" << t.keepalive_messages
      << ",\"background_bytes\":" << t.keepalive_bytes;
  } else {
    o << ",\"messages\":" << c.commit_messages + c.membership_messages + c.other_messages
      << ",\"bytes\":" << c.commit_bytes + c.membership_bytes + c.other_bytes
      << ",\"background_messages\":" << c.membership_messages
      << ",\"background_bytes\":" << c.membership_bytes;
  }
  o << "}";
  return o.str();
}

}  // namespace

int main(int argc, char** argv) {
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
    factory = coord::MakeEtcdControlPlane(etcd, co);
  }
  bench::RpcCounts counts;
  Detections detections;
  Visibility vis(a.count);
  JobLayout layout;
  layout.dp = a.nodes;
  layout.tp = a.ranks;

  std::vector<std::unique_ptr<Member>> members;
  for (int i = 0; i < a.count; ++i) {
    auto m = MakeMember(a, a.first + i, &vis, i, factory, &counts);
    if (!m.ok()) {
      std::cerr << "member " << a.first + i << ": " << m.status().ToString() << "\n";
      return 1;
    }
    (*m)->peer->membership().AddListener(
        [&detections](const peer::MemberInfo& info, peer::MemberState) {
          if (info.self) {
            ++detections.self;
          } else if (info.state == peer::MemberState::kDead) {
            ++detections.dead;
          } else if (info.state == peer::MemberState::kSuspect) {
            ++detections.suspect;
          }
        });
    for (const auto& r : (*m)->ranks) {
      Status s = (*m)->peer->coordinator()->Join(r, layout);
      if (!s.ok()) {
        std::cerr << "join " << r.ToString() << ": " << s.ToString() << "\n";
        return 1;
      }
    }
    members.push_back(std::move(*m));
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
  for (auto& m : members) {
    m->peer->Stop();
    if (m->server) m->server->Shutdown(std::chrono::system_clock::now());
  }
  return 0;
}
