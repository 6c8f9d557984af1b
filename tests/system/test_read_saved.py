"""Reads of saved ranges (the restore a DCP reader uses: docs/dcp.md "How it is stored"), with
real reftd processes on etcd: a restarted rank on the other node reads byte ranges of the job's
committed step from wherever they are, and every misuse is refused naming what is wrong."""

import pytest

import reft
from reft_cluster import LocalCluster
from ranks import snapshot_all

SIZE = 3 * 65536 + 100  # several shards of the replicated buffer, not a multiple of any


def pattern(step, size=SIZE):
    return bytearray((i * 7 + step) & 0xFF for i in range(size))


def test_a_restarted_rank_reads_ranges_of_the_committed_step_and_misuse_is_refused():
    with LocalCluster(nodes=2, etcd=1, config="[etcd]\nlease_ttl_s = 2\n") as c:
        layout = reft.Layout(dp=2)
        clients = [reft.Client(socket=n.socket, job="reads", dp=d, layout=layout,
                               protection="arc1") for d, n in enumerate(c.nodes)]
        bufs = [bytearray(SIZE) for _ in clients]
        own = [bytearray(64) for _ in clients]
        for cl, b, o in zip(clients, bufs, own):
            cl.register("state", b)
            cl.register("rng", o, kind="unique")
        for step in (1, 2):
            for b in bufs:
                b[:] = pattern(step)
            snapshot_all(clients, step)
        clients[1].close()

        # The rank restarts on node1 with nothing registered, as a DCP reader does.
        r = reft.Client(socket=c.nodes[1].socket, job="reads", dp=1, layout=layout,
                        protection="arc1")
        step, saved_layout = r._c.probe_restore()
        assert step == 2 and saved_layout.startswith("dp=2"), (step, saved_layout)
        import ctypes
        want = pattern(2)
        ranges = [(0, 10), (65530, 65546), (SIZE - 7, SIZE), (100, 100)]
        outs = [(ctypes.c_char * max(e - b, 1))() for b, e in ranges]
        r._c.read_saved(2, [("state", 0, 0, b, e, ctypes.addressof(o))
                            for (b, e), o in zip(ranges, outs)])
        for (b, e), o in zip(ranges, outs):
            assert bytes(o)[:e - b] == bytes(want[b:e]), (b, e)
        assert r.last_restore["source"] == "memory", r.last_restore

        out = (ctypes.c_char * 16)()
        with pytest.raises(reft.BusyError, match="step 2.*located in step 1"):
            r._c.read_saved(1, [("state", 0, 0, 0, 16, ctypes.addressof(out))])
        with pytest.raises(reft.NotFoundError, match="'nothing' does not exist in committed step 2"):
            r._c.read_saved(2, [("nothing", 0, 0, 0, 16, ctypes.addressof(out))])
        with pytest.raises(reft.InvalidArgumentError, match="saved per rank"):
            r._c.read_saved(2, [("rng", 0, 0, 0, 16, ctypes.addressof(out))])
        with pytest.raises(reft.InvalidArgumentError, match="has %d bytes" % SIZE):
            r._c.read_saved(2, [("state", 0, 0, SIZE - 8, SIZE + 8, ctypes.addressof(out))])
        # Nothing was registered by the reads: the rank still has no buffer of its own.
        with pytest.raises(reft.InvalidArgumentError, match="no registered buffer"):
            r.restore()
        clients[0].close()
        r.close()
