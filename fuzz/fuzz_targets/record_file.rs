//! Record files as every reader opens them (`lllm::jsonl::Lines`): plain
//! JSONL or zstd frames, told by the magic bytes. The first byte picks the
//! input: odd, the rest is the file as it is (hostile zstd bytes); even, the
//! rest is lines written as frames of two lines each by the batch's own
//! writer. Each line read must read again at its place (`logs show`), an
//! error must be one line, and `repair` (what `--resume` does) must leave a
//! file that reads without a torn frame and that it leaves alone.
#![no_main]

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use lllm::jsonl::{Form, FrameWriter, Lines, repair};
use lllm_fuzz::assert_one_line;

static DIRECTORY: LazyLock<tempfile::TempDir> = LazyLock::new(|| {
    tempfile::tempdir().unwrap_or_else(|error| panic!("no temporary directory: {error}"))
});

/// Lines past this are refused here (1 GiB in use): a bomb stays cheap.
const CAP: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let path: PathBuf = DIRECTORY.path().join("records");
    let _ = std::fs::remove_file(&path);
    if mode % 2 == 1 {
        if std::fs::write(&path, rest).is_err() {
            return;
        }
    } else {
        let Ok(file) = std::fs::File::create(&path) else {
            return;
        };
        let Ok(mut writer) = FrameWriter::new(file, Form::Compressed) else {
            return;
        };
        let lines: Vec<&[u8]> = rest.split_inclusive(|byte| *byte == b'\n').collect();
        for pair in lines.chunks(2) {
            if writer.write(&pair.concat()).is_err() {
                return;
            }
        }
    }
    let read = read_all(&path);
    if let (0, Ok(lines)) = (mode % 2, &read) {
        let bytes: Vec<u8> = lines.iter().flat_map(|(_, line)| line.clone()).collect();
        assert_eq!(bytes, rest, "frames give back what was written");
    }
    if let Ok(lines) = &read {
        for (place, line) in lines.iter().take(8) {
            // `read_at` gives text: lines that are UTF-8 only.
            if let (Some(place), Ok(line)) = (place, std::str::from_utf8(line)) {
                match Lines::read_at(&path, *place) {
                    Ok(again) => assert_eq!(again, line, "the line at place {place}"),
                    Err(error) => panic!("a line read at {place} does not read again: {error}"),
                }
            }
        }
    }
    match repair(&path) {
        Ok(_) => {
            assert_eq!(repair(&path).ok(), Some(0), "a repaired file is left alone");
            if let Ok(mut lines) = Lines::open(&path).map(|lines| lines.with_line_cap(CAP)) {
                let mut sink = Vec::new();
                if std::io::copy(&mut lines, &mut sink).is_ok() {
                    assert_eq!(
                        lines.torn_frame(),
                        None,
                        "a repaired file has no torn frame"
                    );
                }
            }
        }
        Err(error) => assert_one_line(&error.to_string()),
    }
});

/// A line read and its place.
type Placed = (Option<u64>, Vec<u8>);

/// Every line with its place, or the first error (checked to be one line).
fn read_all(path: &std::path::Path) -> Result<Vec<Placed>, ()> {
    let mut lines = match Lines::open(path) {
        Ok(lines) => lines.with_line_cap(CAP),
        Err(error) => {
            assert_one_line(&error.to_string());
            return Err(());
        }
    };
    let mut read = Vec::new();
    loop {
        let place = lines.place();
        let mut line = Vec::new();
        match lines.read_until(b'\n', &mut line) {
            Ok(0) => return Ok(read),
            Ok(_) => read.push((place, line)),
            Err(error) => {
                assert_one_line(&error.to_string());
                return Err(());
            }
        }
    }
}
