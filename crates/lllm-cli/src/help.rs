//! The texts after `--help`: examples, exit codes and where the docs are, for
//! the top-level command and the commands people type most (`run`, `batch`,
//! `replay`). The exit codes are those of `lllm::error::Outcome` and
//! `lllm::error::Error::exit_code`; docs/run.md and docs/formats.md hold the
//! same table.
//!
//! `-h` shows the short text (`after_help`), `--help` and the man pages the
//! long one (`after_long_help`).

/// The exit codes every command shares (each command's own line may add to it).
macro_rules! exit_codes {
    () => {
        "Exit codes:
  0    success: every task succeeded
  1    a run or a task failed (its record says why), or an output could not be written
  2    bad usage, config, prompt or input: nothing was sent
  3    the pass rate of the scored tasks is below --fail-under (lllm batch, lllm eval)
  130  interrupted by Ctrl-C or SIGTERM: what finished is on disk
"
    };
}

/// Where the documentation is, for someone who has only the binary.
macro_rules! docs {
    () => {
        "Docs: `lllm man` (or `lllm man --out DIR`: one page per command), `lllm <COMMAND> --help`;
in the source repository README.md (the way in and where each topic lives), a page per
topic in docs/ (docs/run.md, docs/tactics.md, docs/providers.md, docs/batch.md,
docs/sessions.md, …) and docs/formats.md (tactic YAML, prompt files, task and result
lines, the session record, exit codes)
Settings: flag > LLLM_* variable > ~/.config/lllm/config.yaml (`lllm config path`) > default;
keys from the environment, then ./.env (or --env-file), then `lllm keys`
"
    };
}

pub const TOP: &str = concat!(exit_codes!(), "\n", docs!());

pub const TOP_LONG: &str = concat!(
    "Examples:
  lllm run tactics/summarize.yaml --task-file examples/article.txt
  lllm run t.yaml \"What is 2 + 2?\" -m openai/gpt-4o-mini
  echo \"What is 2 + 2?\" | lllm run t.yaml --json
  lllm batch tasks.jsonl --tactic t.yaml -o out -j 32 --resume
  lllm replay ~/.local/share/lllm/sessions/<session id>.json --rerun
  lllm keys set openai                 keys in a 0600 file; the environment and ./.env win
  lllm config show                     the config file's settings and where each comes from
  lllm completions bash > ~/.local/share/bash-completion/completions/lllm
  lllm man --out ~/.local/share/man/man1

",
    exit_codes!(),
    "\n",
    docs!()
);

pub const RUN: &str = concat!(
    "Examples:
  lllm run t.yaml \"What is 2 + 2?\"                 the task as an argument
  echo \"What is 2 + 2?\" | lllm run t.yaml          a piped stdin is the task
  lllm run t.yaml --task-file a.txt -m anthropic/claude-haiku-4-5
  lllm run t.yaml --task hi --var tone=formal --attach chart.png
  lllm run t.yaml hi -O max_tokens=256 -O critic.temperature=0   model arguments over the tactic's
  lllm run t.yaml --task hi --dry-run               the exact requests, nothing sent
  lllm run t.yaml --task hi --json                  one JSON object: delivery, state, cost…
  lllm run -t t.yaml \"What is 2 + 2?\"              the tactic as batch and replay take it
  lllm -v run t.yaml hi                             a line per request and reply (-vv: bodies)

",
    exit_codes!(),
    "\nDocs: docs/run.md, docs/tactics.md; the session record in docs/formats.md
"
);

