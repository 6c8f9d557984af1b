// Python binding `reft._reft` over reft::Client. Buffers come in through the buffer protocol
// (bytearray, numpy, CPU torch tensors) or as (data_ptr, nbytes) from reft/__init__.py; no
// libtorch ABI coupling. Every blocking call releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "reft/client.h"

namespace py = pybind11;

namespace {

// Raises the Python exception for a status: reft.Error subclass chosen by code in __init__.py
// through the registered translator below.
struct ReftStatusError {
  reft::Status status;
};

void Check(const reft::Status& st) {
  if (!st.ok()) throw ReftStatusError{st};
}

// One optimizer record as reft/__init__.py's _record() builds it: (buffer name, step, lr, beta1,
// beta2, eps, weight_decay, clip_coef, grad_scale, skipped, lerp_first_moment, fma,
// fused_width, l2_weight_decay, not_replayable).
using OptimizerRecord = std::tuple<std::string, uint64_t, double, double, double, double, double,
                                   double, double, bool, bool, bool, int, bool, int>;

reft::OptimizerStep ToOptimizerStep(const OptimizerRecord& r) {
  reft::OptimizerStep o;
  o.step = std::get<1>(r);
  o.lr = std::get<2>(r);
  o.beta1 = std::get<3>(r);
  o.beta2 = std::get<4>(r);
  o.eps = std::get<5>(r);
  o.weight_decay = std::get<6>(r);
  o.clip_coef = std::get<7>(r);
  o.grad_scale = std::get<8>(r);
  o.skipped = std::get<9>(r);
  o.lerp_first_moment = std::get<10>(r);
  o.fma = std::get<11>(r);
  o.fused_width = static_cast<uint8_t>(std::clamp(std::get<12>(r), 0, 255));
  o.l2_weight_decay = std::get<13>(r);
  o.not_replayable = static_cast<uint8_t>(std::clamp(std::get<14>(r), 0, 255));
  return o;
}

// reft.Client.restore(progress=...)'s "phase" names.
const char* PhaseName(reft::RestorePhase phase) {
  switch (phase) {
    case reft::RestorePhase::kIdle: return "idle";
    case reft::RestorePhase::kDeciding: return "deciding";
    case reft::RestorePhase::kFetching: return "fetching";
    case reft::RestorePhase::kCopying: return "copying";
    case reft::RestorePhase::kStaging: return "staging";
    case reft::RestorePhase::kDone: return "done";
    case reft::RestorePhase::kFailed: return "failed";
  }
  return "unknown";
}

}  // namespace

