//! The floor under `lllm batch`'s CPU per LLM call: the same HTTP client
//! (reqwest, same settings), the same tokio runtime and the same concurrency,
//! sending the chat requests `lllm batch` would send for the same tasks to
//! `lllm-mock` and parsing the JSON replies — and nothing else (no agent
//! loop, no record, no output). `bench/batch.sh` runs it beside `lllm batch`
//! and reports the ratio.
//!
//!     cargo run --release --example http_floor -- URL N C [TASKS SYSTEM TURNS]
//!
//! With TASKS (a task file as bench/payloads.py writes it), SYSTEM (the
//! system prompt's file) and TURNS (1, or 3 for the tool loop), each request
//! carries the bytes the runner's would: the system prompt and the task, and
//! in the tool loop the assistant's tool calls, `current_time`'s results
//! (D12's text) and the tool's schema, three requests per task. Without
//! them: the 20-byte tasks of the tiny benchmark, one request each.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (url, total, concurrency) = match args.get(1..4) {
        Some([url, total, concurrency]) => (
            format!("{}/v1/chat/completions", url.trim_end_matches('/')),
            total.parse::<usize>().expect("N is a number"),
            concurrency.parse::<usize>().expect("C is a number"),
        ),
        _ => usage(),
    };
    let (tasks, system, turns) = match args.get(4..) {
        Some([tasks, system, turns]) => (
            read_tasks(tasks),
            std::fs::read_to_string(system).expect("the system prompt's file"),
            turns.parse::<usize>().expect("TURNS is a number"),
        ),
        Some([]) => (
            (0..total)
                .map(|i| format!("What is {i} plus one?"))
                .collect(),
            "Answer in one word.".to_string(),
            1,
        ),
        _ => usage(),
    };
    assert!(tasks.len() >= total, "fewer than N tasks");
    let job = Arc::new(Job {
        url,
        tasks,
        system,
        turns,
        // The key bench/setup.sh gives the runner, sent as the runner sends it.
        key: std::env::var("LLLM_BENCH_KEY").ok(),
        // The schema the runner offers for the built-in `current_time`.
        tools: json!([{"type": "function", "function": {
            "name": "current_time",
            "description": "The current date and time (UTC, RFC 3339).",
            "parameters": {"type": "object", "properties": {}},
        }}]),
    });
    // The runtime `lllm batch` uses by default (`--threads 1`).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let sent = runtime.block_on(async move {
        let client =
            lllm::provider::http::client(std::time::Duration::from_secs(10)).expect("client");
        let next = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..concurrency {
            let (client, next, job) = (client.clone(), next.clone(), job.clone());
            workers.push(tokio::spawn(async move {
                let mut sent = 0;
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= total {
                        break sent;
                    }
                    sent += job.run(&client, index).await;
                }
            }));
        }
        let mut sent = 0;
        for worker in workers {
            sent += worker.await.expect("worker");
        }
        sent
    });
    println!("{sent}");
}

fn usage() -> ! {
    eprintln!("usage: http_floor URL N C [TASKS SYSTEM TURNS]");
    std::process::exit(2);
}

fn read_tasks(path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("the task file");
    text.lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).expect("a task line");
            line["task"].as_str().expect("a task").to_string()
        })
        .collect()
}

struct Job {
    url: String,
    tasks: Vec<String>,
    system: String,
    turns: usize,
    key: Option<String>,
    tools: Value,
}

impl Job {
    /// The requests of task `index`; returns how many were sent.
    async fn run(&self, client: &reqwest::Client, index: usize) -> usize {
        let mut messages = vec![
            json!({"role": "system", "content": self.system}),
            json!({"role": "user", "content": self.tasks[index]}),
        ];
        for round in 1..=self.turns {
            let mut body = json!({"model": "bench-model", "messages": messages});
            if self.turns > 1 {
                body["tools"] = self.tools.clone();
            }
            let mut post = client.post(&self.url).json(&body);
            if let Some(key) = &self.key {
                post = post.bearer_auth(key);
            }
            let reply = post.send().await.expect("reply");
            let bytes = reply.bytes().await.expect("body");
            let mut value: Value = serde_json::from_slice(&bytes).expect("json");
            let message = value["choices"][0]["message"].take();
            if round == self.turns {
                assert!(message["content"].is_string(), "an answer: {message}");
                break;
            }
            // Answer each tool call as the runner does: its arguments parsed
            // and written back compactly, the result in D12's text.
            let calls = message["tool_calls"]
                .as_array()
                .expect("tool calls")
                .clone();
            // The assistant message as the runner writes it back.
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
            for call in calls {
                let arguments: Value = serde_json::from_str(
                    call["function"]["arguments"].as_str().expect("arguments"),
                )
                .expect("JSON arguments");
                let now = "2026-01-01T00:00:00Z";
                messages.push(json!({
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": format!(
                        "Return of calling function current_time with arguments {arguments}:\n---\n{now}\n---\n"
                    ),
                }));
            }
        }
        self.turns
    }
}
