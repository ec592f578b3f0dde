//! `lllm run`: one task through a tactic. The delivery goes to stdout, a
//! one-line summary to stderr, the session record to disk.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::RunArgs;
use crate::error::{Error, Outcome, Result};
use crate::provider::dry_run::{Captured, DryRun, NOT_SENT};
use crate::tactic::{RunState, SessionRecord, TaskInput};

pub async fn run(args: RunArgs) -> Result<Outcome> {
    let prices = match &args.prices {
        Some(path) => Some(crate::provider::models::read_price_file(path).map_err(Error::Usage)?),
        None => None,
    };
    if args.show_config {
        let mut config = crate::config::load(&args.tactic)?;
        if let Some(model) = &args.model {
            config.override_model(model);
        }
        if let Some(prices) = prices {
            config.override_prices(prices);
        }
        for warning in &config.warnings {
            crate::report::warn(warning);
        }
        let text = serde_json::to_string_pretty(&config.resolved).unwrap_or_default();
        println!("{text}");
        return Ok(Outcome::Success);
    }
    let task = TaskInput {
        id: None,
        task: Value::String(read_task(&args)?),
        args: parse_vars(&args.vars)?,
        tags: Map::new(),
    };
    let env = |name: &str| std::env::var(name).ok();
    let dry_run = args.dry_run.then(|| std::sync::Arc::new(DryRun::default()));
    // Config, build and this task's check in one pre-flight: every problem
    // of every phase at once, and nothing sent unless there is none.
    let options = crate::tactic::LoadOptions {
        model: args.model.as_deref(),
        prices: prices.as_ref(),
        env: &env,
        dry_run: dry_run.clone(),
        warn: &|warning| crate::report::warn(warning),
    };
    let tactic = crate::tactic::load(&args.tactic, &options, Some(&task))?;
    if let Some(log) = dry_run {
        // MCP servers start so that their tools are in the bodies shown.
        tactic.start().await?;
        let record = tactic.run(task).await;
        tactic.shutdown().await;
        return show_dry_run(&record, &log.captured());
    }
    // Servers start after every check passed and before the first request.
    tactic.start().await?;

    let streamed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = args.stream.then(|| {
        let seen = streamed.clone();
        let sink: crate::agent::SharedTextSink = std::sync::Arc::new(move |text: &str| {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
            seen.lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push_str(text);
        });
        sink
    });
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let record = tactic.run_until(task, sink, interrupt).await;
    // No MCP server outlives the run, however it ended.
    tactic.shutdown().await;
    let interrupted = interrupted.load(std::sync::atomic::Ordering::SeqCst);
    let record_path = if args.no_record {
        None
    } else {
        let path = args.record.clone().unwrap_or_else(|| {
            PathBuf::from("sessions").join(format!("{}.json", record.session_id))
        });
        record.write(&path).map_err(|source| Error::Write {
            path: path.display().to_string(),
            source,
        })?;
        Some(path)
    };
    let streamed = streamed
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    let mut stdout = std::io::stdout().lock();
    if !streamed.is_empty() {
        let _ = writeln!(stdout);
    }
    // The delivery, unless it is exactly what was streamed already.
    if let Some(delivery) = record
        .delivery
        .as_ref()
        .filter(|delivery| **delivery != streamed)
    {
        if !streamed.is_empty() {
            let _ = writeln!(stdout);
        }
        let _ = writeln!(stdout, "{delivery}");
    }
    let _ = stdout.flush();
    drop(stdout);
    if !args.quiet || record.state == RunState::Failure {
        eprintln!("{}", summary(&record, record_path.as_deref()));
    }
    Ok(match record.state {
        _ if interrupted => Outcome::Interrupted,
        RunState::Success => Outcome::Success,
        RunState::Failure => Outcome::Failed,
    })
}

