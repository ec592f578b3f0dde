//! Writing a file whole or not at all: the bytes go to a temporary file of
//! this writer's own beside the destination, which is synced and renamed over
//! it. A crash leaves the old file or the new one, never half of one.
//!
//! The temporary name is unique to the writer (`.NAME.PID-N.tmp`, created
//! exclusively): two processes, or two threads, writing one path never share
//! a temporary file, so neither truncates nor renames away what the other
//! wrote (a fixed `.NAME.tmp` did: the second `File::create` cut the first
//! writer's bytes, and the first rename left the second with nothing to
//! rename). The last rename wins, and every writer leaves a whole file.
//!
//! Links are never followed: the temporary file is created exclusively
//! (`O_CREAT | O_EXCL`, and `O_NOFOLLOW`), so a link planted at its name is
//! skipped like any file found there, and the rename replaces a link planted
//! at the destination instead of writing where it points (issue 26).
//!
//! Who may write a path at all (a batch directory's lock, an output that must
//! not be an input) is the caller's concern.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Temporary names made by this process so far: with the pid, a name no
/// other writer uses.
static MADE: AtomicU64 = AtomicU64::new(0);

/// A name found taken (a temporary file a killed process left with a pid
/// now reused) is skipped; this many in a row is an error, not a loop.
const ATTEMPTS: u32 = 100;

/// A file being written under a temporary name, renamed over its
/// destination by [`commit`](AtomicFile::commit). Dropped uncommitted (an
/// error on the way), the temporary file is removed.
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// use std::io::Write;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("out.txt");
/// let mut file = lllm::file::atomic::AtomicFile::create(&path)?;
/// writeln!(file, "whole")?;
/// file.commit()?;
/// assert_eq!(std::fs::read_to_string(&path)?, "whole\n");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct AtomicFile {
    writer: BufWriter<File>,
    temporary: PathBuf,
    path: PathBuf,
    committed: bool,
}

impl AtomicFile {
    /// Creates this writer's temporary file in `path`'s directory (which
    /// must exist). `path` must end in a file name.
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        AtomicFile::create_with_mode(path, 0o666)
    }

    /// [`create`](AtomicFile::create) for a file only its owner may read and
    /// write (mode 0600 on Unix, from its first byte): a file of keys.
    pub fn create_private(path: &Path) -> io::Result<AtomicFile> {
        AtomicFile::create_with_mode(path, 0o600)
    }

    fn create_with_mode(path: &Path, mode: u32) -> io::Result<AtomicFile> {
        let (file, temporary) = create_temporary(path, mode)?;
        Ok(AtomicFile {
            writer: BufWriter::new(file),
            temporary,
            path: path.to_path_buf(),
            committed: false,
        })
    }

    /// Writes what is buffered, syncs it to disk and renames the file over
    /// the destination.
    pub fn commit(mut self) -> io::Result<()> {
        self.writer.flush()?;
        self.writer.get_ref().sync_all()?;
        std::fs::rename(&self.temporary, &self.path)?;
        self.committed = true;
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.writer.write(bytes)
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

/// Writes `bytes` to `path` through an [`AtomicFile`].
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = AtomicFile::create(path)?;
    file.write_all(bytes)?;
    file.commit()
}

/// A new file beside `path` that no other writer has: `.NAME.PID-N.tmp`,
/// opened with `create_new` (and `O_NOFOLLOW`), so an existing file, or a
/// link, is never reused or followed. `mode` before the umask, on Unix.
fn create_temporary(path: &Path, mode: u32) -> io::Result<(File, PathBuf)> {
    let Some(name) = path.file_name() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        ));
    };
    let name = name.to_string_lossy();
    let pid = std::process::id();
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let number = MADE.fetch_add(1, Ordering::Relaxed);
        let temporary = path.with_file_name(format!(".{name}.{pid}-{number}.tmp"));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(mode).custom_flags(nix::libc::O_NOFOLLOW);
        }
        #[cfg(not(unix))]
        let _ = mode;
        match options.open(&temporary) {
            Ok(file) => return Ok((file, temporary)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writers_of_one_path_each_leave_a_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("same.json");
        // Every writer opens its temporary file before any commits: with a
        // shared temporary name, each `create` cut the one before it and all
        // renames but the first found nothing.
        let files: Vec<AtomicFile> = (0..20)
            .map(|number| {
                let mut file = AtomicFile::create(&path).unwrap();
                write!(file, "writer {number} {}", "x".repeat(10_000)).unwrap();
                file
            })
            .collect();
        for file in files {
            file.commit().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("writer 19 {}", "x".repeat(10_000)));
        assert_eq!(names(dir.path()), ["same.json"], "no temporary file stays");
    }

    #[test]
    fn threads_writing_one_path_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.json");
        std::thread::scope(|scope| {
            let writers: Vec<_> = (0..8)
                .map(|number| {
                    let path = &path;
                    scope.spawn(move || {
                        for round in 0..50 {
                            write(path, format!("{number}:{round}").as_bytes()).unwrap();
                        }
                    })
                })
                .collect();
            for writer in writers {
                writer.join().unwrap();
            }
        });
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with(":49"), "{text}");
        assert_eq!(names(dir.path()), ["record.json"]);
    }

    #[test]
    fn a_left_temporary_file_is_skipped_and_a_dropped_writer_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        // What a killed process with this pid would have left: the next names.
        let next = MADE.load(Ordering::Relaxed);
        for number in next..next + 3 {
            let left = dir
                .path()
                .join(format!(".a.txt.{}-{number}.tmp", std::process::id()));
            std::fs::write(left, "left").unwrap();
        }
        write(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let before = names(dir.path());
        let mut file = AtomicFile::create(&path).unwrap();
        file.write_all(b"never committed").unwrap();
        drop(file);
        assert_eq!(names(dir.path()), before);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let error = write(Path::new(".."), b"x").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[cfg(unix)]
    #[test]
    fn links_planted_at_the_destination_or_the_temporary_name_are_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "untouched").unwrap();
        let path = dir.path().join("keys.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        // Links at the next temporary names this process will try, one of
        // them dangling (where a link would create a file).
        let next = MADE.load(Ordering::Relaxed);
        let pid = std::process::id();
        let dangling = dir.path().join("created-through-a-link");
        for number in next..next + 10 {
            let target = if number % 2 == 0 { &victim } else { &dangling };
            let name = dir.path().join(format!(".keys.json.{pid}-{number}.tmp"));
            std::os::unix::fs::symlink(target, name).unwrap();
        }
        let mut file = AtomicFile::create_private(&path).unwrap();
        file.write_all(b"{}").unwrap();
        file.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(!dangling.exists());
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        assert!(metadata.is_file(), "the link is replaced by the file");
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
    }
}
