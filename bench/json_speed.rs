//! The raw speed of the JSON writer on real session records: reads a
//! `sessions.jsonl` a batch wrote, then writes every record R times with
//! `lllm::json` and with `serde_json`, checks the bytes are the same and
//! prints nanoseconds per record and MB/s for each (`docs/decisions.md`,
//! "Our own JSON writer").
//!
//!     cargo run --release --example json_speed -- SESSIONS.jsonl [R]

use std::time::Instant;

use lllm::SessionRecord;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: json_speed SESSIONS.jsonl [ROUNDS]");
        std::process::exit(2);
    };
    let rounds: usize = args.get(2).map_or(20, |text| text.parse().expect("ROUNDS"));
    let text = std::fs::read_to_string(path).expect("the sessions file");
    let records: Vec<SessionRecord> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("a session record"))
        .collect();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for record in &records {
        ours.clear();
        theirs.clear();
        lllm::json::write(&mut ours, record).expect("ours");
        serde_json::to_writer(&mut theirs, record).expect("serde_json");
        assert!(ours == theirs, "the writers differ");
    }
    let bytes: usize = records
        .iter()
        .map(|record| serde_json::to_vec(record).expect("json").len())
        .sum();
    let time = |write: &dyn Fn(&mut Vec<u8>, &SessionRecord)| {
        let mut best = f64::MAX;
        let mut out = Vec::with_capacity(1 << 16);
        for _ in 0..rounds {
            let start = Instant::now();
            for record in &records {
                out.clear();
                write(&mut out, record);
            }
            best = best.min(start.elapsed().as_secs_f64());
        }
        best
    };
    let ours = time(&|out, record| lllm::json::write(out, record).expect("ours"));
    let theirs = time(&|out, record| serde_json::to_writer(out, record).expect("serde_json"));
    let n = records.len() as f64;
    println!(
        "{} records, {:.0} bytes each; best of {rounds} rounds",
        records.len(),
        bytes as f64 / n
    );
    for (name, seconds) in [("lllm::json", ours), ("serde_json", theirs)] {
        println!(
            "{name:<11} {:>8.0} ns per record  {:>6.0} MB/s",
            1e9 * seconds / n,
            bytes as f64 / seconds / 1e6
        );
    }
    println!("serde_json / lllm::json: {:.2}×", theirs / ours);
}
