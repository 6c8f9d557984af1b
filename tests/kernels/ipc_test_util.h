#pragma once
// Test helper: send a MemoryExport / EventExport with its fd over a Unix socket (SCM_RIGHTS),
// the way the local channel does, so cross-process tests use real fd passing.
#include <string>

#include "reft/kernels/device.h"

namespace reft::kernels::testing {

/// Sends `bytes` with `fd` attached (fd < 0: none). Returns false on error.
bool SendWithFd(int sock, const std::string& bytes, int fd);
/// Receives one message (up to 64 KiB); *fd is the received fd or -1.
bool RecvWithFd(int sock, std::string* bytes, int* fd);

bool SendExport(int sock, const MemoryExport& ex);
bool RecvExport(int sock, MemoryExport* ex);
bool SendEvent(int sock, const EventExport& ev);
bool RecvEvent(int sock, EventExport* ev);

}  // namespace reft::kernels::testing
