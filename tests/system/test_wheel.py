"""The Python package as users install it: pyproject.toml builds the wheel from this checkout,
pip installs it into a fresh venv of /usr/bin/python3 with no PYTHONPATH, and a trainer there
saves and restores through a real reftd. Then the install checks made at `import reft`: a build
tree on PYTHONPATH shadowing an installed reft of another release warns.

Needs the package index (pip fetches the pinned build requirements): skipped, naming why, when
it cannot be reached."""
import glob
import os
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from reft_cluster import LocalCluster

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_TREE = os.path.join(os.environ.get("REFT_BUILD_DIR", os.path.join(REPO, "build")),
                          "client", "python")

SAVE_RESTORE = textwrap.dedent("""
    import sys
    import reft
    sock = sys.argv[1]
    data = bytearray(range(256)) * 64
    with reft.Client(socket=sock, job="wheel", timeout=20.0) as c:
        c.register("w", data)
        c.snapshot(7)
        assert c.wait_committed(7, timeout=20.0)
    back = bytearray(len(data))
    with reft.Client(socket=sock, job="wheel", timeout=20.0) as c:
        c.register("w", back)
        assert c.restore() == 7
    assert back == data
    print(reft.__version__, reft.__file__)
""")


def cmake_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(reft VERSION "):
                return line.split()[2]
    raise AssertionError("no project(reft VERSION ...) in CMakeLists.txt")


def clean_env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(HOME=str(tmp_path), PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the wheel built from this checkout: its python."""
    try:
        urllib.request.urlopen("https://pypi.org/simple/scikit-build-core/", timeout=15).close()
    except Exception as e:  # noqa: BLE001 - any failure means the same
        pytest.skip("the Python package index cannot be reached (%s): cannot fetch the wheel's "
                    "build requirements" % e)
    tmp = tmp_path_factory.mktemp("wheel")
    venv = tmp / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    env = clean_env(tmp, PIP_CACHE_DIR=os.path.expanduser("~/.cache/pip"))
    subprocess.run(pip + ["wheel", "--no-deps", "-w", str(tmp / "dist"), REPO], check=True,
                   env=env)
    wheels = glob.glob(str(tmp / "dist" / "*.whl"))
    assert len(wheels) == 1, wheels
    name = os.path.basename(wheels[0])
    assert name.startswith("reft_checkpoint-%s-" % cmake_version()), name
    subprocess.run(pip + ["install", wheels[0]], check=True, env=env)
    return tmp, str(venv / "bin" / "python")


def test_the_wheel_saves_and_restores_through_reftd_without_pythonpath(installed):
    tmp, python = installed
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # No executables: reftctl and reftd come from the Debian package or the build tree.
    assert not [p for p in os.listdir(os.path.join(os.path.dirname(python)))
                if p.startswith("reft")]
    with LocalCluster(nodes=1, etcd=0) as cluster:
        out = subprocess.run([python, "-c", SAVE_RESTORE, cluster.nodes[0].socket], check=True,
                             capture_output=True, text=True, env=clean_env(tmp),
                             cwd=str(tmp)).stdout.split()
    assert out[0] == cmake_version()
    assert out[1].startswith(site), (out, site)


def test_a_build_tree_shadowing_another_installed_release_warns(installed):
    tmp, python = installed
    probe = ("import warnings\n"
             "with warnings.catch_warnings(record=True) as seen:\n"
             "    warnings.simplefilter('always')\n"
             "    import reft\n"
             "print(reft.__file__)\n"
             "print('|'.join(str(w.message) for w in seen))\n")
    if not os.path.exists(os.path.join(BUILD_TREE, "reft", "_version.py")):
        pytest.skip("no build tree at %s" % BUILD_TREE)
    # The build tree of the same release as the installed wheel: silent.
    same = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True,
                          env=clean_env(tmp, PYTHONPATH=BUILD_TREE), cwd=str(tmp)).stdout
    path, warned = same.splitlines()[0], same.splitlines()[1:]
    assert path.startswith(BUILD_TREE), same
    assert warned in ([], [""]), same
    # An installed reft-checkpoint of another release (its metadata is all that is read).
    other = tmp / "other-release"
    meta = other / "reft_checkpoint-0.0.1.dist-info"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: reft-checkpoint\nVersion: 0.0.1\n")
    shadow = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True,
                            env=clean_env(tmp, PYTHONPATH="%s:%s" % (BUILD_TREE, other)),
                            cwd=str(tmp)).stdout
    assert "shadows the installed reft-checkpoint 0.0.1" in shadow, shadow
