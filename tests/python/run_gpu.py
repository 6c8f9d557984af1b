#!/usr/bin/python3
"""Runs the GPU tests (pytest FILE...) when torch sees a CUDA/ROCm device; exits 77 (CTest:
skipped) otherwise."""
import sys

import pytest
import torch

if not torch.cuda.is_available():
    print("no CUDA/ROCm device visible to torch: GPU tests skipped")
    sys.exit(77)
# reft_ctest_skip (tests/support): a run whose every test skipped exits 77 as well.
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "reft_ctest_skip"] + sys.argv[1:]))
