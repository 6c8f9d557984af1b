#!/bin/bash
# Runs reft's GPU checks on a GPU machine from a folder made by tools/gpu/bundle.sh: builds the
# Python extension for this machine's python3, then the GPU tests and the GPU figures
# (B1 device->host, B2 device XOR, B3 HAS on a GEMM stage, B7 kill/restore loss identity), and
# finally the CPU-side Python tests under this machine's torch. Each step's output goes to
# <log dir>/<step>.log and to stdout; the exit status counts the failed steps.
#
#   tools/gpu/run_checks.sh [BUNDLE] [LOG_DIR] [STEP...]   (defaults: .gpu, $OUT or gpu-logs, all)
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$(cd "${1:-$src/.gpu}" && pwd)
logs=${2:-${OUT:-$src/gpu-logs}}
shift 2 2>/dev/null || shift $#
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(info extension kernels_gpu_test python_gpu b1_b2 b7 b3 python_cpu)
mkdir -p "$logs"
py=${PYTHON:-python3}
build=$bundle/build
pkg=$build/client/python
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export REFT_BUILD_DIR=$build REFT_LOCAL_TESTD=$build/tests/local/reft_local_testd
export PYTHONPATH=$pkg:$src/tests/support PYTHONUNBUFFERED=1

step_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $py -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
  df -h /dev/shm | tail -1; nproc; free -g | head -2
}
step_extension() {
  mkdir -p "$pkg/reft"
  cp "$src"/client/python/reft/*.py "$pkg/reft/"
  local suffix
  suffix=$($py -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  c++ -std=c++17 -O2 -shared -fPIC -fvisibility=hidden $($py -m pybind11 --includes) \
    -I"$src/client/include" -I"$src/base/include" "$src/client/python/module.cc" \
    -L"$build/client" -lreft -Wl,-rpath,"$build/client" -o "$pkg/reft/_reft$suffix" &&
    $py -c "import reft, reft._device as d; print('reft imports; memory kinds built:', sorted(d.built_memory_kinds()))"
}
step_kernels_gpu_test() { "$build/tests/kernels/kernels_gpu_test"; }
step_python_gpu() {
  (cd "$src/tests/python" && $py run_gpu.py test_gpu.py -v)
}
step_b1_b2() { "$build/tools/bench/kernels/reft_bench_kernels" --size 2GiB --reps 5; }
step_b7() { $py "$src/tools/bench/gpu/gpt_restore.py" --device cuda; }
step_b3() { $py "$src/tools/bench/gpu/has_gemm.py" --device cuda --gib ${B3_GIB:-2 8 16}; }
step_python_cpu() {
  (cd "$src/tests/python" && $py -m pytest -q -p no:cacheprovider test_torch_zero_copy.py \
     test_bubbles.py test_client.py)
}

failed=0
for s in "${steps[@]}"; do
  echo "=== $s"
  start=$SECONDS
  "step_$s" 2>&1 | tee "$logs/$s.log"
  rc=${PIPESTATUS[0]}
  echo "=== $s: rc=$rc, $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
done
echo "=== failed steps: $failed"
exit $failed
