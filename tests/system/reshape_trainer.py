"""A trainer for the reshape tests: what one rank of some (pp, dp) layout registers, with every
byte a function of (buffer name, step, global byte index), so any rank of any layout can check
what a restore gave it.

The model has LAYERS layers; stage s of pp holds the layers l with l * pp // LAYERS == s. Per
layer it registers, under layout-independent names:
- "layers.<l>.weight" (float32) and "layers.<l>.bias" (uint8): replicated;
- "optim.layers.<l>": the layer's optimizer state as a ZeRO-style sharded buffer of
  OPTIM[l] bytes (not a multiple of any dp used), this rank's part (shard=(offset, total));
and per rank "rng" (unique, no shard): restored only at the same coordinates.

--layers FIRST:LAST replaces the even split with the stage's layers as a planner decided them;
--scale K makes every layer's buffers K times larger; --uniform L:MIB replaces the model with L
equal layers of MIB MiB (the planner's transfer benchmark).

Modes: --train N snapshots steps 0..N-1 and waits for the last commit; --restore restores
(with --reshape: restore(reshape=True)), checks every byte, prints one JSON line
{"step", "report", "bad"} or {"error", "message"}; --then K snapshots K more steps after the
restore (under this layout) and waits for their commit.
"""
import argparse
import json
import sys

import numpy as np

import reft

LAYERS = 6
WEIGHT = [40_000, 24_004, 65_536, 12_000, 33_336, 8_192]   # float32 elements per layer
BIAS = [1_001, 999, 4_097, 17, 2_049, 513]                  # bytes
OPTIM = [100_003, 77_777, 131_071, 5_003, 64_001, 9_999]    # bytes of each layer's state
RNG_BYTES = 4096                                                # per rank "rng" (unique, no shard)
UNTOUCHED = 0xEE  # what "rng" holds before a restore


