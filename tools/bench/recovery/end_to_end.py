"""End-to-end recovery time: from a node's death to the first step committed job-wide after it,
split by phase, each phase against its floor (issue "Recovery time as users count it";
docs/bench/recovery.md "End-to-end recovery time"; the phases: docs/recovery.md "Phases of a
recovery").

Per run: N reftd on one real etcd (LocalCluster, production defaults except the link throttle
`[peer] link_bandwidth` and the restore timeouts a throttled restore of this size needs), a job
of one rank per node (dp = N, the numpy trainer below: it restores, then trains on), S bytes of
replicated state per rank, a step every ~150 ms with snapshots committed. With placement
`spare` one more reftd is registered and idle. One node (not the job's coordinator) is lost:

- `killed`: its trainer and reftd SIGKILLed, its memory wiped;
- `silent`: its trainer and reftd SIGSTOPped, and left stopped (lost).

Nobody reports the loss (`--reported`: a trainer's node reports it at once through
reft.elastic.report_failure, as a launcher whose collective failed would). The harness is the
launcher: it follows the job's published decision in etcd (`/reft/v1/jobs/<job>/plan`, polled
every 5 ms: no settle sleep), and the moment a decision of this loss is `decided` it kills the old
trainers and starts every rank of the decided layout on the node it names (reft.elastic
placement_from_plan): restore (reshape=True when the layout changed), then train on. It stops at
the first step committed job-wide after the loss (etcd's committed key, polled every 5 ms).

Per run one JSON line: the kill time (harness wall clock, unix ms), the phases (job-wide ones
from `reftctl -o json restore-check` last_recovery on a node running a rank; a rank's own from its
last_restore()["phases"]: reconnected_at the last rank's hello, restore_started_at the first
rank's start, restore_ended_at the last rank's end), the durations between them, the decision
(policy, new dp, spare_wait) and the floors: detection (killed: the 2 s target; silent: the lease
TTL), restore (the busiest receiver's bytes at the link rate), trainer restart (a trainer process
started, connected and registered with no restore, measured once per run before the loss).
`false_deaths` (a live node unregistered, or a node that declared more than one death) must be 0.

`--torch-restart`: instead, the trainer-restart phase with a torch 2.x trainer (.venv/torch2:
tools/torch2_venv.sh, reft in it by tools/torch2_install_reft.sh) against this numpy trainer:
N ranks (default 8) of S (default 256 MiB) train, are all killed and started again; per trainer
the time from process start to restored and training again (imports, process group, client,
register, restore, first snapshot).

    PYTHONPATH=build/client/python REFT_BUILD_DIR=build /usr/bin/python3 \\
        tools/bench/recovery/end_to_end.py --nodes 4 --size 16M --link-rate 64M --markdown
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "localcluster"))
import reft  # noqa: E402
import reft.elastic  # noqa: E402
from reft_cluster import LocalCluster  # noqa: E402

JOB = "e2e"
LEASE_TTL_S = 5          # reftd's etcd.lease_ttl_s (production default)
KILLED_TARGET_S = 2.0    # the detection target for a killed process
PHASES = ("lost_at", "declared_at", "decided_at", "staged_at", "reconnected_at",
          "restore_started_at", "restore_ended_at")

# One rank: S bytes of replicated float32 state (two buffers) and 4 KiB of unique state. Modes:
# `probe` connects and registers under a job of its own and exits (the restart floor); `train`
# restores (nothing the first time) and trains on. Every line is JSON with the wall time.
TRAINER = r'''
import json, sys, time
t_start = time.time()
import numpy as np
import reft
sock, job, dp, dp_size, size, protection, mode, reshape, sleep_ms = sys.argv[1:10]
dp, dp_size, size, sleep_ms = int(dp), int(dp_size), int(size), int(sleep_ms)
def say(**kw):
    kw["at_ms"] = time.time() * 1000
    print(json.dumps(kw), flush=True)
c = reft.Client(socket=sock, job=job, dp=dp, layout=reft.Layout(dp=dp_size),
                protection=protection, timeout=1800.0)
half = size // 8  # float32 elements per buffer: two buffers of size / 2 bytes
state = [np.zeros(half, dtype=np.float32), np.zeros(half + 3, dtype=np.float32)]
for i, w in enumerate(state):
    c.register("layers.%d.weight" % i, w, layer=i, dtype="float32")
rng = np.full(4096, dp, dtype=np.uint8)
c.register("rng", rng, kind="unique")
say(event="registered", started_ms=t_start * 1000)
if mode == "probe":
    sys.exit(0)
def mark(w, step):  # what training changed at this step: a few elements (the copy is the cost)
    w[0] = w[len(w) // 2] = w[-1] = step
step = c.restore(reshape=reshape == "1")
r = c.last_restore
if step is not None:
    ok = all(w[0] == step and w[len(w) // 2] == step and w[-1] == step for w in state)
    say(event="restored", step=step, ok=bool(ok), total_s=r["total_s"], reshaped=r["reshaped"],
        source=r["source"], phases=r.get("phases"))
step = -1 if step is None else step
# As the C++ sample trainer: a step whose snapshot or commit failed is reported and training goes
# on (the next step may commit); a cancelled one means the job was restored without this trainer.
while True:
    step += 1
    try:
        c.fence()
        for w in state:
            mark(w, step)
        c.snapshot(step)
        if c.wait_committed(step - 1, timeout=0.2):
            say(event="committed", step=step - 1)
    except reft.CancelledError:
        raise
    except reft.Error as e:
        say(event="step-error", step=step, error=str(e)[:500])
    time.sleep(sleep_ms / 1000)
'''

# The torch 2.x trainer of --torch-restart: what a torch job does from its process start to
# training again (imports, the process group, the client, register, restore, a step).
TORCH_TRAINER = r'''
import json, os, sys, time
t_start = time.time()
import torch
import torch.distributed as dist
import reft
t_imported = time.time()
sock, job, dp, dp_size, size, protection = sys.argv[1:7]
dp, dp_size, size = int(dp), int(dp_size), int(size)
dist.init_process_group("gloo", rank=dp, world_size=dp_size)
t_group = time.time()
c = reft.Client(socket=sock, job=job, dp=dp, layout=reft.Layout(dp=dp_size),
                protection=protection, timeout=1800.0)
state = [torch.zeros(size // 8, dtype=torch.float32), torch.zeros(size // 8 + 3, dtype=torch.float32)]
for i, w in enumerate(state):
    c.register("layers.%d.weight" % i, w, layer=i)
t_registered = time.time()
step = c.restore()
t_restored = time.time()
step = 0 if step is None else step + 1
for w in state:
    w[0] = step
c.snapshot(step)
c.fence()
print(json.dumps({"event": "training", "step": step, "started_ms": t_start * 1000,
                  "imported_ms": t_imported * 1000, "group_ms": t_group * 1000,
                  "registered_ms": t_registered * 1000, "restored_ms": t_restored * 1000,
                  "at_ms": time.time() * 1000}), flush=True)
assert c.wait_committed(step, timeout=600)
'''


def parse_bytes(text):
    text = text.strip().upper()
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if text.endswith(suffix):
            return int(float(text[:-1]) * (1 << shift))
    return int(text)


class Rank:
    """One trainer process; its JSON lines are read by a thread as they come."""

    def __init__(self, node, job, dp, dp_size, size, protection, mode="train", reshape=False,
                 sleep_ms=150, python=sys.executable, source=TRAINER, env=None):
        self.node = node
        self.started_ms = time.time() * 1000
        args = [python, "-c", source, node.socket, job, str(dp), str(dp_size), str(size),
                protection]
        if source is TRAINER:
            args += [mode, "1" if reshape else "0", str(sleep_ms)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.events = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()
        with self.cond:
            self.events.append({"event": "exit"})
            self.cond.notify_all()

    def wait(self, event, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for ev in self.events:
                    if ev["event"] == event:
                        return ev
                    if ev["event"] == "exit":
                        raise RuntimeError(f"trainer on {self.node.node_id} exited "
                                           f"({self.proc.wait()}) before '{event}': "
                                           f"{self.proc.stderr.read()[-3000:]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no '{event}' from the trainer on {self.node.node_id}")
                self.cond.wait(left)

    def check_alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"trainer on {self.node.node_id} exited ({self.proc.returncode}): "
                               f"{self.proc.stderr.read()[-3000:]}")

    def signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self):
        self.signal(signal.SIGKILL)
        self.proc.wait()


def wait_all(ranks, event, timeout, on_poll=None):
    """Every rank's `event`, failing as soon as any rank exits without it."""
    deadline = time.monotonic() + timeout
    got = {}
    while len(got) < len(ranks):
        for i, r in enumerate(ranks):
            if i not in got:
                try:
                    got[i] = r.wait(event, timeout=0.05)
                except TimeoutError:
                    if time.monotonic() > deadline:
                        raise
        if on_poll:
            on_poll()
    return [got[i] for i in range(len(ranks))]


