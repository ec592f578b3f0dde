//! `lllm batch` at scale (issue 17): what a batch keeps of each task id is a
//! digest (`batch::ids`), so these tests check that what the ids decide
//! still comes out right on files larger than one pre-flight chunk: every
//! duplicate named with its first line, in line order; `--resume` skipping
//! exactly the ids that succeeded, with the summary over each id's latest
//! result. Peak memory is measured by `bench/scale.sh`, not here.

mod common;

use common::{MockServer, Test};
use serde_json::json;

fn tactic(base_url: &str) -> String {
    format!(
        "tactic_type: scale\nglobal: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs:\n  - {{name: a, system_prompt: Terse.}}\n\
         providers:\n  local: {{api: openai, base_url: \"{base_url}\"}}\n"
    )
}

/// `count` task lines with ids `t0`, `t1`, …; `id(i)` may rename one.
fn lines(count: usize, id: impl Fn(usize) -> String) -> String {
    (0..count)
        .map(|i| json!({"id": id(i), "task": format!("task {i}")}).to_string() + "\n")
        .collect()
}

#[test]
fn duplicates_across_chunks_are_each_named_with_their_first_line_in_line_order() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    // Pre-flight reads 4096 lines at a time: repeats of ids far behind them.
    let tasks = lines(10_000, |i| match i {
        8_999 | 9_499 => "t5".to_string(),
        9_998 => "t4200".to_string(),
        _ => format!("t{i}"),
    });
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &tasks);
    let output = test.run(&["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"]);
    output.expect_code(2);
    let expected = [
        // Lines sharing a problem are grouped.
        "tasks.jsonl: lines 9000, 9500 (2 lines): duplicate id `t5` (first on line 6)",
        "tasks.jsonl:9999: duplicate id `t4200` (first on line 4201)",
    ];
    let mut from = 0;
    for line in expected {
        let at = output.stderr[from..]
            .find(line)
            .unwrap_or_else(|| panic!("{line:?} missing or out of order:\n{}", output.stderr));
        from += at + line.len();
    }
    assert_eq!(output.stderr.matches("duplicate id").count(), 2);
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[test]
fn resume_of_a_large_batch_runs_exactly_the_ids_without_a_success() {
    let test = Test::new();
    // Requests naming FAIL fail for good (400 is never retried) the first 2 times.
    let server = MockServer::start(
        test.dir.path(),
        "rules:\n  - when: {contains: FAIL}\n    reply: {fault: {status: 400, message: no}}\n    \
         times: 2\ndefault: {echo: true}\n",
    );
    let count = 6_000;
    let tasks: String = (0..count)
        .map(|i| {
            let text = if i == 17 || i == 5_003 { "FAIL" } else { "ok" };
            json!({"id": format!("t{i}"), "task": format!("{text} {i}")}).to_string() + "\n"
        })
        .collect();
    let test = test
        .file("t.yaml", &tactic(&server.base_url()))
        .file("tasks.jsonl", &tasks);
    let run = |extra: &[&str]| {
        let mut args = vec![
            "batch",
            "tasks.jsonl",
            "--tactic",
            "t.yaml",
            "-o",
            "out",
            "-q",
            "-j",
            "16",
        ];
        args.extend_from_slice(extra);
        test.run(&args)
    };
    run(&[]).expect_code(1);
    assert_eq!(server.requests().len(), count);
    run(&["--resume"]).expect_code(1);
    assert_eq!(server.requests().len(), count, "failures are results");
    run(&["--retry-errors"]).expect_code(0);
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        count + 2,
        "only the two failed ids ran again"
    );
    let again = requests[count..].to_vec();
    let text = serde_json::to_string(&again).unwrap();
    assert!(
        text.contains("FAIL 17") && text.contains("FAIL 5003"),
        "{text}"
    );
    let summary = test.read_json("out/summary.json");
    assert_eq!(summary["success"], count as u64, "{summary}");
    assert_eq!(summary["failure"], 0, "{summary}");
}
