//! The README's "A tactic as a service" section, run as a newcomer runs it:
//! its `lllm serve` line on the real binary (port 0 for the README's 8000),
//! then its curl call, its Python `RemoteTactic` call (upstream's lllm-core
//! 0.2.1) and its OpenAI SDK call, each block taken from the README's text
//! with only the address replaced, each answered by the shipped `triage`
//! tactic, each leaving a session in the store.
//!
//! The Python blocks need the test venv (`scripts/python-env`); without it
//! they are skipped with a message unless `LLLM_REQUIRE_PYTHON=1`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::python;
use serde_json::Value;

const SECTION: &str = "## A tactic as a service";
const README_URL: &str = "http://127.0.0.1:8000";

/// The fenced blocks of the README's section: (language, text).
fn blocks() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(python::root().join("README.md")).unwrap();
    let start = readme.find(SECTION).expect("the README's serve section");
    let section = &readme[start + SECTION.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in section.lines() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(language), None) => open = Some((language.trim().to_string(), String::new())),
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some((language, mut text))) => {
                text.push_str(line);
                text.push('\n');
                open = Some((language, text));
            }
            (None, None) => {}
        }
    }
    blocks
}

/// A shell line's words (the README's lines need only single quotes).
fn words(line: &str) -> Vec<String> {
    let line = line.split(" #").next().unwrap().trim();
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            _ => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn sessions(store: &Path, home: &Path) -> Vec<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_lllm"))
        .args(["logs", "--json", "--tactic", "triage", "--store"])
        .arg(store)
        .env_clear()
        .env("HOME", home)
        .output()
        .unwrap();
    common::Output::of(output).expect_code(0).json_lines()
}

#[test]
fn the_readme_serve_section_runs_curl_remote_tactic_and_openai_calls() {
    let blocks = blocks();
    let shell: Vec<&str> = blocks
        .iter()
        .filter(|(language, _)| language == "sh")
        .map(|(_, text)| text.trim())
        .collect();
    let python_blocks: Vec<&str> = blocks
        .iter()
        .filter(|(language, _)| language == "python")
        .map(|(_, text)| text.as_str())
        .collect();
    assert_eq!(
        shell.len(),
        2,
        "the serve line, then the curl call: {shell:?}"
    );
    assert_eq!(
        python_blocks.len(),
        2,
        "RemoteTactic, then OpenAI: {python_blocks:?}"
    );
    assert!(
        python_blocks[0].contains("RemoteTactic") && python_blocks[1].contains("OpenAI"),
        "{python_blocks:?}"
    );

    // `lllm serve …`, on a free port instead of the README's 8000.
    let serve = words(shell[0]);
    assert_eq!(&serve[..2], ["lllm", "serve"], "{serve:?}");
    let at = serve.iter().position(|word| word == "--port").unwrap();
    assert_eq!(serve[at + 1], "8000");
    let mut arguments = serve[1..].to_vec();
    arguments[at] = "0".into();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut server = Command::new(env!("CARGO_BIN_EXE_lllm"))
        .args(&arguments)
        .current_dir(python::root())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("LLLM_HOME", &store)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lllm serve");
    let mut banner = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let url = banner
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line {banner:?}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let guard = KillOnDrop(server);

    // curl, as the README shows it.
    let curl = shell[1].replace(README_URL, &url);
    let output = Command::new("sh")
        .args(["-c", &curl])
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("sh");
    let output = common::Output::of(output);
    output.expect_code(0);
    let answer: Value = serde_json::from_str(&output.stdout)
        .unwrap_or_else(|error| panic!("curl's answer is not JSON ({error}): {}", output.stdout));
    assert_eq!(answer["tactic"], "triage", "{answer}");
    assert!(answer["output"]["category"].is_string(), "{answer}");
    assert!(answer["output"]["urgent"].is_boolean(), "{answer}");
    assert_eq!(answer["state"], "success", "{answer}");
    let mut calls = 1;

    if let Some(python) = python::python() {
        // Upstream's RemoteTactic prints the output it got: a dict.
        let block = python_blocks[0].replace(README_URL, &url);
        let output = python::run_code(&python, &block, &[], &[]);
        output.expect_code(0);
        assert!(
            output.stdout.starts_with("{'category': '") && output.stdout.contains("'urgent': "),
            "{}",
            output.stdout
        );
        // The OpenAI SDK prints the reply's content: the delivery.
        let block = python_blocks[1].replace(README_URL, &url);
        let output = python::run_code(&python, &block, &[], &[]);
        output.expect_code(0);
        let delivery: Value = serde_json::from_str(output.stdout.trim())
            .unwrap_or_else(|error| panic!("not the JSON delivery ({error}): {}", output.stdout));
        assert!(delivery["category"].is_string(), "{delivery}");
        calls += 2;
    }

    // SIGTERM drains (records written), then exit 0.
    assert_eq!(guard.stop(), 0);
    // Each call is a session in the store the server was given.
    assert_eq!(sessions(&store, dir.path()).len(), calls);
}

struct KillOnDrop(std::process::Child);

impl KillOnDrop {
    fn stop(mut self) -> i32 {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        self.0.wait().unwrap().code().unwrap_or(-1)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
