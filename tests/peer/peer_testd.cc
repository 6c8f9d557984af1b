// A Peer node in its own process, so a test can SIGSTOP it (a hung peer).
// Usage: reft_peer_testd NODE_ID SHM_DIR SEED. Prints "ADDR host:port" once serving and
// "FENCED" when it learns it was declared dead; runs until killed.
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "peer_fixture.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: reft_peer_testd NODE_ID SHM_DIR SEED\n");
    return 2;
  }
  using namespace reft::peer;
  test::TestNode node(argv[1], argv[2], {argv[3]});
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
