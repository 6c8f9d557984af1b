// reft_local_testd: store + single-node coordinator + LocalServer, serving until SIGTERM.
// Used by tests/python to exercise the Python module against real processes.
//   reft_local_testd SOCKET SHM_DIR
#include <signal.h>

#include <cstdio>

#include "reft/local/local_server.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: reft_local_testd SOCKET SHM_DIR\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
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
  reft::local::LocalServerOptions options;
  options.socket_path = argv[1];
  auto server = reft::local::LocalServer::Create(options, store->get(), &coordinator);
  if (!server.ok() || !(*server)->Start().ok()) {
    std::fprintf(stderr, "cannot start the local server on %s\n", argv[1]);
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  (*server)->Stop();
  return 0;
}
