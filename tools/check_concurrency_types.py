#!/usr/bin/env python3
"""Checks that the product's locks are visible to the thread-safety analysis and its daemon
threads are named (docs/architecture.md "Locking").

Clang's analysis (check_thread_safety.py) only sees locks of an annotated type: a plain
std::mutex passes it without a look at what it protects. This script fails on

- a `std::mutex` (or `std::shared_mutex`, `std::recursive_mutex`, a timed one) anywhere in the
  analysed product code: the fix is reft::Mutex (reft/mutex.h), with REFT_GUARDED_BY on the data
  it guards; reft/mutex.h itself, which wraps std::mutex, is exempt;
- a `std::thread` in daemon/ (std::thread::id and the like excepted): the fix is reft::Thread
  (reft/thread.h), which names the thread; likewise a `std::async` (its thread is unnamed): the
  fix is reft::Async;
- a reft::Thread or reft::Async in daemon/ whose literal name does not start with "reft-".

Usage: check_concurrency_types.py [--root DIR] | --self-test
Exit status 0 clean, 1 a violation (each printed as file:line: what and the fix).
"""
import argparse
import contextlib
import io
import os
import re
import sys
import tempfile

from check_thread_safety import ANALYSED

SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh")
EXEMPT = ("base/include/reft/mutex.h",)
THREAD_SCOPE = ("daemon/",)
PLAIN_MUTEX = re.compile(r"\bstd::(mutex|shared_mutex|recursive_mutex|timed_mutex|"
                         r"recursive_timed_mutex|shared_timed_mutex)\b")
BARE_THREAD = re.compile(r"\bstd::thread\b(?!\s*::)")
BARE_ASYNC = re.compile(r"\bstd::async\b")
# `reft::Thread t("name", ...)`, `reft::Thread("name", ...)`, `reft::Async("name", ...)`,
# `threads.emplace_back("name", ...)` on a std::vector<reft::Thread> (only in files that declare
# one).
THREAD_NAME = re.compile(r'\breft::(?:Thread(?:\s+\w+)?|Async)\s*[({]\s*"([^"]*)"')
POOL_NAME = re.compile(r'\.emplace_back\(\s*"([^"]*)"')


def code_lines(text):
    """(line number, line without its // comment): a comment may name what it forbids."""
    for n, line in enumerate(text.splitlines(), 1):
        yield n, line.split("//", 1)[0]


def check_file(rel, text):
    problems = []
    threads = rel.startswith(THREAD_SCOPE)
    pools = "std::vector<reft::Thread>" in text
    for n, line in code_lines(text):
        m = PLAIN_MUTEX.search(line)
        if m and rel not in EXEMPT:
            problems.append(f"{rel}:{n}: plain std::{m.group(1)}: the thread-safety analysis "
                            f"cannot see it; use reft::Mutex (reft/mutex.h) and mark what it "
                            f"guards REFT_GUARDED_BY")
        if not threads:
            continue
        if BARE_THREAD.search(line):
            problems.append(f"{rel}:{n}: bare std::thread: use reft::Thread (reft/thread.h), "
                            f"which names the thread (\"reft-...\")")
        if BARE_ASYNC.search(line):
            problems.append(f"{rel}:{n}: std::async runs on an unnamed thread: use reft::Async "
                            f"(reft/thread.h)")
        names = THREAD_NAME.findall(line) + (POOL_NAME.findall(line) if pools else [])
        for name in names:
            if not name.startswith("reft-"):
                problems.append(f"{rel}:{n}: thread name \"{name}\" must start with \"reft-\"")
    return problems


def source_files(root):
    for top in ANALYSED:
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue
        for dirpath, _, files in os.walk(base):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    path = os.path.join(dirpath, f)
                    yield os.path.relpath(path, root), path


def check(root):
    problems, count = [], 0
    for rel, path in source_files(root):
        count += 1
        with open(path, encoding="utf-8", errors="replace") as fh:
            problems += check_file(rel, fh.read())
    for p in problems:
        print(p)
    if problems:
        print(f"FAILED: {len(problems)} plain lock(s) or unnamed thread(s) in {count} files")
        return 1
    print(f"concurrency types ok: {count} files, every lock reft::Mutex, every daemon thread "
          f"a named reft::Thread")
    return 0


def self_test():
    """Each rule must fire on its violation and stay quiet on the fix."""
    cases = [
        ("daemon/x/a.h", "  std::mutex mu_;\n", "plain std::mutex"),
        ("client/src/a.cc", "  mutable std::shared_mutex mu;\n", "plain std::shared_mutex"),
        ("daemon/x/a.cc", "  std::lock_guard<std::recursive_mutex> l(m);\n",
         "plain std::recursive_mutex"),
        ("daemon/x/a.cc", "  worker_ = std::thread([this] { Run(); });\n", "bare std::thread"),
        ("daemon/x/a.cc", "  std::vector<std::thread> pool;\n", "bare std::thread"),
        ("daemon/x/a.cc", "  auto f = std::async(std::launch::async, g);\n", "std::async"),
        ("daemon/x/a.cc", '  auto f = reft::Async("ping", g);\n', 'thread name "ping"'),
        ("daemon/x/a.cc", '  t_ = reft::Thread("worker", [] {});\n', 'thread name "worker"'),
        ("daemon/x/a.cc", 'std::vector<reft::Thread> p;\n  p.emplace_back("pool", f);\n',
         'thread name "pool"'),
    ]
    clean = [
        ("daemon/x/a.h", "  reft::Mutex mu_;  // not a std::mutex\n"),
        ("base/include/reft/mutex.h", "  std::mutex mu_;\n"),
        ("daemon/x/a.cc", '  t_ = reft::Thread("reft-worker", [] {});\n'),
        ("daemon/x/a.cc", '  auto f = reft::Async("reft-ping", g);\n'),
        ("daemon/x/a.cc", "  if (t_.get_id() != std::thread::id()) {}\n"),
        ("client/src/a.cc", "  std::thread worker;\n"),  # threads are checked in daemon/ only
    ]
    for rel, text, want in cases:
        got = check_file(rel, text)
        if not any(want in p and p.startswith(rel + ":") for p in got):
            print(f"self-test FAILED: {rel}: {text.strip()!r} gave {got}, wanted '{want}'")
            return 1
    for rel, text in clean:
        got = check_file(rel, text)
        if got:
            print(f"self-test FAILED: {rel}: {text.strip()!r} was refused: {got}")
            return 1
    # And over a tree: the walk finds a violation in an analysed folder.
    with tempfile.TemporaryDirectory(prefix="reft-conc-") as tmp:
        os.makedirs(os.path.join(tmp, "daemon", "x"))
        with open(os.path.join(tmp, "daemon", "x", "a.h"), "w", encoding="utf-8") as fh:
            fh.write("std::mutex mu;\n")
        with contextlib.redirect_stdout(io.StringIO()):
            rc = check(tmp)
        if rc != 1:
            print("self-test FAILED: a tree with a std::mutex passed")
            return 1
    print("self-test passed: plain mutexes, bare daemon threads (std::thread, std::async) and "
          "unprefixed names fail; their fixes pass")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                                   "..")))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    return check(os.path.abspath(args.root))


if __name__ == "__main__":
    sys.exit(main())
