// Metrics: the real exposer on a loopback port, scraped over a plain TCP socket.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "reft/observability/metrics.h"

namespace obs = reft::observability;

namespace {

// GET /metrics with HTTP/1.0 so the server closes the connection after the body.
std::string Scrape(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  REQUIRE(write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

// Value of the sample line that starts with `series` followed by a space; -1 if absent.
double Sample(const std::string& text, const std::string& series) {
  size_t pos = 0;
  while ((pos = text.find(series + " ", pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') {
      return std::stod(text.substr(pos + series.size() + 1));
    }
    pos += series.size();
  }
  return -1;
}

}  // namespace

TEST_CASE("exposer serves every reft metric and values change after recording") {
  auto created = obs::Metrics::Create("127.0.0.1:0");
  REQUIRE(created.ok());
  auto& m = **created;
  REQUIRE(m.port() > 0);

  std::string before = Scrape(m.port());
  REQUIRE(before.rfind("HTTP/1.", 0) == 0);
  CHECK(before.find(" 200 ") != std::string::npos);
  CHECK(Sample(before, "reft_snapshot_bytes_total") == 0);
  CHECK(Sample(before, "reft_snapshots_total") == 0);
  CHECK(Sample(before, "reft_checksum_failures_total") == 0);
  CHECK(Sample(before, "reft_job_access_denied_total") == 0);
  CHECK(Sample(before, "reft_client_mapping_faults_total") == 0);
  CHECK(Sample(before, "reft_recovered_bytes_total{source=\"parity\"}") == 0);
  CHECK(Sample(before, "reft_peers{state=\"alive\"}") == 0);
  CHECK(Sample(before, "reft_recovered_bytes_total{source=\"peer\"}") == 0);
  CHECK(Sample(before, "reft_recovery_phase_duration_seconds_count{operation=\"restore\","
                       "phase=\"locate\"}") == 0);
  CHECK(Sample(before, "reft_persist_failures_total{reason=\"no_space\"}") == 0);
  CHECK(Sample(before, "reft_recovery_phase_seconds_count{phase=\"detect\"}") == 0);
  CHECK(Sample(before, "reft_recovery_phase_seconds_count{phase=\"stage\"}") == 0);
  CHECK(Sample(before, "reft_persist_bytes_total") == 0);
  for (const char* family :
       {"reft_trainer_blocked_seconds", "reft_commit_latency_seconds", "reft_slots",
        "reft_memory_used_bytes", "reft_memory_limit_bytes",
        "reft_recovery_phase_duration_seconds", "reft_gossip_round_trip_seconds",
        "reft_persist_duration_seconds", "reft_persist_bytes_total",
        "reft_persist_failures_total"}) {
    INFO(family);
    CHECK(before.find(std::string("# TYPE ") + family + " ") != std::string::npos);
  }

  m.RecordSnapshot(1000);
  m.RecordSnapshot(24);
  m.ObserveLossPhase(obs::LossPhase::kStage, 0.3);
  m.ObserveTrainerBlocked(0.003);
  m.ObserveCommitLatency(0.2);
  m.SetSlots(6);
  m.SetMemoryUsed(12345);
  m.SetMemoryLimit(1 << 20);
  m.ObserveRecoveryPhase(obs::RecoveryOperation::kRebuild, obs::RecoveryPhase::kDecode, 1.5);
  m.AddBytesRecovered(obs::RecoverySource::kParity, 4096);
  m.AddBytesRecovered(obs::RecoverySource::kPersistent, 7);
  m.IncChecksumFailures();
  m.IncJobAccessDenied();
  m.IncJobAccessDenied();
  m.SetRepairedFaults(3);
  m.SetRepairedFaults(5);
  m.SetRepairedFaults(4);  // a stale total never moves the counter back
  m.SetPeers(obs::PeerState::kAlive, 3);
  m.SetPeers(obs::PeerState::kSuspect, 1);
  m.ObserveGossipRoundTrip(0.0007);
  m.ObserveRecoveryPhase(obs::RecoveryOperation::kRestore, obs::RecoveryPhase::kDeliver, 0.02);
  m.AddBytesRecovered(obs::RecoverySource::kPeer, 512);
  m.ObservePersist(2.0, 3000);
  m.IncPersistFailures(obs::PersistFailure::kMissingDir);

  std::string after = Scrape(m.port());
  CHECK(Sample(after, "reft_snapshot_bytes_total") == 1024);
  CHECK(Sample(after, "reft_snapshots_total") == 2);
  CHECK(Sample(after, "reft_trainer_blocked_seconds_count") == 1);
  CHECK(Sample(after, "reft_trainer_blocked_seconds_sum") == Approx(0.003));
  // 0.003 s falls in le=0.005 but not in le=0.0025 (buckets are cumulative).
  CHECK(Sample(after, "reft_trainer_blocked_seconds_bucket{le=\"0.0025\"}") == 0);
  CHECK(Sample(after, "reft_trainer_blocked_seconds_bucket{le=\"0.005\"}") == 1);
  CHECK(Sample(after, "reft_commit_latency_seconds_count") == 1);
  CHECK(Sample(after, "reft_slots") == 6);
  CHECK(Sample(after, "reft_memory_used_bytes") == 12345);
  CHECK(Sample(after, "reft_memory_limit_bytes") == 1 << 20);
  CHECK(Sample(after,
               "reft_recovery_phase_duration_seconds_count{operation=\"rebuild\",phase=\"decode\"}") == 1);
  CHECK(Sample(after,
               "reft_recovery_phase_duration_seconds_count{operation=\"restore\",phase=\"decode\"}") == 0);
  CHECK(Sample(after, "reft_recovered_bytes_total{source=\"parity\"}") == 4096);
  CHECK(Sample(after, "reft_recovered_bytes_total{source=\"persistent\"}") == 7);
  CHECK(Sample(after, "reft_recovered_bytes_total{source=\"local\"}") == 0);
  CHECK(Sample(after, "reft_checksum_failures_total") == 1);
  CHECK(Sample(after, "reft_job_access_denied_total") == 2);
  CHECK(Sample(after, "reft_client_mapping_faults_total") == 5);
  CHECK(Sample(after, "reft_peers{state=\"alive\"}") == 3);
  CHECK(Sample(after, "reft_peers{state=\"suspect\"}") == 1);
  CHECK(Sample(after, "reft_gossip_round_trip_seconds_count") == 1);
  CHECK(Sample(after, "reft_recovery_phase_duration_seconds_count{operation=\"restore\","
                      "phase=\"deliver\"}") == 1);
  CHECK(Sample(after, "reft_recovered_bytes_total{source=\"peer\"}") == 512);
  CHECK(Sample(after, "reft_persist_duration_seconds_count") == 1);
  CHECK(Sample(after, "reft_persist_bytes_total") == 3000);
  CHECK(Sample(after, "reft_persist_failures_total{reason=\"missing_dir\"}") == 1);
  CHECK(Sample(after, "reft_persist_failures_total{reason=\"no_space\"}") == 0);
  CHECK(Sample(after, "reft_recovery_phase_seconds_count{phase=\"stage\"}") == 1);
  CHECK(Sample(after, "reft_recovery_phase_seconds_sum{phase=\"stage\"}") == Approx(0.3));
  CHECK(Sample(after, "reft_recovery_phase_seconds_count{phase=\"detect\"}") == 0);

  // The in-process serialisation is the same data as the HTTP body.
  CHECK(Sample(m.Serialize(), "reft_snapshot_bytes_total") == 1024);
}

TEST_CASE("empty address disables the exposer, a bad address names the config key") {
  auto disabled = obs::Metrics::Create("");
  REQUIRE(disabled.ok());
  CHECK((*disabled)->port() == 0);
  (*disabled)->RecordSnapshot(5);
  CHECK(Sample((*disabled)->Serialize(), "reft_snapshot_bytes_total") == 5);

  // Take a port, then ask the exposer for the same one.
  auto first = obs::Metrics::Create("127.0.0.1:0");
  REQUIRE(first.ok());
  auto clash = obs::Metrics::Create("127.0.0.1:" + std::to_string((*first)->port()));
  REQUIRE_FALSE(clash.ok());
  CHECK(clash.status().message().find("metrics_listen") != std::string::npos);
}

TEST_CASE("the refresh hook runs before every scrape and sets gauges") {
  auto created = obs::Metrics::Create("127.0.0.1:0");
  REQUIRE(created.ok());
  auto& m = **created;
  int calls = 0;
  m.SetRefreshHook([&calls](obs::Metrics& metrics) {
    ++calls;
    metrics.SetMemoryUsed(1000.0 * calls);
  });
  CHECK(Sample(Scrape(m.port()), "reft_memory_used_bytes") == 1000);
  CHECK(Sample(Scrape(m.port()), "reft_memory_used_bytes") == 2000);
  CHECK(Sample(m.Serialize(), "reft_memory_used_bytes") == 3000);
  m.SetRefreshHook({});
  CHECK(Sample(Scrape(m.port()), "reft_memory_used_bytes") == 3000);
  CHECK(calls == 3);
}
