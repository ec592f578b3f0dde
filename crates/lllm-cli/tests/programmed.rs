//! Programmed tactics (`lllm::Flow`) through the command line: the
//! `custom_tactic` example (its own code, in-process) runs, records and
//! re-runs identically; the stock binary refuses to re-run it; `lllm run`
//! and `lllm batch` (resume, shards, `--max-cost`) run a flow registered with
//! `lllm_cli::run_with` exactly as they run YAML flows.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lllm::{Ctx, Flow, FlowResult, Registry, Task};
use serde_json::{Value, json};

/// The example itself: `registry()`, `run_builtin`, the flow.
#[allow(dead_code)]
#[path = "../../../examples/custom_tactic.rs"]
mod custom_tactic;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cli(args: &[&str], registry: Registry) -> ExitCode {
    let mut all = vec!["lllm"];
    all.extend_from_slice(args);
    lllm_cli::run_with(all, registry)
}

fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn the_custom_tactic_example_records_a_run_that_reruns_identically() {
    let dir = tempfile::tempdir().unwrap();
    let tactic = root().join("examples/custom_tactic/tactic.yaml");
    let code = custom_tactic::run_builtin(&tactic, lllm::Records::dir(dir.path()), None);
    assert_eq!(code, ExitCode::SUCCESS);
    let written: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let path = written[0].to_str().unwrap();
    let record = lllm::replay::load(&written[0], None).unwrap();
    assert_eq!(record.tactic.body.as_deref(), Some("rust:review_loop"));
    assert!(
        record.delivery.as_deref().unwrap().ends_with(
            "In one sentence: A hash map finds a value fast by hashing its key to a bucket."
        ),
        "{:?}",
        record.delivery
    );
    // Draft, review, revision, review, and the short version in a fork of `draft`.
    let calls: Vec<(&str, &str)> = record
        .agent_calls
        .iter()
        .map(|call| (call.agent.as_str(), call.dialog_alias.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("writer", "draft"),
            ("critic", "review"),
            ("writer", "draft"),
            ("critic", "review"),
            ("writer", "short"),
        ]
    );
    assert_eq!(record.agent_calls[3].metadata["round"], 2);
    let steps: Vec<(&str, usize)> = record
        .steps
        .iter()
        .map(|step| (step.step.as_str(), step.agent_call))
        .collect();
    assert_eq!(steps, [("review 1", 1), ("review 2", 3)]);
    let short = record
        .dialogs
        .iter()
        .find(|dialog| dialog.tree_node.dialog_id == record.agent_calls[4].dialog_id)
        .unwrap();
    assert_eq!(
        short.tree_node.parent_id.as_deref(),
        Some(record.agent_calls[0].dialog_id.as_str())
    );
    assert!(lllm::replay::render(&record).contains("program: rust:review_loop"));

    // The example is a full `lllm`: its `replay --rerun` re-executes the run.
    let rerun = cli(&["replay", path, "--rerun"], custom_tactic::registry());
    assert_eq!(rerun, ExitCode::SUCCESS);
    // A binary without the flow cannot, and says so (exit 2).
    let stock = cli(&["replay", path, "--rerun"], Registry::new());
    assert_eq!(stock, ExitCode::from(2));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let error = runtime
        .block_on(lllm::replay::rerun(&record, &Registry::new()).into_future())
        .unwrap_err();
    assert!(
        error.to_string().starts_with(
            "tactic `review_loop` is a programmed tactic (Rust) that this binary does not register"
        ),
        "{error}"
    );
    assert!(error.to_string().contains("lllm::replay::rerun"), "{error}");
    // The library re-runs it from the record, with the example's registry.
    let rerun = runtime
        .block_on(lllm::replay::rerun(&written[0], &custom_tactic::registry()).into_future())
        .unwrap();
    assert!(rerun.is_identical(), "{:?}", rerun.difference());
    assert_eq!(rerun.replayed, record.invoke_count());
    assert_eq!(rerun.record.delivery, record.delivery);
}

