#!/usr/bin/env bash
# Builds lllm's fuzz targets with coverage instrumentation on the stable
# toolchain (libFuzzer from the libfuzzer-sys crate, LLVM's sanitizer-coverage
# passes through rustc-sancov.sh; no nightly, no cargo-fuzz) and runs them.
#
#   fuzz/run.sh TARGET SECONDS [LIBFUZZER_FLAG…]   one target for SECONDS
#   fuzz/run.sh all SECONDS                        every target, FUZZ_JOBS (2) at a time
#   fuzz/run.sh build                              only build
#   fuzz/run.sh list                               the targets' names
#
# Seeds (checked in) are in fuzz/seeds/TARGET and the formats' words in
# fuzz/dicts/; what the fuzzer finds grows fuzz/corpus/TARGET (not checked
# in) and is reused by the next run. A crash,
# a hang (-timeout) or a blown memory limit stops the run with a non-zero exit
# and leaves the input in fuzz/artifacts/TARGET/; replay it with
#   target/debug/TARGET fuzz/artifacts/TARGET/crash-…
set -euo pipefail
cd "$(dirname "$0")"

TARGETS=(tactic_yaml prompt_file task_line attachment_spec task_messages chat_reply responses_reply anthropic_reply sse_lines record_file)

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

build() {
  # Debug builds by default: every crate but lllm and the targets is shared
  # with `cargo test`'s build, so CI compiles little more. FUZZ_PROFILE=release
  # optimizes the dependencies too (serde_json, minijinja, the YAML parser):
  # longer to build, faster to run, for long runs.
  local profile=${FUZZ_PROFILE:-dev}
  local directory=${CARGO_TARGET_DIR:-$PWD/../target}
  # rustc-sancov.sh instruments lllm and the targets only. The profile
  # settings give that lllm its own place beside `cargo test`'s, make it
  # faster to build (no debug info: a crash's stack still names the
  # functions) and let libFuzzer see into parsing: from opt-level 2 rustc
  # stops sharing generic code with the (uninstrumented) dependencies, so
  # serde's code for our types is compiled, and instrumented, in lllm
  # (task_line: 1,023 edges against 264 at opt-level 1). Overflow checks and debug
  # assertions stay on.
  local package settings=()
  for package in lllm lllm-fuzz; do
    settings+=(
      --config "profile.$profile.package.$package.opt-level=2"
      --config "profile.$profile.package.$package.debug=false"
      --config "profile.$profile.package.$package.overflow-checks=true"
      --config "profile.$profile.package.$package.debug-assertions=true"
    )
  done
  RUSTC_WRAPPER="$PWD/rustc-sancov.sh" cargo build --locked --package lllm-fuzz --bins \
    --profile "$profile" "${settings[@]}" >&2 || exit # (errexit stops at no `$(build)`)
  if [[ $profile == dev ]]; then
    echo "$directory/debug"
  else
    echo "$directory/$profile"
  fi
}

run() {
  local bin=$1 target=$2 seconds=$3
  shift 3
  mkdir -p "corpus/$target" "artifacts/$target" logs
  echo "fuzz: $target for ${seconds}s" >&2
  # libFuzzer takes one dictionary: the target's parts joined.
  local dictionary="logs/$target.dict"
  case $target in
  tactic_yaml | prompt_file) cat "dicts/$target.dict" dicts/jinja.dict >"$dictionary" ;;
  attachment_spec | task_messages) cat dicts/json.dict "dicts/$target.dict" >"$dictionary" ;;
  *) cat dicts/json.dict >"$dictionary" ;;
  esac
  # The target's temporary files go into a directory of its own: a crash
  # libFuzzer cannot catch (a stack overflow kills the process before its
  # handler runs: a bare "Segmentation fault", no artifact) leaves there the
  # input a target wrote to a file (prompt_file's prompt), kept as the artifact.
  local scratch="$PWD/logs/tmp-$target" status=0
  rm -rf "$scratch" && mkdir -p "$scratch"
  # -timeout: an input that takes this long is a hang (generous: the machine
  # may be busy). -rss_limit_mb also caps any single allocation.
  TMPDIR="$scratch" "$bin/$target" "corpus/$target" "seeds/$target" \
    -max_total_time="$seconds" -timeout=60 -rss_limit_mb=2048 \
    -dict="$dictionary" -artifact_prefix="artifacts/$target/" -print_final_stats=1 "$@" || status=$?
  if ((status != 0)); then
    local left kept
    while IFS= read -r left; do
      kept="artifacts/$target/left-behind-$(date +%s)-$(basename "$left")"
      cp "$left" "$kept"
      echo "fuzz: $target died (exit $status) while running the input kept in fuzz/$kept" >&2
    done < <(find "$scratch" -type f)
  fi
  rm -rf "$scratch"
  return "$status"
}

# Every target for SECONDS each, FUZZ_JOBS (default 2) at a time, each into
# logs/TARGET.log; the log of a target that failed is shown.
run_all() {
  local bin=$1 seconds=$2 jobs=${FUZZ_JOBS:-2} failed=()
  mkdir -p logs
  declare -A pids=()
  for target in "${TARGETS[@]}"; do
    while (($(jobs -rp | wc -l) >= jobs)); do
      wait -n || true
    done
    run "$bin" "$target" "$seconds" >"logs/$target.log" 2>&1 &
    pids[$target]=$!
  done
  for target in "${TARGETS[@]}"; do
    if wait "${pids[$target]}"; then
      echo "fuzz: $target: $(grep -E '^#[0-9]+[[:space:]]+DONE' "logs/$target.log" | tail -1)"
    else
      failed+=("$target")
      echo "fuzz: $target FAILED; the end of fuzz/logs/$target.log:" >&2
      tail -n 60 "logs/$target.log" >&2
    fi
  done
  echo "fuzz: $((${#TARGETS[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
  ((${#failed[@]} == 0))
}

case "${1:-}" in
  list) printf '%s\n' "${TARGETS[@]}" ;;
  build) build >/dev/null ;;
  all)
    [[ $# -eq 2 ]] || usage
    bin=$(build)
    run_all "$bin" "$2"
    ;;
  "" | -h | --help) usage ;;
  *)
    [[ $# -ge 2 ]] || usage
    [[ " ${TARGETS[*]} " == *" $1 "* ]] || {
      echo "error: unknown target \`$1\` (fuzz/run.sh list)" >&2
      exit 2
    }
    bin=$(build)
    run "$bin" "$@"
    ;;
esac
