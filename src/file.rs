//! Reading a file that a user or a model names, without ever blocking on
//! something that is not a file (issue 12): a named pipe would block `open`
//! until a writer comes, a device could be endless. The file is opened
//! non-blocking and checked on the open handle, so nothing can be swapped in
//! between the check and the read; only regular files are read.
//!
//! Used by prompt loading and the built-in file tools; how long a read may
//! take is the caller's business. Writing a file whole ([`atomic`]) and telling
//! whether two paths are one file ([`same`]) live in the submodules; a file
//! written in place (appended to, locked) is opened by [`open_in_place`],
//! never through a link.

pub mod atomic;
pub mod same;

use std::fs::{File, FileType};
use std::io::{self, Read};
use std::path::Path;

/// What a file that cannot be read as a regular file is, in words.
pub fn describe(kind: &FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a named pipe";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Opens `path` (following symlinks) for reading if it is a regular file,
/// without blocking on a named pipe; with its size. Anything else is an
/// `InvalidInput` error saying what it is.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK: opening a FIFO without a writer returns at once;
        // O_NOCTTY: a terminal device never becomes our controlling terminal.
        options.custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY);
    }
    let file = options.open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", describe(&metadata.file_type())),
        ));
    }
    Ok((file, metadata.len()))
}

/// Opens `path` with `options` for a write in place (appending, locking,
/// cutting a torn tail off), never through a symbolic link at `path`
/// (`O_NOFOLLOW`): a link planted there is an error saying so, not a write to
/// wherever it points (issue 26). A whole file is written with [`atomic`].
pub fn open_in_place(path: &Path, options: &mut std::fs::OpenOptions) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(nix::libc::O_NOFOLLOW);
    }
    options.open(path).map_err(|error| {
        #[cfg(unix)]
        if error.raw_os_error() == Some(nix::libc::ELOOP) {
            return io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "`{}` is a symbolic link, which lllm does not write through",
                    path.display()
                ),
            );
        }
        error
    })
}

/// The first `cap` bytes of the regular file at `path`, and its size.
pub fn read_regular(path: &Path, cap: u64) -> io::Result<(Vec<u8>, u64)> {
    let (file, size) = open_regular(path)?;
    let mut bytes = Vec::with_capacity(size.min(cap) as usize);
    file.take(cap).read_to_end(&mut bytes)?;
    Ok((bytes, size))
}

/// The text of the regular file at `path`, which may hold at most `cap`
/// bytes: a file that is not regular (a named pipe would block, a device could
/// be endless), one larger than `cap` (`/proc` files say size 0, so the read
/// itself is bounded) or one that is not UTF-8 is an error saying which. A
/// leading byte order mark is dropped ([`without_bom`]).
pub fn read_text(path: &Path, cap: u64) -> io::Result<String> {
    let (bytes, size) = read_regular(path, cap.saturating_add(1))?;
    let read = bytes.len() as u64;
    if size > cap || read > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} bytes, more than the {} MiB such a file may have",
                size.max(read),
                cap >> 20
            ),
        ));
    }
    let mut text = String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))?;
    if text.starts_with(BOM) {
        text.drain(..BOM.len_utf8());
    }
    Ok(text)
}

/// The UTF-8 byte order mark, U+FEFF: what Windows editors (Notepad, Excel's
/// "UTF-8" export, PowerShell's `Out-File`) put before a file's text.
pub const BOM: char = '\u{feff}';

/// `text` without a leading byte order mark. It says only that the file is
/// UTF-8, and is no part of what the file holds: a tactic starting with one
/// was refused as "more than one document", a task file's first line as
/// not JSON (issue 26). Every YAML or JSON text lllm reads from a user goes
/// through here (files through [`read_text`]).
pub fn without_bom(text: &str) -> &str {
    text.strip_prefix(BOM).unwrap_or(text)
}

/// The most a tactic, a mock script or a price file may hold: LiteLLM's
/// price file, the largest of them in use, is about 1.5 MiB.
pub const CONFIG_CAP: u64 = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_regular_files_and_refuses_the_rest_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("a.txt");
        std::fs::write(&text, "hello world").unwrap();
        assert_eq!(
            read_regular(&text, 5).unwrap(),
            (b"hello".to_vec(), 11),
            "cut at the cap, with the whole size"
        );
        let error = read_regular(dir.path(), 5).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(error.to_string(), "a directory, not a regular file");
        #[cfg(unix)]
        {
            let fifo = dir.path().join("pipe");
            nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
            // Without O_NONBLOCK this open would wait for a writer forever.
            let error = read_regular(&fifo, 5).unwrap_err();
            assert_eq!(error.to_string(), "a named pipe, not a regular file");
            let error = read_regular(Path::new("/dev/zero"), 5).unwrap_err();
            assert_eq!(error.to_string(), "a character device, not a regular file");
            let looping = dir.path().join("loop.md");
            std::os::unix::fs::symlink(&looping, &looping).unwrap();
            assert!(read_regular(&looping, 5).is_err());
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_file_written_in_place_is_never_reached_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let path = dir.path().join("results.jsonl");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        let error = open_in_place(&path, &mut options).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "`{}` is a symbolic link, which lllm does not write through",
                path.display()
            )
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        std::fs::remove_file(&path).unwrap();
        let mut file = open_in_place(&path, &mut options).unwrap();
        std::io::Write::write_all(&mut file, b"line\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "line\n");
    }

    #[test]
    fn text_files_are_bounded_and_must_be_text() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("t.yaml");
        std::fs::write(&text, "a: 1\n").unwrap();
        assert_eq!(read_text(&text, 5).unwrap(), "a: 1\n");
        let error = read_text(&text, 4).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(
            error.to_string().starts_with("5 bytes, more than"),
            "{error}"
        );
        std::fs::write(&text, b"\xff\xfe").unwrap();
        assert_eq!(
            read_text(&text, 5).unwrap_err().to_string(),
            "not UTF-8 text"
        );
        // A byte order mark is no part of the text; one inside it is.
        std::fs::write(&text, "\u{feff}a: 1\n\u{feff}").unwrap();
        assert_eq!(read_text(&text, 64).unwrap(), "a: 1\n\u{feff}");
        assert_eq!(without_bom("\u{feff}\u{feff}x"), "\u{feff}x");
        assert_eq!(without_bom("x"), "x");
        #[cfg(unix)]
        {
            let fifo = dir.path().join("pipe.yaml");
            nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
            assert_eq!(
                read_text(&fifo, 5).unwrap_err().to_string(),
                "a named pipe, not a regular file"
            );
        }
    }
}
