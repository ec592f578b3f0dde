//! The Python environment of the interop tests: upstream's lllm-core 0.2.1,
//! its service and client, and the `openai` SDK, in the venv
//! `scripts/python-env` makes (default `target/py`).
//!
//! A test that needs it starts with
//!
//! ```ignore
//! let Some(python) = common::python::python() else { return };
//! ```
//!
//! `python()` finds the interpreter from `LLLM_TEST_PYTHON` (a python with
//! those packages), else `target/py/bin/python` when `scripts/python-env`
//! made it. Without either the test prints why and passes as skipped, unless
//! `LLLM_REQUIRE_PYTHON=1` (CI sets it): then it fails with the fix. A
//! `LLLM_TEST_PYTHON` naming no file always fails: a path someone set is
//! meant to be used.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// What the lookup found: a python to use, or why there is none.
#[derive(Debug, PartialEq)]
pub enum Found {
    Python(PathBuf),
    Skip(String),
    Fail(String),
}

const FIX: &str = "run `scripts/python-env` (it makes target/py), or set \
    LLLM_TEST_PYTHON to a python with lllm-core==0.2.1, fastapi, uvicorn, httpx and openai";

/// The repository's root (tests run in crates/lllm-cli).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// `tests/python/`, where the Python fixtures live.
pub fn fixtures() -> PathBuf {
    root().join("tests/python")
}

/// The lookup's rule, apart from the process environment so it is tested on
/// its own: `configured` is `LLLM_TEST_PYTHON`, `required` whether
/// `LLLM_REQUIRE_PYTHON=1`, `default` the venv's python.
pub fn lookup(configured: Option<&str>, required: bool, default: &Path) -> Found {
    if let Some(path) = configured.filter(|path| !path.is_empty()) {
        return if Path::new(path).is_file() {
            Found::Python(PathBuf::from(path))
        } else {
            Found::Fail(format!("LLLM_TEST_PYTHON={path} names no file; {FIX}"))
        };
    }
    if default.is_file() {
        return Found::Python(default.to_path_buf());
    }
    let why = format!("no LLLM_TEST_PYTHON and no {} ({FIX})", default.display());
    if required {
        Found::Fail(format!("LLLM_REQUIRE_PYTHON=1 but {why}"))
    } else {
        Found::Skip(format!(
            "skipped: {why}; set LLLM_REQUIRE_PYTHON=1 to make this an error"
        ))
    }
}

/// The python to run, or `None` (printed why) when the test is to be
/// skipped; panics with the fix when Python is required or misconfigured.
#[track_caller]
pub fn python() -> Option<PathBuf> {
    let configured = std::env::var("LLLM_TEST_PYTHON").ok();
    let required = std::env::var("LLLM_REQUIRE_PYTHON").is_ok_and(|value| value == "1");
    let default = root().join("target/py/bin/python");
    match lookup(configured.as_deref(), required, &default) {
        Found::Python(path) => Some(path),
        Found::Skip(why) => {
            eprintln!("{why}");
            None
        }
        Found::Fail(why) => panic!("{why}"),
    }
}

/// `python -c CODE ARGS…` with only PATH and `env` in its environment,
/// run to the end.
pub fn run_code(python: &Path, code: &str, args: &[&str], env: &[(&str, &str)]) -> super::Output {
    let mut command = Command::new(python);
    command
        .arg("-c")
        .arg(code)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    super::Output::of(command.output().expect("start python"))
}

/// Upstream's service (`create_tactic_app`, what its `lllm serve` runs)
/// serving `tests/python/upstream_tactic.py`'s `answer` tactic on
/// 127.0.0.1, its model calls going to `openai_base_url` (e.g.
/// `MockServer::base_url()`); killed when dropped.
pub struct UpstreamServer {
    child: Child,
    /// `http://127.0.0.1:PORT`: the single-tactic routes (`/run`, …) and
    /// `/tactics/answer/…`.
    pub url: String,
}

impl UpstreamServer {
    pub fn start(python: &Path, openai_base_url: &str) -> UpstreamServer {
        let mut child = Command::new(python)
            .arg(fixtures().join("upstream_tactic.py"))
            .args(["serve", "--port", "0"])
            .current_dir(fixtures())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("OPENAI_BASE_URL", openai_base_url)
            .env("OPENAI_API_KEY", "test")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the upstream service");
        let stdout = child.stdout.take().expect("upstream stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the upstream banner");
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the upstream service did not start (banner {line:?}; its stderr is above)");
        };
        let url = url.to_string();
        UpstreamServer { child, url }
    }
}

impl Drop for UpstreamServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
