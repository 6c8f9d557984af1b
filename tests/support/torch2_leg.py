"""Runs a test command with .venv/torch2's Python: the torch2 leg (ctest label torch2).

The venv holds the current torch and reft installed by pip (tools/torch2_venv.sh); the leg runs
without the build tree on PYTHONPATH, so it tests the package users install. Without the venv
the leg exits 77, reported by CTest as *skipped*, with the reason setup recorded.

usage: torch2_leg.py VENV ARGS...   (runs VENV/bin/python ARGS...)
"""
import os
import sys


def main():
    venv, args = sys.argv[1], sys.argv[2:]
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, ".requirements")):  # written last by setup
        try:
            with open(venv + ".unavailable") as f:
                why = f.read().strip()
        except OSError:
            why = "%s was not created (run tools/setup.sh --torch2)" % venv
        print("SKIPPED: torch2 leg: %s" % why, flush=True)
        sys.exit(77)
    os.execv(python, [python] + args)


if __name__ == "__main__":
    main()