#[test]
fn the_stock_binary_renders_a_programmed_record_and_refuses_to_rerun_it() {
    let dir = tempfile::tempdir().unwrap();
    let tactic = root().join("examples/custom_tactic/tactic.yaml");
    assert_eq!(
        custom_tactic::run_builtin(&tactic, lllm::Records::dir(dir.path()), None),
        ExitCode::SUCCESS
    );
    let path = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let test = common::Test::new();
    let shown = test.run(&["replay", path.to_str().unwrap()]);
    shown.expect_code(0);
    assert!(
        shown.stdout.contains("program: rust:review_loop"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("dialog `short`"), "{}", shown.stdout);
    assert!(
        shown
            .stdout
            .contains("agent call 4 (step `review 2`): `critic`"),
        "{}",
        shown.stdout
    );
    let rerun = test.run(&["replay", path.to_str().unwrap(), "--rerun"]);
    rerun.expect_code(2);
    assert_eq!(
        rerun.stderr,
        "error: tactic `review_loop` is a programmed tactic (Rust) that this binary does not \
         register; re-run the record with a binary whose registry has `.flow(…)` for \
         `review_loop` (`lllm::replay::rerun(record, &registry)`, or \
         `lllm_cli::main_with(registry)`)\n"
    );
}

/// Two agents in turn: the writer answers, the critic checks.
struct TwoStep;

impl Flow for TwoStep {
    const NAME: &'static str = "two_step";
    const AGENTS: &'static [&'static str] = &["writer", "critic"];

    async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
        let [writer, critic] = cx.agents(["writer", "critic"])?;
        writer.open("main")?;
        writer.receive(task.text())?;
        let answer = writer.respond().await?;
        critic.open("main")?;
        critic.receive(format!("check: {}", answer.content))?;
        let check = critic.respond().await?;
        Ok(format!("{} / {}", answer.content, check.content))
    }
}

fn two_step_yaml(extra: &str) -> String {
    format!(
        "tactic_type: two_step\n\
         global: {{model_name: mock/script, model_args: {{max_tokens: 100}}}}\n\
         agent_configs: [{{name: writer}}, {{name: critic}}]\n\
         providers: {{mock: {{script: script.yaml}}}}\n{extra}"
    )
}

/// Every reply costs 100 tokens.
const SCRIPT: &str = "default: {text: ok, usage: {prompt_tokens: 50, completion_tokens: 50}}\n";

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn lllm_run_runs_a_registered_flow_and_load_problems_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "script.yaml", SCRIPT);
    let tactic = write(dir.path(), "t.yaml", &two_step_yaml(""));
    let record = dir.path().join("record.json");
    let registry = || Registry::new().flow(TwoStep);
    let code = cli(
        &[
            "run",
            &tactic,
            "--task",
            "hi",
            "--record",
            record.to_str().unwrap(),
            "-q",
        ],
        registry(),
    );
    assert_eq!(code, ExitCode::SUCCESS);
    let record = lllm::replay::load(&record, None).unwrap();
    assert_eq!(record.delivery.as_deref(), Some("ok / ok"));
    assert_eq!(record.agent_calls.len(), 2);
    assert_eq!(record.tactic.body.as_deref(), Some("rust:two_step"));

    // An agent the flow needs is missing, and the file has a `flow:`: exit 2.
    let broken = write(
        dir.path(),
        "broken.yaml",
        "tactic_type: two_step\nagent_configs: [{name: writer, model_name: mock/echo}]\n\
         flow: [{step: a, agent: writer, text: hi}]\n",
    );
    let code = cli(&["run", &broken, "--task", "hi", "--no-record"], registry());
    assert_eq!(code, ExitCode::from(2));
    let options = lllm::tactic::LoadOptions {
        model: None,
        prices: None,
        model_args: None,
        env: &|_| None,
        dry_run: None,
        warn: &|_| {},
        budget: None,
        registry: &registry(),
        cache: None,
        batch_api: None,
        defaults: None,
    };
    let problems = lllm::tactic::load(Path::new(&broken), &options, None)
        .err()
        .unwrap()
        .problems;
    assert_eq!(problems.len(), 2, "{problems:?}");
}

