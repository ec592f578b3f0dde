//! The settings a user brings outside any tactic, end to end on the real
//! binary: the user config file (`$HOME/.config/lllm/config.yaml` in the
//! test's temp dir, or `LLLM_CONFIG`), `.env` and `--env-file`, `lllm keys`,
//! and the `LLLM_*` defaults, checked on what reaches `lllm-mock` (the model
//! in the body, a fingerprint of the auth header).

mod common;

use std::path::Path;

use common::{MockServer, Test, fingerprint};
use serde_json::Value;

/// A tactic whose one agent names no model.
const NO_MODEL: &str = "agent_configs:\n  - name: a\n    system_prompt: terse\n";

/// The user config file's path in a test (`$HOME` is the temp dir).
const CONFIG: &str = ".config/lllm/config.yaml";

/// A config file with a default model on a `local` provider at `server`,
/// its key in `LOCAL_KEY`; `extra` is appended.
fn config(server: &MockServer, extra: &str) -> String {
    format!(
        "model: local/from-config\nproviders:\n  local: {{api: openai, base_url: \"{}\", api_key_env: LOCAL_KEY}}\n{extra}",
        server.base_url()
    )
}

fn models(server: &MockServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|request| request["body"]["model"].as_str().unwrap_or("").to_string())
        .collect()
}

fn auths(server: &MockServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|request| request["auth"].as_str().unwrap_or("").to_string())
        .collect()
}

/// `lllm ARGS` in the test's directory with more variables.
fn run_with(test: &Test, args: &[&str], env: &[(&str, &str)]) -> common::Output {
    let mut command = test.command(args);
    command.envs(env.iter().copied());
    common::Output::of(command.output().expect("run lllm"))
}

/// `lllm ARGS` in `directory` (relative to the test's).
fn run_in(test: &Test, directory: &str, args: &[&str]) -> common::Output {
    let mut command = test.command(args);
    command.current_dir(test.path(directory));
    common::Output::of(command.output().expect("run lllm"))
}

#[test]
fn the_config_files_model_and_provider_reach_the_request() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let test = test
        .file(CONFIG, &config(&server, ""))
        .file("t.yaml", NO_MODEL)
        .env("LOCAL_KEY", "sk-local");
    let output = test.run(&["run", "t.yaml", "hi", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "ok\n");
    assert_eq!(models(&server), ["from-config"]);
    assert_eq!(auths(&server), [fingerprint("Bearer sk-local")]);
}

#[test]
fn the_model_comes_from_the_flag_then_lllm_model_then_the_file() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let test = test
        .file(CONFIG, &config(&server, ""))
        .file("t.yaml", NO_MODEL)
        .file(
            "own.yaml",
            "global: {model_name: local/from-tactic}\nagent_configs: [{name: a}]\n",
        )
        .env("LOCAL_KEY", "k")
        .env("LLLM_MODEL", "local/from-env");
    test.run(&["run", "t.yaml", "hi", "--no-record"])
        .expect_code(0);
    test.run(&[
        "run",
        "t.yaml",
        "hi",
        "--no-record",
        "-m",
        "local/from-flag",
    ])
    .expect_code(0);
    // A tactic's own model wins over both defaults; `-m` over it.
    test.run(&["run", "own.yaml", "hi", "--no-record"])
        .expect_code(0);
    test.run(&[
        "run",
        "own.yaml",
        "hi",
        "--no-record",
        "-m",
        "local/from-flag",
    ])
    .expect_code(0);
    assert_eq!(
        models(&server),
        ["from-env", "from-flag", "from-tactic", "from-flag"]
    );
    // `lllm batch` takes the same default.
    let test = test.file("tasks.jsonl", "\"one\"\n");
    test.run(&[
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-q",
    ])
    .expect_code(0);
    assert_eq!(models(&server)[4], "from-env");
}