pub const BATCH: &str = concat!(
    "Examples:
  lllm batch tasks.jsonl --tactic t.yaml -o out -j 32
  lllm batch tasks.jsonl --tactic t.yaml -o out --resume --max-cost 5
  lllm batch tasks.jsonl --tactic t.yaml -o out --retry-errors
  lllm batch tasks.jsonl --tactic t.yaml -o out -O max_tokens=256
  lllm batch tasks.jsonl --tactic t.yaml -o out/shard-1 --shard 1/8
  lllm batch tasks.jsonl --tactic t.yaml -o out --via batch-api
  lllm batch tasks.jsonl -t t.yaml -o out -n 10 -v  the first 10 tasks, each request traced
  lllm batch tasks.jsonl -t t.yaml -o out --fail-under 0.9   a CI gate on the asserts' pass rate

",
    "Exit codes:
  0    every task of the run succeeded
  1    a task failed or was skipped, or the output could not be written
  2    bad usage, config or task lines, or DIR is held by another run or holds
       another shard: nothing was sent
  3    the pass rate of the scored tasks is below --fail-under
  130  interrupted by Ctrl-C or SIGTERM: what finished is on disk (--resume goes on)
",
    "\nDocs: docs/batch.md; task and result lines in docs/formats.md
"
);

pub const EVAL: &str = concat!(
    "Examples:
  lllm eval out                                   the tasks' own assertions, scored again
  lllm eval out --asserts strict.yaml             other assertions for every task
  lllm eval out --asserts strict.yaml --fail-under 0.9

",
    "Exit codes:
  0    scored (whatever the pass rate, without --fail-under)
  1    the results could not be rewritten
  2    bad usage, assertions or tactic: nothing was sent or written
  3    the pass rate is below --fail-under
",
    "\nDocs: docs/evals.md; result lines and summary.json in docs/formats.md
"
);

pub const REPLAY: &str = concat!(
    "Examples:
  lllm replay sessions/<session id>.json            the run: dialog tree, calls, messages
  lllm replay out/sessions.jsonl --id TASK_ID       one session of a batch
  lllm replay RECORD --json                         the normalized record
  lllm replay RECORD --rerun --tactic edited.yaml   re-execute offline, stop where it differs
  lllm replay RECORD --rerun -t edited.yaml -m openai/gpt-4o-mini

",
    "Exit codes:
  0    shown, or every request of --rerun matched the record
  1    --rerun diverged from the record (where and how is printed)
  2    bad usage, or a record or tactic that cannot be read
",
    "\nDocs: docs/sessions.md, \"lllm replay\"; the session record in docs/formats.md
"
);

pub const INSPECT: &str = concat!(
    "Examples:
  lllm inspect tactics/triage.yaml            the contract, agents, models, tools and prompts
  lllm inspect tactics/triage.yaml --json     one JSON object: upstream's TacticInfo keys first
  lllm inspect t.yaml --json | jq .input_schema

Nothing is sent and no key is needed; a tactic with problems is refused as `lllm run` refuses it.

",
    exit_codes!(),
    "\n",
    docs!()
);

pub const SERVE: &str = concat!(
    "Examples:
  lllm serve tactics/summarize.yaml                    http://127.0.0.1:8000, one tactic
  lllm serve a.yaml b.yaml --port 0                    a free port, named in the first stdout line
  lllm serve t.yaml --host 0.0.0.0 --token-file token  beyond this machine: a token is required
  curl -s localhost:8000/run -d '{\"input\": \"Tides turn twice a day.\"}'

",
    "Exit codes:
  0    stopped by Ctrl-C or SIGTERM, the runs in flight finished and recorded
  2    bad usage, a tactic that cannot be served, or an address that cannot be bound: nothing was served
",
    "\nDocs: docs/serve.md (routes, bodies, answers, errors, limits, the OpenAI-compatible face)
"
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code `Outcome` and `Error` can end a command with is in the
    /// top-level table, so a new code cannot go undocumented.
    #[test]
    fn the_top_level_table_names_every_exit_code() {
        use lllm::error::{Error, Outcome};
        let codes = [
            Outcome::Success.exit_code(),
            Outcome::Failed.exit_code(),
            Outcome::Interrupted.exit_code(),
            Outcome::BelowFailUnder.exit_code(),
            Error::Usage(String::new()).exit_code(),
        ];
        for code in codes {
            let line = format!("\n  {code:<4} ");
            assert!(TOP.contains(&line), "{code} missing from:\n{TOP}");
            assert!(TOP_LONG.contains(&line), "{code} missing from:\n{TOP_LONG}");
        }
    }
}
