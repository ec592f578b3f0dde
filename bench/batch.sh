#!/usr/bin/env bash
# Benchmark of `lllm batch` against `lllm-mock` with a fixed latency.
#
#   bench/batch.sh [N tasks] [C concurrency] [L latency ms]      (defaults: 5000 256 50)
#   NO_BUILD=1 bench/batch.sh 100000 256 0                       (reuse the release build)
#
# Reports tasks/s against the ideal C / L, CPU time per LLM call of the runner
# (user + system of the `lllm` process over the calls it made) and its peak
# RSS. Session records and results are written as in any run ("logging on").
set -euo pipefail
N=${1:-5000}
C=${2:-256}
L=${3:-50}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release
if [ -z "${NO_BUILD:-}" ]; then
    (cd "$root" && cargo build --release --bins --example http_floor --quiet)
fi
work=$(mktemp -d)
trap 'kill "$mock_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

printf 'default: {echo: true}\n' > "$work/mock.yaml"
"$bin/lllm-mock" --script "$work/mock.yaml" --latency-ms "$L" > "$work/banner" &
mock_pid=$!
for _ in $(seq 100); do [ -s "$work/banner" ] && break; sleep 0.05; done
url=$(sed 's/^listening on //' "$work/banner")

cat > "$work/tactic.yaml" <<YAML
tactic_type: bench
global: {model_name: local/bench-model, max_llm_recall: 0}
agent_configs:
  - {name: a, system_prompt: "Answer in one word."}
providers:
  local: {api: openai, base_url: "$url/v1", max_concurrency: $C}
pricing:
  bench-model: {input_per_million: 0.15, output_per_million: 0.60}
YAML
awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++) printf "{\"id\":\"t%d\",\"task\":\"What is %d plus one?\"}\n", i, i }' > "$work/tasks.jsonl"

/usr/bin/time -f '%U %S %M %e' -o "$work/time" \
    "$bin/lllm" batch "$work/tasks.jsonl" --tactic "$work/tactic.yaml" -o "$work/out" -j "$C" -q
read -r user system rss_kb elapsed < "$work/time"
# The floor: the same HTTP client, runtime and concurrency doing only the
# requests (no agent loop, no records), against the same server.
/usr/bin/time -f '%U %S' -o "$work/floor_time" "$root/target/release/examples/http_floor" "$url" "$N" "$C" > /dev/null
read -r floor_user floor_system < "$work/floor_time"
python3 - "$work/out/summary.json" "$N" "$C" "$L" "$user" "$system" "$rss_kb" "$elapsed" "$floor_user" "$floor_system" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
n, c, l = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
user, system, rss_kb, elapsed, floor_user, floor_system = map(float, sys.argv[5:11])
run = summary["this_run"]
calls = max(run["calls"], 1)
print(f"tasks {n} · concurrency {c} · latency {l:g} ms · success {summary['success']}/{summary['total']}")
rate = run["tasks_per_s"]
if l > 0:
    ideal = c / (l / 1000)
    print(f"throughput   {rate:,.0f} tasks/s (ideal C/L = {ideal:,.0f}: {100 * rate / ideal:.1f} %)")
else:
    print(f"throughput   {rate:,.0f} tasks/s · {run['calls_per_s']:,.0f} LLM calls/s")
print(f"runner CPU   {1e6 * (user + system) / calls:.1f} µs per LLM call (user {user:.2f} s + sys {system:.2f} s)")
per_call = 1e6 * (user + system) / calls
floor = 1e6 * (floor_user + floor_system) / n
print(f"HTTP floor   {floor:.1f} µs per request (same client, runtime and C; no agent, no records) · runner/floor {per_call / floor:.1f}×")
print(f"peak RSS     {rss_kb / 1024:.1f} MB · wall {elapsed:.2f} s (process) / {run['wall_time_s']:.2f} s (run)")
PY