/// A place, its schema derived through `lllm::JsonSchema`: this crate
/// depends on `lllm` and serde, not on schemars.
#[derive(serde::Deserialize, lllm::JsonSchema)]
struct Place {
    /// Its name.
    name: String,
}

/// Plan a trip.
#[lllm::tool]
async fn plan(from: Place, to: Place, days: u32) -> String {
    format!("{} to {} in {days} days", from.name, to.name)
}

#[test]
fn lllm_run_calls_a_program_tool_made_from_a_function() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "script.yaml",
        "replies:\n  - tool_calls: [{name: plan, arguments: {from: {name: Oslo}, to: {name: Rome}, days: 3}}]\n  - text: booked\n",
    );
    let tactic = write(
        dir.path(),
        "t.yaml",
        "tactic_type: trip\nproviders: {mock: {script: script.yaml}}\n\
         agent_configs: [{name: agent, model_name: mock/script, tools: [plan]}]\n",
    );
    let record = dir.path().join("record.json");
    let args = [
        "run",
        &tactic,
        "--task",
        "hi",
        "--record",
        record.to_str().unwrap(),
        "-q",
    ];
    let code = cli(&args, Registry::new().tool_impl(plan::tool()));
    assert_eq!(code, ExitCode::SUCCESS);
    let record = serde_json::to_value(lllm::replay::load(&record, None).unwrap()).unwrap();
    assert_eq!(record["delivery"], "booked");
    let call = &record["agent_calls"][0]["interrupts"][0]["calls"][0];
    assert_eq!(call["result"], "Oslo to Rome in 3 days", "{record:#}");
    let spec = lllm::Tool::spec(&plan::tool()).clone();
    assert_eq!(
        spec.parameters["properties"]["to"]["properties"]["name"]["description"],
        "Its name."
    );
}

#[test]
fn lllm_batch_runs_a_flow_in_shards_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "script.yaml", SCRIPT);
    let tactic = write(dir.path(), "t.yaml", &two_step_yaml(""));
    let tasks: String = (0..10)
        .map(|index| {
            json!({"id": format!("t{index}"), "task": format!("task {index}")}).to_string() + "\n"
        })
        .collect();
    let tasks = write(dir.path(), "tasks.jsonl", &tasks);
    let registry = || Registry::new().flow(TwoStep);
    let mut ids = BTreeSet::new();
    for shard in ["1/2", "2/2"] {
        let out = dir.path().join(shard.replace('/', "of"));
        let out = out.to_str().unwrap();
        let args = [
            "batch", &tasks, "--tactic", &tactic, "-o", out, "--shard", shard, "-q",
        ];
        assert_eq!(cli(&args, registry()), ExitCode::SUCCESS);
        let results = json_lines(&Path::new(out).join("results.jsonl"));
        for result in &results {
            assert_eq!(result["state"], "success", "{result}");
            assert_eq!(result["delivery"], "ok / ok");
            assert!(
                ids.insert(result["id"].as_str().unwrap().to_string()),
                "{result}"
            );
        }
        let sessions = json_lines(&Path::new(out).join("sessions.jsonl"));
        assert_eq!(sessions.len(), results.len());
        for session in &sessions {
            assert_eq!(session["tactic"]["body"], "rust:two_step");
            assert_eq!(session["agent_calls"].as_array().unwrap().len(), 2);
        }
        // Resumed, nothing is left to run.
        let mut resumed = args.to_vec();
        resumed.push("--resume");
        assert_eq!(cli(&resumed, registry()), ExitCode::SUCCESS);
        assert_eq!(
            json_lines(&Path::new(out).join("results.jsonl")).len(),
            results.len()
        );
    }
    assert_eq!(ids.len(), 10, "the shards cover every task once: {ids:?}");
}

