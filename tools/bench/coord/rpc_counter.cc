#include "rpc_counter.h"

#include <cstring>
#include <string>

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>

namespace reft::bench {

namespace {

class CountingInterceptor final : public grpc::experimental::Interceptor {
 public:
  CountingInterceptor(RpcCounts* counts, const char* method) {
    const std::string m = method ? method : "";
    auto ends = [&](const char* s) {
      const size_t n = std::strlen(s);
      return m.size() >= n && m.compare(m.size() - n, n, s) == 0;
    };
    if (ends("/ExchangeCommitState") || ends("/ReportStepCompletion")) {
      messages_ = &counts->commit_messages;
      bytes_ = &counts->commit_bytes;
    } else if (ends("/Ping") || ends("/PingReq") || ends("/Hello")) {
      messages_ = &counts->membership_messages;
      bytes_ = &counts->membership_bytes;
    } else {
      messages_ = &counts->other_messages;
      bytes_ = &counts->other_bytes;
      proto_requests_ = false;  // FetchRegion reads raw byte buffers
    }
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using H = grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(H::PRE_SEND_MESSAGE)) {
      if (const grpc::ByteBuffer* b = methods->GetSerializedSendMessage()) Add(b->Length());
    }
    if (methods->QueryInterceptionHookPoint(H::POST_RECV_MESSAGE)) {
      // Every Peer RPC message is a generated protobuf message: the pointer gRPC hands over
      // points at it, and MessageLite is its primary base (at the same address).
      void* m = methods->GetRecvMessage();
      if (m && proto_requests_) {
        Add(static_cast<google::protobuf::MessageLite*>(m)->ByteSizeLong());
      } else {
        Add(0);
      }
    }
    methods->Proceed();
  }

 private:
  void Add(size_t bytes) {
    messages_->fetch_add(1, std::memory_order_relaxed);
    bytes_->fetch_add(bytes, std::memory_order_relaxed);
  }
  std::atomic<uint64_t>* messages_;
  std::atomic<uint64_t>* bytes_;
  bool proto_requests_ = true;
};

class CountingFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(RpcCounts* counts) : counts_(counts) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CountingInterceptor(counts_, info->method());
  }

 private:
  RpcCounts* counts_;
};

}  // namespace

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
CountingInterceptors(RpcCounts* counts) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> v;
  v.push_back(std::make_unique<CountingFactory>(counts));
  return v;
}

}  // namespace reft::bench
