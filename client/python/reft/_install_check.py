"""Checks made once at `import reft`: the extension and the Python files are of one release, and
a build tree on PYTHONPATH that shadows an installed reft of another release says so.

Both mistakes otherwise surface much later as an AttributeError or a protocol error deep inside a
trainer's first snapshot."""

import os
import warnings

DISTRIBUTION = "reft-checkpoint"  # the name on the package index; `reft` there is another project


def check_extension(package_version, extension_version, extension_path):
    if extension_version != package_version:
        raise ImportError(
            "reft's Python files are release %s but its extension %s is release %s: rebuild or "
            "reinstall reft (pip install \".[torch]\" from the checkout, or cmake --build build)"
            % (package_version, extension_path, extension_version))


def check_cuda_driver(runtime, driver):
    """reft's CUDA backend links the CUDA runtime it was built with (statically): a driver older
    than that runtime cannot run it. Refused here, naming both, rather than at the first CUDA
    tensor with "not CUDA device memory". No driver at all (0) is fine: no CUDA tensor exists."""
    if runtime and driver and driver < runtime:
        raise ImportError(
            "reft was built with CUDA %s, which needs a newer GPU driver than this machine's "
            "(CUDA %s): rebuild reft with the CUDA toolkit your torch uses (pip install "
            "\".[torch]\" with that toolkit's nvcc first on PATH), or update the driver"
            % (_cuda_text(runtime), _cuda_text(driver)))


def _cuda_text(version):
    return "%d.%d" % (version // 1000, (version % 1000) // 10)


def warn_if_shadowing(package_version, from_build_tree, package_dir):
    if not from_build_tree:
        return
    try:
        from importlib import metadata
        installed = metadata.version(DISTRIBUTION)
    except Exception:  # not installed (or no metadata): nothing is shadowed
        return
    if installed != package_version:
        warnings.warn(
            "reft %s is imported from the build tree %s (PYTHONPATH), which shadows the installed "
            "%s %s" % (package_version, os.path.dirname(package_dir), DISTRIBUTION, installed),
            stacklevel=3)
