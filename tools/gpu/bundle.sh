#!/bin/bash
# Packs what reft's GPU checks need into one relocatable folder, for a GPU machine that has
# CUDA, PyTorch and a compiler but not Debian's gRPC, protobuf, Boost or spdlog:
#   <out>/build/...   reftd, reftctl, reft_local_testd, kernels_gpu_test, reft_bench_kernels and
#                     libreft, stripped, at their build-tree paths (REFT_BUILD_DIR=<out>/build)
#   <out>/lib/        every shared library they load except the C/C++ runtime and the driver
# The Python extension is compiled on the GPU machine against its own python3
# (tools/gpu/run_checks.sh); the pure-Python package comes from the source tree.
#
#   tools/gpu/bundle.sh [BUILD_DIR] [OUT]     (defaults: build, .gpu; OUT must be ignored by git)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
out=${2:-$src/.gpu}

if ! grep -q "kernels_gpu_test" "$build/build.ninja" 2>/dev/null; then
  echo "bundle: $build was configured without CUDA (nvcc at /usr/local/cuda/bin, REFT_WITH_CUDA)" >&2
  exit 2
fi
bins=(daemon/app/reftd tools/reftctl/reftctl tests/local/reft_local_testd
      tests/kernels/kernels_gpu_test tools/bench/kernels/reft_bench_kernels)
ninja -C "$build" reftd reftctl reft_local_testd kernels_gpu_test reft_bench_kernels reft >/dev/null

rm -rf "$out"
mkdir -p "$out/lib" "$out/build/client"
for b in "${bins[@]}"; do
  mkdir -p "$out/build/$(dirname "$b")"
  strip --strip-unneeded -o "$out/build/$b" "$build/$b"
done
strip --strip-unneeded -o "$out/build/client/libreft.so.0" "$build/client/libreft.so.0"
ln -s libreft.so.0 "$out/build/client/libreft.so"

# The GPU machine's own libc, libstdc++ (newer than bookworm's) and CUDA driver are used.
system='^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libgcc_s|libstdc\+\+|libcuda)\.so'
for b in "${bins[@]}" client/libreft.so.0; do
  ldd "$build/$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  name=$(basename "$lib")
  [[ $name =~ $system ]] || cp -L "$lib" "$out/lib/$name"
done
echo "bundle: $(du -sh "$out" | cut -f1) in $out"
