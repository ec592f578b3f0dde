//! Bad input gets one clear line, and nothing panics (issue 26), end to end
//! on the real binary, one test per class: a table cell of any width (no
//! panic: cut); a value of any size echoed into a line (bounded, `--json`
//! whole).

mod common;

use common::{MockServer, Test};
use serde_json::{Value, json};

/// Echoes the task with the offline mock provider.
const TACTIC: &str = "tactic_type: echoer
global: {model_name: mock/script, max_llm_recall: 0}
agent_configs: [{name: a, system_prompt: You repeat.}]
providers:
  mock: {script: replies.yaml}
";

/// A test dir with the echoing tactic and its own store.
fn test() -> Test {
    let test = Test::new()
        .file("t.yaml", TACTIC)
        .file("replies.yaml", "default: {echo: true}\n");
    let home = test.path("home").display().to_string();
    test.env("LLLM_HOME", &home)
}

/// Past `u16::MAX`: std's `{:width$}` panics on a width this large.
const WIDE: usize = 70_000;

#[track_caller]
fn assert_lines_within(text: &str, chars: usize) {
    for line in text.lines() {
        assert!(
            line.chars().count() <= chars,
            "a line of {} characters: {}…",
            line.chars().count(),
            line.chars().take(120).collect::<String>()
        );
    }
}

#[test]
fn every_table_cuts_a_cell_wider_than_a_format_width_can_be() {
    let test = test();
    let wide = "w".repeat(WIDE);
    test.run(&[
        "run",
        "t.yaml",
        "--task",
        "hi",
        "--tag",
        &format!("team={wide}"),
        "-q",
    ])
    .expect_code(0);

    // `logs cost`: one long tag broke it for the whole store (exit 101).
    let cost = test.run(&["logs", "cost", "--by", "tag:team"]);
    cost.expect_code(0);
    assert!(cost.stderr.is_empty(), "{}", cost.stderr);
    let lines: Vec<&str> = cost.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", cost.stdout);
    assert!(
        lines[1].starts_with("www") && lines[1].contains("…"),
        "{}",
        lines[1]
    );
    assert!(lines[2].starts_with("total"), "{}", lines[2]);
    assert_lines_within(&cost.stdout, 150);
    // The columns still line up under the header.
    let column = lines[0].find("sessions").unwrap();
    assert_eq!(lines[2].chars().position(|c| c == '1').unwrap(), column + 7);
    // JSON keeps the value whole.
    let json = test.run(&["logs", "cost", "--by", "tag:team", "--json"]);
    json.expect_code(0);
    let first: Value = serde_json::from_str(json.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["group"], wide.as_str());

    // `models`: a price file's model name.
    let prices = json!({&wide: {"input_per_million": 1, "output_per_million": 2}});
    let test = test.file("prices.json", &prices.to_string());
    let models = test.run(&["models", "www", "--prices", "prices.json"]);
    models.expect_code(0);
    assert!(
        models.stdout.lines().nth(1).unwrap().contains("www…"),
        "{}",
        models.stdout
    );
    assert_lines_within(&models.stdout, 300);

    // `cache stats`: a cached reply of a model with a long name.
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let model = "m".repeat(WIDE);
    let test = test.file(
        "cached.yaml",
        &format!(
            "tactic_type: cached\nglobal: {{model_name: local/{model}, max_llm_recall: 0}}\n\
             agent_configs: [{{name: a, system_prompt: You repeat.}}]\n\
             providers:\n  local: {{api: openai, base_url: \"{}\"}}\n",
            server.base_url()
        ),
    );
    test.run(&["run", "cached.yaml", "--task", "hi", "--cache", "-q"])
        .expect_code(0);
    let stats = test.run(&["cache", "stats"]);
    stats.expect_code(0);
    assert!(stats.stdout.contains("local/mmm"), "{}", stats.stdout);
    assert!(stats.stdout.contains("m…"), "{}", stats.stdout);
    assert_lines_within(&stats.stdout, 300);
}

