"""The torch releases reft.torch supports, checked at `import reft.torch` so that another torch
fails there with the range named, not with an AttributeError deep inside a trainer."""

import re

# Tested in CI: Debian's 1.13 and the pinned 2.x of tools/requirements-torch2.txt.
SUPPORTED = ((1, 13), (2, 99))
SUPPORTED_TEXT = "torch 1.13 and 2.x (tested: 1.13 and the 2.x pinned in tools/requirements-torch2.txt)"


def parse(version):
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def require_supported(version):
    v = parse(version)
    if v is None or not SUPPORTED[0] <= v <= SUPPORTED[1]:
        raise ImportError("reft.torch supports %s; this is torch %s" % (SUPPORTED_TEXT, version))
