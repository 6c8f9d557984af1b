// A process with named test points for test_point_test.cc: reaches each point named on its
// command line in turn (for job "job-x") and says on stdout that it passed it.
#include <cstdio>

#include "reft/test_point.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    reft::test_point::Reach(argv[i], "job-x");
    std::printf("passed %s\n", argv[i]);
    std::fflush(stdout);
  }
  return 0;
}
