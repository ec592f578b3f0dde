#!/usr/bin/env bash
# Benchmark of `lllm batch` against `lllm-mock` with a fixed latency.
#
#   bench/batch.sh [N tasks] [C concurrency] [L latency ms]      (defaults: 20000 256 50)
#   NO_BUILD=1 bench/batch.sh 100000 256 0                       (reuse the release build)
#   ROUNDS=5 bench/batch.sh …                                     (rounds; default 3)
#   PAYLOAD=realistic bench/batch.sh …     (1-4 KB tasks, 0.5-2 KB replies; default tiny)
#   PAYLOAD=realistic TURNS=3 bench/batch.sh …   (a tool loop: two tool calls, then the answer)
#   BIN=/path/to/release NO_BUILD=1 bench/batch.sh …   (other binaries, e.g. a build to compare)
#
# Reports tasks/s against the ideal C / L, CPU time per LLM call of the runner
# (user + system of the `lllm` process over the calls it made) and its peak
# RSS, beside an HTTP floor measured in the same rounds. Session records and
# results are written as in any run ("logging on"); the last round's records
# are weighed against their payload (system prompt + task + reply).
set -euo pipefail
N=${1:-20000}
C=${2:-256}
L=${3:-50}
source "$(dirname "$0")/setup.sh"

# ROUNDS runs of each, alternating, so both see the same moments of a shared
# machine; the report gives the median and the best round.
: > "$work/runs"
: > "$work/floors"
for round in $(seq "${ROUNDS:-3}"); do
    rm -rf "$work/out" "$LLLM_HOME"
    /usr/bin/time -f '%U %S %M %e' -o "$work/time" \
        "$bin/lllm" batch "$work/tasks.jsonl" --tactic "$work/tactic.yaml" -o "$work/out" -j "$C" -q ${LLLM_BENCH_FLAGS:-}
    python3 - "$work/out/summary.json" "$(cat "$work/time")" >> "$work/runs" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
run = summary["this_run"]
print(json.dumps({"time": sys.argv[2].split(), "calls": run["calls"], "tasks_per_s": run["tasks_per_s"],
                  "calls_per_s": run["calls_per_s"], "wall": run["wall_time_s"],
                  "success": summary["success"], "total": summary["total"]}))
PY
    # The floor: the same HTTP client, runtime and concurrency doing only the
    # requests (no agent loop, no records), against the same server.
    # It sends the same bytes: system prompt, task, tool rounds and replies.
    /usr/bin/time -f '%U %S' -o "$work/floor_time" "${floor[@]}" > /dev/null
    cat "$work/floor_time" >> "$work/floors"
done
python3 - "$work/runs" "$work/floors" "$N" "$C" "$L" "$payload" "$turns" "$work/out" "$work/tasks.jsonl" "$work/system.txt" <<'PY'
import json, os, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
floors = [list(map(float, line.split())) for line in open(sys.argv[2])]
n, c, l = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
payload, turns = sys.argv[6], int(sys.argv[7])
def cpu(run):
    user, system = float(run["time"][0]), float(run["time"][1])
    return 1e6 * (user + system) / max(run["calls"], 1)
per_call = [cpu(run) for run in runs]
floor = [1e6 * (user + system) / (n * turns) for user, system in floors]
ratios = [a / b for a, b in zip(per_call, floor)]
own = [a - b for a, b in zip(per_call, floor)]
med = statistics.median
print(f"tasks {n} · payload {payload} · {turns} request(s) per task · concurrency {c} · latency {l:g} ms · {len(runs)} round(s) · "
      f"success {min(run['success'] for run in runs)}/{runs[0]['total']} in every round")
rates = [run["tasks_per_s"] for run in runs]
if l > 0:
    ideal = c / (l / 1000)
    print(f"throughput   median {med(rates):,.0f} tasks/s (ideal C/L = {ideal:,.0f}: "
          f"{100 * med(rates) / ideal:.1f} %; best round {100 * max(rates) / ideal:.1f} %)")
else:
    calls = [run["calls_per_s"] for run in runs]
    print(f"throughput   median {med(calls):,.0f} LLM calls/s (best {max(calls):,.0f})")
print(f"runner CPU   median {med(per_call):.1f} µs per LLM call (best {min(per_call):.1f}; "
      f"user + sys of the lllm process / calls)")
print(f"HTTP floor   median {med(floor):.1f} µs per request (best {min(floor):.1f}; same client, "
      f"runtime and C; no agent, no records) · runner/floor median {med(ratios):.1f}×")
print(f"runner's own median {med(own):.1f} µs per call above the floor (agent loop, records, output, pre-flight)")
rss = max(float(run["time"][2]) for run in runs) / 1024
print(f"peak RSS     {rss:.1f} MB (largest round) · wall median {med([run['wall'] for run in runs]):.2f} s")

# The last round's records against what they carry: the system prompt, the
# task and the final reply of each task, in UTF-8 bytes.
out, tasks_file, system = sys.argv[8], sys.argv[9], sys.argv[10]
for name in ("sessions.jsonl", "sessions.jsonl.zst"):
    if os.path.exists(f"{out}/{name}"):
        records = os.path.getsize(f"{out}/{name}")
        carried = n * os.path.getsize(system)
        carried += sum(len(json.loads(line)["task"].encode()) for line in open(tasks_file, encoding="utf-8"))
        for line in open(f"{out}/results.jsonl", encoding="utf-8"):
            delivery = json.loads(line).get("delivery")
            text = delivery if isinstance(delivery, str) else json.dumps(delivery, ensure_ascii=False)
            carried += len(text.encode())
        print(f"records      {records / n:,.0f} bytes per task ({name}): {records / carried:.2f}× the payload "
              f"(system prompt + task + reply: {carried / n:,.0f} bytes per task)")
PY