def use_uniform_model(layers, mib):
    """Replaces the model with `layers` equal layers of `mib` MiB (benchmarks)."""
    global LAYERS, WEIGHT, BIAS, OPTIM
    size = mib << 20
    LAYERS = layers
    WEIGHT = [size * 3 // 4 // 4] * layers
    BIAS = [1024] * layers
    OPTIM = [size // 4] * layers


def layers_of(stage, pp):
    return [l for l in range(LAYERS) if l * pp // LAYERS == stage]


def pattern(name, step, begin, end):
    """Bytes [begin, end) of the global buffer `name` at `step`."""
    seed = sum(name.encode()) * 31 + step * 101
    idx = np.arange(begin, end, dtype=np.uint64)
    return ((idx * np.uint64(2654435761) + np.uint64(seed)) >> np.uint64(7)).astype(np.uint8)


def part(total, dp, dp_size):
    """This rank's part of a sharded buffer: (offset, size, valid bytes)."""
    size = -(-total // dp_size)
    offset = dp * size
    return offset, size, max(0, min(size, total - offset))


class Rank:
    def __init__(self, args):
        self.args = args
        layout = reft.Layout(dp=args.dp_size, pp=args.pp_size, tp=1, zero=1)
        self.client = reft.Client(socket=args.socket, job=args.job, pp=args.pp, dp=args.dp,
                                  layout=layout, protection=args.protection)
        self.buffers = {}  # name -> (array, global begin, valid bytes)
        mine = layers_of(args.pp, args.pp_size)
        if args.layers:  # the split a planner's decision gives this stage
            first, last = (int(x) for x in args.layers.split(":"))
            mine = list(range(first, last + 1))
        k = args.scale
        for l in mine:
            w = np.zeros(WEIGHT[l] * k, dtype=np.float32)
            self.client.register(f"layers.{l}.weight", w, layer=l, dtype="float32")
            self.buffers[f"layers.{l}.weight"] = (w, 0, w.nbytes)
            b = np.zeros(BIAS[l] * k, dtype=np.uint8)
            self.client.register(f"layers.{l}.bias", b, layer=l)
            self.buffers[f"layers.{l}.bias"] = (b, 0, b.nbytes)
            offset, size, valid = part(OPTIM[l] * k, args.dp, args.dp_size)
            o = np.zeros(size, dtype=np.uint8)
            self.client.register(f"optim.layers.{l}", o, kind="unique", layer=l,
                                 optimizer=True, shard=(offset, OPTIM[l] * k))
            self.buffers[f"optim.layers.{l}"] = (o, offset, valid)
        if args.stage_state:  # stage-wide state without a layer (like a flat optimizer state)
            name = stage_state_name(mine)
            st = np.zeros(args.stage_state, dtype=np.uint8)
            self.client.register(name, st)
            self.buffers[name] = (st, 0, st.nbytes)
        if args.register_unknown:  # a name the saved step does not have
            self.unknown = np.zeros(64, dtype=np.uint8)
            self.client.register("layers.unknown.weight", self.unknown)
        self.rng = np.full(RNG_BYTES, UNTOUCHED, dtype=np.uint8)
        self.client.register("rng", self.rng, kind="unique")

    def rng_name(self):
        return f"rng.pp{self.args.pp}.dp{self.args.dp}"

    def fill(self, step):
        for name, (arr, begin, valid) in self.buffers.items():
            raw = arr.view(np.uint8)
            raw[:valid] = pattern(name, step, begin, begin + valid)
            raw[valid:] = 0
        self.rng[:] = pattern(self.rng_name(), step, 0, self.rng.size)

    def check(self, step, untouched):
        bad = []
        for name, (arr, begin, valid) in self.buffers.items():
            raw = arr.view(np.uint8)
            if not np.array_equal(raw[:valid], pattern(name, step, begin, begin + valid)):
                bad.append(name)
            elif valid < raw.size and raw[valid:].any():
                bad.append(name + " (padding)")
        want = (np.full(self.rng.size, UNTOUCHED, dtype=np.uint8) if "rng" in untouched
                else pattern(self.rng_name(), step, 0, self.rng.size))
        if not np.array_equal(self.rng, want):
            bad.append("rng")
        return bad

    def train(self, first, count):
        for step in range(first, first + count):
            self.fill(step)
            self.client.snapshot(step)
            self.client.fence()
        last = first + count - 1
        if not self.client.wait_committed(last, timeout=120):
            raise SystemExit(f"step {last} not committed")
        print(json.dumps({"committed": last}), flush=True)


def stage_state_name(layers):
    """The name of a stage's layer-less buffer: the same for every rank running those layers."""
    return f"stage.{layers[0]}-{layers[-1]}.state"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--pp", type=int, default=0)
    p.add_argument("--dp", type=int, default=0)
    p.add_argument("--pp-size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--protection", default="none")
    p.add_argument("--train", type=int, default=0)
    p.add_argument("--restore", action="store_true")
    p.add_argument("--reshape", action="store_true")
    p.add_argument("--then", type=int, default=0)
    p.add_argument("--register-unknown", action="store_true")
    p.add_argument("--stage-state", type=int, default=0,
                   help="BYTES of replicated state without a layer, named after the stage's layers")
    p.add_argument("--scale", type=int, default=1, help="every layer's buffers this many times larger")
    p.add_argument("--uniform", default="", help="L:MIB: L equal layers of MIB MiB each instead (a 3:1 "
                   "split of weight and sharded optimizer state, a 1 KiB bias)")
    p.add_argument("--layers", default="", help="FIRST:LAST: this stage's layers (default: an even split)")
    args = p.parse_args()
    if args.uniform:
        use_uniform_model(*(int(x) for x in args.uniform.split(":")))
    rank = Rank(args)
    if args.train:
        rank.train(0, args.train)
        return 0
    if not args.restore:
        return 0
    try:
        step = rank.client.restore(reshape=args.reshape)
    except reft.Error as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}), flush=True)
        return 0
    report = rank.client.last_restore
    bad = [] if step is None else rank.check(step, report.get("untouched") or [])
    print(json.dumps({"step": step, "report": report, "bad": bad}), flush=True)
    if args.then and step is not None and not bad:
        rank.train(step + 1, args.then)
    return 0


if __name__ == "__main__":
    sys.exit(main())
