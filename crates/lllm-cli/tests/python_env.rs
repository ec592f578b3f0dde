//! The Python side of the interop tests: the lookup of the test venv
//! (`common::python`), and the upstream fixture tactic
//! (`tests/python/upstream_tactic.py`) served by upstream's own service
//! against `lllm-mock`, called through upstream's own `RemoteTactic`.
//!
//! Needs the venv `scripts/python-env` makes (or `LLLM_TEST_PYTHON`);
//! without one these skip with a message, unless `LLLM_REQUIRE_PYTHON=1`.

mod common;

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::MockServer;
use common::python::{self, Found, UpstreamServer};
use serde_json::Value;

const SCRIPT: &str = "default: {text: \"A hash map maps keys to values.\"}\n";

/// Upstream's client against upstream's service: the contract, a run, a
/// stream, and a bad input (refused before the model is called).
const CLIENT: &str = r#"
import asyncio, json, sys
from lllm.services.client import RemoteTactic, RemoteTacticError

# A bare `http://host:port` names the tactic "host:port", which upstream's
# client then refuses (a defect lllm's client does not copy): name the route.
remote = RemoteTactic(sys.argv[1] + "/tactics/answer")
info = remote.fetch_info()
out = {"info": info.model_dump(mode="json")}
out["run"] = remote.run({"question": "What is a hash map?"})

async def events():
    return [event.model_dump(mode="json") async for event in remote.aevents({"question": "Streamed?"})]

out["events"] = asyncio.run(events())
try:
    remote.run({"q": "no question"})
    out["bad"] = None
except RemoteTacticError as error:
    out["bad"] = {"status": error.status_code, "type": error.error_type}
print(json.dumps(out))
"#;

#[test]
fn lookup_prefers_the_configured_python_then_the_venv_then_skips_or_fails() {
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("python");
    let other = dir.path().join("other-python");
    std::fs::write(&other, "").unwrap();
    let missing = dir.path().join("missing");

    assert_eq!(
        python::lookup(other.to_str(), false, &venv),
        Found::Python(other.clone())
    );
    // A configured path that names nothing fails even when not required.
    let Found::Fail(why) = python::lookup(Some("/no/such/python"), false, &venv) else {
        panic!("a missing LLLM_TEST_PYTHON must fail");
    };
    assert!(
        why.contains("LLLM_TEST_PYTHON=/no/such/python names no file"),
        "{why}"
    );
    assert!(why.contains("scripts/python-env"), "{why}");

    // Unset (or empty): the venv's python when it is there.
    std::fs::write(&venv, "").unwrap();
    assert_eq!(
        python::lookup(None, true, &venv),
        Found::Python(venv.clone())
    );
    assert_eq!(python::lookup(Some(""), false, &venv), Found::Python(venv));

    // Neither: a skip that says how to require it, or a failure with the fix.
    let Found::Skip(why) = python::lookup(None, false, &missing) else {
        panic!("no python and not required must skip");
    };
    assert!(why.starts_with("skipped: no LLLM_TEST_PYTHON"), "{why}");
    assert!(why.contains("LLLM_REQUIRE_PYTHON=1"), "{why}");
    let Found::Fail(why) = python::lookup(None, true, &missing) else {
        panic!("no python when required must fail");
    };
    assert!(
        why.starts_with("LLLM_REQUIRE_PYTHON=1 but no LLLM_TEST_PYTHON"),
        "{why}"
    );
    assert!(why.contains("scripts/python-env"), "{why}");
}

