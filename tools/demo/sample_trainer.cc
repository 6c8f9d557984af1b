// A C++ trainer for the demo (when torch is missing) and for the crash tests: registers K
// buffers (the last one unique to the rank, the others replicated across its data-parallel
// group), fills them with a pattern that is a pure function of (step, buffer, offset) — and of
// the rank for the unique buffer — snapshots every step, and after a restart restores and
// checks every byte of the pattern of the restored step. One line per event on stdout:
//   restore-report <memory|tier|none> <agreement seconds> <why it waited, or ->
//   restore-time <Restore() seconds> <seconds inside reftd>
//   restored <step> ok | restored -1 fresh | restored <step> MISMATCH <buffer> <offset>
//   restore-error <code> <message>      snapshot-error <step> <code> <message>
//   committed <step>                    done <step>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "reft/client.h"

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void Fill(std::vector<uint8_t>& buf, int64_t step, size_t index) {
  const uint64_t seed = Mix(static_cast<uint64_t>(step) * 1315423911u + index);
  size_t i = 0;
  for (; i + 8 <= buf.size(); i += 8) {
    uint64_t v = Mix(seed ^ i);
    std::memcpy(buf.data() + i, &v, 8);
  }
  uint64_t v = Mix(seed ^ i);
  for (; i < buf.size(); ++i, v >>= 8) buf[i] = static_cast<uint8_t>(v);
}

