# Sourced by the benchmarks: with N, C and L set, builds the release binaries
# (unless NO_BUILD is set), starts `lllm-mock` with latency L ms and writes
# the bench tactic and N single-turn tasks into a temporary directory.
# Sets `root`, `bin`, `work` (removed on exit), `url` and `mock_pid`.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$root/target/release
if [ -z "${NO_BUILD:-}" ]; then
    (cd "$root" && cargo build --release --bins --example http_floor --quiet)
fi
work=$(mktemp -d)
mock_pid=
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