#[test]
fn upstream_remote_tactic_calls_the_fixture_served_by_upstream() {
    let Some(python) = python::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start(dir.path(), SCRIPT);
    let server = UpstreamServer::start(&python, &mock.base_url());

    let output = python::run_code(&python, CLIENT, &[&server.url], &[]);
    output.expect_code(0);
    let answer: Value = serde_json::from_str(output.stdout.trim()).expect("one JSON line");

    let info = &answer["info"];
    assert_eq!(info["name"], "answer");
    assert_eq!(info["runtime_kind"], "python");
    assert_eq!(
        info["input_schema"]["required"],
        serde_json::json!(["question"])
    );
    assert_eq!(
        info["output_schema"]["required"],
        serde_json::json!(["answer"])
    );
    assert_eq!(
        info["capabilities"],
        serde_json::json!(["arun", "run", "stream"])
    );
    assert_eq!(
        info["examples"][0]["input"]["question"],
        "What is a hash map?"
    );

    assert_eq!(
        answer["run"],
        serde_json::json!({"answer": "A hash map maps keys to values."})
    );

    // Upstream streams a `message` event per delta and no closing event.
    let events = answer["events"].as_array().expect("events");
    assert!(events.len() > 1, "{events:?}");
    assert!(
        events.iter().all(|event| event["kind"] == "message"),
        "{events:?}"
    );
    let text: String = events
        .iter()
        .filter_map(|event| event["data"].as_str())
        .collect();
    assert_eq!(text, "A hash map maps keys to values.");

    assert_eq!(
        answer["bad"],
        serde_json::json!({"status": 400, "type": "SchemaError"})
    );

    // Two model calls reached the mock (the run, the stream), the bad input
    // none; each carried its question as the last user message.
    let requests = mock.requests();
    let questions: Vec<&str> = requests
        .iter()
        .map(|request| {
            request["body"]["messages"]
                .as_array()
                .and_then(|messages| messages.last())
                .and_then(|message| message["content"].as_str())
                .unwrap_or_else(|| panic!("a chat request: {request}"))
        })
        .collect();
    assert_eq!(questions, ["What is a hash map?", "Streamed?"]);
    assert_eq!(requests[1]["body"]["stream"], true);
}

/// Upstream's own command line serves the fixture unchanged
/// (`python -m lllm.cli serve upstream_tactic:build`), and the fixture's
/// one-shot driver runs it in process.
#[test]
fn upstream_cli_serves_the_fixture_and_the_driver_runs_it() {
    let Some(python) = python::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start(dir.path(), SCRIPT);
    let fixtures = python::fixtures();

    let driver = Command::new(&python)
        .arg("upstream_tactic.py")
        .args(["run", "Driven?"])
        .current_dir(&fixtures)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("OPENAI_BASE_URL", mock.base_url())
        .env("OPENAI_API_KEY", "test")
        .output()
        .expect("run the driver");
    let driver = common::Output::of(driver);
    driver.expect_code(0);
    assert_eq!(
        driver.stdout.trim(),
        r#"{"answer": "A hash map maps keys to values."}"#
    );

    // Upstream's CLI takes no port 0: a port nothing listens on, then wait
    // for it to accept (bounded, generous: it only guards a broken start).
    let port = common::closed_port();
    let mut server = Command::new(&python)
        .args(["-m", "lllm.cli", "serve", "upstream_tactic:build"])
        .args(["--port", &port.to_string(), "--log-level", "warning"])
        .current_dir(&fixtures)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("OPENAI_BASE_URL", mock.base_url())
        .env("OPENAI_API_KEY", "test")
        .stdin(Stdio::null())
        .spawn()
        .expect("start upstream's lllm serve");
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = server.try_wait() {
            panic!("upstream's lllm serve exited: {status}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "upstream's lllm serve did not listen on {url}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = python::run_code(
        &python,
        "import httpx, json, sys\n\
         r = httpx.post(sys.argv[1] + '/tactics/answer/run', json={'input': {'question': 'Served?'}})\n\
         print(json.dumps({'status': r.status_code, 'body': r.json()}))",
        &[&url],
        &[],
    );
    let _ = server.kill();
    let _ = server.wait();
    output.expect_code(0);
    let answer: Value = serde_json::from_str(output.stdout.trim()).expect("one JSON line");
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["body"]["tactic"], "answer");
    assert_eq!(
        answer["body"]["output"]["answer"],
        "A hash map maps keys to values."
    );
    assert!(
        answer["body"]["request_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    assert_eq!(
        mock.requests().len(),
        2,
        "the driver's call and the served one"
    );
}
