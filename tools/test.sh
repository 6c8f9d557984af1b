#!/usr/bin/env bash
# The README's test command: installs the Debian packages, builds everything, runs every test
# that needs neither a GPU nor minutes of benchmarking (labels gpu and slow are separate).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
bash tools/setup.sh
build="${REFT_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPython_EXECUTABLE=/usr/bin/python3 >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
ctest --output-on-failure -LE 'slow' --timeout 600 -j"$(nproc)" "$@"