/// Prints each captured request, named by the agent and dialog that made it.
fn show_dry_run(record: &SessionRecord, captured: &[Captured]) -> Result<Outcome> {
    let mut stdout = std::io::stdout().lock();
    for (index, request) in captured.iter().enumerate() {
        let place = who_sent(record, &request.sha256)
            .map(|(agent, dialog, model)| {
                format!(" · agent `{agent}` · dialog `{dialog}` · model {model}")
            })
            .unwrap_or_default();
        let body = serde_json::to_string_pretty(&request.wire.body).unwrap_or_default();
        let _ = writeln!(
            stdout,
            "── request {} of {}{place}\nPOST {}\n{body}\n",
            index + 1,
            captured.len(),
            request.wire.url
        );
    }
    let _ = stdout.flush();
    match record.error.as_deref() {
        Some(error) if !error.contains(NOT_SENT) => {
            eprintln!("lllm: dry run: the run failed before sending: {error}");
            Ok(Outcome::Failed)
        }
        _ => {
            eprintln!(
                "lllm: dry run: {} request(s) shown, nothing sent; later turns need model replies",
                captured.len()
            );
            Ok(Outcome::Success)
        }
    }
}

/// The agent, dialog and model of the invoke with this request digest.
fn who_sent(record: &SessionRecord, sha256: &str) -> Option<(String, String, String)> {
    for call in &record.agent_calls {
        for invoke in &call.invokes {
            if invoke.request.sha256 == sha256 {
                let model = call.model.clone();
                return Some((call.agent.clone(), call.dialog_alias.clone(), model));
            }
        }
    }
    record
        .sub_tactic_sessions
        .iter()
        .find_map(|sub| who_sent(sub, sha256))
}

fn read_task(args: &RunArgs) -> Result<String> {
    match (&args.task, &args.task_file) {
        (Some(text), _) if text == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|error| {
                    Error::Usage(format!("cannot read the task from stdin: {error}"))
                })?;
            Ok(text)
        }
        (Some(text), _) => Ok(text.clone()),
        (None, Some(path)) => std::fs::read_to_string(path).map_err(|error| {
            Error::Usage(format!(
                "cannot read task file `{}`: {error}",
                path.display()
            ))
        }),
        (None, None) => Err(Error::Usage(
            "no task given; pass `--task TEXT`, `--task-file PATH` or `--task -` for stdin".into(),
        )),
    }
}

/// `key=value` pairs into template arguments (values stay strings).
fn parse_vars(vars: &[String]) -> Result<Map<String, Value>> {
    let mut args = Map::new();
    for var in vars {
        let Some((key, value)) = var.split_once('=') else {
            return Err(Error::Usage(format!("`--var {var}` is not `key=value`")));
        };
        let key = key.trim();
        if key.is_empty() || matches!(key, "task" | "args") {
            return Err(Error::Usage(format!(
                "`--var {var}`: the key must be a name other than `task` and `args`"
            )));
        }
        args.insert(key.to_string(), Value::String(value.to_string()));
    }
    Ok(args)
}

/// `lllm: success in 1.2 s · 2 calls · 120 tokens (100 in, 20 out) · $0.000030 · record sessions/….json`
fn summary(record: &SessionRecord, path: Option<&Path>) -> String {
    let state = match (&record.state, &record.error) {
        (RunState::Success, _) => "success".to_string(),
        (RunState::Failure, Some(error)) => format!("failure: {error}"),
        (RunState::Failure, None) => "failure".to_string(),
    };
    let cost = &record.cost;
    let dollars = match (cost.cost, cost.cost_known) {
        (Some(dollars), true) => format!("${dollars:.6}"),
        (Some(dollars), false) => format!("${dollars:.6} + unknown"),
        (None, _) => "cost unknown".to_string(),
    };
    let mut line = format!(
        "lllm: {state} in {:.1} s · {} call(s) · {} tokens ({} in, {} out) · {dollars}",
        record.latency_ms as f64 / 1000.0,
        record.invoke_count(),
        cost.total_tokens,
        cost.prompt_tokens,
        cost.completion_tokens,
    );
    if let Some(path) = path {
        line.push_str(&format!(" · record {}", path.display()));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vars_parse_and_reject_bad_pairs() {
        let args = parse_vars(&["topic=owls".into(), "n=3=4".into()]).unwrap();
        assert_eq!(args["topic"], "owls");
        assert_eq!(args["n"], "3=4");
        assert!(parse_vars(&["novalue".into()]).is_err());
        assert!(parse_vars(&["task=x".into()]).is_err());
    }
}
