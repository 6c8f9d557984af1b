"""The checks `import reft` and `import reft.torch` make (pure functions; nothing is started):
one release for the Python files and the extension, a driver the CUDA backend can run on, a
build tree shadowing an installed package of another release, and the supported torch range."""
import warnings

import pytest

from reft import _install_check, _torch_version


def test_an_extension_of_another_release_is_refused_naming_both():
    _install_check.check_extension("0.2.0", "0.2.0", "/x/_reft.so")
    with pytest.raises(ImportError, match=r"release 0\.2\.0 but its extension /x/_reft\.so is "
                                          r"release 0\.1\.0"):
        _install_check.check_extension("0.2.0", "0.1.0", "/x/_reft.so")


def test_a_driver_older_than_the_cuda_runtime_is_refused_naming_both():
    _install_check.check_cuda_driver(0, 0)            # no CUDA backend
    _install_check.check_cuda_driver(13000, 0)        # no driver: CPU tensors only
    _install_check.check_cuda_driver(13000, 13020)
    with pytest.raises(ImportError, match=r"built with CUDA 13\.0, .*\(CUDA 12\.8\)"):
        _install_check.check_cuda_driver(13000, 12080)


def test_only_a_build_tree_of_another_release_warns(monkeypatch):
    from importlib import metadata
    monkeypatch.setattr(metadata, "version", lambda name: {"reft-checkpoint": "0.1.0"}[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _install_check.warn_if_shadowing("0.1.0", True, "/b/reft")   # same release
        _install_check.warn_if_shadowing("0.2.0", False, "/site/reft")  # installed itself
    with pytest.warns(UserWarning, match=r"reft 0\.2\.0 is imported from the build tree /b .*"
                                         r"shadows the installed reft-checkpoint 0\.1\.0"):
        _install_check.warn_if_shadowing("0.2.0", True, "/b/reft")


@pytest.mark.parametrize("version", ["1.13.1", "2.0.0", "2.15.0", "2.15.0+cu130", "2.16.0a0"])
def test_supported_torch(version):
    _torch_version.require_supported(version)


@pytest.mark.parametrize("version", ["1.12.1", "3.0.0", "nightly"])
def test_unsupported_torch_is_an_import_error_naming_the_range(version):
    with pytest.raises(ImportError, match=r"reft\.torch supports torch 1\.13 and 2\.x .*this is "
                                          r"torch " + version.replace(".", r"\.")):
        _torch_version.require_supported(version)
