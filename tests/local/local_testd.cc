// reft_local_testd: store + single-node coordinator + LocalServer, serving until SIGTERM.
// Used by tests/python to exercise the Python module against real processes.
//   reft_local_testd SOCKET SHM_DIR
// REFT_TESTD_AOR_RESYNC_STEPS (optional) sets LocalServerOptions::aor_resync_steps. On SIGUSR1
// it prints one JSON line per joined session (rank and the AOR / peer-copy counters), then
// "end", so a test can see what the daemon did.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "node_local_hooks.h"
#include "reft/local/local_server.h"
#include "reft/local/single_node_commit.h"

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
  reft::local::SingleNodeCommitCoordinator coordinator(store->get());
  reft::testing::NodeLocalPeerCopier copier(store->get());
  reft::testing::NodeLocalRestoreProvider restorer(store->get(), &coordinator);
  reft::local::LocalServerOptions options;
  options.socket_path = argv[1];
  if (const char* v = std::getenv("REFT_TESTD_AOR_RESYNC_STEPS"); v != nullptr && *v != '\0') {
    options.aor_resync_steps = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
  }
  auto server = reft::local::LocalServer::Create(options, store->get(), &coordinator,
                                                 reft::local::ClusterHooks{&copier, &restorer});
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
      std::printf("{\"job\": \"%s\", \"dp\": %d, \"snapshots\": %llu, \"aor_replays\": %llu, "
                  "\"aor_copies\": %llu, \"aor_mismatches\": %llu, \"peer_copies\": %llu}\n",
                  x.rank.job.c_str(), x.rank.dp, static_cast<unsigned long long>(x.snapshots),
                  static_cast<unsigned long long>(x.aor_replays),
                  static_cast<unsigned long long>(x.aor_copies),
                  static_cast<unsigned long long>(x.aor_mismatches),
                  static_cast<unsigned long long>(x.peer_copies));
    }
    std::printf("end\n");
    std::fflush(stdout);
  }
  (*server)->Stop();
  return 0;
}