#[test]
fn lllm_batch_keeps_a_flows_calls_inside_max_cost() {
    // Mock models are free: the flow's agents call `lllm-mock` over HTTP,
    // at $100 per million tokens. Each call (100 tokens) costs $0.01, a task $0.02.
    let dir = tempfile::tempdir().unwrap();
    let server = common::MockServer::start(dir.path(), SCRIPT);
    let tactic = write(
        dir.path(),
        "t.yaml",
        &format!(
            "tactic_type: two_step\n\
             global: {{model_name: local/metered, model_args: {{max_tokens: 100}}}}\n\
             agent_configs: [{{name: writer}}, {{name: critic}}]\n\
             providers: {{local: {{api: openai, base_url: \"{}\"}}}}\n\
             pricing:\n  metered: {{input_per_million: 100.0, output_per_million: 100.0}}\n",
            server.base_url()
        ),
    );
    let tasks: String = (0..10)
        .map(|index| json!({"id": format!("t{index}"), "task": "hi"}).to_string() + "\n")
        .collect();
    let tasks = write(dir.path(), "tasks.jsonl", &tasks);
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let args = [
        "batch",
        &tasks,
        "--tactic",
        &tactic,
        "-o",
        out,
        "-j",
        "2",
        "--max-cost",
        "0.07",
        "-q",
    ];
    assert_eq!(cli(&args, Registry::new().flow(TwoStep)), ExitCode::from(1));
    let results = json_lines(&Path::new(out).join("results.jsonl"));
    assert_eq!(results.len(), 10, "every task has a result");
    let spent: f64 = results
        .iter()
        .map(|result| result["cost"].as_f64().unwrap_or(0.0))
        .sum();
    let succeeded = results
        .iter()
        .filter(|result| result["state"] == "success")
        .count();
    assert!(spent > 0.0 && spent <= 0.07 + 1e-9, "spent {spent}");
    assert!(
        (1..10).contains(&succeeded),
        "{succeeded} succeeded: {results:?}"
    );
    // What the server answered is the bill: within the budget too.
    let answered = server
        .requests()
        .iter()
        .filter(|request| request["status"] == 200)
        .count();
    assert!(
        answered as f64 * 0.01 <= 0.07 + 1e-9,
        "{answered} calls answered"
    );
}

/// Two agents at once: the first one's reply is slower.
struct AtOnce;

impl Flow for AtOnce {
    const NAME: &'static str = "at_once";
    const AGENTS: &'static [&'static str] = &["slow", "fast"];

    async fn call(&self, cx: &mut Ctx, _task: Task) -> FlowResult {
        let [slow, fast] = cx.agents(["slow", "fast"])?;
        slow.open("main")?;
        fast.open("main")?;
        slow.receive("slow question")?;
        fast.receive("fast question")?;
        let (first, second) = tokio::join!(slow.respond(), fast.respond());
        Ok(format!("{} + {}", first?.content, second?.content))
    }
}

#[test]
fn calls_made_at_once_rerun_whatever_order_they_finished_in() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "script.yaml",
        "rules:\n  - when: {contains: slow}\n    reply: {text: slow answer, delay_ms: 300}\n\
         default: {text: fast answer}\n",
    );
    let tactic = write(
        dir.path(),
        "t.yaml",
        "tactic_type: at_once\nglobal: {model_name: mock/script}\n\
         agent_configs: [{name: slow}, {name: fast}]\nproviders: {mock: {script: script.yaml}}\n",
    );
    let record = dir.path().join("record.json");
    let record = record.to_str().unwrap();
    let registry = || Registry::new().flow(AtOnce);
    let code = cli(
        &["run", &tactic, "--task", "go", "--record", record, "-q"],
        registry(),
    );
    assert_eq!(code, ExitCode::SUCCESS);
    let recorded = lllm::replay::load(Path::new(record), None).unwrap();
    assert_eq!(
        recorded.delivery.as_deref(),
        Some("slow answer + fast answer")
    );
    assert_eq!(recorded.agent_calls.len(), 2);
    let code = cli(&["replay", record, "--rerun"], registry());
    assert_eq!(code, ExitCode::SUCCESS);
}