// Returns the first mismatching offset, or -1.
int64_t Check(const std::vector<uint8_t>& buf, int64_t step, size_t index) {
  std::vector<uint8_t> expect(buf.size());
  Fill(expect, step, index);
  for (size_t i = 0; i < buf.size(); ++i) {
    if (buf[i] != expect[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

// The harness's barrier: it creates the file when every process may go on.
void WaitForFile(const std::string& path) {
  while (access(path.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"reft sample trainer"};
  reft::ClientOptions options;
  int64_t steps = 100;
  uint64_t size = 1 << 20;
  int nbuffers = 3;
  uint64_t unique_size = 0;
  int sleep_us = 0;
  bool restore_only = false;
  std::string wait_file;
  std::string restore_after_file;
  std::string verify_after_file;
  app.add_option("--socket", options.socket_path)->required();
  app.add_option("--job", options.job)->required();
  app.add_option("--dp", options.dp);
  app.add_option("--dp-size", options.layout.dp);
  app.add_option("--tp", options.tp);
  app.add_option("--tp-size", options.layout.tp);
  app.add_option("--pp", options.pp);
  app.add_option("--pp-size", options.layout.pp);
  app.add_option("--protection", options.protection);
  app.add_option("--steps", steps);
  app.add_option("--size", size, "bytes per buffer (odd sizes welcome)");
  app.add_option("--buffers", nbuffers);
  app.add_option("--unique-size", unique_size, "bytes of the unique buffer (default: like the others)");
  app.add_option("--sleep-us", sleep_us, "pause per step");
  int64_t step_commit_ms = 30000;
  app.add_option("--step-commit-timeout-ms", step_commit_ms,
                 "how long each step waits for the previous step's commit (the last step's wait "
                 "stays 30 s); short in tests that cut the control plane off");
  app.add_flag("--restore-only", restore_only, "restore, verify, exit");
  app.add_option("--restore-after-file", restore_after_file,
                 "print 'registered' once the buffers are registered, then wait until this file "
                 "exists before restoring (benchmarks start every rank's restore together)");
  app.add_option("--verify-after-file", verify_after_file,
                 "after the restore-time line, wait until this file exists before checking the "
                 "restored bytes (so one rank's check does not run inside another's restore)");
  app.add_option("--wait-file", wait_file,
                 "after the restore, wait until this file exists before training (a stand-in "
                 "for a real job's first collective, which no rank passes before all restored)");
  app.add_option("--reply-timeout-ms", options.reply_timeout_ms,
                 "longest wait for one reftd reply (a restore from a slow tier needs more)");
  CLI11_PARSE(app, argc, argv);

  auto client = reft::Client::Connect(options);
  if (!client.ok()) {
    std::printf("connect-error %d %s\n", static_cast<int>(client.status().code()),
                client.status().message().c_str());
    return 2;
  }
  // Each buffer is allocated once, at its own size (not copied from a prototype).
  std::vector<std::vector<uint8_t>> buffers(nbuffers);
  // Replicated buffers hold the same bytes on every rank of a sharding group; the unique one
  // differs per rank, so a restore that hands a rank another rank's unique state is caught.
  auto pattern = [&](int b) {
    const size_t rank = static_cast<size_t>(
        (options.pp * options.layout.dp + options.dp) * options.layout.tp + options.tp);
    return b == nbuffers - 1 ? static_cast<size_t>(b) + 1000 * (rank + 1) : static_cast<size_t>(b);
  };
  for (int b = 0; b < nbuffers; ++b) {
    // Sizes differ per buffer so regions have odd, unaligned lengths.
    buffers[b].resize(b == nbuffers - 1 && unique_size > 0 ? unique_size : size + 7 * b);
    reft::BufferOptions bo;
    bo.kind = b == nbuffers - 1 ? reft::BufferKind::kUnique : reft::BufferKind::kReplicated;
    auto st = (*client)->Register("buf" + std::to_string(b), buffers[b].data(), buffers[b].size(), bo);
    if (!st.ok()) {
      std::printf("register-error %d %s\n", static_cast<int>(st.code()), st.message().c_str());
      return 2;
    }
  }

  if (!restore_after_file.empty()) {
    std::printf("registered\n");
    std::fflush(stdout);
    WaitForFile(restore_after_file);
  }
  auto restored = (*client)->Restore();
  if (!restored.ok()) {
    std::printf("restore-error %d %s\n", static_cast<int>(restored.status().code()),
                restored.status().message().c_str());
    std::fflush(stdout);
    return 3;
  }
  if (auto report = (*client)->LastRestore()) {
    std::printf("restore-report %s %.6f %s\n", report->source.c_str(),
                std::chrono::duration<double>(report->agreement).count(),
                report->agreement_reason.empty() ? "-" : report->agreement_reason.c_str());
    // Restore() as this trainer saw it (copy-out included) and the part spent inside reftd.
    std::printf("restore-time %.6f %.6f\n", std::chrono::duration<double>(report->total).count(),
                std::chrono::duration<double>(report->daemon).count());
  }
  std::fflush(stdout);
  if (!verify_after_file.empty()) WaitForFile(verify_after_file);
  int64_t start = 0;
  if (!restored->has_value()) {
    std::printf("restored -1 fresh\n");
  } else {
    const int64_t step = **restored;
    for (int b = 0; b < nbuffers; ++b) {
      int64_t bad = Check(buffers[b], step, pattern(b));
      if (bad >= 0) {
        std::printf("restored %lld MISMATCH %d %lld\n", static_cast<long long>(step), b,
                    static_cast<long long>(bad));
        return 4;
      }
    }
    std::printf("restored %lld ok\n", static_cast<long long>(step));
    start = step + 1;
  }
  std::fflush(stdout);
  if (restore_only) return 0;
  if (!wait_file.empty()) WaitForFile(wait_file);

  for (int64_t step = start; step < start + steps; ++step) {
    auto st = (*client)->Fence();  // the previous copy no longer reads the buffers
    if (st.ok()) {
      for (int b = 0; b < nbuffers; ++b) Fill(buffers[b], step, pattern(b));
      st = (*client)->Snapshot(step);
    }
    if (!st.ok()) {
      std::printf("snapshot-error %lld %d %s\n", static_cast<long long>(step),
                  static_cast<int>(st.code()), st.message().c_str());
      std::fflush(stdout);
      // Cancelled: the job was restored again without this trainer (an older restore epoch);
      // its state is of an abandoned timeline, so it exits for its launcher to restart it.
      if (st.code() == reft::StatusCode::kCancelled) return 3;
      continue;  // training goes on; the next step tries again
    }
    if (step > start) {
      auto committed =
          (*client)->WaitCommitted(step - 1, std::chrono::milliseconds(step_commit_ms));
      if (committed.ok() && *committed) {
        std::printf("committed %lld\n", static_cast<long long>(step - 1));
        std::fflush(stdout);
      }
    }
    if (sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
  }
  if (reft::Status fenced = (*client)->Fence(); !fenced.ok()) {
    std::fprintf(stderr, "fence: %s\n", fenced.ToString().c_str());
  }
  auto last = start + steps - 1;
  auto committed = (*client)->WaitCommitted(last, std::chrono::milliseconds(30000));
  if (committed.ok() && *committed) std::printf("committed %lld\n", static_cast<long long>(last));
  std::printf("done %lld\n", static_cast<long long>(last));
  return 0;
}
