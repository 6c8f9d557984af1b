#!/usr/bin/env bash
# The README's test command: installs the Debian packages, builds everything, runs every test
# that is not a slow benchmark (GPU tests report "skipped" on machines without a GPU).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/tools/build.sh"
cd "$here/${REFT_BUILD_DIR:-build}"
ctest --output-on-failure -LE 'slow' --timeout 900 -j"$(nproc)" "$@"
