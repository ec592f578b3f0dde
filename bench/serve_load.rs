//! The load generator of `bench/serve.sh`: C clients, each posting one JSON
//! body after another (the next as soon as the last answer's body has been
//! read to its end) until N requests are answered, and one JSON line of what
//! it measured: the latency of each request from its send to the last byte of
//! its answer (p50, p99, mean, max), the answered requests per second and the
//! failures.
//!
//!     cargo run --release --example serve_load -- URL C N BODY [--expect TEXT] [--no-warmup] [--spread MS] [--dump FILE]
//!
//! BODY is a file holding the request body (JSON, posted as
//! `application/json`). A request counts as answered when its status is 200
//! and, with `--expect TEXT`, its body holds TEXT (a stream's closing
//! `event: result`, a reply's text); any other answer is a failure, and the
//! first one's status and body start are printed on stderr. Each client
//! first sends one request it does not count (its connection made, the
//! server's first-call work done) unless `--no-warmup`; `bench/serve.sh`
//! holds N = C requests open that way to weigh the memory of requests in
//! flight.
//!
//! With `--spread MS`, client i sends its first counted request i·MS/C
//! milliseconds after the first client: with MS the mock's latency, the
//! requests arrive evenly, about C every MS, as the calls of many independent
//! users do, instead of in waves of C at once (every client answered in the
//! same millisecond and sending again at once). A wave measures how fast a
//! server drains a burst of C simultaneous arrivals; `bench/serve.sh` measures
//! both, and its added-latency target is about the even arrivals.
//!
//! With `--dump FILE`, each answered request is also a line of FILE: when
//! it was sent (milliseconds after the first counted request) and its
//! latency, to see whether a tail is spread out or bunched in time.
//!
//! The same program measures the baseline: BODY an OpenAI chat request and
//! URL `lllm-mock`'s `/v1/chat/completions`, so "the latency a served call
//! adds" is a difference between two runs of this one client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

struct Job {
    url: String,
    body: bytes::Bytes,
    expect: Option<String>,
    total: usize,
    next: AtomicUsize,
    failures: AtomicUsize,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, clients, total, body, rest @ ..] = &args[..] else {
        usage();
    };
    let clients: usize = clients.parse().unwrap_or_else(|_| usage());
    let total: usize = total.parse().unwrap_or_else(|_| usage());
    let mut expect = None;
    let mut warmup = true;
    let mut spread = Duration::ZERO;
    let mut dump = None;
    let mut rest = rest.iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--expect" => expect = Some(rest.next().unwrap_or_else(|| usage()).clone()),
            "--no-warmup" => warmup = false,
            "--spread" => {
                let ms: u64 = rest
                    .next()
                    .and_then(|ms| ms.parse().ok())
                    .unwrap_or_else(|| usage());
                spread = Duration::from_millis(ms);
            }
            "--dump" => dump = Some(rest.next().unwrap_or_else(|| usage()).clone()),
            _ => usage(),
        }
    }
    if clients == 0 || total == 0 {
        usage();
    }
    let body = std::fs::read(body).unwrap_or_else(|error| {
        eprintln!("serve_load: {body}: {error}");
        std::process::exit(2);
    });
    let job = Arc::new(Job {
        url: url.clone(),
        body: body.into(),
        expect,
        total,
        next: AtomicUsize::new(0),
        failures: AtomicUsize::new(0),
    });
    // One thread, as `lllm batch` and bench/http_floor.rs drive their load:
    // the generator takes as little of the machine as it can.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let shared = job.clone();
    let (latencies, wall) = runtime.block_on(async move {
        let job = shared;
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(clients)
            .timeout(Duration::from_secs(600))
            .build()
            .expect("client");
        if warmup {
            let mut warming = Vec::new();
            for _ in 0..clients {
                let (client, job) = (client.clone(), job.clone());
                warming.push(tokio::spawn(async move { job.send(&client).await }));
            }
            for warm in warming {
                warm.await.expect("warm-up");
            }
            job.failures.store(0, Ordering::Relaxed);
        }
        let started = Instant::now();
        let mut workers = Vec::new();
        for index in 0..clients {
            let (client, job) = (client.clone(), job.clone());
            let delay = spread.mul_f64(index as f64 / clients as f64);
            workers.push(tokio::spawn(async move {
                tokio::time::sleep_until(tokio::time::Instant::from_std(started + delay)).await;
                let mut latencies = Vec::new();
                while job.next.fetch_add(1, Ordering::Relaxed) < job.total {
                    let sent = Instant::now();
                    if job.send(&client).await {
                        latencies.push((sent - started, sent.elapsed()));
                    }
                }
                latencies
            }));
        }
        let mut latencies = Vec::with_capacity(total);
        for worker in workers {
            latencies.extend(worker.await.expect("client"));
        }
        (latencies, started.elapsed())
    });
    if let Some(path) = dump {
        let lines: String = latencies
            .iter()
            .map(|(at, took)| {
                format!(
                    "{:.3} {:.3}\n",
                    at.as_secs_f64() * 1e3,
                    took.as_secs_f64() * 1e3
                )
            })
            .collect();
        if let Err(error) = std::fs::write(&path, lines) {
            eprintln!("serve_load: {path}: {error}");
        }
    }
    let mut millis: Vec<f64> = latencies
        .iter()
        .map(|(_, d)| d.as_secs_f64() * 1e3)
        .collect();
    millis.sort_by(f64::total_cmp);
    let rank = |p: f64| -> f64 {
        if millis.is_empty() {
            return f64::NAN;
        }
        // Nearest rank: the smallest value at or above a fraction p of them.
        let index = ((p * millis.len() as f64).ceil() as usize).clamp(1, millis.len()) - 1;
        millis[index]
    };
    let mean = millis.iter().sum::<f64>() / millis.len().max(1) as f64;
    println!(
        "{}",
        json!({
            "clients": clients,
            "requests": total,
            "answered": millis.len(),
            "failures": job.failures.load(Ordering::Relaxed),
            "p50_ms": rank(0.50),
            "p99_ms": rank(0.99),
            "mean_ms": mean,
            "max_ms": millis.last().copied().unwrap_or(f64::NAN),
            "wall_s": wall.as_secs_f64(),
            "per_s": millis.len() as f64 / wall.as_secs_f64(),
        })
    );
}

impl Job {
    /// One request; whether it was answered as expected.
    async fn send(&self, client: &reqwest::Client) -> bool {
        let answer = client
            .post(&self.url)
            .header("content-type", "application/json")
            .body(self.body.clone())
            .send()
            .await;
        let (status, text) = match answer {
            Ok(answer) => {
                let status = answer.status();
                match answer.bytes().await {
                    Ok(bytes) => (
                        status.as_u16(),
                        String::from_utf8_lossy(&bytes).into_owned(),
                    ),
                    Err(error) => (status.as_u16(), format!("(body cut: {error})")),
                }
            }
            Err(error) => (0, format!("(no answer: {error})")),
        };
        let answered = status == 200
            && self
                .expect
                .as_ref()
                .is_none_or(|expect| text.contains(expect.as_str()));
        if !answered && self.failures.fetch_add(1, Ordering::Relaxed) == 0 {
            let start: String = text.chars().take(300).collect();
            eprintln!("serve_load: first failure: status {status}: {start}");
        }
        answered
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: serve_load URL C N BODY [--expect TEXT] [--no-warmup] [--spread MS] [--dump FILE]"
    );
    std::process::exit(2);
}