#[test]
fn a_huge_value_is_echoed_cut_with_its_length() {
    let test = test();
    let huge = "v".repeat(100_000);
    for round in 0..3 {
        let tags: Vec<String> = (0..4).map(|key| format!("k{key}={huge}{round}")).collect();
        let mut args = vec!["run", "t.yaml", "--task", "hi", "-q"];
        for tag in &tags {
            args.extend(["--tag", tag.as_str()]);
        }
        test.run(&args).expect_code(0);
    }

    // The listing: 10.5 MB for five sessions before; now a line each.
    let listing = test.run(&["logs", "-n", "5"]);
    listing.expect_code(0);
    assert_eq!(listing.stdout.lines().count(), 3, "{}", listing.stdout);
    assert!(
        listing.stdout.len() < 2_000,
        "{} bytes",
        listing.stdout.len()
    );
    assert!(listing.stdout.contains("characters)"), "{}", listing.stdout);
    // `--json` stays whole.
    let json = test.run(&["logs", "-n", "1", "--json"]);
    let session: Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(session["tags"]["k0"], format!("{huge}2"));

    // Errors: an id, a flag's value, a tag, a time, a grouping, paths.
    let cut = format!("{}… (100000 characters)", "v".repeat(200));
    for args in [
        vec!["replay", huge.as_str()],
        vec!["merge", huge.as_str(), "-o", "merged"],
        vec!["batch", huge.as_str(), "--tactic", "t.yaml", "-o", "out"],
        vec!["logs", "show", huge.as_str()],
        vec!["logs", "--since", huge.as_str()],
        vec!["logs", "cost", "--by", huge.as_str()],
        vec!["logs", "--tag", huge.as_str()],
        vec!["run", "t.yaml", "--task", "hi", "--tag", huge.as_str()],
    ] {
        let output = test.run(&args);
        output.expect_code(2);
        assert_eq!(
            output.stderr.lines().count(),
            1,
            "{:?}: {}",
            &args[..2],
            output.stderr
        );
        assert!(
            output.stderr.contains(&cut),
            "{:?}: {}",
            &args[..2],
            output.stderr
        );
        assert!(
            output.stderr.len() < 600,
            "{:?}: {}",
            &args[..2],
            output.stderr
        );
    }

    // A task file's id, repeated: the pre-flight error names it, cut.
    let line = json!({"id": huge, "task": "x"}).to_string();
    let test = test.file("tasks.jsonl", &format!("{line}\n{line}\n"));
    let batch = test.batch("t.yaml", "out", &[]);
    batch.expect_code(2);
    let duplicate = batch
        .stderr
        .lines()
        .find(|line| line.contains("duplicate id"))
        .unwrap_or_else(|| panic!("{}", batch.stderr));
    assert!(duplicate.contains(&cut), "{duplicate}");
    assert_lines_within(&batch.stderr, 600);
}

/// `t.yaml` run with `flow`/`extra` added to an echoing tactic whose model is
/// served by `lllm-mock` at `url` (so a request that goes out is seen).
fn served_tactic(url: &str, extra: &str) -> String {
    format!(
        "tactic_type: served\nglobal: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs: [{{name: a, system_prompt: You repeat.}}]\n\
         providers:\n  local: {{api: openai, base_url: \"{url}\", api_key_env: TEST_KEY}}\n{extra}"
    )
}

