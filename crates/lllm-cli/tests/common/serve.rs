//! A running `lllm serve` for the serve tests: started on a free port of
//! 127.0.0.1, its address read from the first stdout line, its stderr
//! kept; killed when dropped. And a small HTTP client (reqwest on a
//! current-thread runtime) that reads streams event by event.

use std::io::{BufRead, BufReader, Read};
use std::process::Child;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::Test;

pub struct Served {
    pub child: Child,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    stderr: Arc<Mutex<String>>,
}

impl Served {
    /// `lllm serve ARGS --port 0` in `test`'s directory.
    #[track_caller]
    pub fn start(test: &Test, args: &[&str]) -> Served {
        let mut all = vec!["serve"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--port", "0"]);
        let mut child = test.spawn(&all);
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("stderr");
        let kept = stderr.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read) = pipe.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                kept.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..read]));
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line).expect("read the first line");
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = reader.read_to_string(&mut rest);
        });
        let Some(url) = line.trim_end().strip_prefix("listening on ") else {
            let _ = child.wait();
            panic!(
                "first stdout line {line:?}; stderr:\n{}",
                stderr.lock().unwrap()
            );
        };
        assert!(line.ends_with('\n'), "{line:?}");
        Served {
            url: url.to_string(),
            child,
            stderr,
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// [`eventually`], saying what the server wrote on stderr if not.
    #[track_caller]
    pub fn eventually(&self, what: &str, mut check: impl FnMut() -> bool) {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(60) {
            if check() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!(
            "{what}: not within a minute; the server's stderr:\n{}",
            self.stderr()
        );
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer: status, headers, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Answer {
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.text))
    }

    /// The error body's `error.type`, checked to have the one shape.
    #[track_caller]
    pub fn error_type(&self) -> String {
        let body = self.json();
        let error = &body["error"];
        for key in ["type", "message", "tactic", "endpoint", "request_id"] {
            assert!(error.get(key).is_some(), "no `error.{key}` in {body}");
        }
        error["type"].as_str().unwrap().to_string()
    }
}

pub fn block<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// One request: `method` `url`, the bearer `token` if any, `body` as is
/// (with `content_type`).
pub async fn send(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<(&str, &str)>,
) -> Answer {
    let client = reqwest::Client::new();
    let mut request = client.request(method.parse().expect("method"), url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some((content_type, body)) = body {
        request = request
            .header("content-type", content_type)
            .body(body.to_string());
    }
    let response = request.send().await.expect("an answer");
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        text: response.text().await.expect("a body"),
    }
}

/// `GET url`.
#[track_caller]
pub fn get(url: &str) -> Answer {
    block(send("GET", url, None, None))
}

/// `POST url` with a JSON body.
#[track_caller]
pub fn post(url: &str, body: &str) -> Answer {
    block(send("POST", url, None, Some(("application/json", body))))
}

/// One Server-Sent Event: its `event:`, `id:` and `data:` (parsed).
#[derive(Debug, Clone)]
pub struct Sse {
    pub event: Option<String>,
    pub id: Option<String>,
    pub data: Value,
}

/// Reads SSE messages from a streamed response as they arrive.
pub struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    pub async fn open(url: &str, body: &str) -> (u16, Events) {
        let response = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("an answer");
        (
            response.status().as_u16(),
            Events {
                response,
                buffer: String::new(),
            },
        )
    }

    /// The messages of a response already sent (with a token, say).
    pub fn from(response: reqwest::Response) -> Events {
        Events {
            response,
            buffer: String::new(),
        }
    }

    /// The next message, `None` at the end of the body.
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let message: String = self.buffer.drain(..end + 2).collect();
                let mut sse = Sse {
                    event: None,
                    id: None,
                    data: Value::Null,
                };
                for line in message.lines() {
                    if let Some(value) = line.strip_prefix("event: ") {
                        sse.event = Some(value.to_string());
                    } else if let Some(value) = line.strip_prefix("id: ") {
                        sse.id = Some(value.to_string());
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        sse.data = serde_json::from_str(value)
                            .unwrap_or_else(|_| Value::String(value.to_string()));
                    }
                }
                return Some(sse);
            }
            match self.response.chunk().await.expect("a chunk") {
                Some(chunk) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                None => {
                    assert!(
                        self.buffer.trim().is_empty(),
                        "a cut message: {:?}",
                        self.buffer
                    );
                    return None;
                }
            }
        }
    }

    /// Every message to the end of the body.
    pub async fn all(mut self) -> Vec<Sse> {
        let mut all = Vec::new();
        while let Some(sse) = self.next().await {
            all.push(sse);
        }
        all
    }
}

/// Waits (polling, up to a minute) until `check` holds.
#[track_caller]
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(60) {
        if check() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{what}: not within a minute");
}

/// The session records under `dir`, read: `lllm serve`'s, lines of a
/// `sessions.jsonl` in a folder of their own, and a record file's whole.
pub fn records(dir: &std::path::Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut records = Vec::new();
    for path in entries.filter_map(|entry| Some(entry.ok()?.path())) {
        if path.is_dir() {
            records.extend(self::records(&path));
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            match path
                .file_name()
                .is_some_and(|name| name == "sessions.jsonl")
            {
                true => records.extend(
                    text.lines()
                        .filter_map(|line| serde_json::from_str(line).ok()),
                ),
                false => records.extend(serde_json::from_str::<Value>(&text).ok()),
            }
        }
    }
    records
}

/// Waits until `/health` says `count` runs are under way (polling; the
/// caller bounds the wait).
pub async fn until_running(url: &str, count: u64) {
    loop {
        let health = send("GET", &format!("{url}/health"), None, None).await;
        if health.json()["running"] == count {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
