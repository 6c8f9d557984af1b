#pragma once
/// \file daemon.h
/// \brief reftd's composition root: owns the store, the local channel and the gRPC server.
/// Create -> Start -> (signals) -> Shutdown. Called from main's thread only.

#include <memory>

#include "config.h"
#include "reft/result.h"

namespace reft::app {

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Create(DaemonConfig config);
  ~Daemon();

  /// \brief Adopts segments, starts the local socket and the gRPC server, then tells systemd
  /// READY=1. Any failure here is a runtime failure (exit 1).
  Status Start();
  /// \brief Stops accepting work, finishes or aborts in-flight copies, joins every thread.
  void Shutdown();

 private:
  explicit Daemon(DaemonConfig config);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace reft::app
