//! What the library's default records cost: `ccall` of 2,000 tasks on
//! `mock/echo`, records written into a store (each a file in its
//! `sessions/`, indexed) against none, in one process, alternating.
//!
//! ```text
//! cargo run --example records_bench -- [TASKS] [ROUNDS]
//! ```
//!
//! TASKS defaults to 2,000 and ROUNDS to 5; each round runs the tasks once
//! without records and once with, into a fresh store in a temporary
//! directory, at the default concurrency (16). It prints each round's wall
//! times and, last, the median ratio (records on / off) and the cost per
//! record. Numbers: docs/benchmarks.md, "Records by default".

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lllm::{Records, Registry, Tactic};

async fn ccall(tactic: &Tactic, tasks: usize, records: Records) -> Duration {
    let started = Instant::now();
    let mut stream = tactic
        .ccall((0..tasks).map(|number| format!("task {number}: a line of text to echo back")))
        .write_records(records);
    let mut done = 0;
    while let Some((_, result)) = stream.next().await {
        result.expect("mock/echo answers");
        done += 1;
    }
    assert_eq!(done, tasks);
    started.elapsed()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let tasks: usize = args
        .next()
        .map_or(2000, |text| text.parse().expect("TASKS"));
    let rounds: usize = args.next().map_or(5, |text| text.parse().expect("ROUNDS"));
    let tactic = Tactic::from_yaml(
        "agent_configs: [{name: echo, model_name: mock/echo}]",
        ".",
        &Registry::new(),
    )
    .expect("the echo tactic");
    // A warm-up round: the runtime's threads, the allocator, the page cache.
    ccall(&tactic, tasks / 10, Records::none()).await;
    let (mut ratios, mut per_record) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let off = ccall(&tactic, tasks, Records::none()).await;
        let on = ccall(&tactic, tasks, Records::store(dir.path())).await;
        let written = std::fs::read_dir(dir.path().join("sessions"))
            .expect("the records")
            .count();
        assert_eq!(written, tasks, "every run's record is written");
        let ratio = on.as_secs_f64() / off.as_secs_f64();
        let extra = (on.as_secs_f64() - off.as_secs_f64()) / tasks as f64 * 1e6;
        println!(
            "round {round}: off {:.3} s, on {:.3} s, ratio {ratio:.2}, {extra:.0} µs per record",
            off.as_secs_f64(),
            on.as_secs_f64()
        );
        ratios.push(ratio);
        per_record.push(extra);
    }
    println!(
        "{tasks} tasks, median of {rounds}: records on / off = {:.2}, {:.0} µs more per record",
        median(&mut ratios),
        median(&mut per_record)
    );
}
