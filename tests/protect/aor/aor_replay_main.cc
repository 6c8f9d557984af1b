// reft_aor_replay: replays an AOR trace through AorReplica and writes the final state, so that
// tests written in another language (test_aor_torch.py) can compare the library with their own
// optimizer.
//
// Trace (little-endian):
//   0   char[8]  "REFTAORT"
//   8   u8       gradient dtype (reft::aor::GradDtype: 0 fp32, 1 fp16, 2 bf16)
//   9   u8[7]    zero
//   16  u64      n (elements)
//   24  u64      number of step records
//   32  u64      initial iteration      40  u64  initial optimizer step
//   48  f32[n]   param, then f32[n] exp_avg, then f32[n] exp_avg_sq
//   then per record: 80-byte EncodeStepHyper record, then n gradients of the dtype
// Output file: f32[n] param, exp_avg, exp_avg_sq. Stdout: one JSON line with the counters.
//
// Usage: reft_aor_replay [--threads T] [--chunks K] TRACE OUT
// Exit: 0 ok, 1 the replica refused a record (message on stderr), 2 usage or I/O error.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "reft/aor/hyper_codec.h"
#include "reft/aor/replica.h"

using namespace reft::aor;

namespace {

uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

int Usage() {
  std::fprintf(stderr, "usage: reft_aor_replay [--threads T] [--chunks K] TRACE OUT\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int chunks = 1;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--chunks" && i + 1 < argc)
      chunks = std::atoi(argv[++i]);
    else if (!a.empty() && a[0] == '-')
      return Usage();
    else
      pos.push_back(a);
  }
  if (pos.size() != 2 || threads < 1 || chunks < 1) return Usage();

  std::ifstream in(pos[0], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "reft_aor_replay: cannot open %s\n", pos[0].c_str());
    return 2;
  }
  uint8_t header[48];
  if (!in.read(reinterpret_cast<char*>(header), sizeof header) ||
      std::memcmp(header, "REFTAORT", 8) != 0 || header[8] > 2) {
    std::fprintf(stderr, "reft_aor_replay: %s is not an AOR trace\n", pos[0].c_str());
    return 2;
  }
  const auto dtype = static_cast<GradDtype>(header[8]);
  const uint64_t n = GetU64(header + 16), records = GetU64(header + 24);
  const uint64_t iteration0 = GetU64(header + 32), step0 = GetU64(header + 40);
  std::vector<float> state(3 * n);
  if (!in.read(reinterpret_cast<char*>(state.data()), static_cast<std::streamsize>(12 * n))) {
    std::fprintf(stderr, "reft_aor_replay: truncated initial state\n");
    return 2;
  }
  float* p = state.data();
  float* m = p + n;
  float* v = m + n;

  std::vector<AorReplica> replicas;
  std::vector<uint64_t> cut;
  for (int c = 0; c <= chunks; ++c) cut.push_back(n * static_cast<uint64_t>(c) / chunks);
  for (int c = 0; c < chunks; ++c) {
    const uint64_t off = cut[c];
    replicas.emplace_back(AdamWState{p + off, m + off, v + off, cut[c + 1] - off}, iteration0,
                          step0, threads);
  }

  const size_t esize = GradDtypeSize(dtype);
  std::vector<uint8_t> hyper(kStepHyperWireSize), grad(n * esize);
  for (uint64_t r = 0; r < records; ++r) {
    if (!in.read(reinterpret_cast<char*>(hyper.data()), kStepHyperWireSize) ||
        !in.read(reinterpret_cast<char*>(grad.data()), static_cast<std::streamsize>(grad.size()))) {
      std::fprintf(stderr, "reft_aor_replay: truncated at record %llu\n",
                   static_cast<unsigned long long>(r));
      return 2;
    }
    for (int c = 0; c < chunks; ++c) {
      const reft::Status st = replicas[c].ApplyEncoded(
          hyper.data(), hyper.size(), grad.data() + cut[c] * esize, dtype, cut[c + 1] - cut[c]);
      if (!st.ok()) {
        std::fprintf(stderr, "reft_aor_replay: record %llu: %s\n",
                     static_cast<unsigned long long>(r), st.ToString().c_str());
        return 1;
      }
    }
  }

  std::ofstream out(pos[1], std::ios::binary | std::ios::trunc);
  if (!out.write(reinterpret_cast<const char*>(state.data()),
                 static_cast<std::streamsize>(state.size() * sizeof(float)))) {
    std::fprintf(stderr, "reft_aor_replay: cannot write %s\n", pos[1].c_str());
    return 2;
  }
  std::printf("{\"n\":%llu,\"records\":%llu,\"iteration\":%llu,\"step\":%llu}\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(records),
              static_cast<unsigned long long>(replicas[0].iteration()),
              static_cast<unsigned long long>(replicas[0].step()));
  return 0;
}
