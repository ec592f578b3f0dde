//! `lllm batch` against a provider quota kept by `lllm-mock` (`--rpm`,
//! `--tpm`): with no limits configured lllm learns the quota from the
//! rate-limit headers and paces itself before the wall; with the quota
//! configured it sends nothing the server refuses. Asserts counts (tasks,
//! requests, 429s in the mock's log), never timing.

mod common;

use common::{MockServer, Test};

const TASKS: usize = 240;
/// The quota: 200 requests a minute, so the batch outruns the minute's
/// bucket by 40 requests, which the refill (10 every 3 s) has to bring.
const RPM: &str = "200";
/// Each task costs about 9 prompt tokens (the system prompt and the task,
/// at four characters a token) and its max_tokens 16, ~25 in all: the token
/// window binds a little before the request window.
const TPM: &str = "4800";

fn tactic(wire: &str, base_url: &str, limits: &str) -> String {
    format!(
        r#"tactic_type: quota
global: {{model_name: quota/m, max_llm_recall: 20, model_args: {{max_tokens: 16}}}}
agent_configs:
  - {{name: a, system_prompt: "Answer tersely."}}
providers:
  quota: {{api: {wire}, base_url: "{base_url}", api_key_env: QUOTA_KEY, retry_base_ms: 200, retry_cap_ms: 30000{limits}}}
"#
    )
}

fn tasks() -> String {
    (0..TASKS)
        .map(|i| format!("{{\"id\": \"t{i}\", \"task\": \"question {i:03}\"}}\n"))
        .collect()
}

/// Runs the batch and returns (tasks successful, requests the mock served, 429s).
fn batch(wire: &str, limits: &str) -> (usize, usize, usize) {
    let test = Test::new().env("QUOTA_KEY", "sk-quota");
    let mock = MockServer::start_with(
        test.dir.path(),
        "default: {echo: true}\n",
        &["--rpm", RPM, "--tpm", TPM],
    );
    let base_url = match wire {
        "anthropic" => mock.url.clone(),
        _ => mock.base_url(),
    };
    let test = test
        .file("tactic.yaml", &tactic(wire, &base_url, limits))
        .file("tasks.jsonl", &tasks());
    test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "tactic.yaml",
        "-o",
        "out",
        "-j",
        "32",
        "-q",
        "--no-store",
    ])
    .expect_code(0);
    let summary = test.read_json("out/summary.json");
    let requests = mock.requests();
    let status = |code: u64| {
        requests
            .iter()
            .filter(|line| line["status"] == code)
            .count()
    };
    (
        summary["success"].as_u64().unwrap_or(0) as usize,
        status(200),
        status(429),
    )
}

#[test]
fn with_no_limits_configured_lllm_learns_the_quota_from_the_headers() {
    let (success, served, refused) = batch("openai", "");
    assert_eq!((success, served), (TASKS, TASKS));
    // The first replies teach the quota before the bucket runs out; a
    // handful of 429s at most, never one per task past the minute's bucket.
    assert!(refused <= 4, "{refused} requests answered 429");
}

#[test]
fn with_the_quota_configured_no_request_is_refused() {
    let limits = format!(", rpm: {RPM}, tpm: {TPM}");
    let (success, served, refused) = batch("openai", &limits);
    assert_eq!((success, served, refused), (TASKS, TASKS, 0));
}

#[test]
fn the_anthropic_wire_is_paced_by_its_headers_too() {
    let (success, served, refused) = batch("anthropic", "");
    assert_eq!((success, served), (TASKS, TASKS));
    assert!(refused <= 4, "{refused} requests answered 429");
    let limits = format!(", rpm: {RPM}, tpm: {TPM}");
    assert_eq!(batch("anthropic", &limits), (TASKS, TASKS, 0));
}
