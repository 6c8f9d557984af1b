#include "admin_client.h"

#include <chrono>
#include <cstdlib>

namespace reft::ctl {

std::string AdminTarget(const CtlContext& ctx) {
  if (!ctx.socket.empty()) return "unix:" + ctx.socket + ".admin";
  if (!ctx.addr.empty()) return ctx.addr;
  if (const char* env = std::getenv("REFT_ADDR"); env && *env) return env;
  return "127.0.0.1:7070";
}

std::unique_ptr<v1::Admin::Stub> MakeAdminStub(const CtlContext& ctx) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel =
      grpc::CreateCustomChannel(AdminTarget(ctx), grpc::InsecureChannelCredentials(), args);
  return v1::Admin::NewStub(channel);
}

std::unique_ptr<grpc::ClientContext> MakeCallContext(double timeout_s) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  return context;
}

bool CheckRpc(CtlContext& ctx, const grpc::Status& status, const std::string& what) {
  if (status.ok()) return true;
  const bool unreachable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
                            status.error_message().find("onnect") != std::string::npos);
  if (unreachable) {
    ctx.Fail(kExitUnreachable, "cannot reach reftd at " + AdminTarget(ctx) + ": " +
                                   status.error_message());
  } else {
    ctx.Fail(kExitFailed, what + ": " + status.error_message());
  }
  return false;
}

}  // namespace reft::ctl