#[test]
fn a_tactics_own_provider_entry_wins_whole() {
    let test = Test::new();
    let users = MockServer::start(test.dir.path(), "default: {text: user}\n");
    let tactics = MockServer::start(test.dir.path(), "default: {text: tactic}\n");
    // The tactic's `local` has no `api_key_env`: the config file's is not
    // merged in, so its key cannot go to the tactic's server.
    let tactic = format!(
        "{NO_MODEL}providers:\n  local: {{api: openai, base_url: \"{}\"}}\n",
        tactics.base_url()
    );
    let test = test
        .file(CONFIG, &config(&users, ""))
        .file("t.yaml", &tactic)
        .env("LOCAL_KEY", "sk-users-key");
    let output = test.run(&["run", "t.yaml", "hi", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "tactic\n");
    assert!(users.requests().is_empty());
    // No key at all: the config file's entry (and its key) is not merged in.
    assert_eq!(auths(&tactics), [""]);
}

#[test]
fn the_config_files_prices_are_read_from_its_directory() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "default: {text: ok, usage: {prompt_tokens: 1000000, completion_tokens: 0}}\n",
    );
    let test = test
        .file(CONFIG, &config(&server, "prices: prices.yaml\n"))
        .file(
            ".config/lllm/prices.yaml",
            "from-config: {input_per_million: 2.5, output_per_million: 10}\n",
        )
        .file("t.yaml", NO_MODEL)
        .env("LOCAL_KEY", "k");
    let output = test.run(&["run", "t.yaml", "hi", "--no-record", "--json"]);
    output.expect_code(0);
    let summary: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(summary["cost"], 2.5, "{}", output.stdout);
    // `LLLM_PRICES` wins over the file, as `--prices` would.
    let test = test.file(
        "cheap.yaml",
        "from-config: {input_per_million: 1, output_per_million: 1}\n",
    );
    let cheap = test.path("cheap.yaml").display().to_string();
    let test = test.env("LLLM_PRICES", &cheap);
    let output = test.run(&["run", "t.yaml", "hi", "--no-record", "--json"]);
    let summary: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(summary["cost"], 1.0, "{}", output.stdout);
}

/// A batch of three tasks whose tool waits until all three run at once: it
/// finishes only if the batch runs three tasks at a time (a lower
/// concurrency would leave the tool waiting until its limit, and fail).
fn barrier_batch(concurrency_setup: impl FnOnce(Test) -> Test, args: &[&str]) {
    let test = Test::new();
    let call = "{tool_calls: [{id: c1, name: arrive, arguments: {}}]}";
    let server = MockServer::start(
        test.dir.path(),
        &format!(
            "replies:\n  - {call}\n  - {call}\n  - {call}\n  - {{text: done}}\n  - {{text: done}}\n  - {{text: done}}\n"
        ),
    );
    let tactic = format!(
        "global: {{model_name: local/m}}\nagent_configs:\n  - name: a\n    tools: [arrive]\n\
         providers:\n  local: {{api: openai, base_url: \"{}\"}}\n\
         tools:\n  - name: arrive\n    description: wait for the others\n    parameters: {{type: object, properties: {{}}}}\n    command: [sh, arrive.sh]\n    timeout_s: 120\n",
        server.base_url()
    );
    // Up to 100 s: far beyond any machine's pace, short of the tool's limit.
    let arrive = "mkdir -p arrived; touch arrived/$$; i=0\n\
                  while [ \"$(ls arrived | wc -l)\" -lt 3 ]; do i=$((i+1)); [ $i -gt 1000 ] && { echo alone; exit 1; }; sleep 0.1; done\n\
                  echo together\n";
    let test = concurrency_setup(
        test.file("t.yaml", &tactic)
            .file("arrive.sh", arrive)
            .file("tasks.jsonl", "\"1\"\n\"2\"\n\"3\"\n"),
    );
    let mut all = vec![
        "batch",
        "tasks.jsonl",
        "--tactic",
        "t.yaml",
        "-o",
        "out",
        "-q",
    ];
    all.extend_from_slice(args);
    test.run(&all).expect_code(0);
    let results = std::fs::read_to_string(test.path("out/results.jsonl")).unwrap();
    assert_eq!(results.matches("\"success\"").count(), 3, "{results}");
}

#[test]
fn batch_concurrency_comes_from_the_flag_then_the_variable_then_the_file() {
    barrier_batch(|test| test.file(CONFIG, "concurrency: 3\n"), &[]);
    barrier_batch(
        |test| {
            test.file(CONFIG, "concurrency: 1\n")
                .env("LLLM_CONCURRENCY", "3")
        },
        &[],
    );
    barrier_batch(
        |test| {
            test.file(CONFIG, "concurrency: 1\n")
                .env("LLLM_CONCURRENCY", "1")
        },
        &["-j", "3"],
    );
}

