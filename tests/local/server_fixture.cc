#include "server_fixture.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>

namespace reft::testing {

ServerFixture::ServerFixture(local::LocalServerOptions options, local::PlanSource* plans) {
  ::chmod(dir.path().c_str(), 0755);  // the disallowed-uid test connects as nobody
  socket = dir.path() + "/reftd.sock";
  store::StoreOptions so;
  so.shm_dir = dir.path() + "/shm";
  so.chunk_size = 64 * 1024;
  so.prefault = false;
  auto s = store::SnapshotStore::Open(so);
  REQUIRE(s.ok());
  store = std::move(*s);
  coordinator = std::make_unique<coord::SingleNodeCommitCoordinator>(store.get());
  copier = std::make_unique<NodeLocalPeerCopier>(store.get());
  restorer = std::make_unique<NodeLocalRestoreProvider>(store.get(), coordinator.get());
  options.socket_path = socket;
  auto srv = local::LocalServer::Create(options, store.get(), coordinator.get(),
                                        local::ClusterHooks{copier.get(), restorer.get(), plans});
  REQUIRE(srv.ok());
  server = std::move(*srv);
  Status st = server->Start();
  INFO(st.ToString());
  REQUIRE(st.ok());
}

ServerFixture::~ServerFixture() { server->Stop(); }

}  // namespace reft::testing
