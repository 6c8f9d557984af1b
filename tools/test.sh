#!/usr/bin/env bash
# The README's test command: installs the Debian packages and the torch2 venv, builds everything,
# runs every test that is not a slow benchmark (GPU tests report "skipped" on machines without a
# GPU; the torch2 leg reports "skipped" when the package index could not be reached).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/tools/setup.sh" --torch2
bash "$here/tools/build.sh"
bash "$here/tools/torch2_install_reft.sh"
cd "$here/${REFT_BUILD_DIR:-build}"
ctest --output-on-failure -LE 'slow' --timeout 900 -j"$(nproc)" "$@"
