#!/usr/bin/env python3
"""Compiles the project's sources with clang's thread-safety analysis as an error.

Mutex-protected state is annotated (reft/thread_annotations.h, reft/mutex.h): REFT_GUARDED_BY on
the data, REFT_REQUIRES on the functions that expect the lock held. GCC ignores the annotations;
this check runs clang in syntax-only mode over every translation unit of the product that
compile_commands.json lists (the build's own flags, include paths and definitions) with only
`-Wthread-safety` enabled, as an error. It fails on the first access to guarded state without
its lock, a `...Locked` call without the lock, a lock not released, and the like. A lock of a
type the analysis does not know (a plain std::mutex) is invisible to it: check_concurrency_types.py
refuses those.

Usage: check_thread_safety.py --build BUILD_DIR [--clang clang++-14] [--jobs N]
       check_thread_safety.py --self-test [--clang clang++-14]
Exit status: 0 clean, 1 a violation (the diagnostics are printed), 77 clang is not installed.
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# The product's code; tests, benches and generated sources are not analysed.
ANALYSED = ("base/", "client/src/", "client/python/", "daemon/", "kernels/device/", "kernels/host/",
            "proto/local/", "protect/", "tools/reftctl/")
CHECK_FLAGS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]
# GCC-only options clang refuses.
GCC_ONLY = ("-fvect-cost-model", "-fno-semantic-interposition")


def clang_args(entry, clang):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = [clang]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith(GCC_ONLY):
            continue
        out.append(a)
    return out + CHECK_FLAGS


def lock_users(build):
    """Objects whose recorded header dependencies include the annotated lock (ninja's deps
    log, fresh after a build); None when the log cannot be read (then everything is analysed).
    A translation unit without reft/mutex.h has no capability, so it cannot violate anything."""
    try:
        out = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True,
                             text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    users, current = set(), None
    for line in out.stdout.splitlines():
        if line and not line[0].isspace():
            current = line.split(":", 1)[0]
        elif current and line.strip().endswith(("reft/mutex.h", "reft/thread_annotations.h")):
            users.add(current)
    return users or None


def object_of(entry):
    """The object file an entry compiles to ("output", which CMake writes only for some
    generators and versions, else the argument of -o)."""
    if entry.get("output"):
        return entry["output"]
    args = entry.get("arguments") or shlex.split(entry["command"])
    for flag, value in zip(args, args[1:]):
        if flag == "-o":
            return value
    return None


def units(build):
    path = os.path.join(build, "compile_commands.json")
    with open(path, encoding="utf-8") as fh:
        entries = json.load(fh)
    users = lock_users(build)
    seen = set()
    for e in entries:
        if users is not None and object_of(e) not in users:
            continue
        f = os.path.realpath(os.path.join(e["directory"], e["file"]))
        rel = os.path.relpath(f, ROOT)
        if rel in seen or rel.startswith("..") or not rel.endswith((".cc", ".cpp")):
            continue
        if rel.startswith(ANALYSED):
            seen.add(rel)
            yield rel, e


def compile_one(rel, entry, clang):
    r = subprocess.run(clang_args(entry, clang), cwd=entry["directory"], capture_output=True,
                       text=True)
    return rel, r.returncode, r.stderr


def check(build, clang, jobs):
    todo = list(units(build))
    if not todo:
        print(f"FAILED: no product sources in {build}/compile_commands.json")
        return 1
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for rel, rc, err in pool.map(lambda t: compile_one(t[0], t[1], clang), todo):
            if rc != 0:
                failed.append(rel)
                sys.stdout.write(err)
    if failed:
        print(f"FAILED: thread-safety violations (or clang errors) in {len(failed)} of "
              f"{len(todo)} files: {', '.join(failed)}")
        return 1
    print(f"thread safety ok: {len(todo)} files analysed with {clang} {' '.join(CHECK_FLAGS[1:])}")
    return 0


SELF_TEST = """
#include "reft/mutex.h"
struct Counter {
  reft::Mutex mu;
  int n REFT_GUARDED_BY(mu) = 0;
  void AddLocked() REFT_REQUIRES(mu) { ++n; }
  void Add() { reft::MutexLock lock(mu); AddLocked(); }
  int Get() { %s }
};
"""


def self_test(clang):
    """The flags must reject an unguarded read and accept the guarded one."""
    inc = os.path.join(ROOT, "base", "include")
    with tempfile.TemporaryDirectory(prefix="reft-tsa-") as tmp:
        src = os.path.join(tmp, "t.cc")

        def run(body):
            with open(src, "w", encoding="utf-8") as fh:
                fh.write(SELF_TEST % body)
            return subprocess.run([clang, "-std=c++17", "-I", inc, src] + CHECK_FLAGS,
                                  capture_output=True, text=True)
        bad = run("return n;")
        if bad.returncode == 0 or "requires holding mutex" not in bad.stderr:
            print("self-test FAILED: an unguarded read was not an error:", bad.stderr)
            return 1
        good = run("reft::MutexLock lock(mu); return n;")
        if good.returncode != 0:
            print("self-test FAILED: a guarded read was refused:", good.stderr)
            return 1
    print("self-test passed: an unguarded read fails the check, a guarded one passes")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", help="build directory with compile_commands.json")
    ap.add_argument("--clang", default=os.environ.get("REFT_TSA_CLANG", "clang++-14"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if shutil.which(args.clang) is None:
        print(f"SKIPPED: {args.clang} is not installed (tools/setup.sh installs clang-14)")
        return 77
    if args.self_test:
        return self_test(args.clang)
    if not args.build:
        ap.error("--build is required")
    return check(os.path.abspath(args.build), args.clang, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
