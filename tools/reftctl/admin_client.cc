#include "admin_client.h"

#include "reft/security/grpc_auth.h"

#include <chrono>
#include <cstdlib>

namespace reft::ctl {

std::string AdminTarget(const CtlContext& ctx) {
  if (!ctx.socket.empty()) return "unix:" + ctx.socket + ".admin";
  if (!ctx.addr.empty()) return ctx.addr;
  if (const char* env = std::getenv("REFT_ADDR"); env && *env) return env;
  return "127.0.0.1:7070";
}

namespace {
security::SecurityOptions SecurityFor(const CtlContext& ctx) {
  security::SecurityOptions o;
  // The Unix admin socket is local: TLS is for the TCP endpoint only.
  if (ctx.socket.empty()) {
    o.tls_ca = ctx.tls_ca;
    o.tls_cert = ctx.tls_cert;
    o.tls_key = ctx.tls_key;
  }
  return o;
}

std::string TokenFile(const CtlContext& ctx) {
  if (!ctx.token_file.empty()) return ctx.token_file;
  const char* env = std::getenv("REFT_TOKEN_FILE");
  return env ? env : "";
}
}  // namespace

std::unique_ptr<v1::Admin::Stub> MakeAdminStub(const CtlContext& ctx) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto credentials = security::MakeChannelCredentials(SecurityFor(ctx));
  auto channel = grpc::CreateCustomChannel(
      AdminTarget(ctx), credentials.ok() ? *credentials : grpc::InsecureChannelCredentials(), args);
  return v1::Admin::NewStub(channel);
}

std::unique_ptr<grpc::ClientContext> MakeCallContext(CtlContext& ctx, double timeout_s) {
  if (auto credentials = security::MakeChannelCredentials(SecurityFor(ctx)); !credentials.ok()) {
    ctx.Fail(kExitUsage, credentials.status().message());
    return nullptr;
  }
  auto context = std::make_unique<grpc::ClientContext>();
  if (auto file = TokenFile(ctx); !file.empty()) {
    auto token = security::ReadTokenFile(file);
    if (!token.ok()) {
      ctx.Fail(kExitUsage, token.status().message());
      return nullptr;
    }
    security::AttachToken(context.get(), *token);
  }
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
