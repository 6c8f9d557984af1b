#!/bin/sh
# Verifies the configured reftd.service (docs/operations.md "Run under systemd"):
#  1. policy: Type=notify, WatchdogSec, LimitMEMLOCK, DevicePolicy=closed are present, and
#     neither DynamicUser= nor RemoveIPC=yes is (both delete the snapshots in /dev/shm);
#  2. `systemd-analyze verify` finds no real unit error. The copy it verifies points
#     ExecStart at the built reftd, because the install path does not exist in a build tree.
# Usage: verify_unit.sh UNIT_FILE REFTD_BINARY. Exit 77 (CTest skip) without systemd-analyze.
set -u
unit="$1"
reftd="$2"
fail=0

[ -r "$unit" ] || { echo "FAIL: unit file '$unit' not readable"; exit 1; }

# Only directive lines count, not comments (the unit's header comment names DynamicUser).
directives=$(grep -v '^[[:space:]]*[#;]' "$unit")
require() {
  if ! printf '%s\n' "$directives" | grep -Eq "$1"; then
    echo "FAIL: unit lacks $2"; fail=1
  fi
}
forbid() {
  if printf '%s\n' "$directives" | grep -Eiq "$1"; then
    echo "FAIL: unit must not contain $2"; fail=1
  fi
}
require '^Type=notify[[:space:]]*$' 'Type=notify'
require '^WatchdogSec=[0-9]' 'WatchdogSec='
require '^LimitMEMLOCK=' 'LimitMEMLOCK='
require '^DevicePolicy=closed[[:space:]]*$' 'DevicePolicy=closed'
require '^DeviceAllow=' 'DeviceAllow= for the GPU device nodes'
require '^RuntimeDirectory=' 'RuntimeDirectory='
require '^Restart=on-failure' 'Restart=on-failure'
forbid '^DynamicUser=' 'DynamicUser='
forbid '^RemoveIPC=(yes|true|on|1)[[:space:]]*$' 'RemoveIPC=yes'
forbid '^PrivateDevices=(yes|true|on|1)' 'PrivateDevices=yes (hides the GPU nodes)'

if ! command -v systemd-analyze >/dev/null 2>&1; then
  [ "$fail" -eq 0 ] || exit 1
  echo "SKIP: systemd-analyze not installed"; exit 77
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
copy="$tmp/reftd.service"
sed "s#^ExecStart=[^ ]*#ExecStart=$reftd#" "$unit" > "$copy"
grep -q "^ExecStart=$reftd" "$copy" || { echo "FAIL: no ExecStart= line to rewrite"; exit 1; }

out=$(systemd-analyze verify --man=no "$copy" 2>&1)
rc=$?
[ -n "$out" ] && printf 'systemd-analyze: %s\n' "$out"
# Any message about a line of the unit (unknown key, unparsable value, bad section) is a real
# error, even though systemd-analyze only warns and "ignores" such lines.
if printf '%s\n' "$out" | grep -q "^$copy:[0-9]"; then
  echo "FAIL: systemd-analyze reports problems in the unit's lines"; fail=1
fi
if [ "$rc" -ne 0 ]; then
  # Environment-only complaints (no systemd as PID 1 in a container, no bus) are not unit
  # errors; anything else is.
  real=$(printf '%s\n' "$out" | grep -v -e 'Failed to connect to bus' -e 'System has not been booted with systemd' \
                                       -e 'Failed to .*manager' -e '^$')
  if [ -n "$real" ]; then
    echo "FAIL: systemd-analyze verify exited $rc"; fail=1
  fi
fi
[ "$fail" -eq 0 ] && echo "OK: $unit"
exit "$fail"
