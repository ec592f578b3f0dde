#!/usr/bin/env bash
# Benchmark of `lllm serve` against `lllm-mock`, beside upstream's service
# (lllm-core 0.2.1's `lllm serve`, FastAPI under uvicorn) running the
# equivalent tactic (tests/python/upstream_tactic.py) on the same mock, all
# in one run:
#
#   bench/serve.sh                                  (release build, then every measurement)
#   NO_BUILD=1 bench/serve.sh                       (reuse the release build)
#   BIN=target/debug NO_BUILD=1 bench/serve.sh      (other binaries; the table says which)
#   LEVELS="1 64 1000" ROUNDS=10 SEGMENTS=5 HOLD=1000 THROUGHPUT_C=64 bench/serve.sh   (the defaults)
#   OUT=FILE bench/serve.sh                         (the table's file; default target/bench-serve.md)
#   LLLM_BENCH_FLAGS=--no-record bench/serve.sh     (extra `lllm serve` flags)
#   PARTS="latency memory throughput" bench/serve.sh   (the default: all three; the table shows those run)
#   BASE=DIR PARTS=throughput bench/serve.sh        (DIR/lllm too, side by side in the throughput part: a change's cost)
#   THROUGHPUT_ROUNDS=3 bench/serve.sh              (the throughput part's rounds)
#   CONTROL=0 bench/serve.sh                        (no control turn: see 1.)
#   IR=2000 NO_BUILD=1 bench/serve.sh               (and instructions a call: needs valgrind)
#
# 1. Added latency. At each level C of concurrent clients, bench/serve_load.rs
#    (C clients, each sending its next request when its last answer ended)
#    measures p50 and p99 from send to last byte of: the mock called directly
#    (the chat request lllm sends, unstreamed and streamed), `lllm serve`'s
#    /run and its /stream (to the closing `event: result`). Added = served -
#    direct, at the same C, the same mock and the same mock latency. The
#    mock's latency grows with C (max(10, C) ms) so every level asks the same
#    ~1,000 calls/s of the server at most: a level measures what C requests in
#    flight cost, not a queue in front of a saturated CPU. Each level runs
#    twice: with the clients' first requests spread evenly over the mock's
#    latency (serve_load --spread), so requests arrive as independent users'
#    do, about one a millisecond (the target's measure); then in waves, every
#    client sending in the same millisecond, a burst of C to drain (shown
#    beside it: what a thundering herd costs). A level's C * ROUNDS requests
#    (300 at least) of each kind are sent in SEGMENTS turns, the four kinds
#    taking turns (direct, /run, direct stream, /stream, then again), and
#    each kind's p50 and p99 are of its latencies from every turn: on a
#    shared machine the tail at 1,000 clients is a few stalls of a few
#    milliseconds, bunched in time (serve_load --dump shows them), and a kind
#    measured in one stretch met them or did not by luck. A fifth kind, the
#    control, takes its turn after /stream: the direct request again, whose
#    "added" latency against the first direct turns is the measure's own
#    noise (an A/A comparison: nothing is added, so what shows is the
#    machine), the floor below which an added p99 cannot be told apart.
# 2. Memory per request in flight: a fresh `lllm serve`, warmed, its RSS idle;
#    then HOLD requests held open by a mock reply that takes 10 s, RSS sampled
#    every 100 ms; (peak - idle) / HOLD, for /run and for /stream.
# 3. Throughput: THROUGHPUT_C clients against a mock that answers at once,
#    `lllm serve`'s /run and upstream's /run alternating for 3 rounds; the
#    ratio of the medians, and the mock alone as the ceiling. With BASE, a
#    second `lllm serve` of another build (BASE/lllm, the same tactic and
#    flags, a store of its own) and this one are then loaded at once, each
#    by half the clients, for THROUGHPUT_ROUNDS rounds; the table compares
#    their CPU per call: what a change costs, under the same load.
#
# 4. With IR=N: instructions a call, which the machine's load does not move
#    (its latency and CPU figures spread by ±10 % and more from run to run).
#    A fresh `lllm serve --no-store` under callgrind per route, warmed by 300
#    calls at 64 clients, then counted over N more (callgrind_control -z,
#    then -d): every thread's user-space instructions but the index's, whose
#    cost a row follows how many rows a transaction holds, and so the
#    timing of the run. Run it on the `profiling` build to see where they go
#    (callgrind_annotate); the release build's symbols are stripped.
#
# Needs python3 (the table, and scripts/python-env for upstream's venv) and
# /proc (RSS). Everything listens on 127.0.0.1 and is stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/target/release}
levels=${LEVELS:-1 64 1000}
rounds=${ROUNDS:-10}
segments=${SEGMENTS:-5}
[[ $segments =~ ^[1-9][0-9]{0,2}$ ]] || { echo "serve.sh: SEGMENTS must be a number from 1 to 999, not '$segments'" >&2; exit 2; }
control=${CONTROL:-1}
[[ $control =~ ^[01]$ ]] || { echo "serve.sh: CONTROL must be 0 or 1, not '$control'" >&2; exit 2; }
hold=${HOLD:-1000}
throughput_c=${THROUGHPUT_C:-64}
base=${BASE:-}
out=${OUT:-$root/target/bench-serve.md}
parts=" ${PARTS:-latency memory throughput} "
if [ -z "${NO_BUILD:-}" ]; then
    (cd "$root" && cargo build --release --bins --example serve_load --quiet)
