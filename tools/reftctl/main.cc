// reftctl: operator CLI for reftd. `reftctl [--addr H:P | --socket PATH] [-o table|json] NOUN VERB`
// Exit codes: 0 success, 1 operation failed, 2 usage error, 3 cannot reach the daemon.
#include <cstdio>

#include "command.h"

namespace reft::ctl {
void RegisterStatusCommand(CLI::App& root, CtlContext& ctx);
void RegisterSnapshotsCommands(CLI::App& root, CtlContext& ctx);
void RegisterNodesCommands(CLI::App& root, CtlContext& ctx);
void RegisterRecoveryCommands(CLI::App& root, CtlContext& ctx);  // persist, restore-check, rebuild
void RegisterJobsCommands(CLI::App& root, CtlContext& ctx);      // jobs list, jobs release
void RegisterJobPlanCommands(CLI::App& plan, CtlContext& ctx);    // plan attach, plan show
}  // namespace reft::ctl

int main(int argc, char** argv) {
  using namespace reft::ctl;
  CtlContext ctx;
  CLI::App app{"reftctl: operate reft checkpoint daemons"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("reftctl ") + REFT_VERSION);
  std::string output = "table";
  auto* addr = app.add_option("--addr", ctx.addr, "daemon gRPC address HOST:PORT");
  auto* socket = app.add_option("--socket", ctx.socket, "daemon local socket PATH");
  addr->excludes(socket);
  app.add_option("--token-file", ctx.token_file, "shared token file (default $REFT_TOKEN_FILE)");
  app.add_option("--tls-ca", ctx.tls_ca, "CA bundle for mutual TLS to the daemon");
  app.add_option("--tls-cert", ctx.tls_cert, "client certificate for mutual TLS");
  app.add_option("--tls-key", ctx.tls_key, "client key for mutual TLS");
  app.add_option("-o,--output", output, "output format")
      ->check(CLI::IsMember({"table", "json"}));
  app.parse_complete_callback([&] {
    ctx.format = output == "json" ? OutputFormat::kJson : OutputFormat::kTable;
  });

  RegisterStatusCommand(app, ctx);
  RegisterSnapshotsCommands(app, ctx);
  RegisterNodesCommands(app, ctx);
  RegisterRecoveryCommands(app, ctx);
  RegisterJobsCommands(app, ctx);
  auto* plan = app.add_subcommand(
      "plan", "recovery planning: offline (templates ... transfer) and on a daemon's job (attach, show)");
  plan->require_subcommand(1);
  RegisterPlanCommands(*plan, ctx);
  RegisterJobPlanCommands(*plan, ctx);
  RegisterReliabilityCommands(app, ctx);
  RegisterProtectionPlanCommand(*plan, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "reftctl: %s\n", e.what());
    std::fprintf(stderr, "Run with --help for usage.\n");
    return kExitUsage;
  }
  return ctx.exit_code;
}