#[test]
fn bad_numbers_and_booleans_in_variables_are_usage_errors() {
    let test = Test::new()
        .file(
            "t.yaml",
            "global: {model_name: mock/echo}\nagent_configs: [{name: a}]\n",
        )
        .file("tasks.jsonl", "\"one\"\n");
    let batch = ["batch", "tasks.jsonl", "--tactic", "t.yaml", "-o", "out"];
    let output = run_with(&test, &batch, &[("LLLM_CONCURRENCY", "0")]);
    output.expect_code(2);
    assert!(output.stderr.contains("'0'"), "{}", output.stderr);
    let output = run_with(&test, &["run", "t.yaml", "hi"], &[("LLLM_CACHE", "maybe")]);
    output.expect_code(2);
    assert!(output.stderr.contains("maybe"), "{}", output.stderr);
    let output = run_with(
        &test,
        &["run", "t.yaml", "hi", "--no-record"],
        &[("LLLM_CACHE", "no")],
    );
    output.expect_code(0);
    // `--cache` before a positional takes no value from it.
    let output = run_with(
        &test,
        &["run", "--cache", "t.yaml", "hi", "--no-record"],
        &[],
    );
    output.expect_code(0);
}

#[test]
fn records_go_to_the_store_and_logs_find_them_from_anywhere() {
    let test = Test::new()
        .file(
            "project/t.yaml",
            "global: {model_name: mock/echo}\nagent_configs: [{name: a}]\n",
        )
        .file("elsewhere/.keep", "");
    let output = run_in(&test, "project", &["run", "t.yaml", "hello records"]);
    output.expect_code(0);
    assert!(!test.path("project/sessions").exists(), "no ./sessions");
    let records = test.path(".local/share/lllm/sessions");
    let written: Vec<_> = std::fs::read_dir(&records).unwrap().flatten().collect();
    assert_eq!(written.len(), 1);
    let record_path = written[0].path();
    assert!(
        output.stderr.contains(&record_path.display().to_string()),
        "{}",
        output.stderr
    );
    let session_id = record_path
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    // From another directory, `lllm logs` lists and shows it.
    let listed = run_in(&test, "elsewhere", &["logs", "--json"]);
    listed.expect_code(0);
    assert!(listed.stdout.contains(&session_id), "{}", listed.stdout);
    let shown = run_in(&test, "elsewhere", &["logs", "show", &session_id]);
    shown.expect_code(0);
    assert!(shown.stdout.contains("hello records"), "{}", shown.stdout);

    // The config file's `records` (from its directory), and `LLLM_HOME`
    // moving the default with the store.
    let test = test.file(CONFIG, "records: runs\n");
    test.run(&["run", "project/t.yaml", "again"]).expect_code(0);
    assert_eq!(
        std::fs::read_dir(test.path(".config/lllm/runs"))
            .unwrap()
            .count(),
        1
    );
    let test = test.file(CONFIG, "").env("LLLM_HOME", "home");
    test.run(&["run", "project/t.yaml", "again"]).expect_code(0);
    assert_eq!(
        std::fs::read_dir(test.path("home/sessions"))
            .unwrap()
            .count(),
        1
    );
}

