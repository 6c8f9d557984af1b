"""Running a trainer as another uid, as a user of a shared cluster would: `setpriv` drops to
the uid (and its groups), and the `reft` package it imports is a copy in a directory that uid
can read (the build tree's permissions are left as they are).

The attack tests that need this must run in CI: under CI=true a machine that cannot run them
(not root, no setpriv) fails them instead of skipping."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

NOBODY = 65534


def require_other_uid():
    """Skips (fails under CI=true) when the test cannot run a process as another uid."""
    why = None
    if os.geteuid() != 0:
        why = "needs root (to run trainers as another uid)"
    elif shutil.which("setpriv") is None:
        why = "needs setpriv (util-linux)"
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}: an attack test may not be skipped in CI")
    pytest.skip(why)


def package_copy() -> str:
    """A directory holding a copy of the `reft` package every uid can read; removed at exit."""
    import reft  # the build tree's, on PYTHONPATH
    src = os.path.dirname(reft.__file__)
    root = tempfile.mkdtemp(prefix="reft-pkg-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    shutil.copytree(src, os.path.join(root, "reft"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for d, dirs, files in os.walk(root):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    return root


def open_to(cluster):
    """Lets other uids reach the daemons' sockets (SO_PEERCRED and the owner checks decide)."""
    for d in [cluster.root] + [n.root for n in cluster.nodes]:
        os.chmod(d, 0o755)


def as_uid(uid, package_dir, gid=None, groups=None, env=None):
    """(prefix, environment) that run a command as `uid` (primary group `gid`, default the uid;
    the supplementary `groups`, default none): the `setpriv ... --` prefix, and `env` added to a
    minimal environment whose PYTHONPATH is `package_dir`."""
    gid = uid if gid is None else gid
    cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
    cmd += [f"--groups={','.join(str(g) for g in groups)}"] if groups else ["--clear-groups"]
    return cmd + ["--"], {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                          "PYTHONPATH": package_dir, "HOME": "/tmp", **(env or {})}


def run_as(uid, script, args, package_dir, gid=None, groups=None, env=None, timeout=120):
    """Runs `python -c script args...` as `uid` (as_uid) with `env` added to a minimal
    environment; returns the last line of its stdout as JSON."""
    prefix, env = as_uid(uid, package_dir, gid, groups, env)
    cmd = prefix + [sys.executable, "-c", script] + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])
