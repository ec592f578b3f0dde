#!/usr/bin/env bash
# Benchmark of scoring (issue 32): one N-task batch two ways against
# `lllm-mock` (no latency, so the runner's own cost shows), in the same
# rounds: without assertions, and with deterministic assertions on every
# task (the tactic's `asserts`: equals via each line's `expected`,
# contains, icontains, not-contains, starts-with, regex, not-is-json,
# cost, latency, calls).
#
#   bench/evals.sh [N tasks] [C concurrency]        (defaults: 100000 256)
#   NO_BUILD=1 bench/evals.sh …                    (reuse the release build)
#   ROUNDS=5 bench/evals.sh …                      (rounds; default 3)
#   BIN=target/debug NO_BUILD=1 bench/evals.sh …   (another build)
#
# Reports the CPU time per task of the `lllm` process each way (user +
# system, medians over the rounds) and their ratio: what scoring adds.
#
#   IR=4000 NO_BUILD=1 bench/evals.sh …            (and instructions: needs valgrind)
#
# CPU time on a shared machine moves by ±15 % from one round to the next;
# with IR set, the first IR tasks also run once each way under callgrind,
# and the ratio of user-space instructions per task (which does not move
# with the machine's load) is reported beside it.
set -euo pipefail
N=${1:-100000}
C=${2:-256}
L=0
source "$(dirname "$0")/setup.sh"

# The scored run: the same tactic with assertions, the same tasks with an
# `expected` each (the tiny payload's mock echoes the task).
cp "$work/tactic.yaml" "$work/scored.yaml"
cat >> "$work/scored.yaml" <<'YAML'
asserts:
  - {type: contains, value: plus}
  - {type: icontains, value: PLUS}
  - {type: not-contains, value: "as an AI"}
  - {type: starts-with, value: ""}
  - {type: regex, value: "[0-9]+"}
  - {type: not-is-json}
  - {type: cost, threshold: 1}
  - {type: latency, threshold: 600000}
  - {type: calls, threshold: 4}
YAML
python3 - "$work/tasks.jsonl" "$work/scored.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as tasks, open(sys.argv[2], "w") as scored:
    for line in tasks:
        task = json.loads(line)
        task["expected"] = task["task"] if isinstance(task["task"], str) else ""
        scored.write(json.dumps(task) + "\n")
PY

run() {
    local name=$1 tasks=$2 tactic=$3
    # One output at a time on disk (a 100,000-task run writes hundreds of MB).
    rm -rf "$work"/out-*
    /usr/bin/time -f '%U %S %M %e' -o "$work/time" \
        "$bin/lllm" batch "$tasks" --tactic "$tactic" -o "$work/out-$name" -j "$C" -q --no-store
    python3 - "$work/out-$name/summary.json" "$(cat "$work/time")" "$name" >> "$work/runs" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
scores = summary.get("scores") or {}
print(json.dumps({"name": sys.argv[3], "time": sys.argv[2].split(), "success": summary["success"],
                  "scored": scores.get("scored", 0), "passed": scores.get("passed", 0)}))
PY
}
: > "$work/runs"
for round in $(seq "${ROUNDS:-3}"); do
    run plain "$work/tasks.jsonl" "$work/tactic.yaml"
    run scored "$work/scored.jsonl" "$work/scored.yaml"
done
python3 - "$work" "$N" <<'PY'
import json, statistics, sys
work, n = sys.argv[1], int(sys.argv[2])
runs = [json.loads(line) for line in open(f"{work}/runs")]
med = statistics.median
rows = {}
for name in ("plain", "scored"):
    mine = [run for run in runs if run["name"] == name]
    cpu = [1e6 * (float(run["time"][0]) + float(run["time"][1])) / n for run in mine]
    rows[name] = dict(cpu=med(cpu), all_cpu=cpu, success=min(run["success"] for run in mine),
                      scored=mine[-1]["scored"], passed=mine[-1]["passed"],
                      wall=med(float(run["time"][3]) for run in mine),
                      rss=max(float(run["time"][2]) for run in mine) / 1024)
base = rows["plain"]
print(f"tasks {n} · mock latency 0 ms · {len(runs) // 2} round(s), medians")
for name, row in rows.items():
    print(f"{name:<7} success {row['success']}/{n} · scored {row['scored']} (passed {row['passed']}) · "
          f"wall {row['wall']:.2f} s · CPU {row['cpu']:.1f} µs/task ({row['cpu'] / base['cpu']:.3f}×) · "
          f"rounds {', '.join(f'{c:.1f}' for c in row['all_cpu'])} · RSS {row['rss']:.0f} MB")
print(f"scoring adds {100 * (rows['scored']['cpu'] / base['cpu'] - 1):+.1f} % CPU per task (target ≤ +10 %)")
PY

if [ -n "${IR:-}" ]; then
    command -v valgrind > /dev/null || { echo "bench/evals.sh: IR needs valgrind (apt-get install valgrind)" >&2; exit 2; }
    for name in plain scored; do
        case $name in
            plain) tasks=$work/tasks.jsonl tactic=$work/tactic.yaml ;;
            scored) tasks=$work/scored.jsonl tactic=$work/scored.yaml ;;
        esac
        head -n "$IR" "$tasks" > "$work/ir.jsonl"
        rm -rf "$work"/out-*
        valgrind --tool=callgrind --callgrind-out-file="$work/$name.out" \
            "$bin/lllm" batch "$work/ir.jsonl" --tactic "$tactic" -o "$work/out-$name" -j "$C" -q --no-store 2> "$work/$name.err"
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/$name.err" > "$work/$name.ir"
    done
    python3 - "$work" "$IR" <<'PY'
import sys
work, n = sys.argv[1], int(sys.argv[2])
plain, scored = (int(open(f"{work}/{name}.ir").read()) / n for name in ("plain", "scored"))
print(f"instructions (callgrind, {n} tasks each way): plain {plain:,.0f} · scored {scored:,.0f} per task · "
      f"scoring adds {100 * (scored / plain - 1):+.1f} %")
PY
fi
