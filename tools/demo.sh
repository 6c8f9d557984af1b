#!/usr/bin/env bash
# README command 1: installs what it needs, builds reft, and runs the main job on an embedded
# local cluster (reftd on loopback, a torch trainer, crashes, verified restores).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
bash tools/setup.sh
build="${REFT_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPython_EXECUTABLE=/usr/bin/python3 >/dev/null
cmake --build "$build" -j"$(nproc)" --target reftd reftctl reft_python reft_sample_trainer
REFT_BUILD_DIR="$build" exec /usr/bin/python3 tools/demo/demo.py
