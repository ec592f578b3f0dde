//! The floor under `lllm batch`'s CPU per LLM call: the same HTTP client
//! (reqwest, same settings), the same tokio runtime and the same concurrency,
//! posting a one-turn chat request to `lllm-mock` and parsing the JSON reply —
//! and nothing else (no agent loop, no record, no output). `bench/batch.sh`
//! runs it beside `lllm batch` and reports the ratio.
//!
//!     cargo run --release --example http_floor -- URL N C

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (url, total, concurrency) = match args.as_slice() {
        [_, url, total, concurrency] => (
            format!("{}/v1/chat/completions", url.trim_end_matches('/')),
            total.parse::<usize>().expect("N is a number"),
            concurrency.parse::<usize>().expect("C is a number"),
        ),
        _ => {
            eprintln!("usage: http_floor URL N C");
            std::process::exit(2);
        }
    };
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
            let (client, next, url) = (client.clone(), next.clone(), url.clone());
            workers.push(tokio::spawn(async move {
                let mut sent = 0;
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    let body = serde_json::json!({
                        "model": "bench-model",
                        "messages": [
                            {"role": "system", "content": "Answer in one word."},
                            {"role": "user", "content": format!("What is {sent} plus one?")},
                        ],
                    });
                    let reply = client.post(&url).json(&body).send().await.expect("reply");
                    let bytes = reply.bytes().await.expect("body");
                    let value: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
                    assert!(value["choices"][0]["message"]["content"].is_string());
                    sent += 1;
                }
                sent
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
