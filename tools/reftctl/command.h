#pragma once
/// \file command.h
/// \brief How reftctl subcommands plug into the CLI. Each noun lives in its own file and
/// exposes one `Register<Noun>Commands(CLI::App& root, CtlContext& ctx)`; main.cc calls them.
///
/// Exit codes (docs/protocol.md "reftctl"): 0 success, 1 operation failed, 2 usage error, 3 cannot reach
/// the daemon. A command sets `ctx.exit_code` and prints its result with `ctx.Emit`.

#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace reft::ctl {

enum ExitCode : int { kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitUnreachable = 3 };

enum class OutputFormat { kTable, kJson };

/// \brief Schema version stamped into every JSON document reftctl prints ("schema": N).
inline constexpr int kJsonSchemaVersion = 1;

struct CtlContext {
  std::string addr;        ///< --addr H:P (gRPC Admin endpoint)
  std::string socket;      ///< --socket PATH (local socket; Admin is reached over its sibling)
  OutputFormat format = OutputFormat::kTable;
  std::string token_file;  ///< --token-file or $REFT_TOKEN_FILE: shared token for the daemon
  std::string tls_ca, tls_cert, tls_key;  ///< --tls-*: mutual TLS to the daemon
  int exit_code = kExitOk;

  /// \brief Prints `doc` as JSON (with "schema") or, in table mode, through `table`
  /// (which writes human-readable text to stdout).
  void Emit(nlohmann::json doc, const std::function<void(const nlohmann::json&)>& table) const;
  /// \brief Prints one clear error line to stderr and sets exit_code.
  void Fail(int code, const std::string& message);
};

/// Offline commands that need no daemon. main.cc creates the `plan` subcommand and passes it.
void RegisterPlanCommands(CLI::App& plan, CtlContext& ctx);  // plan templates|instantiate|failover|transfer
void RegisterProtectionPlanCommand(CLI::App& plan, CtlContext& ctx);  // plan protection
void RegisterReliabilityCommands(CLI::App& root, CtlContext& ctx);    // reliability ...

}  // namespace reft::ctl
