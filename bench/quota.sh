#!/usr/bin/env bash
# Benchmark of `lllm batch` against a provider quota: `lllm-mock` keeps a
# requests- and tokens-per-minute quota (token buckets, as OpenAI and
# Anthropic describe theirs) and answers 429 beyond it. One N-task batch per
# wire, twice: with no limits configured (lllm learns the quota from the
# rate-limit headers) and with the quota configured (`rpm`, `tpm`).
#
#   bench/quota.sh [N tasks]                  (default 20000; the quota is scaled to N)
#   NO_BUILD=1 bench/quota.sh 2000            (reuse the release build; a quick run)
#   BIN=DIR NO_BUILD=1 bench/quota.sh …      (the binaries in DIR)
#   WIRES="openai" bench/quota.sh             (default: "openai anthropic")
#
# The quota: rpm = N / 2 and a tpm that binds first (28 tokens a minute per
# request allowed, each request counting ~31: its prompt at 4 characters a
# token and its max_tokens 20), so the batch needs ~73 s of quota time
# whatever N. Reports per run the throughput against the quota's ideal (the
# time the quota needs to admit N requests: its initial minute's bucket, then
# its refill rate; measured from the mock's log, first request to the last one
# admitted) and the share of requests the mock answered 429.
set -euo pipefail
N=${1:-20000}
C=${C:-64}
L=${L:-20}
RPM=$((N / 2))
TPM=$((RPM * 28))
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BIN:-$root/target/release}
if [ -z "${NO_BUILD:-}" ]; then
    (cd "$root" && cargo build --release --bins --quiet)
fi
work=$(mktemp -d)
mock_pid=
trap 'kill "$mock_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
export ANTHROPIC_API_KEY=bench-key OPENAI_API_KEY=bench-key LLLM_HOME="$work/home"

printf 'default: {echo: true}\n' > "$work/mock.yaml"
awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++) printf "{\"id\":\"t%d\",\"task\":\"What is %d plus one?\"}\n", i, i }' > "$work/tasks.jsonl"

# A fresh server (fresh buckets) per run.
start_mock() {
    kill "$mock_pid" 2>/dev/null || true
    : > "$work/banner"
    rm -f "$work/log.jsonl"
    "$bin/lllm-mock" --script "$work/mock.yaml" --latency-ms "$L" --rpm "$RPM" --tpm "$TPM" \
        --log "$work/log.jsonl" > "$work/banner" &
    mock_pid=$!
    for _ in $(seq 100); do [ -s "$work/banner" ] && break; sleep 0.05; done
    url=$(sed 's/^listening on //' "$work/banner")
}

run() {
    local wire=$1 limits=$2 base_url provider
    start_mock
    case $wire in
        openai) base_url="$url/v1" ;;
        anthropic) base_url="$url" ;;
    esac
    case $limits in
        configured) provider="{api: $wire, base_url: \"$base_url\", api_key_env: OPENAI_API_KEY, max_concurrency: $C, rpm: $RPM, tpm: $TPM}" ;;
        none) provider="{api: $wire, base_url: \"$base_url\", api_key_env: OPENAI_API_KEY, max_concurrency: $C}" ;;
    esac
    cat > "$work/tactic.yaml" <<YAML
tactic_type: bench
global: {model_name: quota/bench-model, max_llm_recall: 8, model_args: {max_tokens: 20}}
agent_configs:
  - {name: a, system_prompt: "Answer in one word."}
providers:
  quota: $provider
pricing:
  bench-model: {input_per_million: 0.15, output_per_million: 0.60}
YAML
    rm -rf "$work/out"
    "$bin/lllm" batch "$work/tasks.jsonl" --tactic "$work/tactic.yaml" -o "$work/out" -j "$C" -q --no-store || true
    kill "$mock_pid" 2>/dev/null || true
    wait "$mock_pid" 2>/dev/null || true
    mock_pid=
    python3 - "$work/log.jsonl" "$work/out/summary.json" "$wire" "$limits" "$RPM" "$TPM" <<'PY'
import json, math, sys
from datetime import datetime
log_path, summary_path, wire, limits = sys.argv[1:5]
rpm, tpm = int(sys.argv[5]), int(sys.argv[6])
lines = [json.loads(line) for line in open(log_path)]
summary = json.load(open(summary_path))

def text(content):
    if isinstance(content, str):
        return content
    return "\n".join(part if isinstance(part, str) else part.get("text", "") for part in content or [])

def cost(body):
    # As the mock counts it: the prompt's characters / 4, rounded up, at
    # least 1, plus max_tokens.
    chars = sum(len(text(message.get("content")).encode()) for message in body.get("messages", []))
    system = body.get("system")
    if system:
        chars += len(text(system).encode())
    return max(1, math.ceil(chars / 4)) + body.get("max_tokens", body.get("max_completion_tokens", 0))

when = lambda line: datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).timestamp()
admitted = [line for line in lines if line["status"] == 200]
refused = sum(1 for line in lines if line["status"] == 429)
tokens = sum(cost(line["body"]) for line in admitted)
# The quota admits its minute's bucket at once, then refills at limit / 60 a second.
ideal = max((len(admitted) - rpm) / (rpm / 60), (tokens - tpm) / (tpm / 60), 0)
measured = when(admitted[-1]) - when(lines[0])
print(f"{wire:9} limits {limits:10}  success {summary['success']}/{summary['total']}  "
      f"quota time {measured:6.1f} s (ideal {ideal:5.1f} s): {100 * ideal / measured:5.1f} % of the quota's throughput  "
      f"429s {refused}/{len(lines)} = {100 * refused / len(lines):.2f} %")
PY
}

echo "tasks $N · concurrency $C · mock latency $L ms · quota per key: rpm $RPM, tpm $TPM (tokens bind)"
for wire in ${WIRES:-openai anthropic}; do
    run "$wire" none
    run "$wire" configured
done
