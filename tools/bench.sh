#!/usr/bin/env bash
# Runs every benchmark of BENCHMARKS.md and writes their JSON lines to out/bench/<name>.jsonl.
# Slow (minutes) and kept out of the test command. Usage: tools/bench.sh [quick]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${REFT_BUILD_DIR:-build}"
bash "$here/tools/build.sh" reftd reftctl reft_bench_client store_bench reft_bench_kernels \
  protect_bench reft_bench_peer planner_table3_bench planner_policy_bench \
  planner_transfer_bench planner_estimator_bench planner_exec_bench has_pipeline_bench aor_bench aor_copy_bench \
  persist_bench reft_sample_trainer reft_python coord_scale_host
cd "$here"
out=out/bench
mkdir -p "$out"
size=1G; params=272M; [ "${1:-}" = quick ] && size=256M && params=32M
b="$build/tools/bench"
run() { local name=$1; shift; echo "== $name: $*" >&2; "$@" | tee "$out/$name.jsonl"; }
run client   "$b/client/reft_bench_client" --size "$size" --reps 11
run checkpointer /usr/bin/python3 tools/bench/client/checkpointer_bench.py --params "$params" \
    --steps 8 --build-dir "$build"
run store    "$b/store/store_bench" --bytes $((1 << 30)) --runs 5
run kernels  "$b/kernels/reft_bench_kernels" --size "$size" --reps 3
run protect  "$b/protect/protect_bench" --mib 128 --reps 15
run aor      "$b/aor/aor_bench" --reps 5
run aor_copy "$b/aor/aor_copy_bench" --elems 16M --reps 3
run peer     "$b/peer/reft_bench_peer" --size 256M --reps 5
run peer_grpc "$b/peer/reft_bench_peer" --size 256M --reps 5 --transport grpc
run persist  "$b/persist/persist_bench" --bytes 536870912 --runs 7
run restore_vs_tier /usr/bin/python3 tools/bench/recovery/restore_vs_tier.py
run restore_agreement /usr/bin/python3 tools/bench/recovery/restore_agreement.py --runs 10
run restore_unthrottled /usr/bin/python3 tools/bench/recovery/restore_unthrottled.py \
    --members 8 --sizes 64M,256M --runs 3
run restore_unthrottled_1g /usr/bin/python3 tools/bench/recovery/restore_unthrottled.py \
    --members 4 --sizes 1G --runs 3
run restore_vs_link_rate /usr/bin/python3 tools/bench/recovery/restore_unthrottled.py \
    --members 8 --sizes 64M --schemes arc1 --link-rates 2M,8M,32M,128M,0
run planner_table3    "$b/planner/planner_table3_bench"
run planner_policy    "$b/planner/planner_policy_bench" --seeds 30 --sweep
run planner_transfer  "$b/planner/planner_transfer_bench"
run planner_estimator "$b/planner/planner_estimator_bench"
run planner_exec      "$b/planner/planner_exec_bench" --steps 5
run planner_transfer_exec env PYTHONPATH="$build/client/python" REFT_BUILD_DIR="$build" \
    /usr/bin/python3 tools/bench/planner/transfer_exec_bench.py --layers 4,8,16 --mib 16 --link 25M
run planner_churn env PYTHONPATH="$build/client/python" REFT_BUILD_DIR="$build" \
    /usr/bin/python3 tools/bench/planner/churn_bench.py --nodes 30 --floor 15 --events 24 --pp 2
for s in 2 3 4; do for r in 0.25 1.0; do
  run "has_pp${s}_${r}" "$b/has/has_pipeline_bench" --reftd "$build/daemon/app/reftd" \
      --stages "$s" --iterations 6 --ss-over-bubble "$r" --chunk 131072
done; done
# Control plane at cluster scale (docs/bench/coordination.md): etcd up to 4,096 nodes x 8 ranks,
# today's gossip path up to where it stops working.
coord_nodes=64,256,1024,4096; gossip_nodes=16,32,64,128
[ "${1:-}" = quick ] && coord_nodes=64,256 && gossip_nodes=16,32
run coord_etcd   /usr/bin/python3 tools/bench/coord/coord_scale.py --backend etcd \
    --nodes "$coord_nodes" --build-dir "$build"
run coord_gossip /usr/bin/python3 tools/bench/coord/coord_scale.py --backend gossip --runs 1 \
    --nodes "$gossip_nodes" --build-dir "$build"
