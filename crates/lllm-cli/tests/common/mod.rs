//! The integration-test builder: a temp dir with files, a cleared environment,
//! the real `lllm` binary, and an `lllm-mock` server on 127.0.0.1 when a test
//! needs a provider.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

pub mod otlp;
pub mod python;
pub mod serve;

pub struct Test {
    pub dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    stdin: Option<String>,
}

pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Test {
    pub fn new() -> Test {
        Test {
            dir: tempfile::tempdir().expect("temp dir"),
            env: Vec::new(),
            stdin: None,
        }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub fn file(self, relative: &str, content: &str) -> Test {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create dirs");
        }
        std::fs::write(&path, content).expect("write file");
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Test {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn stdin(mut self, text: &str) -> Test {
        self.stdin = Some(text.into());
        self
    }

    /// `lllm` with `args` in the test dir, with an environment holding only
    /// PATH, HOME and what the test set; stdout and stderr piped.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lllm"));
        command
            .args(args)
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command
    }

    /// Runs `lllm` with `args` to the end (see `command`).
    pub fn run(&self, args: &[&str]) -> Output {
        let mut child = self.command(args).spawn().expect("start lllm");
        if let Some(text) = &self.stdin {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(text.as_bytes()).expect("write stdin");
        }
        Output::of(child.wait_with_output().expect("wait for lllm"))
    }

    /// `lllm batch tasks.jsonl --tactic TACTIC -o OUT -q EXTRA…`, run to
    /// the end: the batch every batch test starts from.
    pub fn batch(&self, tactic: &str, out: &str, extra: &[&str]) -> Output {
        let mut args = vec!["batch", "tasks.jsonl", "--tactic", tactic, "-o", out, "-q"];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    pub fn read_json(&self, relative: &str) -> Value {
        let text = std::fs::read_to_string(self.path(relative)).expect("read json file");
        serde_json::from_str(&text).expect("valid json")
    }
}

impl Output {
    pub fn of(output: std::process::Output) -> Output {
        Output {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Output {
        assert_eq!(
            self.code, code,
            "exit code {} (expected {code})\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    /// Each stdout line read as JSON (`--json` listings, `--events`).
    #[track_caller]
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }
}

/// An `lllm-mock` server on 127.0.0.1, killed when dropped.
pub struct MockServer {
    child: Child,
    pub url: String,
    pub log: PathBuf,
}

impl MockServer {
    pub fn start(dir: &Path, script: &str) -> MockServer {
        MockServer::start_with(dir, script, &[])
    }

    /// Starts it with more flags (`--batch-polls 2`, …).
    pub fn start_with(dir: &Path, script: &str, arguments: &[&str]) -> MockServer {
        let script_path = dir.join(format!("mock-{}.yaml", uuid_like()));
        std::fs::write(&script_path, script).expect("write script");
        let log = script_path.with_extension("log.jsonl");
        let mut child = Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
            .arg("--script")
            .arg(&script_path)
            .arg("--log")
            .arg(&log)
            .args(arguments)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lllm-mock");
        let stdout = child.stdout.take().expect("mock stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read mock banner");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected lllm-mock banner: {line:?}"))
            .to_string();
        MockServer { child, url, log }
    }

    /// The base URL an OpenAI client uses (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// The request log, one JSON value per request.
    pub fn requests(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

impl Test {
    /// Starts `lllm` with `args` like `run`, without waiting (to signal or kill it).
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args).spawn().expect("start lllm")
    }
}

/// A port on 127.0.0.1 that nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// `sha256:` and the first 6 bytes of an auth header's digest, as `lllm-mock`
/// logs the key a request carried (computed here on its own, so a test checks
/// the mock's log against it).
pub fn fingerprint(header: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(header.as_bytes());
    let hex: String = digest[..6]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256:{hex}")
}
