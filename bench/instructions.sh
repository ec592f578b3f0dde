#!/usr/bin/env bash
# The CPU cost of `lllm batch` as instructions per LLM call, beside the HTTP
# floor: deterministic where timings on a shared machine are not (they move
# by ±20 % with the host's other tenants; these repeat to within 1 %).
#
#   bench/instructions.sh [N tasks]          (default 3000; needs valgrind)
#   NO_BUILD=1 bench/instructions.sh 3000    (reuse the release build)
#   PAYLOAD=realistic TURNS=3 bench/instructions.sh 1000   (payloads as in bench/batch.sh)
#
# Both run under callgrind against `lllm-mock` with no latency, at
# concurrency 256, writing records and results as any run does; user-space
# instructions only (the kernel's share, TCP and file writes, is not counted).
#
# valgrind cannot run the CPU's SHA instructions, so SHA-256 (the request
# digests, the task file's fingerprint) runs in software under it: about 40 %
# of a realistic run's instructions, against 2 % of its time in a real run.
# With symbols in the binary (BIN=a build with CARGO_PROFILE_RELEASE_STRIP=none)
# the report also gives the runner without that software SHA-256, and the
# passes the floor does not make (pre-flight's parse, the record and result
# line, the session store) with the ratio they alone set.
set -euo pipefail
command -v valgrind > /dev/null || { echo "bench/instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
N=${1:-3000}
C=256
L=0
source "$(dirname "$0")/setup.sh"

instructions() {
    grep -E '^(summary|totals):' "$1" | head -1 | awk '{print $2}'
}
valgrind --tool=callgrind --callgrind-out-file="$work/runner.out" \
    "$bin/lllm" batch "$work/tasks.jsonl" --tactic "$work/tactic.yaml" -o "$work/out" -j "$C" -q ${LLLM_BENCH_FLAGS:-} 2> "$work/runner.err"
valgrind --tool=callgrind --callgrind-out-file="$work/floor.out" \
    "${floor[@]}" > /dev/null 2> "$work/floor.err"
results=$(wc -l < "$work/out/results.jsonl")
[ "$results" -eq "$N" ] || { echo "bench/instructions.sh: $results of $N results" >&2; exit 1; }
runner=$(instructions "$work/runner.out")
floor_instructions=$(instructions "$work/floor.out")
# Self cost of the SHA-256 valgrind runs in software (ring's, or sha2's in
# older builds; empty when the binary has no symbols).
sha=$(callgrind_annotate "$work/runner.out" 2> /dev/null | awk '/(sha2::sha256::soft::compress |sha256_block_data_order)/ && !sha { gsub(",", "", $1); sha = $1 } END { print sha }')
# Inclusive costs by caller, for the passes the floor does not make.
callgrind_annotate --inclusive=yes --tree=caller "$work/runner.out" > "$work/callers.txt" 2> /dev/null || true
python3 - "$runner" "$floor_instructions" "$N" "$turns" "$payload" "$sha" "$work/callers.txt" <<'PY'
import re, sys
runner, floor, tasks, turns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sha = int(sys.argv[6]) if sys.argv[6] else None
n = tasks * turns
print(f"tasks {tasks} · payload {sys.argv[5]} · {turns} request(s) per task · concurrency 256 · latency 0 ms · user-space instructions (callgrind)")
print(f"runner       {runner / n:,.0f} per LLM call (lllm batch: pre-flight, agent loop, HTTP, records, output)")
print(f"HTTP floor   {floor / n:,.0f} per request (same client, runtime and C; no agent, no records)")
print(f"runner/floor {runner / floor:.2f}× · runner's own {(runner - floor) / n:,.0f} per call above the floor")
if sha is None:
    print("(SHA-256 runs in software under valgrind; BIN=an unstripped build shows its share)")
else:
    print(f"without SHA-256 in software (hardware SHA in real runs): runner {(runner - sha) / n:,.0f} per call, "
          f"{(runner - sha) / floor:.2f}× the floor")

    # The caller tree: each block lists a function's callers ("<"), then the
    # function itself ("*") with its inclusive cost.
    def blocks():
        callers = []
        for line in open(sys.argv[7], encoding="utf-8", errors="replace"):
            match = re.match(r"\s*([\d,]+) \([^)]*\)\s+([<*])\s+(.*)", line)
            if not match:
                callers = []
                continue
            cost, kind, name = int(match[1].replace(",", "")), match[2], match[3]
            if kind == "<":
                callers.append((cost, name))
            else:
                yield name, cost, callers
                callers = []

    found = {}
    for name, cost, callers in blocks():
        for key, function in [("parse", "lllm::batch::formats::LineReader::parse "),
                              ("record", "lllm::batch::scheduler::Shared::record "),
                              ("store", "lllm::store::registrar::Registrar::flush ")]:
            if function in name + " " and key not in found:
                run = sum(cost for cost, caller in callers if "run_locked" in caller)
                found[key] = (cost, run)
    if "parse" in found and "record" in found:
        # The floor parses each task line once too: the run's own parse is
        # its counterpart, pre-flight's is the pass the floor does not make.
        # (No store pass with --no-store.)
        preflight = found["parse"][0] - found["parse"][1]
        record, store = found["record"][0], found.get("store", (0, 0))[0]
        passes = preflight + record + store
        rest = runner - sha - floor - passes
        print(f"passes the floor does not make, per call: pre-flight's parse {preflight / n:,.0f} · "
              f"record and result line {record / n:,.0f} · session store {store / n:,.0f}")
        print(f"the floor plus these passes alone: {(floor + passes) / floor:.2f}× "
              f"(the rest of the runner above the floor: {rest / n:,.0f} per call)")
PY
