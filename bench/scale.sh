#!/usr/bin/env bash
# Scale benchmark (issue 17). For each N (default 100000 300000 1000000):
# `lllm batch` over N single-turn tasks of a few hundred bytes (with quotes
# and newlines) against `lllm-mock` at latency 0 with `-j $J` (256), and
# reports the peak RSS, the wall time, the CPU per task and the bytes each
# task leaves in sessions.jsonl and results.jsonl; each N runs twice, with
# plain records and with `--compress` (sessions.jsonl.zst), and a line gives
# the compressed run's bytes and CPU per task as ratios of the plain one's
# (FORMS=plain or FORMS=compressed runs one). Then one realistic
# single-turn task (a 2 KB task, a 1 KB reply, a short system prompt):
# the bytes of its sessions.jsonl line against its payload (task + reply).
#
#   bench/scale.sh [N ...]
#
# The session store is on, as by default, in a fresh directory (LLLM_HOME);
# ARGS adds flags to each `lllm batch` (e.g. ARGS=--no-store). LEVELS=1 also
# shows zstd's own benchmark of levels 1-9 and 19 on the plain records of the
# first N in 1 MiB blocks (the batch writer's frames; needs the `zstd` CLI).
#
# Builds the release binaries first unless NO_BUILD is set (for quick
# iterations: CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${NO_BUILD:-}" ]; then
    (cd "$root" && cargo build --release --bins --quiet)
fi
J=${J:-256}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100000 300000 1000000)
N=0 C=$J L=0 NO_BUILD=1 source "$root/bench/setup.sh"
export LLLM_HOME=$work/home

# A task of 300-400 bytes: prose with quotes and escaped newlines.
tasks() {
    awk -v n="$1" 'BEGIN {
        line = "The \\\"quarterly\\\" report says revenue rose; summarize it.\\n";
        for (i = 0; i < n; i++) {
            text = "";
            for (k = 0; k < 5 + i % 3; k++) text = text line;
            printf "{\"id\":\"task-%07d\",\"task\":\"Item %d: %s\"}\n", i, i, text
        }
    }'
}

forms=(${FORMS:-plain compressed})
printf '%10s %10s %10s %8s %12s %14s %14s\n' tasks form peak_MB wall_s cpu_us/task sessions_B/task results_B/task
for n in "${sizes[@]}"; do
    tasks "$n" > "$work/tasks.jsonl"
    declare -A cpu=() bytes=()
    for form in "${forms[@]}"; do
        out=$work/out-$n-$form
        flag= sessions=$out/sessions.jsonl
        if [ "$form" = compressed ]; then flag=--compress sessions=$out/sessions.jsonl.zst; fi
        /usr/bin/time -f '%M %e %U %S' -o "$work/time" \
            "$bin/lllm" batch "$work/tasks.jsonl" --tactic "$work/tactic.yaml" -o "$out" -j "$J" -q $flag ${ARGS:-} \
            || { echo "lllm batch failed (N=$n, $form)"; cat "$work/time"; exit 1; }
        read -r rss wall user system < "$work/time"
        done_count=$(grep -c '"state":"success"' "$out/results.jsonl" || true)
        [ "$done_count" -eq "$n" ] || { echo "only $done_count of $n tasks succeeded"; exit 1; }
        cpu[$form]=$(awk -v user="$user" -v sys="$system" -v n="$n" 'BEGIN { print (user + sys) * 1e6 / n }')
        bytes[$form]=$(stat -c %s "$sessions")
        awk -v n="$n" -v form="$form" -v rss="$rss" -v wall="$wall" -v cpu="${cpu[$form]}" \
            -v sessions="${bytes[$form]}" -v results="$(stat -c %s "$out/results.jsonl")" \
            'BEGIN { printf "%10d %10s %10.1f %8.2f %12.1f %14.0f %14.0f\n", n, form, rss / 1024, wall,
                     cpu, sessions / n, results / n }'
        if [ -n "${LEVELS:-}" ] && [ "$form" = plain ] && [ "$n" = "${sizes[0]}" ]; then
            echo "zstd levels on these records, 1 MiB blocks (zstd -b):"
            zstd -q -b1 -e9 -B1MiB "$sessions" 2>&1 | tr '\r' '\n' | grep -E '^ ?[0-9]+#' || true
            zstd -q -b19 -B1MiB "$sessions" 2>&1 | tr '\r' '\n' | grep -E '^ ?[0-9]+#' || true
        fi
        rm -rf "$out" "$LLLM_HOME"
    done
    if [ -n "${cpu[plain]:-}" ] && [ -n "${cpu[compressed]:-}" ]; then
        awk -v n="$n" -v pb="${bytes[plain]}" -v cb="${bytes[compressed]}" -v pc="${cpu[plain]}" -v cc="${cpu[compressed]}" \
            'BEGIN { printf "%10d compressed/plain: sessions bytes %.3fx (%.1f:1), cpu per task %.3fx\n", n, cb / pb, pb / cb, cc / pc }'
    fi
done

# One realistic single-turn task: its record against its payload.
reply=$(python3 -c 'print(("The report, in short: revenue rose 4% on \"steady\" demand.\n" * 20)[:1024], end="")')
task=$(python3 -c 'print(("Summarize the \"quarterly\" report below.\nRevenue rose 4% while costs fell.\n" * 30)[:2048], end="")')
python3 -c 'import json, sys; print("default: {text: %s}" % json.dumps(sys.argv[1]))' "$reply" > "$work/reply.yaml"
"$bin/lllm-mock" --script "$work/reply.yaml" --latency-ms 0 > "$work/banner2" &
reply_mock=$!
trap 'kill "$mock_pid" "$reply_mock" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -s "$work/banner2" ] && break; sleep 0.05; done
reply_url=$(sed 's/^listening on //' "$work/banner2")
sed "s|$url|$reply_url|" "$work/tactic.yaml" > "$work/reply-tactic.yaml"
python3 -c 'import json, sys; print(json.dumps({"id": "t1", "task": sys.argv[1]}))' "$task" > "$work/one.jsonl"
"$bin/lllm" batch "$work/one.jsonl" --tactic "$work/reply-tactic.yaml" -o "$work/one" -q
record=$(stat -c %s "$work/one/sessions.jsonl")
payload=$(( ${#task} + ${#reply} ))
awk -v record="$record" -v payload="$payload" \
    'BEGIN { printf "record of a 2 KB task with a 1 KB reply: %d bytes for a %d-byte payload: %.2fx\n", record, payload, record / payload }'
