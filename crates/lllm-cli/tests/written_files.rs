//! Files lllm writes are written where they are named, whatever was planted
//! there (issue 26), on the real binary: a link at the name of the keys file,
//! its lock, `DIR/default_tactic.yaml`, a report or a man page is replaced
//! (or refused), never written through; `lllm keys` makes a directory others
//! can write to private, or refuses one that is not the user's; and `lllm
//! keys set` run ten times at once keeps all ten keys.

#![cfg(unix)]

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use common::{MockServer, Test};
use serde_json::{Value, json};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn link(target: &Path, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// Whether `path` is a regular file itself (not a link to one).
fn is_plain_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.is_file())
}

/// A test whose keys file is `xdg/lllm/keys.json`, in a directory of mode 0700.
fn keys_test() -> Test {
    let test = Test::new();
    let xdg = test.path("xdg").display().to_string();
    std::fs::create_dir_all(test.path("xdg/lllm")).unwrap();
    std::fs::set_permissions(
        test.path("xdg/lllm"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    test.env("XDG_CONFIG_HOME", &xdg)
}

/// `lllm keys set NAME` with `value` on stdin, started (not waited for).
fn spawn_set(test: &Test, name: &str) -> std::process::Child {
    let mut command = test.command(&["keys", "set", name]);
    command.stdin(Stdio::piped());
    command.spawn().unwrap()
}

fn set(test: &Test, name: &str, value: &str) -> common::Output {
    let mut child = spawn_set(test, name);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(value.as_bytes())
        .unwrap();
    common::Output::of(child.wait_with_output().unwrap())
}

fn stored(test: &Test) -> Value {
    test.read_json("xdg/lllm/keys.json")
}

#[test]
fn a_link_planted_at_the_keys_file_is_replaced_not_written_through() {
    let test = keys_test();
    let keys = test.path("xdg/lllm/keys.json");
    std::fs::create_dir_all(test.path("elsewhere")).unwrap();

    // A dangling link: following it would create a file where it points.
    let created = test.path("elsewhere/created.json");
    link(&created, &keys);
    set(&test, "A_KEY", "sk-a-0123456789").expect_code(0);
    assert!(!created.exists(), "nothing was written through the link");
    assert!(is_plain_file(&keys));
    assert_eq!(mode(&keys), 0o600);
    assert_eq!(stored(&test)["A_KEY"], "sk-a-0123456789");

    // A link to a file: read (its keys are kept), never written.
    let victim = test.path("elsewhere/victim.json");
    std::fs::write(&victim, "{\"OLD_KEY\": \"kept-value\"}").unwrap();
    std::fs::remove_file(&keys).unwrap();
    link(&victim, &keys);
    set(&test, "B_KEY", "sk-b-0123456789").expect_code(0);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "{\"OLD_KEY\": \"kept-value\"}"
    );
    assert!(is_plain_file(&keys));
    assert_eq!(stored(&test)["OLD_KEY"], "kept-value");
    assert_eq!(stored(&test)["B_KEY"], "sk-b-0123456789");
    std::fs::remove_file(&keys).unwrap();
    link(&victim, &keys);
    test.run(&["keys", "remove", "OLD_KEY"]).expect_code(0);
    assert!(is_plain_file(&keys));
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "{\"OLD_KEY\": \"kept-value\"}"
    );

    // A link at the lock's name is refused: neither created nor locked.
    let lock = test.path("xdg/lllm/keys.json.lock");
    std::fs::remove_file(&lock).unwrap();
    let lock_target = test.path("elsewhere/lock-target");
    link(&lock_target, &lock);
    let output = set(&test, "C_KEY", "sk-c-0123456789");
    output.expect_code(2);
    assert!(
        output
            .stderr
            .starts_with("error: cannot lock the keys file with `")
            && output.stderr.lines().count() == 1,
        "{}",
        output.stderr
    );
    assert!(!lock_target.exists());
    assert!(stored(&test).get("C_KEY").is_none());
}

