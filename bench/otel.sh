#!/usr/bin/env bash
# What OpenTelemetry export costs a batch (docs/benchmarks.md, "Telemetry"):
# `lllm batch` against `lllm-mock` at concurrency C, in alternating rounds
# with export off, on (to a local OTLP receiver that answers every POST at
# once) and on towards a collector that is down (a closed port), all in one
# run. Reports CPU per task of the `lllm` process (user + system over its
# tasks: the exporter's thread included) and each ratio to "off".
#
#   bench/otel.sh [N tasks] [C concurrency] [L latency ms]   (defaults: 20000 256 50)
#   NO_BUILD=1 BIN=target/debug bench/otel.sh 5000 256 50     (a debug build, as built)
#   ROUNDS=5 bench/otel.sh …                                  (rounds; default 3)
#   PAYLOAD=realistic TURNS=3 bench/otel.sh …                 (as bench/batch.sh)
#   IR=3000 NO_BUILD=1 bench/otel.sh …                        (and instructions: needs valgrind)
#
# With IR set, the first IR tasks also run once in each mode under callgrind,
# which counts the user-space instructions of every thread of the process:
# a measure the machine's load does not move (the machine's noise is ±10 %
# a round; docs/benchmarks.md, "Telemetry", has what each step took out).
set -euo pipefail
N=${1:-20000}
C=${2:-256}
L=${3:-50}
source "$(dirname "$0")/setup.sh"

# The receiver: OTLP/HTTP's answer to every POST, the body read and counted.
cat > "$work/receiver.py" <<'PY'
import http.server, sys, threading
class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    received = 0
    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        self.rfile.read(length)
        Receiver.received += length
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
PY
python3 "$work/receiver.py" > "$work/receiver_url" &
receiver_pid=$!
trap 'kill "$mock_pid" "$receiver_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -s "$work/receiver_url" ] && break; sleep 0.05; done
receiver=$(cat "$work/receiver_url")
dead=http://127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# The collector each mode exports to: none, the receiver, the closed port.
endpoint_of() {
    case "$1" in
        off) echo ;;
        on) echo "$receiver" ;;
        dead) echo "$dead" ;;
    esac
}

: > "$work/runs"
for round in $(seq "${ROUNDS:-3}"); do
    for mode in off on dead; do
        rm -rf "$work/out" "$LLLM_HOME"
        endpoint=$(endpoint_of "$mode")
        env ${endpoint:+OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint} /usr/bin/time -f '%U %S %M' -o "$work/time" \
            "$bin/lllm" batch "$work/tasks.jsonl" --tactic "$work/tactic.yaml" -o "$work/out" -j "$C" -q 2> "$work/stderr" || true
        python3 - "$mode" "$work/out/summary.json" "$(cat "$work/time")" "$work/stderr" >> "$work/runs" <<'PY'
import json, sys
mode, summary, time = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3].split()
print(json.dumps({"mode": mode, "cpu": float(time[0]) + float(time[1]), "rss_kb": int(time[2]),
                  "tasks": summary["total"], "success": summary["success"]}))
PY
    done
done
python3 - "$work/runs" "$N" "$C" "$L" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
n, c, l = sys.argv[2:5]
per_task = {mode: [1e6 * run["cpu"] / run["tasks"] for run in runs if run["mode"] == mode] for mode in ("off", "on", "dead")}
med = statistics.median
print(f"tasks {n} · concurrency {c} · latency {l} ms · {len(per_task['off'])} round(s) of each, alternating")
for mode in ("off", "on", "dead"):
    these = [run for run in runs if run["mode"] == mode]
    ratios = [a / b for a, b in zip(per_task[mode], per_task["off"])]
    print(f"  {mode:<4}  CPU per task {med(per_task[mode]):7.0f} µs (best {min(per_task[mode]):.0f})  "
          f"ratio to off {med(ratios):.3f} (per round {', '.join(f'{r:.3f}' for r in ratios)})  "
          f"peak RSS {max(run['rss_kb'] for run in these) / 1024:.0f} MB  "
          f"success {min(run['success'] for run in these)}/{these[0]['tasks']}")
PY

if [ -n "${IR:-}" ]; then
    command -v valgrind > /dev/null || { echo "bench/otel.sh: IR needs valgrind (apt-get install valgrind)" >&2; exit 2; }
    head -n "$IR" "$work/tasks.jsonl" > "$work/ir.jsonl"
    for mode in off on dead; do
        rm -rf "$work/out" "$LLLM_HOME"
        endpoint=$(endpoint_of "$mode")
        env ${endpoint:+OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint} valgrind --tool=callgrind --callgrind-out-file="$work/$mode.out" \
            "$bin/lllm" batch "$work/ir.jsonl" --tactic "$work/tactic.yaml" -o "$work/out" -j "$C" -q 2> "$work/$mode.err" || true
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/$mode.err" > "$work/$mode.ir"
    done
    python3 - "$work" "$IR" <<'PY'
import sys
work, n = sys.argv[1], int(sys.argv[2])
off, on, dead = (int(open(f"{work}/{mode}.ir").read()) / n for mode in ("off", "on", "dead"))
print(f"instructions (callgrind, {n} tasks each): off {off:,.0f} per task · "
      f"on {on:,.0f} ({100 * (on / off - 1):+.1f} %) · dead {dead:,.0f} ({100 * (dead / off - 1):+.1f} %)")
PY
fi
