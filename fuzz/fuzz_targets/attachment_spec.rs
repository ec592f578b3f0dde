//! Attachment specs of a task line (issue 26), through the batch's own path
//! (`tasks::parse_line` with the scope `lllm batch` gives it): the input is
//! one entry of `attachments` (a JSON value: a path, a URL, a `data:` URL,
//! an object `{"path"}`, `{"url"}`, `{"base64", "name"}`), or the whole list
//! when it is a JSON array, or else a path as text.
//!
//! The TASKS file's directory is a sandbox holding ordinary files, links
//! out of it, a named pipe, lllm's secrets (a keys file, a config
//! directory, `.env`) and hard links to them; beside it are files that must
//! never be read. Whatever the input: an error is one line; no part holds
//! the text of a file outside the directory or of a secret; a text part is
//! one `<file name="…">` element whose name cannot end the attribute and
//! whose text cannot end the element; an image is a URL or a data: URL of
//! at most 20 MiB.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use lllm::batch::tasks::parse_line;
use lllm::dialog::{AttachmentScope, ContentPart};
use lllm_fuzz::assert_one_line;
use serde_json::{Value, json};

/// In every file that must never be attached.
const FORBIDDEN: &str = "lllm-fuzz-forbidden-5c81";

struct Sandbox {
    _root: tempfile::TempDir,
    scope: AttachmentScope,
}

static SANDBOX: LazyLock<Sandbox> = LazyLock::new(|| {
    let root =
        tempfile::tempdir().unwrap_or_else(|error| panic!("no temporary directory: {error}"));
    let path = |relative: &str| root.path().join(relative);
    let write = |relative: &str, bytes: &[u8]| {
        let file = path(relative);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|error| panic!("{error}"));
        }
        std::fs::write(&file, bytes).unwrap_or_else(|error| panic!("{error}"));
    };
    let secret = format!("KEY={FORBIDDEN}\n");
    write("tasks/notes.txt", b"inside\n");
    write("tasks/sub/deeper.txt", b"deeper\n");
    write("tasks/owl.png", b"\x89PNG\r\n\x1a\nowl");
    write("tasks/blob.bin", b"\x00\x01\x02");
    write("tasks/.env", secret.as_bytes());
    write("tasks/.env.local", secret.as_bytes());
    write("tasks/.config/lllm/keys.json", secret.as_bytes());
    write("tasks/.config/lllm/notes.md", secret.as_bytes());
    write("tasks/mine.env", secret.as_bytes());
    write("outside.txt", secret.as_bytes());
    write("shared/outside.txt", secret.as_bytes());
    #[cfg(unix)]
    {
        let link = |target: &str, name: &str| {
            std::os::unix::fs::symlink(target, path(name))
                .unwrap_or_else(|error| panic!("{error}"));
        };
        link("notes.txt", "tasks/alias.txt");
        link("../outside.txt", "tasks/out.txt");
        link("..", "tasks/up");
        link("../shared", "tasks/shared");
        link(".env", "tasks/env.txt");
        link(".config/lllm/keys.json", "tasks/keys.txt");
        link("/proc/self/environ", "tasks/environ.txt");
        link("loop.txt", "tasks/loop.txt");
        std::fs::hard_link(
            path("tasks/.config/lllm/keys.json"),
            path("tasks/copy.json"),
        )
        .unwrap_or_else(|error| panic!("{error}"));
        nix::unistd::mkfifo(&path("tasks/pipe"), nix::sys::stat::Mode::S_IRWXU)
            .unwrap_or_else(|error| panic!("{error}"));
        // The socket's file stays when the listener is gone.
        std::os::unix::net::UnixListener::bind(path("tasks/socket"))
            .unwrap_or_else(|error| panic!("{error}"));
    }
    let scope = AttachmentScope::default()
        .refuse_file(&path("tasks/.config/lllm/keys.json"), "lllm's keys file")
        .refuse_file(&path("tasks/mine.env"), "an env file lllm reads keys from")
        .refuse_directory(
            &path("tasks/.config/lllm"),
            "inside lllm's config directory",
        )
        .confine_to(path("tasks"))
        .unwrap_or_else(|error| panic!("{error}"));
    Sandbox { _root: root, scope }
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let entries = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(list)) => list,
        Ok(entry) => vec![entry],
        Err(_) => vec![Value::String(text.to_string())],
    };
    let line = json!({"id": "a", "task": "see", "attachments": entries}).to_string();
    // The forbidden text may come from the input itself (a name, a path
    // that does not exist); only then may an output hold it.
    let planted = line.contains(FORBIDDEN);
    let task = match parse_line(&line, 1, &SANDBOX.scope) {
        Err(message) => {
            assert_one_line(&message);
            return assert!(planted || !message.contains(FORBIDDEN), "{message}");
        }
        Ok(task) => task.unwrap_or_else(|| panic!("a line with a task was skipped")),
    };
    let parts = &task.input.attachments;
    assert_eq!(parts.len(), entries.len(), "an attachment per entry");
    for (entry, part) in entries.iter().zip(parts) {
        check(part);
        if let ContentPart::Text { text } = part
            && from_file(entry)
        {
            assert!(
                planted || !text.contains(FORBIDDEN),
                "{entry} read a file it may not: {text}"
            );
        }
    }
});

/// Whether the entry names a file (rather than giving bytes or a URL).
fn from_file(entry: &Value) -> bool {
    match entry {
        Value::String(spec) => {
            let spec = spec.trim();
            !(spec.starts_with("data:")
                || spec.starts_with("http://")
                || spec.starts_with("https://"))
        }
        Value::Object(object) => object.contains_key("path"),
        _ => false,
    }
}

fn check(part: &ContentPart) {
    match part {
        ContentPart::Text { text } => element(text),
        ContentPart::ImageUrl { image_url } => {
            let url = &image_url.url;
            if let Some(rest) = url.strip_prefix("data:") {
                let (_, data) = rest
                    .split_once(";base64,")
                    .unwrap_or_else(|| panic!("an image data: URL without base64: {url:.80}"));
                // 4 symbols for 3 bytes, whole: at most the cap's.
                assert!(
                    data.len() as u64 / 4 * 3 <= 20 << 20,
                    "an image over 20 MiB"
                );
            } else {
                assert!(
                    url.starts_with("http://") || url.starts_with("https://"),
                    "an image URL that is neither: {url:.80}"
                );
            }
        }
    }
}

/// One `<file name="NAME">\n…\n</file>` element: the name has no quote,
/// angle bracket or control character; the text no `</file` in any case.
fn element(text: &str) {
    let rest = text
        .strip_prefix("<file name=\"")
        .unwrap_or_else(|| panic!("a text part that is not a file element: {text:.80}"));
    let (name, rest) = rest
        .split_once("\">\n")
        .unwrap_or_else(|| panic!("a file element whose name does not end: {text:.80}"));
    assert!(
        !name.contains(['"', '<', '>']) && !name.chars().any(char::is_control),
        "a name that is not escaped: {name:?}"
    );
    let body = rest
        .strip_suffix("\n</file>")
        .unwrap_or_else(|| panic!("a file element that does not end: {text:.80}"));
    assert!(
        !body.to_ascii_lowercase().contains("</file"),
        "a text that ends the element early: {body:.200}"
    );
}
