#!/bin/sh
# The RUSTC_WRAPPER of fuzz/run.sh: compiles lllm and the fuzz targets with
# LLVM's sanitizer-coverage instrumentation (what libFuzzer steers by; the
# flags cargo-fuzz passes with `--sanitizer none`, all stable) and every other
# crate as usual, so those are shared with `cargo test`'s build.
rustc=$1
shift
case " $* " in
*" --crate-name lllm "* | *" --crate-name lllm_fuzz "* | *fuzz_targets/*)
  exec "$rustc" "$@" \
    -Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    --cfg fuzzing
  ;;
esac
exec "$rustc" "$@"
