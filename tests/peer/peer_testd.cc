// A Peer node in its own process, so a test can SIGSTOP it (a hung peer).
// Usage: reft_peer_testd NODE_ID SHM_DIR SEED [REGION_BYTES]. With REGION_BYTES it first writes
// and seals region "params" of job/pp0-tp0-dp0 step 1 (bytes RandomBytes(n, 7)). Prints "ADDR host:port" once serving and
// "FENCED" when it learns it was declared dead; runs until killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "peer_fixture.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: reft_peer_testd NODE_ID SHM_DIR SEED [REGION_BYTES]\n");
    return 2;
  }
  using namespace reft::peer;
  test::TestNode node(argv[1], argv[2], {argv[3]});
  if (argc == 5) {
    test::WriteSlot(node.store.get(), {"job", 0, 0, 0}, 1,
                    reft::testing::RandomBytes(std::strtoull(argv[4], nullptr, 10), 7));
  }
  node.peer->membership().AddListener([](const MemberInfo& m, MemberState) {
    if (m.self) {
      std::printf("FENCED\n");
      std::fflush(stdout);
    }
  });
  std::printf("ADDR %s\n", node.address.c_str());
  std::fflush(stdout);
  for (;;) pause();
}
