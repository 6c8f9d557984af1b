#pragma once
// A real store + single-node coordinator + LocalServer in a temp dir, for the local tests.
#include <memory>
#include <string>

#include "reft/local/local_server.h"
#include "test_support.h"

namespace reft::testing {

struct ServerFixture {
  explicit ServerFixture(local::LocalServerOptions options = {});
  ~ServerFixture();
  TempDir dir{"reft-local"};
  std::string socket;
  std::unique_ptr<store::SnapshotStore> store;
  std::unique_ptr<local::SingleNodeCommitCoordinator> coordinator;
  std::unique_ptr<local::LocalServer> server;
};

}  // namespace reft::testing
