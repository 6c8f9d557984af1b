"""Helpers for system tests that drive several reft.Client ranks from one process."""
import threading


def snapshot_all(clients, step, timeout=30):
    """Snapshots `step` on every client at once (a step commits when every rank's snapshot is
    in; a rank's ring copy waits for its neighbour's part to be published), fences them, and
    asserts the step commits job-wide within `timeout` seconds."""
    threads = [threading.Thread(target=c.snapshot, args=(step,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.fence()
    assert clients[0].wait_committed(step, timeout=timeout), step
