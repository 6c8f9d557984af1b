#pragma once
// A real store + single-node coordinator + LocalServer in a temp dir, for the local tests.
#include <memory>
#include <string>

#include "node_local_hooks.h"
#include "reft/local/local_server.h"
#include "single_node_commit.h"
#include "test_support.h"

namespace reft::testing {

struct ServerFixture {
  /// `plans`: what plan queries are answered from (null: reftd without a planner).
  explicit ServerFixture(local::LocalServerOptions options = {},
                         local::PlanSource* plans = nullptr);
  ~ServerFixture();
  TempDir dir{"reft-local"};
  std::string socket;
  std::unique_ptr<store::SnapshotStore> store;
  std::unique_ptr<coord::SingleNodeCommitCoordinator> coordinator;
  std::unique_ptr<NodeLocalPeerCopier> copier;
  std::unique_ptr<NodeLocalRestoreProvider> restorer;
  std::unique_ptr<local::LocalServer> server;
};

}  // namespace reft::testing