#[test]
fn what_was_accepted_silently_is_refused_before_anything_is_sent() {
    let test = test().env("TEST_KEY", "sk-test-key-0001");
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let url = server.base_url();
    let tool = |parameters: &str| {
        format!(
            "tools:\n  - name: wc\n    description: count\n    parameters: {parameters}\n    \
             command: [wc]\n"
        )
    };
    let fork = "flow:\n  - {step: one, agent: a, text: \"{{ task }}\"}\n  \
                - {step: two, agent: a, dialog: side, fork: {from: nowhere}, text: again}\n";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "parameters: a string",
            tool("\"a string\""),
            "t.yaml:9:5: tool `wc`: `parameters` is a string, not a JSON Schema object",
        ),
        (
            "parameters: a list",
            tool("[text]"),
            "t.yaml:9:5: tool `wc`: `parameters` is a list, not a JSON Schema object",
        ),
        (
            "parameters: type 5",
            tool("{type: 5}"),
            "t.yaml:9:5: tool `wc`: `parameters` has `type: 5`",
        ),
        (
            "parameters: not a schema",
            tool("{type: object, properties: {text: {type: 7}}}"),
            "t.yaml:9:5: tool `wc`: `parameters` is not a valid JSON Schema at `/properties/text/type`",
        ),
        (
            "prompts: a file",
            "prompts: notes.txt\n".into(),
            "t.yaml:6:1: `prompts`: `./notes.txt` is a regular file, not a directory",
        ),
        (
            "fork: from nowhere",
            fork.into(),
            "t.yaml:8:48: step `two`: `fork.from` names dialog `nowhere`, which no step of agent `a` opens \
             before it",
        ),
    ];
    let test = test
        .file("notes.txt", "not prompts")
        .file("tasks.jsonl", "{\"id\": \"t1\", \"task\": \"hi\"}\n");
    for (name, extra, expected) in &cases {
        std::fs::write(test.path("t.yaml"), served_tactic(&url, extra)).unwrap();
        for output in [
            test.run(&["run", "t.yaml", "--task", "hi"]),
            test.batch(
                "t.yaml",
                &format!("out-{}", name.replace([' ', ':'], "-")),
                &[],
            ),
        ] {
            output.expect_code(2);
            assert!(
                output.stderr.contains(expected),
                "{name}: {}",
                output.stderr
            );
            let errors = output
                .stderr
                .lines()
                .filter(|line| line.starts_with("error:"));
            let lines: Vec<&str> = errors.filter(|line| line.contains(expected)).collect();
            assert_eq!(lines.len(), 1, "{name}: {}", output.stderr);
        }
    }

    // `api_key_env` naming a variable set nowhere (environment, `.env`, keys).
    std::fs::write(test.path("t.yaml"), served_tactic(&url, "")).unwrap();
    let unset = Test::new()
        .file("t.yaml", &served_tactic(&url, ""))
        .file("tasks.jsonl", "{\"id\": \"t1\", \"task\": \"hi\"}\n");
    let expected = "TEST_KEY is not set (the `api_key_env` of `providers.local`, needed by \
                    model `local/m`)";
    for output in [
        unset.run(&["run", "t.yaml", "--task", "hi", "--no-record"]),
        unset.run(&["run", "t.yaml", "--task", "hi", "--dry-run"]),
        unset.batch("t.yaml", "out", &[]),
    ] {
        output.expect_code(2);
        assert!(output.stderr.contains(expected), "{}", output.stderr);
    }
    assert!(server.requests().is_empty(), "{:?}", server.requests());
    // Set in an env file, it is found (the usual order: environment, env
    // file, keys file).
    let found = unset.file(".env", "TEST_KEY=sk-from-env-file\n");
    found
        .run(&["run", "t.yaml", "--task", "hi", "--no-record", "-q"])
        .expect_code(0);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_byte_order_mark_starts_any_file_lllm_reads() {
    const BOM: &str = "\u{feff}";
    let test = Test::new();
    let home = test.path("home").display().to_string();
    let xdg = test.path("xdg").display().to_string();
    let test = test
        .env("LLLM_HOME", &home)
        .env("XDG_CONFIG_HOME", &xdg)
        .file(
            "t.yaml",
            &format!(
                "{BOM}tactic_type: echoer\nglobal: {{max_llm_recall: 0}}\n\
                 agent_configs: [{{name: a, system_prompt: You repeat.}}]\n\
                 providers:\n  mock: {{script: replies.yaml}}\n\
                 flow:\n  - {{step: one, agent: a, prompt: ask}}\n"
            ),
        )
        .file("replies.yaml", &format!("{BOM}default: {{echo: true}}\n"))
        .file(
            "prompts/ask.md",
            &format!("{BOM}---\nrenderer: jinja\n---\nSay {{{{ task }}}} back.\n"),
        )
        .file(
            "xdg/lllm/config.yaml",
            &format!("{BOM}model: mock/script\n"),
        )
        .file(
            "tasks.jsonl",
            &format!(
                "{BOM}{{\"id\": \"t1\", \"task\": \"hi\"}}\n{{\"id\": \"t2\", \"task\": \"ho\"}}\n"
            ),
        )
        .file(
            "prices.json",
            &format!(
                "{BOM}{{\"my-model\": {{\"input_per_million\": 1, \"output_per_million\": 2}}}}"
            ),
        );

    // Tactic, mock script, prompt front matter and config file.
    let run = test.run(&["run", "t.yaml", "--task", "hi", "-q"]);
    run.expect_code(0);
    assert_eq!(run.stdout.trim(), "Say hi back.");
    // The task file's first line.
    test.batch("t.yaml", "out", &[]).expect_code(0);
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    let ids: Vec<String> = results
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["id"].to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{results}");
    assert!(ids.contains(&"\"t1\"".to_string()), "{results}");
    // A price file.
    let models = test.run(&["models", "my-model", "--prices", "prices.json"]);
    models.expect_code(0);
    assert!(models.stdout.contains("my-model"), "{}", models.stdout);
}

#[test]
fn a_prompt_chaining_thousands_of_operators_is_one_error_line_not_a_crash() {
    // 20,000 `+` in one tag: minijinja's compiler recursed once per operator
    // and the process died of SIGSEGV.
    let chain = format!("Say {{{{ task{} }}}} back.\n", " ~ task".repeat(20_000));
    let test = test()
        .file(
            "t.yaml",
            &format!("{TACTIC}flow:\n  - {{step: one, agent: a, prompt: ask}}\n"),
        )
        .file(
            "prompts/ask.md",
            &format!("---\nrenderer: jinja\n---\nintro\n{chain}"),
        );
    let run = test.run(&["run", "t.yaml", "--task", "hi", "-q"]);
    run.expect_code(2);
    let error = run.stderr.trim();
    assert_eq!(error.lines().count(), 1, "{error}");
    assert!(
        error.contains("ask.md:5") && error.contains("more than 1000 operators"),
        "{error}"
    );
}

