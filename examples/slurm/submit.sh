#!/usr/bin/env bash
# Submits a sharded `lllm batch` as a Slurm job array, then `lllm merge` as a
# job that starts once every element has ended well (`afterok`).
#
#   TASKS=tasks.jsonl TACTIC=tactic.yaml OUT=out SHARDS=8 examples/slurm/submit.sh
#
# Each element writes OUT/shard-<index>; the merge writes OUT/merged.
# Re-running one element (say index 2, after a node failure or a time limit):
#   sbatch --array=2 --export=ALL,TASKS=…,TACTIC=…,OUT=…,SHARDS=8 examples/slurm/batch.sbatch
#   sbatch --dependency=afterok:<its job id> --export=ALL,OUT=…,SHARDS=8 examples/slurm/merge.sbatch
# The element passes `--shard 3/8` and `--resume` itself, so only the tasks
# shard 3 has not finished run again.
set -euo pipefail

: "${TASKS:?set TASKS to the task file (JSONL)}"
: "${TACTIC:?set TACTIC to the tactic YAML}"
: "${OUT:=out}"
: "${SHARDS:=8}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export TASKS TACTIC OUT SHARDS

array_job=$(sbatch --parsable --array="0-$((SHARDS - 1))" --export=ALL "$here/batch.sbatch")
array_job=${array_job%%;*}   # `--parsable` prints `id` or `id;cluster`
merge_job=$(sbatch --parsable --dependency="afterok:$array_job" --export=ALL "$here/merge.sbatch")
echo "batch: job array $array_job ($SHARDS elements); merge: job ${merge_job%%;*}"
