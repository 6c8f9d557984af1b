"""Progress reports of a running restore: reft.Client.restore(progress=...).

libreft adds the bytes a restore delivers to an atomic counter (Client::RestoreProgressNow)
and restore() runs without the GIL, so a thread here reads the counter once a second, calls the
trainer's callback with a report and logs the same at INFO on the `reft` logger. The restore
itself never waits for this thread. A report is a dict:

    {"phase": "fetching", "bytes_done": 123, "bytes_total": 456, "bytes_per_s": 7.8e8}

phase: "deciding" (reftd takes the job-wide decision and locates the step; bytes_total is 0
until it has placed the state), "fetching" (verified bytes stream into the buffers), "copying"
(reftd decoded a lost part and hands the whole state over at once), "staging" (staged device
buffers go back to their devices), and in the last report, made when restore() returns,
"done" with bytes_done == bytes_total. bytes_per_s: bytes_done over the time since restore()
was called.
"""

import logging
import threading
import time

_log = logging.getLogger("reft")

INTERVAL_S = 1.0
# What libreft reports while a restore runs; before the first one it still shows the last
# restore's "done" or "failed", which is not this restore's progress.
_RUNNING = ("deciding", "fetching", "copying", "staging")


def _mib(n):
    return f"{n / (1 << 20):.1f} MiB"


class RestoreWatch:
    """Context manager around one restore: `read()` -> (phase, bytes_done, bytes_total) from
    libreft; `callback(report)` or None. Reports while the restore runs, at most once every
    `interval_s` (default INTERVAL_S), then once more when it returns successfully (phase
    "done")."""

    def __init__(self, read, callback, interval_s=None):
        self._read = read
        self._callback = callback
        self._interval_s = INTERVAL_S if interval_s is None else interval_s
        self._stop = threading.Event()
        self._thread = None
        self._start = 0.0

    def __enter__(self):
        self._start = time.monotonic()
        # Nobody listens: no thread (a restore in a loop pays nothing).
        if self._callback is not None or _log.isEnabledFor(logging.INFO):
            self._thread = threading.Thread(target=self._run, name="reft-restore-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._thread is None:
            return False
        self._stop.set()
        self._thread.join()
        if exc_type is None:
            self._report(final=True)
        return False

    def _run(self):
        while not self._stop.wait(self._interval_s):
            self._report(final=False)

    def _report(self, final):
        phase, done, total = self._read()
        if not final and phase not in _RUNNING:
            return
        if final:
            phase = "done"
        elapsed = max(time.monotonic() - self._start, 1e-9)
        report = {"phase": phase, "bytes_done": int(done), "bytes_total": int(total),
                  "bytes_per_s": done / elapsed}
        _log.info("restore %s: %s of %s (%s/s)", phase, _mib(done), _mib(total),
                  _mib(report["bytes_per_s"]), extra={"reft_restore_progress": report})
        if self._callback is None:
            return
        try:
            self._callback(dict(report))
        except Exception:  # noqa: BLE001 - the trainer's callback must not break its restore
            # The restore goes on (its result is the trainer's state); the callback is not
            # called again during it.
            _log.warning("restore progress callback %r raised; not called again during this "
                         "restore", self._callback, exc_info=True)
            self._callback = None