#[test]
fn a_keys_directory_others_can_write_to_is_made_private_or_refused() {
    let test = keys_test();
    let directory = test.path("xdg/lllm");
    std::fs::set_permissions(&directory, std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = set(&test, "A_KEY", "sk-a-0123456789");
    output.expect_code(0);
    assert_eq!(mode(&directory), 0o700);
    assert!(
        output
            .stderr
            .contains("could be written by other users (mode 0777); it is now 0700"),
        "{}",
        output.stderr
    );
    assert_eq!(mode(&test.path("xdg/lllm/keys.json")), 0o600);
    std::fs::set_permissions(&directory, std::fs::Permissions::from_mode(0o770)).unwrap();
    test.run(&["keys", "remove", "A_KEY"]).expect_code(0);
    assert_eq!(mode(&directory), 0o700, "remove tightens it too");

    // Another user's directory that others can write to: refused, untouched.
    // Only root can make one to test with (and this is not run as the other user).
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let theirs = test.path("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = theirs.join("config.yaml");
    std::fs::write(&config, "").unwrap();
    let config = config.display().to_string();
    let mut child = test
        .command(&["--config", &config, "keys", "set", "A_KEY"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"sk-a-0123456789")
        .unwrap();
    let output = common::Output::of(child.wait_with_output().unwrap());
    output.expect_code(2);
    assert_eq!(
        output.stderr,
        format!(
            "error: the keys file's directory `{}` can be written by other users (mode 0777) \
             and is not yours: no key is stored there; hint: point `--config` or \
             `XDG_CONFIG_HOME` at a directory of your own\n",
            theirs.display()
        )
    );
    assert_eq!(mode(&theirs), 0o777);
    assert!(!theirs.join("keys.json").exists());
}

#[test]
fn ten_keys_set_at_once_are_all_kept() {
    let test = keys_test();
    // Every process is started, then all are given their key at once: each
    // reads, changes and writes the file while the others do.
    let children: Vec<_> = (0..10)
        .map(|index| spawn_set(&test, &format!("KEY_{index}")))
        .collect();
    let children: Vec<_> = children
        .into_iter()
        .enumerate()
        .map(|(index, mut child)| {
            let value = format!("sk-concurrent-{index:04}");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(value.as_bytes())
                .unwrap();
            child
        })
        .collect();
    for child in children {
        common::Output::of(child.wait_with_output().unwrap()).expect_code(0);
    }
    let keys = stored(&test);
    for index in 0..10 {
        assert_eq!(
            keys[format!("KEY_{index}")],
            format!("sk-concurrent-{index:04}"),
            "{keys:#}"
        );
    }
    let list = test.run(&["keys", "list"]);
    list.expect_code(0);
    assert_eq!(list.stdout.lines().count(), 10, "{}", list.stdout);
}

#[test]
fn default_tactic_reports_and_man_pages_replace_a_planted_link() {
    let test = Test::new();
    let server = MockServer::start(test.dir.path(), "default: {text: fine}\n");
    let line = json!({"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}});
    let test = test
        .file("batch.jsonl", &format!("{line}\n"))
        .file("victim.txt", "untouched\n")
        .file("other-victim.txt", "untouched too\n")
        .env("OPENAI_BASE_URL", &server.base_url())
        .env("OPENAI_API_KEY", "sk-test-secret");
    let victim = test.path("victim.txt");
    std::fs::create_dir_all(test.path("out")).unwrap();
    let default = test.path("out/default_tactic.yaml");
    link(&victim, &default);
    test.run(&["batch", "batch.jsonl", "-o", "out", "-q"])
        .expect_code(0);
    assert!(is_plain_file(&default));
    let written = std::fs::read_to_string(&default).unwrap();
    assert!(written.contains("tactic_type: batch_default"), "{written}");

    link(&victim, &test.path("out/report.html"));
    let other_victim = test.path("other-victim.txt");
    link(&other_victim, &test.path("out/report.csv"));
    test.run(&["report", "out"]).expect_code(0);
    assert!(is_plain_file(&test.path("out/report.html")));
    assert!(is_plain_file(&test.path("out/report.csv")));

    std::fs::create_dir_all(test.path("man")).unwrap();
    link(&victim, &test.path("man/lllm.1"));
    test.run(&["man", "--out", "man"]).expect_code(0);
    assert!(is_plain_file(&test.path("man/lllm.1")));
    assert!(
        std::fs::read_to_string(test.path("man/lllm.1"))
            .unwrap()
            .contains(".TH lllm")
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    assert_eq!(
        std::fs::read_to_string(&other_victim).unwrap(),
        "untouched too\n"
    );
}

#[test]
fn a_link_planted_at_a_file_lllm_appends_to_or_locks_is_refused() {
    let test = Test::new()
        .file(
            "t.yaml",
            "agent_configs: [{name: a, model_name: mock/echo}]\n",
        )
        .file("tasks.jsonl", "\"hello\"\n")
        .file("victim.txt", "untouched\n");
    let victim = test.path("victim.txt");
    for name in [".lock", "results.jsonl", "sessions.jsonl"] {
        let out = format!("out-{}", name.trim_start_matches('.'));
        std::fs::create_dir_all(test.path(&out)).unwrap();
        let planted = test.path(&format!("{out}/{name}"));
        link(&victim, &planted);
        // A directory with results is continued with `--resume`.
        let resume: &[&str] = if name == ".lock" { &[] } else { &["--resume"] };
        let output = test.batch("t.yaml", &out, resume);
        output.expect_code(2);
        let expected = format!(
            "`{}` is a symbolic link, which lllm does not write through",
            Path::new(&out).join(name).display()
        );
        assert!(
            output.stderr.contains(&expected) && output.stderr.lines().count() == 1,
            "{name}: {}",
            output.stderr
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    }
}
