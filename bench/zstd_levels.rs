//! zstd levels on real records, as the batch writer frames them: a
//! `sessions.jsonl` cut into 1 MiB frames at line ends, compressed at each
//! level with this build's libzstd (the `thin` one lllm ships), and once with
//! a frame per record; the ratio and the CPU per record of each
//! (docs/decisions.md, "Compressed records").
//!
//!   cargo run --release --example zstd_levels -- out/sessions.jsonl

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: zstd_levels SESSIONS.jsonl")?;
    let data = std::fs::read(&path)?;
    let records = data.iter().filter(|byte| **byte == b'\n').count().max(1);
    let mut frames = Vec::new();
    let mut start = 0;
    while start < data.len() {
        let mut end = (start + lllm::jsonl::FRAME).min(data.len());
        while end < data.len() && data[end - 1] != b'\n' {
            end += 1;
        }
        frames.push(&data[start..end]);
        start = end;
    }
    println!(
        "{records} records, {} bytes, {} frames",
        data.len(),
        frames.len()
    );
    let mut output = Vec::new();
    for level in [1, 2, 3, 4, 5, 7, 9, 19] {
        let mut compressor = zstd::bulk::Compressor::new(level)?;
        let started = Instant::now();
        let mut compressed = 0;
        for frame in &frames {
            output.clear();
            output.reserve(zstd::zstd_safe::compress_bound(frame.len()));
            compressed += compressor.compress_to_buffer(frame, &mut output)?;
        }
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "level {level:2}: ratio {:5.2}:1, {:8.2} µs per record",
            data.len() as f64 / compressed as f64,
            seconds * 1e6 / records as f64
        );
    }
    let mut compressor = zstd::bulk::Compressor::new(lllm::jsonl::LEVEL)?;
    let started = Instant::now();
    let mut compressed = 0;
    for line in data.split_inclusive(|byte| *byte == b'\n') {
        compressed += compressor.compress(line)?.len();
    }
    println!(
        "level {:2}, a frame per record: ratio {:5.2}:1, {:8.2} µs per record",
        lllm::jsonl::LEVEL,
        data.len() as f64 / compressed as f64,
        started.elapsed().as_secs_f64() * 1e6 / records as f64
    );
    Ok(())
}