PYBIND11_MODULE(_reft, m) {
  m.doc() = "reft native client (use the `reft` package)";
  // The release this extension was built from; reft/__init__.py checks it against _version.py.
  m.attr("__version__") = REFT_VERSION;
  // reft._raise(code, message), set by __init__.py. Leaked on purpose: a static py::object
  // would be released by the C++ exit handlers after the interpreter finalized, without the
  // GIL (a fatal error at exit).
  static py::object& raise_hook = *new py::object();

  m.def("_set_raise_hook", [](py::object hook) { raise_hook = hook; });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ReftStatusError& e) {
      if (raise_hook) {
        // The hook raises; turn that into the active Python error.
        try {
          raise_hook(static_cast<int>(e.status.code()), e.status.message());
        } catch (py::error_already_set& err) {
          err.restore();
          return;
        }
      }
      PyErr_SetString(PyExc_RuntimeError, e.status.ToString().c_str());
    }
  });

  // reft's AOR replay kernel on host arrays (reft/_aor.py checks which form reproduces the
  // trainer's optimizer): pointers to n param/exp_avg/exp_avg_sq of state_dtype (0 fp32,
  // 2 bf16), n gradients of grad_dtype (0 fp32, 1 fp16, 2 bf16), and the record tuple
  // snapshot_aor takes (its name is ignored).
  m.def("replay_optimizer_step",
        [](uintptr_t param, uintptr_t exp_avg, uintptr_t exp_avg_sq, int state_dtype,
           uintptr_t grad, int grad_dtype, uint64_t n, const OptimizerRecord& r) {
          const reft::OptimizerStep o = ToOptimizerStep(r);
          reft::Status st;
          {
            py::gil_scoped_release nogil;
            st = reft::ReplayOptimizerStep(
                reinterpret_cast<void*>(param), reinterpret_cast<void*>(exp_avg),
                reinterpret_cast<void*>(exp_avg_sq), state_dtype,
                reinterpret_cast<const void*>(grad), grad_dtype, n, o);
          }
          Check(st);
        });

  // Which backend owns a bare device pointer (`__cuda_array_interface__`): (memory kind, device).
  m.def("locate", [](uintptr_t ptr) {
    auto [memory, device] = reft::LocateMemory(reinterpret_cast<const void*>(ptr));
    return std::make_pair(static_cast<int>(memory), device);
  });
  m.def("cuda_runtime_and_driver", [] { return reft::CudaRuntimeAndDriver(); });
  m.def("built_memory_kinds", [] {
    std::vector<int> out;
    for (auto k : reft::BuiltMemoryLocations()) out.push_back(static_cast<int>(k));
    return out;
  });

  // reft.plan: a job's plan document (JSON text) over the local socket, no hello needed.
  m.def("query_plan", [](const std::string& socket, const std::string& job, int64_t timeout_ms) {
    reft::Result<std::string> doc = reft::Status::Internal("unset");
    {
      py::gil_scoped_release nogil;
      doc = reft::QueryPlan(socket, job, std::chrono::milliseconds(timeout_ms));
    }
    Check(doc.status());
    return *doc;
  });

  // reft.elastic.report_failure: a suspicion that a node of the job failed (no hello needed).
  m.def("report_failure", [](const std::string& socket, const std::string& job,
                             const std::string& reason, std::optional<int64_t> peer_rank,
                             int64_t timeout_ms) {
    reft::Result<std::vector<std::string>> nodes = reft::Status::Internal("unset");
    {
      py::gil_scoped_release nogil;
      nodes = reft::ReportFailure(socket, job, reason, peer_rank,
                                  std::chrono::milliseconds(timeout_ms));
    }
    Check(nodes.status());
    return *nodes;
  });

  // For tests: emulated device memory (a memfd "device" reftd pulls like GPU memory). Its bytes
  // are host memory, reachable through the buffer protocol; reft.testing wraps it with
  // `__cuda_array_interface__`.
  py::class_<reft::EmulatedBuffer>(m, "_EmulatedDeviceMemory", py::buffer_protocol())
      .def(py::init([](uint64_t nbytes, bool exportable) {
             auto b = reft::EmulatedBuffer::Create(nbytes, exportable);
             Check(b.status());
             return std::move(*b);
           }),
           py::arg("nbytes"), py::arg("exportable") = true)
      .def_property_readonly("ptr",
                             [](const reft::EmulatedBuffer& b) {
                               return reinterpret_cast<uintptr_t>(b.data());
                             })
      .def_property_readonly("nbytes", &reft::EmulatedBuffer::size)
      .def_buffer([](reft::EmulatedBuffer& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.size())}, {1});
      });

  py::class_<reft::Client>(m, "_Client")
      .def(py::init([](const std::string& socket, const std::string& job, int pp, int tp, int dp,
                       int ldp, int ltp, int lpp, int lzero, const std::string& protection,
                       int timeout_ms, int connect_timeout_ms) {
             reft::ClientOptions o;
             o.socket_path = socket;
             o.job = job;
             o.pp = pp;
             o.tp = tp;
             o.dp = dp;
             o.layout = {ldp, ltp, lpp, lzero};
             o.protection = protection;
             o.reply_timeout_ms = timeout_ms;
             o.connect_timeout = std::chrono::milliseconds(connect_timeout_ms);
             reft::Result<std::unique_ptr<reft::Client>> c = reft::Status::Internal("unset");
             {
               py::gil_scoped_release nogil;
               c = reft::Client::Connect(o);
             }
             Check(c.status());
             return std::move(*c);
           }))
      .def("register_ptr",
           [](reft::Client& c, const std::string& name, uintptr_t ptr, uint64_t nbytes, int kind,
              const std::string& dtype, int layer, int memory, bool optimizer,
              const std::string& gradient, uint64_t shard_offset, uint64_t shard_total) {
             reft::BufferOptions o;
             o.kind = static_cast<reft::BufferKind>(kind);
             o.dtype = dtype;
             o.layer = layer;
             o.memory = static_cast<reft::MemoryLocation>(memory);
             o.optimizer = optimizer;
             o.gradient = gradient;
             o.shard_offset = shard_offset;
             o.shard_total = shard_total;
             reft::Status st;
             {
               py::gil_scoped_release nogil;
               st = c.Register(name, reinterpret_cast<void*>(ptr), nbytes, o);
             }
             Check(st);
           })
      .def("register_buffer",
           [](reft::Client& c, const std::string& name, py::buffer obj, int kind,
              const std::string& dtype, int layer, bool optimizer, const std::string& gradient,
              uint64_t shard_offset, uint64_t shard_total) {
             py::buffer_info info = obj.request(/*writable=*/true);
             // Only C-contiguous memory is one region (restore writes it back in place).
             py::ssize_t expect = info.itemsize;
             for (int i = info.ndim - 1; i >= 0; --i) {
               if (info.shape[i] > 1 && info.strides[i] != expect) {
                 throw py::value_error("buffer '" + name + "' is not C-contiguous");
               }
               expect *= info.shape[i];
             }
             uint64_t nbytes = static_cast<uint64_t>(info.size) * info.itemsize;
             reft::BufferOptions o;
             o.kind = static_cast<reft::BufferKind>(kind);
             o.dtype = dtype;
             o.layer = layer;
             o.optimizer = optimizer;
             o.gradient = gradient;
             o.shard_offset = shard_offset;
             o.shard_total = shard_total;
             reft::Status st;
             {
               py::gil_scoped_release nogil;
               st = c.Register(name, info.ptr, nbytes, o);
             }
             Check(st);
           })
      .def("staged_reason",
           [](const reft::Client& c, const std::string& name) {
             auto why = c.StagedReason(name);
             Check(why.status());
             return *why;
           })
      .def("set_stream",
           [](reft::Client& c, int memory, int device, uintptr_t stream) {
             Check(c.SetStream(static_cast<reft::MemoryLocation>(memory), device,
                               reinterpret_cast<void*>(stream)));
           })
      .def("gate_host_copies",
           [](reft::Client& c, uintptr_t word, uint64_t value) {
             Check(c.GateHostCopies(reinterpret_cast<const uint64_t*>(word), value));
           })
      .def("snapshot",
           [](reft::Client& c, int64_t step) {
             reft::Status st;
             {
               py::gil_scoped_release nogil;
               st = c.Snapshot(step);
             }
             Check(st);
           })
      // Optimizer hyper-parameters for protection "aor": (buffer name or "" for every replayed
      // shard, step, lr, beta1, beta2, eps, weight_decay, clip_coef, grad_scale, skipped,
      // lerp_first_moment).
      .def("snapshot_aor",
           [](reft::Client& c, int64_t step,
              const std::vector<OptimizerRecord>& records) {
             std::map<std::string, reft::OptimizerStep> per_buffer;
             reft::OptimizerStep all;
             bool has_all = false;
             for (const auto& r : records) {
               const reft::OptimizerStep o = ToOptimizerStep(r);
               if (std::get<0>(r).empty()) {
                 all = o;
                 has_all = true;
               } else {
                 per_buffer[std::get<0>(r)] = o;
               }
             }
             reft::Status st;
             {
               py::gil_scoped_release nogil;
               st = has_all ? c.Snapshot(step, all) : c.Snapshot(step, per_buffer);
             }
             Check(st);
           })
      .def("fence",
           [](reft::Client& c) {
             reft::Status st;
             {
               py::gil_scoped_release nogil;
               st = c.Fence();
             }
             Check(st);
           })
      // HAS hints: two atomic stores, no GIL release needed (the first call may attach the
      // hint page and wait for an in-flight snapshot, which is short and rare).
      .def("bubble_begin", [](reft::Client& c) { Check(c.BubbleBegin()); })
      .def("bubble_end", [](reft::Client& c) { Check(c.BubbleEnd()); })
      .def("enable_has",
           [](reft::Client& c, int stages, int stage, int micro_batches, double forward,
              double backward) {
             reft::HasPipelineHint h{stages, stage, micro_batches, forward, backward};
             reft::Status st;
             {
               py::gil_scoped_release nogil;
               st = c.EnableHas(h);
             }
             Check(st);
           })
      .def("wait_committed",
           [](reft::Client& c, int64_t step, std::optional<double> timeout) {
             std::optional<std::chrono::milliseconds> t;
             if (timeout) t = std::chrono::milliseconds(static_cast<int64_t>(*timeout * 1000.0));
             reft::Result<bool> r = false;
             {
               py::gil_scoped_release nogil;
               r = c.WaitCommitted(step, t);
             }
             Check(r.status());
             return *r;
           })
      .def("restore",
           [](reft::Client& c, bool reshape, const std::string& remap_layout,
              const std::map<std::string, std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>>&
                  remap) -> std::optional<int64_t> {
             reft::RestoreOptions o;
             o.reshape = reshape;
             o.remap_layout = remap_layout;
             for (const auto& [name, segments] : remap) {
               auto& out = o.remap[name];
               for (const auto& [src, dst, length] : segments) out.push_back({src, dst, length});
             }
             reft::Result<std::optional<int64_t>> r = std::optional<int64_t>();
             {
               py::gil_scoped_release nogil;
               r = c.Restore(o);
             }
             Check(r.status());
             return *r;
           },
           py::arg("reshape"), py::arg("remap_layout") = std::string(),
           py::arg("remap") = std::map<std::string,
                                       std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>>())
      // (phase, bytes_done, bytes_total) of the restore running now: atomic loads, no lock,
      // so reft/_progress.py's thread polls it while restore() runs without the GIL.
      .def("restore_progress",
           [](const reft::Client& c) {
             const reft::RestoreProgress p = c.RestoreProgressNow();
             return py::make_tuple(PhaseName(p.phase), p.bytes_done, p.bytes_total);
           })
      .def("probe_restore",
           [](reft::Client& c) -> py::object {
             reft::Result<std::optional<reft::RestoreProbe>> r =
                 std::optional<reft::RestoreProbe>();
             {
               py::gil_scoped_release nogil;
               r = c.ProbeRestore();
             }
             Check(r.status());
             if (!*r) return py::none();
             return py::make_tuple((*r)->step, (*r)->saved_layout);
           })
      .def("read_saved",
           // ranges: [(name, pp, tp, begin, end, dst address)]; the caller keeps dst alive.
           [](reft::Client& c, int64_t step, const py::list& ranges) {
             std::vector<reft::SavedRange> rs;
             rs.reserve(ranges.size());
             for (const auto& item : ranges) {
               auto t = item.cast<py::tuple>();
               rs.push_back({t[0].cast<std::string>(), t[1].cast<int>(), t[2].cast<int>(),
                             t[3].cast<uint64_t>(), t[4].cast<uint64_t>(),
                             reinterpret_cast<void*>(t[5].cast<uintptr_t>())});
             }
             reft::Status st;
             {
               py::gil_scoped_release nogil;
               st = c.ReadSaved(step, rs);
             }
             Check(st);
           })
      .def("last_restore",
           [](const reft::Client& c) -> py::object {
             auto r = c.LastRestore();
             if (!r) return py::none();
             auto secs = [](std::chrono::nanoseconds d) {
               return std::chrono::duration<double>(d).count();
             };
             py::dict d;
             d["step"] = r->step < 0 ? py::object(py::none()) : py::object(py::int_(r->step));
             d["source"] = r->source;
             d["agreement_s"] = secs(r->agreement);
             d["agreement_reason"] = r->agreement_reason;
             d["daemon_s"] = secs(r->daemon);
             d["total_s"] = secs(r->total);
             d["detail"] = r->detail;
             d["reshaped"] = r->reshaped;
             d["from_layout"] =
                 r->from_layout.empty() ? py::object(py::none()) : py::object(py::str(r->from_layout));
             d["filled"] = r->filled;
             d["untouched"] = r->untouched;
             d["aor"] = r->aor.empty() ? py::object(py::none()) : py::object(py::str(r->aor));
             py::dict phases;
             const std::pair<const char*, const std::optional<reft::RecoveryPhaseTime>*> marks[] = {
                 {"lost_at", &r->phases.lost_at},
                 {"declared_at", &r->phases.declared_at},
                 {"decided_at", &r->phases.decided_at},
                 {"staged_at", &r->phases.staged_at},
                 {"reconnected_at", &r->phases.reconnected_at},
                 {"restore_started_at", &r->phases.restore_started_at},
                 {"restore_ended_at", &r->phases.restore_ended_at}};
             for (const auto& [name, mark] : marks) {
               if (!*mark) {
                 phases[name] = py::none();
                 continue;
               }
               py::dict m;
               m["at_ms"] = (*mark)->at_ms;
               m["node"] = (*mark)->node;
               phases[name] = m;
             }
             d["phases"] = phases;
             return std::move(d);
           })
      .def("aor_state",
           [](reft::Client& c) -> py::object {
             reft::Result<reft::AorReport> r = reft::AorReport{};
             {
               py::gil_scoped_release nogil;
               r = c.AorState();
             }
             if (!r.ok() && r.status().code() == reft::StatusCode::kUnsupported) {
               return py::none();
             }
             Check(r.status());
             py::dict d;
             d["state"] = r->state;
             d["replays"] = r->replays;
             d["copies"] = r->copies;
             d["verified"] = r->verified;
             d["mismatches"] = r->mismatches;
             return std::move(d);
           })
      .def("close",
           [](reft::Client& c) {
             reft::Status st;
             {
               py::gil_scoped_release nogil;
               st = c.Close();
             }
             Check(st);
           })
      .def_property_readonly("session_id", &reft::Client::session_id);
}