/// `lllm ARGS` in `test`'s dir and environment, under an open-file limit of
/// `files` (soft and hard: `sh`'s `ulimit -n`), to the end.
fn run_limited(test: &Test, files: u32, args: &[&str]) -> common::Output {
    let script = format!("ulimit -n {files} && exec \"$0\" \"$@\"");
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_lllm"))
        .args(args)
        .current_dir(test.dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", test.dir.path())
        .env("LLLM_HOME", test.path("home"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("start sh");
    common::Output::of(output)
}

#[test]
fn running_out_of_file_descriptors_is_named_and_a_batch_fits_its_limit() {
    let test = test();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    // One task, 100 branches at once, each opening its connection in the
    // same poll of the flow: under a limit of 32 most find no descriptor.
    // (`max_concurrency` lets them all go: without it, lllm would keep to
    // what a local server serves, 4 at first.)
    let fan = format!(
        "tactic_type: fan\nglobal: {{model_name: local/m, max_llm_recall: 0}}\n\
         agent_configs: [{{name: a, system_prompt: You repeat.}}]\n\
         providers:\n  local: {{api: openai, base_url: \"{}\", max_concurrency: 1000}}\n\
         pricing:\n  m: {{input_per_million: 1, output_per_million: 1}}\n\
         flow:\n  - parallel: {{foreach: \"range(100)\", as: n}}\n    steps:\n      \
         - {{step: one, agent: a, text: \"say {{{{ n }}}}\"}}\n",
        server.base_url()
    );
    let test = test.file("fan.yaml", &fan);
    let output = run_limited(
        &test,
        32,
        &["run", "fan.yaml", "--task", "hi", "--no-record"],
    );
    output.expect_code(1);
    assert!(
        output.stderr.contains(
            "too many open files (the process's limit is 32; raise it with `ulimit -n` or \
             lower -j): no connection to `"
        ),
        "{}",
        output.stderr
    );
    assert!(
        !output.stderr.contains("cannot connect"),
        "{}",
        output.stderr
    );

    // A batch whose `-j` cannot fit the limit runs fewer at once, and says so.
    let tasks: String = (0..40)
        .map(|index| {
            json!({"id": format!("t{index}"), "task": format!("task {index}")}).to_string() + "\n"
        })
        .collect();
    let test = test.file("tasks.jsonl", &tasks);
    let batch = run_limited(
        &test,
        100,
        &[
            "batch",
            "tasks.jsonl",
            "--tactic",
            "t.yaml",
            "-o",
            "out",
            "-j",
            "500",
        ],
    );
    batch.expect_code(0);
    // A warning: said without `-q` (which is "only errors").
    assert!(
        batch.stderr.lines().any(|line| line
            == "warning: `-j 500` needs about 2064 open files and this process may have 100 \
         (`ulimit -n`); running 9 tasks at once; hint: raise the limit (`ulimit -n 2064`) or \
         lower -j"),
        "{}",
        batch.stderr
    );
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    assert_eq!(results.lines().count(), 40);
    assert!(
        results
            .lines()
            .all(|line| line.contains("\"state\":\"success\"")),
        "{results}"
    );
}

#[test]
fn a_record_s_text_is_cut_by_characters_never_mid_character() {
    let test = test();
    test.run(&[
        "run", "t.yaml", "--task", "hi", "-q", "--record", "run.json",
    ])
    .expect_code(0);
    let mut record: Value =
        serde_json::from_str(&std::fs::read_to_string(test.path("run.json")).unwrap()).unwrap();
    // Byte 19 of the start time and byte 8 of the dialog id fall inside `é`,
    // where the listing and `replay` cut them (a panic, exit 101, before).
    record["started_at"] = json!("2026-11-27T13:28:1é");
    record["session_id"] = json!("crafted-session");
    let dialog = record["agent_calls"][0]["dialog_id"]
        .as_str()
        .unwrap()
        .to_string();
    let text = serde_json::to_string(&record)
        .unwrap()
        .replace(&dialog, "aéééééééé");
    let test = test.file("records/crafted.json", &text);

    let replay = test.run(&["replay", "records/crafted.json"]);
    replay.expect_code(0);
    assert!(
        replay.stdout.contains("dialog `main` [aééééééé]:"),
        "{}",
        replay.stdout
    );

    test.run(&["logs", "reindex", "--from", "records", "-q"])
        .expect_code(0);
    let listing = test.run(&["logs"]);
    listing.expect_code(0);
    assert!(
        listing
            .stdout
            .lines()
            .any(|line| line.starts_with("2026-11-27T13:28:1é  ")),
        "{}",
        listing.stdout
    );
}
