#!/usr/bin/env bash
# Benchmark of the response cache: one N-task batch three ways against
# `lllm-mock` (no latency, so the runner's own cost shows):
#   without the cache · with `--cache` into an empty cache (every call
#   missed, then kept) · with `--cache` again (every call answered from it).
#
#   bench/cache.sh [N tasks] [C concurrency]         (defaults: 10000 64)
#   NO_BUILD=1 bench/cache.sh …                     (reuse the release build)
#
# Reports, per way, the requests sent and the cache hits (from summary.json),
# the wall time and the CPU time per task of the `lllm` process, and the
# cache file's size; the ratios are against the run without the cache,
# measured in the same invocation.
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
    /usr/bin/time -f '%U %S %M %e' -o "$work/time-$name" \
        "$bin/lllm" batch "$work/tasks.jsonl" --tactic "$work/tactic.yaml" \
        -o "$work/out-$name" -j "$C" -q --no-store "$@"
}
run plain
run cold --cache
run warm --cache
python3 - "$work" "$N" <<'PY'
import json, os, sys
work, n = sys.argv[1], int(sys.argv[2])
rows = {}
for name in ("plain", "cold", "warm"):
    summary = json.load(open(f"{work}/out-{name}/summary.json"))
    user, system, rss, wall = map(float, open(f"{work}/time-{name}").read().split())
    rows[name] = dict(calls=summary["calls"], hits=summary.get("cache_hits", 0),
                      success=summary["success"], cost=summary["cost"],
                      cpu=1e6 * (user + system) / n, wall=wall, rss=rss / 1024)
base = rows["plain"]
labels = {"plain": "no cache", "cold": "--cache, empty", "warm": "--cache, again"}
print(f"tasks {n} · mock latency 0 ms")
for name, row in rows.items():
    print(f"{labels[name]:<15} sent {row['calls']:>6} · hits {row['hits']:>6} · "
          f"success {row['success']}/{n} · ${row['cost']:.4f} · wall {row['wall']:.2f} s "
          f"({row['wall'] / base['wall']:.2f}×) · CPU {row['cpu']:.0f} µs/task "
          f"({row['cpu'] / base['cpu']:.2f}×) · RSS {row['rss']:.0f} MB")
size = sum(os.path.getsize(f"{work}/home/{f}") for f in os.listdir(f"{work}/home"))
print(f"cache files {size / 1e6:.1f} MB for {n} replies ({size / n:.0f} B per reply)")
PY
