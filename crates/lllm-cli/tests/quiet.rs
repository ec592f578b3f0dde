//! `-q` is "only errors" in every command that has it, warnings included,
//! and a warning about a model without a price is said once per session
//! store, not on every run nor on a replay (issue 27).

mod common;

use common::{MockServer, Test};

/// The user config file's path in a test (`$HOME` is the temp dir).
const CONFIG: &str = ".config/lllm/config.yaml";

/// A tactic on `local` at `server`, whose model has no price.
fn tactic(server: &MockServer) -> String {
    format!(
        "tactic_type: t\nproviders:\n  local: {{api: openai, base_url: \"{}\"}}\n\
         global: {{model_name: local/unpriced}}\nagent_configs:\n  - {{name: a}}\n",
        server.base_url()
    )
}

const TASKS: &str = "{\"id\": \"a\", \"task\": \"one\"}\n{\"id\": \"b\", \"task\": \"two\"}\n";

const NO_PRICE: &str = "warning: no price known for `local/unpriced`";

#[test]
fn dash_q_silences_every_warning_in_every_command_that_has_it() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    // A credential written in the config file: a warning for every command
    // (the settings are read first), and the model has no price.
    let test = test
        .file(
            CONFIG,
            "providers:\n  gateway: {api: openai, base_url: \"http://127.0.0.1:9/v1\", \
             headers: {Authorization: \"Bearer sk-literal-123456\"}}\n",
        )
        .file("t.yaml", &tactic(&server))
        .file("tasks.jsonl", TASKS);
    let commands: [&[&str]; 4] = [
        &["run", "t.yaml", "the task", "--no-store"],
        &[
            "batch",
            "tasks.jsonl",
            "-t",
            "t.yaml",
            "-o",
            "out",
            "--no-store",
        ],
        &["merge", "out", "-o", "merged"],
        &["logs", "reindex", "--from", "out"],
    ];
    for args in commands {
        let loud = test.run(args);
        assert!(
            loud.stderr.contains("warning: ")
                && loud.stderr.contains("holds a credential in plain text"),
            "{args:?} warns without -q:\n{}",
            loud.stderr
        );
        if args[0] != "merge" && args[0] != "logs" {
            assert!(loud.stderr.contains(NO_PRICE), "{args:?}: {}", loud.stderr);
        }
        let mut quiet = args.to_vec();
        quiet.push("-q");
        if args[0] == "batch" {
            quiet[5] = "again";
        }
        if args[0] == "merge" {
            quiet[3] = "merged-again";
        }
        let output = test.run(&quiet);
        assert_eq!(output.code, 0, "{quiet:?}: {}", output.stderr);
        assert_eq!(output.stderr, "", "{quiet:?}");
    }
    // An error is still said under -q.
    let output = test.run(&["run", "missing.yaml", "the task", "-q"]);
    output.expect_code(2);
    assert!(output.stderr.starts_with("error: "), "{}", output.stderr);
}

#[test]
fn a_missing_price_is_said_once_per_store_and_never_on_a_replay() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {echo: true}\n");
    let test = test
        .file("t.yaml", &tactic(&server))
        .file("tasks.jsonl", TASKS);
    let warned = |args: &[&str]| {
        let output = test.run(args);
        output.expect_code(0);
        output.stderr.matches(NO_PRICE).count()
    };
    let run = ["run", "t.yaml", "the task"];
    assert_eq!(warned(&run), 1, "the first run in the store says it");
    assert_eq!(warned(&run), 0, "the next one does not");
    assert_eq!(
        warned(&["batch", "tasks.jsonl", "-t", "t.yaml", "-o", "out"]),
        0,
        "nor a batch in that store"
    );
    // Another store, once again; once for a whole batch.
    assert_eq!(
        warned(&[
            "batch",
            "tasks.jsonl",
            "-t",
            "t.yaml",
            "-o",
            "out2",
            "--store",
            "other"
        ]),
        1
    );
    assert_eq!(warned(&["run", "t.yaml", "x", "--store", "other"]), 0);
    // Without a store: once per run.
    for _ in 0..2 {
        assert_eq!(warned(&["run", "t.yaml", "x", "--no-store"]), 1);
    }
    // `-q` says nothing, so nothing is remembered.
    let quiet = test.run(&["run", "t.yaml", "x", "--store", "third", "-q"]);
    quiet.expect_code(0);
    assert_eq!(quiet.stderr, "");
    assert_eq!(warned(&["run", "t.yaml", "x", "--store", "third"]), 1);
    // A replay's costs were told when it ran.
    assert_eq!(
        warned(&["run", "t.yaml", "x", "--no-store", "--record", "r.json"]),
        1
    );
    let replay = test.run(&["replay", "r.json", "--rerun"]);
    replay.expect_code(0);
    assert!(!replay.stderr.contains("no price"), "{}", replay.stderr);
    // Where it is remembered: the store's `said.list`.
    let said = std::fs::read_to_string(test.path(".local/share/lllm/said.list")).unwrap();
    assert_eq!(said, "no-price local/unpriced\n");
}
