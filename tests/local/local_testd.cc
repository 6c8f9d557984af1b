// reft_local_testd: store + single-node coordinator + LocalServer, serving until SIGTERM.
// Used by tests/python to exercise the Python module against real processes.
//   reft_local_testd SOCKET SHM_DIR
// REFT_TESTD_AOR_RESYNC_STEPS, REFT_TESTD_AOR_PROBATION_STEPS and REFT_TESTD_AOR_DEVICE_OPTIMIZERS
// (optional) set LocalServerOptions::aor_resync_steps, aor_probation_steps and
// aor_device_optimizers (1 = on). On SIGUSR1 it prints one JSON line per joined session (rank,
// the AOR / peer-copy counters and the AOR state), then "end", so a test can see what the
// daemon did.
// Plan queries (reft.plan) are answered by a stand-in for the planner: a one-rank document on
// node "testd" with no node lost ("testd": true) for a job with a committed step, NotFound
// "has no committed step" otherwise.
// REFT_TESTD_FOREIGN_JOB (optional) names a job that another uid owns (the test's own
// trainers may not use it).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "node_local_hooks.h"
#include "reft/local/job_owners.h"
#include "reft/local/local_server.h"
#include "reft/local/plan_source.h"
#include "single_node_commit.h"

namespace {

class TestdPlans final : public reft::local::PlanSource {
 public:
  explicit TestdPlans(reft::local::CommitCoordinator* coordinator) : coordinator_(coordinator) {}
  reft::Result<std::string> PlanJson(const std::string& job) override {
    auto step = coordinator_->NewestCommitted(job);
    if (!step) return reft::Status::NotFound("job '" + job + "' has no committed step");
    // The shape of `reftctl plan show -o json` for a one-rank job on node "testd" that lost
    // nothing (what reft.elastic reads), marked as the stand-in's.
    return "{\"job\": \"" + job + "\", \"step\": " + std::to_string(*step) +
           ", \"node\": \"testd\", \"layout\": {\"dp\": 1, \"tp\": 1, \"pp\": 1}"
           ", \"ranks\": [{\"pp\": 0, \"tp\": 0, \"dp\": 0, \"node\": \"testd\"}]"
           ", \"model\": {\"layers\": [{\"layer\": 0, \"stage\": 0}]}"
           ", \"decision\": {\"needed\": false}, \"publication\": null, \"testd\": true}";
  }

 private:
  reft::local::CommitCoordinator* const coordinator_;
};

// Gives `job` to a uid that is not this process's, as its first hello would have.
bool ClaimForeign(reft::local::JobOwners& owners, const char* job) {
  reft::PeerCredentials other;
  other.uid = ::getuid() == 0 ? 4242 : ::getuid() + 1;
  other.gid = other.uid;
  reft::local::JobOwner claim;
  claim.uid = other.uid;
  return owners.Admit(job, other, claim).ok();
}

// `s` for a JSON string: quotes and backslashes escaped, control characters dropped.
std::string JsonText(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: reft_local_testd SOCKET SHM_DIR\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  reft::store::StoreOptions so;
  so.shm_dir = argv[2];
  so.chunk_size = 64 * 1024;
  auto store = reft::store::SnapshotStore::Open(so);
  if (!store.ok()) {
    std::fprintf(stderr, "store: %s\n", store.status().ToString().c_str());
    return 1;
  }
  reft::coord::SingleNodeCommitCoordinator coordinator(store->get());
  reft::testing::NodeLocalPeerCopier copier(store->get());
  reft::testing::NodeLocalRestoreProvider restorer(store->get(), &coordinator);
  reft::local::LocalServerOptions options;
  options.socket_path = argv[1];
  if (const char* v = std::getenv("REFT_TESTD_AOR_RESYNC_STEPS"); v != nullptr && *v != '\0') {
    options.aor_resync_steps = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
  }
  if (const char* v = std::getenv("REFT_TESTD_AOR_PROBATION_STEPS"); v != nullptr && *v != '\0') {
    options.aor_probation_steps = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
  }
  if (const char* v = std::getenv("REFT_TESTD_AOR_DEVICE_OPTIMIZERS"); v != nullptr) {
    options.aor_device_optimizers = std::string(v) == "1";
  }
  auto owners = reft::local::JobOwners::Open("");
  if (!owners.ok()) return 1;
  options.job_owners = owners->get();
  if (const char* job = std::getenv("REFT_TESTD_FOREIGN_JOB"); job != nullptr && *job != '\0') {
    if (!ClaimForeign(**owners, job)) return 1;
  }
  TestdPlans plans(&coordinator);
  auto server = reft::local::LocalServer::Create(
      options, store->get(), &coordinator, reft::local::ClusterHooks{&copier, &restorer, &plans});
  if (!server.ok() || !(*server)->Start().ok()) {
    std::fprintf(stderr, "cannot start the local server on %s\n", argv[1]);
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  int sig = 0;
  for (;;) {
    sigwait(&set, &sig);
    if (sig != SIGUSR1) break;
    for (const auto& x : (*server)->Sessions()) {
      if (!x.joined) continue;
      std::printf(
          "{\"job\": \"%s\", \"dp\": %d, \"snapshots\": %llu, \"aor_replays\": %llu, "
          "\"aor_copies\": %llu, \"aor_verified\": %llu, \"aor_mismatches\": %llu, "
          "\"peer_copies\": %llu, \"aor_state\": \"%s\", \"aor_last_copy\": \"%s\"}\n",
          x.rank.job.c_str(), x.rank.dp, static_cast<unsigned long long>(x.snapshots),
          static_cast<unsigned long long>(x.aor_replays),
          static_cast<unsigned long long>(x.aor_copies),
          static_cast<unsigned long long>(x.aor_verified),
          static_cast<unsigned long long>(x.aor_mismatches),
          static_cast<unsigned long long>(x.peer_copies), JsonText(x.aor_state).c_str(),
          JsonText(x.aor_last_copy).c_str());
    }
    std::printf("end\n");
    std::fflush(stdout);
  }
  (*server)->Stop();
  return 0;
}
