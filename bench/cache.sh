#!/usr/bin/env bash
# Benchmark of the response cache: one N-task batch three ways against
# `lllm-mock` (no latency, so the runner's own cost shows):
#   without the cache · with `--cache` into an empty cache (every call
#   missed, then kept) · with `--cache` again (every call answered from it).
#
#   bench/cache.sh [N tasks] [C concurrency]         (defaults: 10000 64)
#   NO_BUILD=1 bench/cache.sh …                     (reuse the release build)
#   ROUNDS=5 bench/cache.sh …                       (rounds; default 3)
#
# Reports, per way, the requests sent and the cache hits (from summary.json),
# the wall time and the CPU time per task of the `lllm` process, and the
# cache file's size; the ratios are against the run without the cache,
# measured in the same rounds (medians over the rounds: a shared machine's
# moments vary).
set -euo pipefail
N=${1:-10000}
C=${2:-64}
L=0
source "$(dirname "$0")/setup.sh"
export LLLM_HOME="$work/home"

run() {
    local name=$1
    shift
    rm -rf "$work/out-$name"
    /usr/bin/time -f '%U %S %M %e' -o "$work/time" \
        "$bin/lllm" batch "$work/tasks.jsonl" --tactic "$work/tactic.yaml" \
        -o "$work/out-$name" -j "$C" -q --no-store "$@"
    python3 - "$work/out-$name/summary.json" "$(cat "$work/time")" "$name" >> "$work/runs" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
print(json.dumps({"name": sys.argv[3], "time": sys.argv[2].split(), "calls": summary["calls"],
                  "hits": summary.get("cache_hits", 0), "success": summary["success"],
                  "cost": summary["cost"]}))
PY
}
: > "$work/runs"
for round in $(seq "${ROUNDS:-3}"); do
    rm -rf "$LLLM_HOME"
    run plain
    run cold --cache
    run warm --cache
done
python3 - "$work" "$N" <<'PY'
import json, os, statistics, sys
work, n = sys.argv[1], int(sys.argv[2])
runs = [json.loads(line) for line in open(f"{work}/runs")]
med = statistics.median
rows = {}
for name in ("plain", "cold", "warm"):
    mine = [run for run in runs if run["name"] == name]
    cpu = [1e6 * (float(run["time"][0]) + float(run["time"][1])) / n for run in mine]
    rows[name] = dict(calls=mine[-1]["calls"], hits=mine[-1]["hits"],
                      success=min(run["success"] for run in mine), cost=mine[-1]["cost"],
                      cpu=med(cpu), wall=med(float(run["time"][3]) for run in mine),
                      rss=max(float(run["time"][2]) for run in mine) / 1024)
base = rows["plain"]
labels = {"plain": "no cache", "cold": "--cache, empty", "warm": "--cache, again"}
rounds = len(runs) // 3
print(f"tasks {n} · mock latency 0 ms · {rounds} round(s), medians")
for name, row in rows.items():
    print(f"{labels[name]:<15} sent {row['calls']:>6} · hits {row['hits']:>6} · "
          f"success {row['success']}/{n} · ${row['cost']:.4f} · wall {row['wall']:.2f} s "
          f"({row['wall'] / base['wall']:.2f}×) · CPU {row['cpu']:.0f} µs/task "
          f"({row['cpu'] / base['cpu']:.2f}×) · RSS {row['rss']:.0f} MB")
home = f"{work}/home"
size = sum(os.path.getsize(f"{home}/{f}") for f in os.listdir(home))
print(f"cache files {size / 1e6:.1f} MB for {n} replies ({size / n:.0f} B per reply)")
PY