fi
case "$bin" in /*) ;; *) bin=$root/$bin ;; esac
load=$bin/examples/serve_load
python=$("$root/scripts/python-env")
# 1,000 clients hold 2,000 sockets in this process tree and more in the servers.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((4 * hold + 4096)) ]; then
    echo "serve.sh: open files limited to $(ulimit -n); raise it (ulimit -n $((4 * hold + 4096)))" >&2
    exit 1
fi

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
export LLLM_HOME=$work/store LLLM_BENCH_KEY=sk-bench-0123456789abcdef0123456789abcdef

# Starts a server whose first stdout line is `listening on URL`; sets `url`
# and `pid` (the server's). Usage: start NAME COMMAND…
start() {
    local name=$1; shift
    "$@" > "$work/$name.banner" 2> "$work/$name.err" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 600); do
        [ -s "$work/$name.banner" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$work/$name.err" >&2; exit 1; }
        sleep 0.05
    done
    url=$(head -1 "$work/$name.banner" | sed -n 's/^listening on //p')
    [ -n "$url" ] || { echo "serve.sh: $name did not start" >&2; cat "$work/$name.err" >&2; exit 1; }
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# The mock: a level's latency is a tag in the question ([L64]: 64 ms), a held
# request's is 10 s, an untagged one is answered at once.
question="What is a hash map?"
answer="A hash map maps keys to values."
{
    echo "rules:"
    echo "  - when: {contains: \"[hold]\"}"
    echo "    reply: {text: \"$answer\", delay_ms: 10000}"
    for c in $levels; do
        echo "  - when: {contains: \"[L$c]\"}"
        echo "    reply: {text: \"$answer\", delay_ms: $(( c > 10 ? c : 10 ))}"
    done
    echo "default: {text: \"$answer\"}"
} > "$work/mock.yaml"
start mock "$bin/lllm-mock" --script "$work/mock.yaml"
mock=$url mock_pid=$pid

# The equivalent of upstream_tactic.py's `answer`: one agent, one call, the
# same system prompt; the question is the task.
cat > "$work/answer.yaml" <<YAML
tactic_type: answer
description: Answers a question in one sentence with one model call.
global: {model_name: local/bench-model, max_llm_recall: 0}
agent_configs:
  - {name: a, system_prompt: "Answer the question in one sentence."}
providers:
  local: {api: openai, base_url: "$mock/v1", api_key_env: LLLM_BENCH_KEY, max_concurrency: 100000}
YAML
# Limits raised above every level, so none answers a 429.
serve_flags=(--port 0 --concurrency $((hold > 1000 ? hold * 2 : 2000)) ${LLLM_BENCH_FLAGS:-})
start lllm "$bin/lllm" serve "$work/answer.yaml" "${serve_flags[@]}"
lllm=$url lllm_pid=$pid
if [ -n "$base" ] && [[ $parts == *" throughput "* ]]; then
    case "$base" in /*) ;; *) base=$root/$base ;; esac
    # A store of its own: two servers sharing one SQLite index would pay
    # for each other's writes.
    start base env LLLM_HOME="$work/base-store" "$base/lllm" serve "$work/answer.yaml" "${serve_flags[@]}"
    base_url=$url base_pid=$pid
fi
start upstream env -C "$root/tests/python" OPENAI_BASE_URL="$mock/v1" OPENAI_API_KEY="$LLLM_BENCH_KEY" \
    "$python" upstream_tactic.py serve --port 0
upstream=$url upstream_pid=$pid

# Bodies: the chat request lllm sends (the baseline), lllm's and upstream's.
bodies() {  # bodies TAG: writes $work/{direct,direct_stream,lllm,upstream}.json
    python3 - "$work" "$question $1" <<'PY'
import json, sys
work, question = sys.argv[1], sys.argv[2]
chat = {"model": "bench-model", "messages": [
    {"role": "system", "content": "Answer the question in one sentence."},
    {"role": "user", "content": question}]}
json.dump(chat, open(f"{work}/direct.json", "w"))
json.dump(dict(chat, stream=True), open(f"{work}/direct_stream.json", "w"))
json.dump({"input": question}, open(f"{work}/lllm.json", "w"))
json.dump({"input": {"question": question}}, open(f"{work}/upstream.json", "w"))
PY
}

: > "$work/results.jsonl"
# CPU time (user + system) a process has used, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
measure() {  # measure KIND C N URL BODY EXPECT PID [LOAD FLAGS…]: one line of results, PID's CPU per call
    local kind=$1 c=$2 n=$3 target=$4 body=$5 expect=$6 server=$7
    shift 7
    local line before after
    before=$(cpu_ticks "$server")
    line=$("$load" "$target" "$c" "$n" "$work/$body" --expect "$expect" "$@")
    after=$(cpu_ticks "$server")
    # The warm-up's C calls are in the CPU time too.
    local cpu_us=$(( (after - before) * 1000000 / ticks / (n + c) ))
    echo "{\"kind\": \"$kind\", \"c\": $c, \"cpu_us\": $cpu_us, \"result\": $line}" >> "$work/results.jsonl"
    echo "  $kind c=$c: $line" >&2
}

[[ $parts == *" latency "* ]] || levels=
echo "serve.sh: added latency" >&2
for c in $levels; do
    bodies "[L$c]"
    n=$(( c * rounds > 300 ? c * rounds : 300 ))
    per=$(( (n + segments - 1) / segments ))
    # Arrivals spread evenly over the mock's latency (serve_load --spread),
    # then, where there is more than one client, in waves. The four kinds
    # take turns, SEGMENTS times, each time with its share of the requests;
    # each kind's percentiles are of all its latencies together.
    for arrivals in even waves; do
        [ "$arrivals" = waves ] && [ "$c" = 1 ] && continue
        spread=(--spread $(( c > 10 ? c : 10 )))
        [ "$arrivals" = waves ] && spread=()
        for segment in $(seq "$segments"); do
            dump() { echo --dump "$work/latencies.$1_$arrivals.$c.$segment"; }
            measure "direct_$arrivals" "$c" "$per" "$mock/v1/chat/completions" direct.json "$answer" "$mock_pid" "${spread[@]}" $(dump direct)
            measure "run_$arrivals" "$c" "$per" "$lllm/run" lllm.json "$answer" "$lllm_pid" "${spread[@]}" $(dump run)
            measure "direct_stream_$arrivals" "$c" "$per" "$mock/v1/chat/completions" direct_stream.json "[DONE]" "$mock_pid" "${spread[@]}" $(dump direct_stream)
            measure "stream_$arrivals" "$c" "$per" "$lllm/stream" lllm.json "event: result" "$lllm_pid" "${spread[@]}" $(dump stream)
            [ "$control" = 0 ] || measure "control_$arrivals" "$c" "$per" "$mock/v1/chat/completions" direct.json "$answer" "$mock_pid" "${spread[@]}" $(dump control)
        done
    done
done

echo "serve.sh: memory per request in flight" >&2
routes="run stream"
[[ $parts == *" memory "* ]] || routes=
for route in $routes; do
    # A fresh server per route: a heap grown by the other route's held
    # requests would hide this one's.
    start "lllm_memory_$route" "$bin/lllm" serve "$work/answer.yaml" "${serve_flags[@]}"
    memory=$url memory_pid=$pid
    bodies ""
    "$load" "$memory/run" 64 640 "$work/lllm.json" --expect "$answer" > /dev/null
    "$load" "$memory/stream" 64 640 "$work/lllm.json" --expect "event: result" > /dev/null
    bodies "[hold]"
    sleep 1
    idle=$(rss_kb "$memory_pid")
    "$load" "$memory/$route" "$hold" "$hold" "$work/lllm.json" --no-warmup \
        --expect "$answer" > "$work/hold.json" &
    holder=$!
    peak=$idle
    while kill -0 "$holder" 2>/dev/null; do
        now=$(rss_kb "$memory_pid"); [ "$now" -gt "$peak" ] && peak=$now
        sleep 0.1
    done
    wait "$holder"
    echo "{\"kind\": \"memory_$route\", \"idle_kb\": $idle, \"peak_kb\": $peak, \"held\": $hold, \"result\": $(cat "$work/hold.json")}" >> "$work/results.jsonl"
    echo "  $route: idle $idle KB, peak $peak KB with $hold held" >&2
    kill "$memory_pid"
done

echo "serve.sh: throughput" >&2
bodies ""
tn=$(( throughput_c * 30 ))
throughput_rounds=$(seq "${THROUGHPUT_ROUNDS:-3}")
[[ $parts == *" throughput "* ]] || throughput_rounds=
for _ in $throughput_rounds; do
    measure throughput_lllm "$throughput_c" "$tn" "$lllm/run" lllm.json "$answer" "$lllm_pid"
    measure throughput_upstream "$throughput_c" $(( throughput_c * 10 )) "$upstream/run" upstream.json "$answer" "$upstream_pid"
done
# With BASE: both builds at once, each loaded by its own THROUGHPUT_C / 2
# clients, so that both see the same machine. Measured one after the other
# on a busy machine, the second of two servers of the same binary used
# 10-15 % more CPU a call than the first, which hid any change.
for _ in ${base:+$throughput_rounds}; do
    half=$(( throughput_c / 2 > 0 ? throughput_c / 2 : 1 ))
    ours_before=$(cpu_ticks "$lllm_pid") base_before=$(cpu_ticks "$base_pid")
    "$load" "$lllm/run" "$half" "$tn" "$work/lllm.json" --expect "$answer" > "$work/pair_lllm.json" &
    one=$!
    "$load" "$base_url/run" "$half" "$tn" "$work/lllm.json" --expect "$answer" > "$work/pair_base.json" &
    two=$!
    wait "$one"
    wait "$two"
    ours_after=$(cpu_ticks "$lllm_pid") base_after=$(cpu_ticks "$base_pid")
    for side in lllm base; do
        if [ "$side" = lllm ]; then used=$(( ours_after - ours_before )); else used=$(( base_after - base_before )); fi
        echo "{\"kind\": \"pair_$side\", \"c\": $half, \"cpu_us\": $(( used * 1000000 / ticks / (tn + half) )), \"result\": $(cat "$work/pair_$side.json")}" >> "$work/results.jsonl"
    done
    echo "  side by side: $(tail -2 "$work/results.jsonl" | cut -c1-60 | tr '\n' ' ')" >&2
done
[ -z "$throughput_rounds" ] || measure throughput_mock "$throughput_c" "$tn" "$mock/v1/chat/completions" direct.json "$answer" "$mock_pid"

python3 - "$work/results.jsonl" "$bin" "$levels" "$out" "$base" "$work" <<'PY'
import glob, json, math, os, platform, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
binary, levels, out, base = sys.argv[2], [int(c) for c in sys.argv[3].split()], sys.argv[4], sys.argv[5]
work = sys.argv[6]
build = "release" if "/release" in binary else "debug" if "/debug" in binary else binary
def get(kind, c=None):
    return [row for row in rows if row["kind"] == kind and (c is None or row["c"] == c)]
def pooled(kind, c):
    """p50 and p99 (nearest rank, as serve_load) of every turn's latencies."""
    millis = sorted(float(line.split()[1]) for path in glob.glob(f"{work}/latencies.{kind}.{c}.*")
                    for line in open(path))
    rank = lambda p: millis[min(len(millis), max(1, math.ceil(p * len(millis)))) - 1] if millis else math.nan
    return {"p50_ms": rank(0.50), "p99_ms": rank(0.99),
            "failures": sum(row["result"]["failures"] for row in get(kind, c))}
def cpu(kind, c):
    return round(statistics.mean(row["cpu_us"] for row in get(kind, c)))
lines = []
say = lines.append
load = os.getloadavg()[0]
say(f"`bench/serve.sh` ({build} build, {os.cpu_count()} cores, load {load:.1f} at the end, "
    f"Linux {platform.release()})")
say("")
failures = 0
for arrivals, title in (("even", "Arrivals spread evenly over the mock's latency (the target's measure):"),
                        ("waves", "Arrivals in waves (all C clients sending in the same millisecond, a burst to drain):")):
  shown = [c for c in levels if get(f"run_{arrivals}", c)]
  if not shown:
    continue
  say(title)
  say("")
  say("| clients | mock latency | direct p50 / p99 | /run p50 / p99 | added p50 / p99 | "
    "direct stream p50 / p99 | /stream p50 / p99 | added p50 / p99 | server CPU per call /run · /stream "
    "| direct again: added p50 / p99 (the measure's own noise) |")
  say("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  for c in shown:
    r = {k: pooled(f"{k}_{arrivals}", c) for k in ("direct", "run", "direct_stream", "stream")}
    cpus = f"{cpu(f'run_{arrivals}', c):,} · {cpu(f'stream_{arrivals}', c):,} µs"
    failures += sum(x["failures"] for x in r.values())
    def pair(x): return f"{x['p50_ms']:.2f} / {x['p99_ms']:.2f} ms"
    def added(a, b): return f"{a['p50_ms'] - b['p50_ms']:+.2f} / {a['p99_ms'] - b['p99_ms']:+.2f} ms"
    control = pooled(f"control_{arrivals}", c)
    noise = added(control, r["direct"]) if not math.isnan(control["p99_ms"]) else "not run"
    failures += control["failures"]
    say(f"| {c:,} | {max(10, c)} ms | {pair(r['direct'])} | {pair(r['run'])} | {added(r['run'], r['direct'])} "
        f"| {pair(r['direct_stream'])} | {pair(r['stream'])} | {added(r['stream'], r['direct_stream'])} | {cpus} "
        f"| {noise} |")
  say("")
for route in ("run", "stream"):
    if not get(f"memory_{route}"):
        continue
    m = get(f"memory_{route}")[0]
    per = (m["peak_kb"] - m["idle_kb"]) / m["held"]
    failures += m["result"]["failures"]
    say(f"- memory per request in flight (/{route}): {per:.1f} KB "
        f"(RSS {m['idle_kb'] / 1024:.1f} MB idle, {m['peak_kb'] / 1024:.1f} MB with {m['held']:,} held)")
ours = [x["result"]["per_s"] for x in get("throughput_lllm")]
if not ours:
    say(f"- failed requests: {failures}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    open(out, "w").write(text)
    sys.exit(0)
theirs = [x["result"]["per_s"] for x in get("throughput_upstream")]
ceiling = get("throughput_mock")[0]["result"]["per_s"]
failures += sum(x["result"]["failures"] for x in get("throughput_lllm") + get("throughput_upstream"))
med = statistics.median
say(f"- throughput at {get('throughput_lllm')[0]['c']} clients, mock answering at once: "
    f"`lllm serve` {med(ours):,.0f} calls/s, upstream's service {med(theirs):,.1f} calls/s: "
    f"**{med(ours) / med(theirs):.1f}×** (medians of {len(ours)} alternating rounds; "
    f"rounds {', '.join(f'{x:,.0f}' for x in ours)} vs {', '.join(f'{x:,.1f}' for x in theirs)}); "
    f"the mock alone answers {ceiling:,.0f} calls/s")
cpu = lambda kind: med([x["cpu_us"] for x in get(kind)])
say(f"- CPU per call (user + system of the process serving it, warm-ups included): `lllm serve` "
    f"{cpu('throughput_lllm'):,.0f} µs, upstream's service {cpu('throughput_upstream'):,.0f} µs, "
    f"the mock {cpu('throughput_mock'):,.0f} µs")
if get("pair_base"):
    mine, based = get("pair_lllm"), get("pair_base")
    failures += sum(x["result"]["failures"] for x in mine + based)
    ratios = [a["cpu_us"] / b["cpu_us"] for a, b in zip(mine, based)]
    say(f"- against `{base}/lllm`, both served at once ({mine[0]['c']} clients each): CPU per "
        f"call {med([x['cpu_us'] for x in mine]):,.0f} µs against "
        f"{med([x['cpu_us'] for x in based]):,.0f} µs, **{med(ratios):.3f}×** (median of the "
        f"rounds' ratios {', '.join(f'{r:.3f}' for r in ratios)}); throughput "
        f"{med([x['result']['per_s'] for x in mine]):,.0f} against "
        f"{med([x['result']['per_s'] for x in based]):,.0f} calls/s")
say(f"- failed requests: {failures}")
text = "\n".join(lines) + "\n"
print(text, end="")
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
open(out, "w").write(text)
print(f"(written to {out})", file=sys.stderr)
PY

if [ -n "${IR:-}" ]; then
    command -v callgrind_control > /dev/null || { echo "serve.sh: IR needs valgrind (apt-get install valgrind)" >&2; exit 2; }
    echo "serve.sh: instructions a call (callgrind)" >&2
    bodies ""
    ir_line="- instructions a call (callgrind, $IR calls at 64 clients after 300, the index apart):"
    for route in run stream; do
        expect=$answer
        [ "$route" = stream ] && expect="event: result"
        start "ir_$route" valgrind --tool=callgrind --callgrind-out-file="$work/ir_$route.out" \
            "$bin/lllm" serve "$work/answer.yaml" --port 0 --no-store ${LLLM_BENCH_FLAGS:-}
        "$load" "$url/$route" 64 300 "$work/lllm.json" --expect "$expect" > /dev/null
        callgrind_control -z "$pid" > /dev/null 2>&1
        "$load" "$url/$route" 64 "$IR" "$work/lllm.json" --no-warmup --expect "$expect" > /dev/null
        callgrind_control -d "$pid" > /dev/null 2>&1
        kill "$pid"
        wait "$pid" 2> /dev/null || true
        total=$(sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$work/ir_$route.out.1" | head -1)
        ir_line="$ir_line /$route $(python3 -c "print(f'{$total / $IR:,.0f}')")"
        [ "$route" = run ] && ir_line="$ir_line ·"
    done
    echo "$ir_line"
    echo "$ir_line" >> "$out"
fi
