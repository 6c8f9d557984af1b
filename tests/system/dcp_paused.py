"""Runs a DCP trainer script with `dcp.async_save` held before one step's save, for a test that
must act exactly then (kill a node while the save is in flight):

    python dcp_paused.py SCRIPT ARGS...      (REFT_TEST_PAUSE_STEP, REFT_TEST_PAUSE_DIR set)

Before saving step REFT_TEST_PAUSE_STEP the rank creates <dir>/paused.<RANK> and waits until
<dir>/go exists; every other call passes straight through."""
import os
import runpy
import sys
import time

import torch.distributed.checkpoint as dcp

STEP = int(os.environ["REFT_TEST_PAUSE_STEP"])
WHERE = os.environ["REFT_TEST_PAUSE_DIR"]
_async_save = dcp.async_save


def _held(state_dict, *args, checkpoint_id=None, **kwargs):
    if checkpoint_id == STEP:
        open(os.path.join(WHERE, "paused.%s" % os.environ["RANK"]), "w").close()
        while not os.path.exists(os.path.join(WHERE, "go")):
            time.sleep(0.005)
    return _async_save(state_dict, *args, checkpoint_id=checkpoint_id, **kwargs)


dcp.async_save = _held
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
