"""tools/localcluster.sh refuses what it cannot do and says how to fix it (no daemon starts
here; docs:operations runs the cluster itself)."""
import os
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "tools" / "localcluster.sh")


def run(*args, tmp):
    env = dict(os.environ, TMPDIR=str(tmp))
    env.pop("REFT_BUILD_DIR", None)
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_a_missing_build_names_the_build_command(tmp_path):
    r = run("up", "--build-dir", str(tmp_path / "nowhere"), tmp=tmp_path)
    assert r.returncode == 1
    assert "no build tree at" in r.stderr and "tools/build.sh reftd reftctl" in r.stderr
    empty = tmp_path / "build"
    empty.mkdir()
    r = run("up", "--build-dir", str(empty), tmp=tmp_path)
    assert r.returncode == 1
    assert f"reftd is not built ({empty}/daemon/app/reftd is missing)" in r.stderr
    assert "tools/build.sh reftd reftctl" in r.stderr
    assert not (tmp_path / "reft-localcluster").exists()


def test_a_directory_holding_other_files_is_refused(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    r = run("up", "--dir", str(tmp_path), tmp=tmp_path)
    assert r.returncode == 1 and "is not a local cluster's directory" in r.stderr, r.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_down_and_status_without_a_cluster(tmp_path):
    r = run("down", tmp=tmp_path)
    assert r.returncode == 0 and "nothing to stop" in r.stderr
    r = run("status", tmp=tmp_path)
    assert r.returncode == 1 and "tools/localcluster.sh up" in r.stderr
