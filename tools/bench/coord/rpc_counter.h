#pragma once
/// \file rpc_counter.h
/// \brief Counts the Peer RPCs a gRPC server receives and answers (messages and protobuf bytes
/// both ways), split into commit messages and membership probes, for the control-plane scale bench.
/// Installed on each member's server; one counter per process.

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <grpcpp/support/server_interceptor.h>

namespace reft::bench {

struct RpcCounts {
  // ExchangeCommitState (gossip), ReportStepCompletion (etcd: reports to the coordinator)
  std::atomic<uint64_t> commit_messages{0}, commit_bytes{0};
  std::atomic<uint64_t> membership_messages{0}, membership_bytes{0};  // Ping, PingReq, Hello
  std::atomic<uint64_t> other_messages{0}, other_bytes{0};
};

/// Interceptor creators for grpc::ServerBuilder::experimental().SetInterceptorCreators().
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
CountingInterceptors(RpcCounts* counts);

}  // namespace reft::bench
