# Sourced by the benchmarks: with N, C and L set, builds the release binaries
# (unless NO_BUILD is set), writes the bench tactic, N tasks and the mock's
# script into a temporary directory and starts `lllm-mock` with latency L ms.
# PAYLOAD (`tiny`, the default: 20-byte tasks, echo replies; or `realistic`:
# 1-4 KB tasks, 0.5-2 KB replies, escapes and non-ASCII) and TURNS (1, the
# default; or 3: two `current_time` tool calls, then the answer) choose the
# payload, written by bench/payloads.py.
# Sets `root`, `bin`, `work` (removed on exit), `url`, `mock_pid`, `turns`
# (requests per task) and `floor` (the HTTP floor's command line).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BIN:-$root/target/release}
if [ -z "${NO_BUILD:-}" ]; then
    (cd "$root" && cargo build --release --bins --example http_floor --quiet)
fi
work=$(mktemp -d)
mock_pid=
trap 'kill "$mock_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

# The session store of each run is its own (fresh each round), not the
# user's: an index grown by earlier runs would make the numbers drift.
export LLLM_HOME=$work/store

payload=${PAYLOAD:-tiny}
turns=${TURNS:-1}
python3 "$root/bench/payloads.py" "$work" "$N" "$payload" "$turns"

"$bin/lllm-mock" --script "$work/mock.yaml" --latency-ms "$L" > "$work/banner" &
mock_pid=$!
for _ in $(seq 100); do [ -s "$work/banner" ] && break; sleep 0.05; done
url=$(sed 's/^listening on //' "$work/banner")

# A key, as every real run has one: replies are scrubbed of it.
export LLLM_BENCH_KEY=sk-bench-0123456789abcdef0123456789abcdef
tools= agent_tools=
if [ "$turns" = 3 ]; then tools='builtin_tools: {current_time: null}'; agent_tools=', tools: [current_time]'; fi
cat > "$work/tactic.yaml" <<YAML
tactic_type: bench
global: {model_name: local/bench-model, max_llm_recall: 0, context_manager: {type: default, max_tokens: 128000}}
agent_configs:
  - {name: a, system_prompt: $(python3 -c 'import json, sys; print(json.dumps(open(sys.argv[1], encoding="utf-8").read(), ensure_ascii=False))' "$work/system.txt")$agent_tools}
providers:
  local: {api: openai, base_url: "$url/v1", api_key_env: LLLM_BENCH_KEY, max_concurrency: $C}
pricing:
  bench-model: {input_per_million: 0.15, output_per_million: 0.60}
$tools
YAML
floor=("$bin/examples/http_floor" "$url" "$N" "$C" "$work/tasks.jsonl" "$work/system.txt" "$turns")
