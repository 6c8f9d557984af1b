#!/usr/bin/env bash
# Installs the Debian packages (tools/setup.sh), configures and builds reft into
# ${REFT_BUILD_DIR:-build}. Arguments are build targets (none = everything).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
bash tools/setup.sh
build="${REFT_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPython_EXECUTABLE=/usr/bin/python3 >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