def note(text):
    """Progress on stderr (the JSON lines go to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def poll(pred, timeout, what, every=0.005, on_poll=None):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if on_poll:
            on_poll()
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(every)


class MemoryLow:
    """The lowest MemAvailable seen (the machine's headroom during the run), sampled as the
    harness polls."""

    def __init__(self):
        self.min_kib = None
        self.last = 0.0

    def sample(self):
        now = time.monotonic()
        if now - self.last < 0.2:
            return
        self.last = now
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    kib = int(line.split()[1])
                    self.min_kib = kib if self.min_kib is None else min(self.min_kib, kib)

    def gib(self):
        return None if self.min_kib is None else round(self.min_kib / (1 << 20), 1)


def committed(cluster):
    """The job's newest committed step in etcd, -1 before the first."""
    step = cluster.committed_step(JOB)
    return -1 if step is None else step


def publication(cluster):
    v = cluster.etcd.get(f"/reft/v1/jobs/{JOB}/plan")
    return json.loads(v) if v else None


def deaths_declared(node):
    return node.metrics().get("reft_node_deaths_declared_total", 0)


def busiest_receiver_bytes(size, n, new_dp):
    """Bytes the busiest node's link must take in the restore (replicated state of `size` bytes
    per rank, sharded over the n ranks that saved it). Same layout: the node that takes the lost
    rank holds nothing and receives the whole state (arc1: the n-1 live shards and the lost one's
    ARC copy; aec: the n-1 live shards and the survivors' rep/aec regions, size/n in all).
    Reshaped (every rank of the new layout assembles the whole state): a survivor holds its own
    shard and receives the other n-1 (the lost one as its ARC copy or as size/n of parity); the
    survivor holding the lost shard's ARC copy receives one less, which does not change the
    busiest. The same for arc1 and aec."""
    return size if new_dp == n else size * (n - 1) // n


def phase_ms(phases, name):
    p = (phases or {}).get(name)
    return None if p is None else p["at_ms"]


def span_s(a, b):
    return None if a is None or b is None else round((b - a) / 1000, 3)


def restart_floor(node, size, protection, n):
    """A trainer process started, connected and registered its buffers, no restore (a job of its
    own): the seconds from Popen to its 'registered' line."""
    probe = Rank(node, JOB + "-probe", 0, n, size, protection, mode="probe")
    ev = probe.wait("registered", timeout=300)
    probe.proc.wait()
    return round((ev["at_ms"] - probe.started_ms) / 1000, 3)


def one_run(args, scheme, kind, placement):
    n, size = args.nodes, args.size
    config = (f"[peer]\nlink_bandwidth = {args.link_rate}\n"
              "[restore]\npiece_timeout_ms = 600000\ntimeout_ms = 1800000\n")
    mem = MemoryLow()
    with LocalCluster(nodes=n, config=config, metrics=True, keep=args.keep) as cluster:
        if args.keep:
            note(f"cluster directory (kept): {cluster.root}")
        nodes = list(cluster.nodes)
        spare = cluster.add_node("spare1") if placement == "spare" else None
        ranks = [Rank(node, JOB, d, n, size, scheme, sleep_ms=args.step_ms)
                 for d, node in enumerate(nodes)]
        new_ranks, victim, victim_rank = [], None, None
        try:
            def watch():
                mem.sample()
                for r in ranks:
                    r.check_alive()
            poll(lambda: committed(cluster) >= 2, 1800, "the job did not commit", on_poll=watch)
            note(f"{scheme} {kind} {placement}: the job commits")
            floor_restart_s = restart_floor(nodes[0], size, scheme, n)
            lead = cluster.coordinator_of(JOB)
            victim = next(x for x in reversed(nodes) if x is not lead)
            victim_rank = nodes.index(victim)
            witness = next(x for x in nodes if x is not victim)
            base = committed(cluster)
            sig = signal.SIGSTOP if kind == "silent" else signal.SIGKILL
            kill_ms = time.time() * 1000
            t_kill = time.monotonic()
            ranks[victim_rank].signal(sig)
            victim.kill(sig)
            if kind == "killed":
                victim.wipe_memory()
            if args.reported:
                reft.elastic.report_failure(witness.socket, JOB, "allreduce: connection reset",
                                            peer_rank=victim_rank)

            def decided():
                pub = publication(cluster)
                if pub and pub.get("state") in ("decided", "confirmed") and \
                        victim.node_id in str(pub.get("basis", "")).split(","):
                    return pub
                return None
            note(f"{victim.node_id} lost ({kind}); waiting for the decision")
            pub = poll(decided, 600, "no decision of the loss was published", on_poll=mem.sample)
            seen_decided_s = time.monotonic() - t_kill
            seen_decided_ms = time.time() * 1000
            survivors = [x for x in nodes if x is not victim] + ([spare] if spare else [])
            by_id = {x.node_id: x for x in survivors}
            doc = reft.plan(witness.socket, JOB)
            world = reft.elastic.world_size(doc)
            places = [reft.elastic.placement_from_plan(doc, r, world) for r in range(world)]
            if places[0].tp > 1 or places[0].pp > 1:
                # The planner may split the model into stages (a reconfiguration onto fewer
                # nodes); this trainer restores a data-parallel layout only.
                raise RuntimeError(
                    f"the planner decided dp={places[0].dp} tp={places[0].tp} pp={places[0].pp} "
                    f"({places[0].policy}); this bench's trainer runs data parallel only")
            # The launcher: the old trainers go, the decided layout's ranks start at once.
            for i, r in enumerate(ranks):
                if i != victim_rank:
                    r.kill()
            new_ranks = [Rank(by_id[p.node], JOB, p.dp_rank, p.dp, size, scheme,
                              reshape=p.dp != n, sleep_ms=args.step_ms) for p in places]
            spawned_ms = time.time() * 1000  # the old trainers gone, the new ones started
            note(f"decided: {len(places)} ranks start on {[p.node for p in places]}")
            restored = wait_all(new_ranks, "restored", timeout=1800, on_poll=mem.sample)
            note("restored; waiting for the first commit")

            def watch_new():
                mem.sample()
                for r in new_ranks:
                    r.check_alive()
            # The first commit after the recovery is of a step trained after the restore: a
            # step the old trainers had completed may still commit just after the loss.
            restored_step = max(e["step"] for e in restored)

            def after_loss():
                step = committed(cluster)
                return step if step > max(base, restored_step) else None
            first = poll(after_loss, 600, "no commit after the restore", on_poll=watch_new)
            first_commit_s = time.monotonic() - t_kill
            first_commit_seen_ms = time.time() * 1000
            # restore-check on a node running a rank: the job's last recovery and its first
            # commit (that node may note the commit a moment after etcd has it).
            answer = new_ranks[0].node
            shown, refused = {}, []

            def last_recovery():
                # Right after a commit restore-check may fail for a moment (the step committed
                # in etcd, not yet on the answering node): asked again, the failure noted.
                got = answer.ctl("restore-check", "--job", JOB, json_output=True, check=False)
                if not isinstance(got, dict):
                    refused.append((got.stderr or got.stdout).strip()[:300])
                    return None
                shown["doc"] = got
                last = got.get("last_recovery") or {}
                return last if last.get("first_commit_at") else None
            try:
                last = poll(last_recovery, 60, "restore-check shows no first commit", every=0.05)
            except TimeoutError:
                raise TimeoutError(f"restore-check on {answer.node_id} shows no first commit "
                                   f"after step {base} (etcd: {committed(cluster)}): "
                                   f"{json.dumps(shown.get('doc'))[:3000]}; refused: "
                                   f"{refused[-1:]}")
            live = survivors
            false_deaths = sum(0 if cluster.registered(x) else 1 for x in live) + sum(
                max(0, deaths_declared(x) - 1) for x in live)
            heard = sum(1 for x in live if deaths_declared(x) >= 1)
        finally:
            for r in ranks + new_ranks:
                r.kill()
            if kind == "silent" and victim is not None:
                victim.resume()
    job_phases = last.get("phases") or {}
    rank_phases = [r.get("phases") or {} for r in restored]
    phases = {p: phase_ms(job_phases, p) for p in PHASES}
    for p in PHASES:  # a phase restore-check does not carry: the ranks' own
        if phases[p] is None:
            got = [phase_ms(rp, p) for rp in rank_phases if phase_ms(rp, p) is not None]
            if got:
                phases[p] = min(got) if p == "restore_started_at" else max(got)
    first_commit_ms = phase_ms(last, "first_commit_at")
    decision = (pub.get("plan") or {}).get("decision") or {}
    busiest = busiest_receiver_bytes(size, n, world)
    floor_restore_s = round(busiest / args.link_rate, 3) if args.link_rate else None
    return {
        "bench": "end_to_end", "scheme": scheme, "kind": kind, "placement": placement,
        "reported": args.reported, "nodes": n, "state_bytes": size,
        "link_bandwidth": args.link_rate, "lease_ttl_s": LEASE_TTL_S, "victim": victim.node_id,
        "kill_ms": round(kill_ms), "phases": phases, "first_commit_at": first_commit_ms,
        "first_commit_step": last.get("first_commit_step"), "base_step": base,
        "first_commit_seen_step": first, "restored_step": restored_step,
        "policy": decision.get("policy"), "new_dp": world,
        "new_nodes": [p.node for p in places], "spare_wait": decision.get("spare_wait"),
        "durations_s": {
            "kill_to_declared": span_s(kill_ms, phases["declared_at"]),
            "lost_to_declared": span_s(phases["lost_at"], phases["declared_at"]),
            "declared_to_decided": span_s(phases["declared_at"], phases["decided_at"]),
            "decided_to_reconnected": span_s(phases["decided_at"], phases["reconnected_at"]),
            "restore": span_s(phases["restore_started_at"], phases["restore_ended_at"]),
            "restore_end_to_first_commit": span_s(phases["restore_ended_at"], first_commit_ms),
            "kill_to_first_commit": span_s(kill_ms, first_commit_ms),
        },
        # The harness's own clock: when it saw the decision in etcd, when the new trainers were
        # started, when etcd's committed key first showed a step after the loss (polled).
        "harness_ms": {"decision_seen": round(seen_decided_ms), "trainers_started": round(spawned_ms),
                       "first_commit_seen": round(first_commit_seen_ms)},
        "harness_durations_s": {
            "decision_seen_to_trainers_started": span_s(seen_decided_ms, spawned_ms),
            "trainers_started_to_reconnected": span_s(spawned_ms, phases["reconnected_at"]),
            "restore_end_to_first_commit_seen": span_s(phases["restore_ended_at"], first_commit_seen_ms),
            "kill_to_first_commit_seen": span_s(kill_ms, first_commit_seen_ms),
        },
        "harness_s": {"kill_to_decision_seen": round(seen_decided_s, 3),
                      "kill_to_first_commit_seen": round(first_commit_s, 3)},
        "floors_s": {
            "detection": KILLED_TARGET_S if kind == "killed" else LEASE_TTL_S,
            "restore": floor_restore_s, "restore_busiest_receiver_bytes": busiest,
            "trainer_restart": floor_restart_s,
        },
        "restored_ok": all(r["ok"] for r in restored),
        "restore_total_s_slowest": round(max(r["total_s"] for r in restored), 3),
        "step_errors": [ev for r in ranks + new_ranks for ev in r.events
                        if ev["event"] == "step-error"][:5],
        "restore_check_failed_answers": len(refused),
        "restore_check_first_failure": refused[0] if refused else None,
        "false_deaths": int(false_deaths), "nodes_that_heard_the_death": heard,
        "min_mem_available_gib": mem.gib(),
    }


def torch_python():
    """The torch 2.x venv's python with reft in it, or None and why. An existing venv is used as
    it is; otherwise tools/torch2_venv.sh creates it (it leaves .venv/torch2.unavailable saying
    why when it cannot)."""
    venv = os.path.join(ROOT, ".venv", "torch2")
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        try:
            made = subprocess.run(["bash", os.path.join(ROOT, "tools", "torch2_venv.sh")],
                                  capture_output=True, text=True, timeout=3600)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"tools/torch2_venv.sh failed: {e}"
        if not os.access(python, os.X_OK):
            why = os.path.join(ROOT, ".venv", "torch2.unavailable")
            reason = open(why).read().strip() if os.path.exists(why) else made.stderr[-300:]
            return None, f"no torch2 venv ({reason})"
    if subprocess.run([python, "-c", "import reft, torch"], capture_output=True).returncode != 0:
        inst = subprocess.run(["bash", os.path.join(ROOT, "tools", "torch2_install_reft.sh")],
                              capture_output=True, text=True)
        if subprocess.run([python, "-c", "import reft, torch"], capture_output=True).returncode:
            return None, f"reft not installable in {venv}: {inst.stderr[-300:]}"
    return python, None


def torch_restart(args):
    """Every rank trains, all trainers are killed and started again (no node lost): per trainer
    the seconds from its process start to restored and one step snapshotted, torch 2.x vs the
    numpy trainer, same cluster, same bytes."""
    python, why = torch_python()
    if python is None:
        print(json.dumps({"bench": "end_to_end_torch_restart", "skipped": why}), flush=True)
        return
    n, size = args.nodes, args.size
    out = {"bench": "end_to_end_torch_restart", "nodes": n, "state_bytes": size,
           "scheme": args.schemes.split(",")[0], "python_torch": python}
    with LocalCluster(nodes=n, config="[restore]\ntimeout_ms = 1800000\n") as cluster:
        scheme = out["scheme"]
        for label, py, src in (("numpy", sys.executable, TRAINER), ("torch2", python, TORCH_TRAINER)):
            job = f"restart-{label}"
            times = []
            for attempt in ("first", "restart"):
                port = 29400 + 10 * len(label) + len(attempt)  # a fresh rendezvous per start
                env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
                ranks = []
                for d, node in enumerate(cluster.nodes):
                    r = Rank(node, job, d, n, size, scheme, python=py, source=src, env=env)
                    ranks.append(r)
                # Restored: the moment restore() returned (the next line of either trainer is
                # its first step); the first start trains until a step is committed.
                if src is TRAINER:
                    evs = [r.wait("restored" if attempt == "restart" else "committed", 1800)
                           for r in ranks]
                    restored = [ev["at_ms"] for ev in evs]
                    marks = {"registered": [r.wait("registered", 1)["at_ms"] for r in ranks]}
                else:
                    evs = [r.wait("training", 1800) for r in ranks]
                    for r in ranks:
                        if r.proc.wait(timeout=1800) != 0:
                            raise RuntimeError(f"torch trainer failed: {r.proc.stderr.read()[-2000:]}")
                    restored = [ev["restored_ms"] for ev in evs]
                    marks = {k: [ev[k + "_ms"] for ev in evs]
                             for k in ("imported", "group", "registered")}
                if attempt == "restart":
                    times = [round((t - r.started_ms) / 1000, 3) for t, r in zip(restored, ranks)]
                    stage_marks = marks
                for r in ranks:
                    r.kill()
            out[label] = {"start_to_training_s_max": max(times),
                          "start_to_training_s_min": min(times), "ranks_s": times,
                          # the slowest rank's start to each stage (restart attempt)
                          "stages_s": {k: round(max(t - r.started_ms for t, r in zip(v, ranks)) / 1000, 3)
                                       for k, v in stage_marks.items()}}
    print(json.dumps(out), flush=True)


def markdown(rows):
    print("\n| scheme | kind | placement | policy (dp) | kill→declared | declared→decided | "
          "decided→reconnected | restore (floor) | restore end→commit | total | restart floor | "
          "false deaths |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("error"):
            why = [x for x in r["error"].splitlines() if x.strip()][-1]
            print(f"| {r['scheme']} | {r['kind']} | {r['placement']} | failed: {why[:200]} "
                  "|||||||||")
            continue
        d, f = r["durations_s"], r["floors_s"]

        def s(x):
            return "–" if x is None else f"{x:.2f} s"
        print(f"| {r['scheme']} | {r['kind']} | {r['placement']} | {r['policy']} ({r['new_dp']}) | "
              f"{s(d['kill_to_declared'])} (≤ {f['detection']:g} s) | {s(d['declared_to_decided'])} | "
              f"{s(d['decided_to_reconnected'])} | {s(d['restore'])} ({s(f['restore'])}) | "
              f"{s(d['restore_end_to_first_commit'])} | **{s(d['kill_to_first_commit'])}** | "
              f"{s(f['trainer_restart'])} | {r['false_deaths']} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--size", default="256M", help="replicated state per rank (suffix K, M, G)")
    ap.add_argument("--schemes", default="arc1,aec")
    ap.add_argument("--kinds", default="killed,silent")
    ap.add_argument("--placements", default="spare,no_spare")
    ap.add_argument("--link-rate", default="128M", help="[peer] link_bandwidth, bytes/s (0: none)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--step-ms", type=int, default=150, help="pause between a trainer's steps")
    ap.add_argument("--reported", action="store_true",
                    help="a survivor's node reports the loss at once (report_failure)")
    ap.add_argument("--keep", action="store_true",
                    help="keep each cluster's directories (logs, and its shared memory: "
                         "several GiB at full size, remove them after)")
    ap.add_argument("--markdown", action="store_true", help="a summary table at the end")
    ap.add_argument("--torch-restart", action="store_true",
                    help="measure the trainer restart with torch 2.x instead (8 x 256 MiB)")
    args = ap.parse_args()
    # A SIGTERM (timeout) unwinds like an exception: the clusters stop their reftd and etcd.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.size = parse_bytes(args.size)
    args.link_rate = parse_bytes(args.link_rate)
    if args.torch_restart:
        torch_restart(args)
        return 0
    rows = []
    for scheme in args.schemes.split(","):
        for kind in args.kinds.split(","):
            for placement in args.placements.split(","):
                for _ in range(args.runs):
                    try:
                        r = one_run(args, scheme, kind, placement)
                    except (RuntimeError, TimeoutError) as e:
                        # A path the daemon did not complete: the run says what, the sweep goes on.
                        r = {"bench": "end_to_end", "scheme": scheme, "kind": kind,
                             "placement": placement, "nodes": args.nodes,
                             "state_bytes": args.size, "error": str(e)[:4000]}
                    print(json.dumps(r), flush=True)
                    rows.append(r)
    if args.markdown:
        markdown(rows)
    return 1 if any(r.get("error") or r["false_deaths"] or not r["restored_ok"]
                    for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