#[test]
fn a_bad_config_file_is_one_line_and_nothing_runs() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let test = test
        .file(CONFIG, &config(&server, "concurency: 4\n"))
        .file("t.yaml", NO_MODEL)
        .env("LOCAL_KEY", "k");
    let output = test.run(&["run", "t.yaml", "hi"]);
    output.expect_code(2);
    let config_path = test.path(CONFIG).display().to_string();
    assert_eq!(
        output.stderr,
        format!(
            "error: {config_path}:4:1: unknown key `concurency`; known keys: model, providers, prices, \
             concurrency, records, store, cache, compress; did you mean `concurrency`?\n"
        )
    );
    assert!(server.requests().is_empty());
    // `LLLM_CONFIG` names another file; one that is not there is an error.
    let test = test
        .file("mine.yaml", "model: [unclosed\n")
        .env("LLLM_CONFIG", "mine.yaml");
    let output = test.run(&["run", "t.yaml", "hi"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .starts_with("error: mine.yaml:1:8: unclosed bracket '['"),
        "{}",
        output.stderr
    );
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    let output = test.run(&["run", "t.yaml", "hi", "--config", "missing.yaml"]);
    output.expect_code(2);
    assert!(
        output
            .stderr
            .contains("config file `missing.yaml` not found"),
        "{}",
        output.stderr
    );
    // A key written in plain text is refused, without echoing it.
    let test = test.file(
        "mine.yaml",
        "providers:\n  local: {base_url: \"http://127.0.0.1:1/v1\", api_key: sk-plain-text}\n",
    );
    let output = test.run(&["run", "t.yaml", "hi"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("`providers.local.api_key`"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("sk-plain-text"));
}

#[test]
fn dot_env_and_env_files_give_keys_and_the_environment_wins() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let test = test
        .file(CONFIG, &config(&server, ""))
        .file("t.yaml", NO_MODEL)
        .file(
            ".env",
            "# the project's keys\nexport LOCAL_KEY=\"sk-dotenv\"\n",
        )
        .file("other.env", "LOCAL_KEY='sk-other'\n");
    test.run(&["run", "t.yaml", "hi", "--no-record"])
        .expect_code(0);
    test.run(&[
        "run",
        "t.yaml",
        "hi",
        "--no-record",
        "--env-file",
        "other.env",
    ])
    .expect_code(0);
    run_with(
        &test,
        &["run", "t.yaml", "hi", "--no-record"],
        &[("LLLM_ENV_FILE", "other.env")],
    )
    .expect_code(0);
    // Without `.env` no key is found: the variable `api_key_env` names is
    // unset, which is bad input before anything is sent (issue 26). The
    // flag wins over `LLLM_ENV_FILE`.
    let unset = run_with(
        &test,
        &["run", "t.yaml", "hi", "--no-record", "--no-env-file"],
        &[("LLLM_ENV_FILE", "other.env")],
    );
    unset.expect_code(2);
    assert!(
        unset
            .stderr
            .contains("LOCAL_KEY is not set (the `api_key_env` of `providers.local`"),
        "{}",
        unset.stderr
    );
    let test = test.env("LOCAL_KEY", "sk-process");
    test.run(&["run", "t.yaml", "hi", "--no-record"])
        .expect_code(0);
    assert_eq!(
        auths(&server),
        [
            fingerprint("Bearer sk-dotenv"),
            fingerprint("Bearer sk-other"),
            fingerprint("Bearer sk-other"),
            fingerprint("Bearer sk-process"),
        ]
    );
}

#[test]
fn a_malformed_env_file_names_its_line() {
    let test = Test::new()
        .file(
            "t.yaml",
            "global: {model_name: mock/echo}\nagent_configs: [{name: a}]\n",
        )
        .file(".env", "A=1\nB = \"two\"\nthis is sk-not-a-pair\n");
    let output = test.run(&["run", "t.yaml", "hi"]);
    output.expect_code(2);
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert!(
        output.stderr.starts_with("error: .env:3: "),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("sk-not-a-pair"));
    let output = test.run(&["run", "t.yaml", "hi", "--env-file", "nope.env"]);
    output.expect_code(2);
    assert!(output.stderr.contains("`nope.env`"), "{}", output.stderr);
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
#[test]
fn keys_are_kept_private_used_listed_by_name_and_removed() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let tactic = format!(
        "global: {{model_name: local/m}}\nagent_configs: [{{name: a}}]\n\
         providers:\n  local: {{api: openai, base_url: \"{}\", api_key_env: LOCAL_KEY}}\n",
        server.base_url()
    );
    let xdg = test.path("xdg").display().to_string();
    let test = test.file("t.yaml", &tactic).env("XDG_CONFIG_HOME", &xdg);
    let keys = test.path("xdg/lllm/keys.json");

    let path = test.run(&["keys", "path"]);
    path.expect_code(0);
    assert_eq!(path.stdout.trim(), keys.display().to_string());
    let mut set = test.command(&["keys", "set", "LOCAL_KEY"]);
    set.stdin(std::process::Stdio::piped());
    let mut child = set.spawn().unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"sk-from-keys\n")
            .unwrap();
    }
    let output = common::Output::of(child.wait_with_output().unwrap());
    output.expect_code(0);
    assert!(!output.stderr.contains("sk-from-keys"));
    assert_eq!(mode(&keys), 0o600);
    assert_eq!(mode(&test.path("xdg/lllm")), 0o700);

    test.run(&["run", "t.yaml", "hi", "--no-record"])
        .expect_code(0);
    let list = test.run(&["keys", "list"]);
    list.expect_code(0);
    assert_eq!(list.stdout, "LOCAL_KEY\tused\n");
    // The environment wins, and `list` says so; still no value shown.
    let shadowed = run_with(&test, &["keys", "list"], &[("LOCAL_KEY", "sk-process")]);
    assert_eq!(shadowed.stdout, "LOCAL_KEY\tthe environment wins\n");
    run_with(
        &test,
        &["run", "t.yaml", "hi", "--no-record"],
        &[("LOCAL_KEY", "sk-process")],
    )
    .expect_code(0);
    for output in [&list, &shadowed] {
        assert!(!output.stdout.contains("sk-") && !output.stderr.contains("sk-"));
    }
    assert_eq!(
        auths(&server),
        [
            fingerprint("Bearer sk-from-keys"),
            fingerprint("Bearer sk-process")
        ]
    );

    let output = test.run(&["keys", "remove", "LOCAL_KEYS"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("did you mean `LOCAL_KEY`?"),
        "{}",
        output.stderr
    );
    test.run(&["keys", "remove", "LOCAL_KEY"]).expect_code(0);
    assert_eq!(test.run(&["keys", "list"]).stdout, "");
    // Once removed, the variable `api_key_env` names is unset: refused
    // before anything is sent.
    test.run(&["run", "t.yaml", "hi", "--no-record"])
        .expect_code(2);
    assert_eq!(
        auths(&server).len(),
        2,
        "nothing sent once the key is removed"
    );
    // A key is never taken from the command line, and an empty stdin is no key.
    test.run(&["keys", "set", "LOCAL_KEY", "sk-on-the-line"])
        .expect_code(2);
    let output = test.run(&["keys", "set", "openai"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("no value for `OPENAI_API_KEY`"),
        "{}",
        output.stderr
    );
    // A keys file others can read is used, with a warning.
    std::fs::write(&keys, "{\"LOCAL_KEY\": \"sk-shared\"}").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = test.run(&["run", "t.yaml", "hi", "--no-record"]);
    output.expect_code(0);
    assert!(
        output
            .stderr
            .contains("can be read by other users (mode 0644)"),
        "{}",
        output.stderr
    );
    assert_eq!(auths(&server)[2], fingerprint("Bearer sk-shared"));
}

#[cfg(unix)]
#[test]
fn keys_from_files_never_reach_a_tools_environment() {
    let test = Test::new();
    let server = MockServer::start(
        test.dir.path(),
        "replies:\n  - {tool_calls: [{id: c1, name: show_env, arguments: {}}]}\n  - {text: done}\n",
    );
    let tactic = "agent_configs:\n  - name: a\n    tools: [show_env]\n\
                  tools:\n  - name: show_env\n    description: environment\n    parameters: {type: object, properties: {}}\n    command: [sh, show_env.sh]\n";
    let test = test
        .file(CONFIG, &config(&server, ""))
        .file("t.yaml", tactic)
        .file("show_env.sh", "env > seen.env\necho seen\n")
        .file(
            ".env",
            "LOCAL_KEY=sk-dotenv-key\nOTHER_SECRET=sk-dotenv-other\n",
        )
        .file(
            ".config/lllm/keys.json",
            "{\"OPENAI_API_KEY\": \"sk-keys-file\"}",
        );
    let output = test.run(&["run", "t.yaml", "hi", "--no-record"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "done\n");
    assert_eq!(auths(&server)[0], fingerprint("Bearer sk-dotenv-key"));
    let seen = std::fs::read_to_string(test.path("seen.env")).unwrap();
    assert!(seen.contains("PATH="), "{seen}");
    for secret in ["sk-dotenv-key", "sk-dotenv-other", "sk-keys-file"] {
        assert!(!seen.contains(secret), "{secret} reached the tool: {seen}");
    }
}

/// The words of the `lllm config show` line of `key`.
fn shown(stdout: &str, key: &str) -> String {
    stdout
        .lines()
        .find(|line| {
            line.strip_prefix(key)
                .is_some_and(|rest| rest.starts_with("  "))
        })
        .map(|line| {
            line[key.len()..]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| panic!("no `{key}` line in {stdout}"))
}

#[test]
fn config_show_names_where_each_setting_comes_from_and_no_secret() {
    let test = Test::new()
        .file(
            CONFIG,
            "model: openai/gpt-4o-mini\nconcurrency: 8\nproviders:\n  gateway: {base_url: \"https://user:hunter2@gw.example/v1\", api_key_env: GW_KEY}\n",
        )
        .file(".env", "GW_KEY=sk-gateway\n")
        .env("LLLM_HOME", "store");
    let output = test.run(&["config", "show"]);
    output.expect_code(0);
    let config_path = test.path(CONFIG).display().to_string();
    let stdout = &output.stdout;
    assert_eq!(
        shown(stdout, "model"),
        format!("openai/gpt-4o-mini ({config_path} (model))")
    );
    assert_eq!(
        shown(stdout, "concurrency"),
        format!("8 ({config_path} (concurrency))")
    );
    assert_eq!(shown(stdout, "store"), "store (LLLM_HOME)");
    assert_eq!(
        shown(stdout, "records"),
        "store/sessions (the store (LLLM_HOME))"
    );
    assert!(shown(stdout, "env files").starts_with(".env "), "{stdout}");
    assert!(
        shown(stdout, "provider gateway").contains("gw.example"),
        "{stdout}"
    );
    for secret in ["hunter2", "sk-gateway"] {
        assert!(!stdout.contains(secret), "{stdout}");
    }
    let output = run_with(&test, &["config", "show"], &[("LLLM_MODEL", "mock/echo")]);
    assert_eq!(shown(&output.stdout, "model"), "mock/echo (LLLM_MODEL)");
    let path = test.run(&["config", "path"]);
    assert_eq!(path.stdout.trim(), config_path);
}

#[test]
fn help_shows_the_variables_of_the_flags() {
    let output = Test::new().run(&["batch", "--help"]);
    output.expect_code(0);
    for variable in [
        "LLLM_CONCURRENCY",
        "LLLM_PRICES",
        "LLLM_CACHE",
        "LLLM_CONFIG",
        "LLLM_ENV_FILE",
    ] {
        assert!(
            output.stdout.contains(&format!("[env: {variable}")),
            "{variable}: {}",
            output.stdout
        );
    }
}

#[test]
fn replay_rerun_and_models_check_take_the_default_model() {
    let test = Test::new()
        .file(CONFIG, "model: mock/echo\n")
        .file("t.yaml", NO_MODEL);
    test.run(&["run", "t.yaml", "hello", "--record", "r.json"])
        .expect_code(0);
    let output = test.run(&["replay", "r.json", "--rerun"]);
    output.expect_code(0);
    assert!(
        output
            .stdout
            .starts_with("identical: 1 model call replayed"),
        "{}",
        output.stdout
    );
    let output = test.run(&["models", "--check", "t.yaml"]);
    output.expect_code(0);
    assert!(output.stdout.contains("mock/echo"), "{}", output.stdout);
    // Without the default, the tactic names no model: exit 2.
    let test = test.file("empty.yaml", "# no settings\n");
    let output = test.run(&["run", "t.yaml", "hello", "--config", "empty.yaml"]);
    output.expect_code(2);
    assert!(
        output.stderr.contains("has no `model_name`"),
        "{}",
        output.stderr
    );
}

#[test]
fn the_cache_setting_comes_from_the_flag_then_the_variable_then_the_file() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: ok}\n");
    let test = test
        .file(CONFIG, &config(&server, "cache: true\n"))
        .file("t.yaml", NO_MODEL)
        .env("LOCAL_KEY", "k");
    let run = ["run", "t.yaml", "same question", "--no-record"];
    // The file turns the cache on: the second run is answered from it.
    test.run(&run).expect_code(0);
    test.run(&run).expect_code(0);
    assert_eq!(server.requests().len(), 1);
    // `LLLM_CACHE=0` over the file, `--cache` over the variable.
    run_with(&test, &run, &[("LLLM_CACHE", "0")]).expect_code(0);
    assert_eq!(server.requests().len(), 2);
    let mut cached = run.to_vec();
    cached.push("--cache");
    run_with(&test, &cached, &[("LLLM_CACHE", "0")]).expect_code(0);
    assert_eq!(server.requests().len(), 2);
    test.run(&[
        "run",
        "t.yaml",
        "same question",
        "--no-record",
        "--no-cache",
    ])
    .expect_code(0);
    assert_eq!(server.requests().len(), 3);
}
