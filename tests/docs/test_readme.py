"""README.md's code blocks run as written, and no page tells users to `pip install reft`.

Every fenced code block of README.md is preceded by a marker, an HTML comment on its own line
(blank lines may separate the two), saying what this test does with the block:

    <!-- readme-test: run -->             run it; a non-zero exit fails the test
    <!-- readme-test: run python -->      the same, as Python (`run sh`: as shell)
    <!-- readme-test: xfail REASON -->    run it, expected to fail (strict: a fix shows as XPASS)
    <!-- readme-test: skip REASON -->     not run here; reported as skipped with REASON

Any marker may carry `timeout=SECONDS` (default 300). The language is the marker's
(`run python`, `run sh`) or else the fence's info string: python/py, or sh/bash/shell/console
or none for shell; a `console` block runs its `$ ` lines with the prompt cut. A block without a
marker, or with a malformed one, fails the test: new blocks cannot go untested by accident.

Shell runs with `bash -euo pipefail`, Python with $REFT_README_PYTHON (default: this
interpreter), from the repository root so that `pip install .` works, with HOME and TMPDIR in a
fresh temporary directory per block (TMPDIR a short one under /tmp: a unix socket's path
there must fit in 107 bytes). PYTHONPATH is removed, so the build tree is not importable,
unless $REFT_README_PYTHONPATH gives one for the blocks. A block that needs a venv or a daemon
sets it up itself, as a reader would (e.g. `python3 -m venv /tmp/x && /tmp/x/bin/pip install
".[torch]"`). Test ids name the page and the fence's line: readme-L53-python. $REFT_README
checks another file instead of the repository's README.md (a marked-up copy, or another page
with marked blocks: docs:operations runs docs/operations.md's). A block that leaves a local
cluster running (`tools/localcluster.sh up` in its $TMPDIR without `down`) fails, and the
cluster is stopped.
"""

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

import readme_blocks

REPO = pathlib.Path(__file__).resolve().parents[2]
README = pathlib.Path(os.environ.get("REFT_README", REPO / "README.md"))
PAGE = README.stem.lower()  # test ids: readme-L53-python, operations-L20-sh
OUTPUT_TAIL = 4000
LOCAL_CLUSTER = "reft-localcluster"  # tools/localcluster.sh's directory under $TMPDIR

# "pip install reft" fetches an unrelated project from the package index. Allowed: a path
# (".[torch]", ./dist/reft-….whl), another distribution (reft-checkpoint…).
PIP_INSTALL_REFT = re.compile(r"pip3? +install +(?:(?:-U|--upgrade) +)?[\"']?reft(?![\w.\-/])")
PIP_CHECKED = ["README.md", "docs", "examples"]


def _blocks():
    params = []
    for block in readme_blocks.parse(README.read_text()):
        marks = []
        if block.error:
            pass  # the test body fails with it
        elif block.action == "skip":
            marks = [pytest.mark.skip(reason=block.reason)]
        elif block.action == "xfail":
            marks = [pytest.mark.xfail(strict=True, reason=block.reason)]
        params.append(pytest.param(block, marks=marks,
                                   id=f"{PAGE}-{block.id.split('-', 1)[1]}"))
    return params


@pytest.fixture
def short_tmp():
    """A fresh directory with a short path (pytest's tmp_path is too long for the sockets of
    a local cluster under it)."""
    path = tempfile.mkdtemp(prefix="readme-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _environment(tmp_path, tmpdir):
    env = dict(os.environ)
    # pip's cache stays the user's: a fresh HOME must not download torch's ~4 GB again.
    env.setdefault("PIP_CACHE_DIR", os.path.expanduser("~/.cache/pip"))
    env["HOME"] = str(tmp_path / "home")
    os.makedirs(env["HOME"])
    env["TMPDIR"] = tmpdir
    env.pop("PYTHONPATH", None)
    if os.environ.get("REFT_README_PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["REFT_README_PYTHONPATH"]
    return env


def _command(block, tmp_path):
    if block.language == "python":
        script = tmp_path / f"readme_L{block.line}.py"
        script.write_text(block.code)
        return [os.environ.get("REFT_README_PYTHON") or sys.executable, str(script)]
    return ["bash", "-euo", "pipefail", "-c", block.code]


def _run(command, env, timeout_s):
    """Runs command in its own process group; returns (exit status or None on timeout, output)."""
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            output, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a process that left the group holds the pipe
            output = "(output lost: a process outside the block's group still holds it)"
        return None, output


@pytest.mark.parametrize("block", _blocks())
def test_readme_block(block, tmp_path, short_tmp):
    where = f"{README}:{block.line}"
    if block.error:
        pytest.fail(f"{where}: {block.error}", pytrace=False)
    env = _environment(tmp_path, short_tmp)
    status, output = _run(_command(block, tmp_path), env, block.timeout_s)
    left = _stop_local_cluster(env)
    if status == 0 and left:
        pytest.fail(f"{where}: the block left a local cluster running (stopped now):\n{left}",
                    pytrace=False)
    if status != 0:
        what = f"timed out after {block.timeout_s} s" if status is None else f"exited {status}"
        pytest.fail(f"{where}: {block.language} block {what}; output:\n"
                    f"{output[-OUTPUT_TAIL:]}", pytrace=False)


def _stop_local_cluster(env):
    """Stops a cluster `tools/localcluster.sh up` left in the block's $TMPDIR (its daemons run
    in sessions of their own: the block's process group does not hold them); returns what
    `down` said, or "" when there was none."""
    where = os.path.join(env["TMPDIR"], LOCAL_CLUSTER)
    if not os.path.exists(os.path.join(where, "cluster.json")):
        return ""
    r = subprocess.run(["bash", str(REPO / "tools" / "localcluster.sh"), "down", "--dir", where],
                       env=env, capture_output=True, text=True, timeout=120)
    return r.stdout + r.stderr or "(down said nothing)"


def _text_files(root):
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for path in paths:
        data = path.read_bytes()
        if b"\0" not in data:
            yield path, data.decode("utf-8", errors="replace")


def test_the_quickstart_block_is_the_example_file():
    """README's complete trainer is examples/torch/quickstart.py, which system:quickstart runs:
    the two cannot drift apart."""
    example = (REPO / "examples" / "torch" / "quickstart.py").read_text()
    blocks = [b.code for b in readme_blocks.parse(README.read_text())]
    assert any(code.strip("\n") == example.strip("\n") for code in blocks), (
        "no README block is the text of examples/torch/quickstart.py: copy the file into the "
        "README's quickstart block")


def test_no_page_says_pip_install_reft():
    found = []
    for name in PIP_CHECKED:
        if not (REPO / name).exists():
            continue
        for path, text in _text_files(REPO / name):
            for number, line in enumerate(text.split("\n"), 1):
                if PIP_INSTALL_REFT.search(line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, ("`pip install reft` installs an unrelated project from the package "
                       "index; install from the source tree or a wheel instead:\n" +
                       "\n".join(found))


def test_pip_install_pattern():
    flagged = ["pip install reft", "pip3 install -U reft", "python3 -m pip install reft[torch]",
               "pip install 'reft'", "pip install --upgrade reft==1.0", "pip  install  reft "]
    fine = ['pip install ".[torch]"', "pip install reft-checkpoint", "pip install .",
            "pip install ./dist/reft-0.1-py3-none-any.whl", "pip install reftd",
            "pip install reft.whl", "pip install reft/"]
    assert [s for s in flagged if not PIP_INSTALL_REFT.search(s)] == []
    assert [s for s in fine if PIP_INSTALL_REFT.search(s)] == []
