//! The TASKS file read once (issue 26): a batch copies it, at its start,
//! into a file of its own that nobody else can write, and reads only that
//! copy (its format, pre-flight, the run), so lines appended or rewritten
//! while the batch runs are neither run nor paid for, and the lines that
//! run are exactly the ones pre-flight checked (a duplicate id appended
//! during the run cannot run twice). The copy is hashed on the way
//! (`batch.json`'s SHA-256).
//!
//! The copy lives in the output directory, which the run has locked, with
//! no name (unlinked as soon as it is open, on Unix): it goes with the
//! process, however it ends. When the run ends the file is looked at again;
//! [`Snapshot::changed`] says whether it is still the file that was copied.
//! Where attachments and line tactics are found is still the TASKS file's
//! own directory: only the lines come from the copy.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::tasks::Lines;
use crate::sha256::Sha256;

/// A TASKS file as it was when the batch started.
#[derive(Debug)]
pub struct Snapshot {
    copy: Arc<Mutex<File>>,
    length: u64,
    sha256: String,
    /// The TASKS file, and what it was when copied.
    path: PathBuf,
    stamp: Stamp,
    /// The copy's name, on systems where an open file cannot be unlinked.
    #[cfg(not(unix))]
    name: PathBuf,
}

/// Why a snapshot could not be taken.
#[derive(Debug)]
pub enum SnapshotError {
    /// The TASKS file cannot be read.
    Read(io::Error),
    /// The copy cannot be written in the output directory.
    Write(io::Error),
}

/// What tells a file apart from the one it was: its size, its modification
/// time and (on Unix) which file it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    length: u64,
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    file: (u64, u64),
}

impl Stamp {
    fn of(metadata: &std::fs::Metadata) -> Stamp {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        Stamp {
            length: metadata.len(),
            modified: metadata.modified().ok(),
            #[cfg(unix)]
            file: (metadata.dev(), metadata.ino()),
        }
    }
}

/// Names tried for the copy before giving up (a name is taken only when a
/// killed run on a system without unlinking left it, with a reused pid).
const ATTEMPTS: u32 = 100;

impl Snapshot {
    /// Copies the regular file at `path` (never a pipe or a device) into
    /// `dir`, as it is now: the bytes it holds when opened, none appended
    /// later.
    pub fn take(path: &Path, dir: &Path) -> Result<Snapshot, SnapshotError> {
        let (original, _) = crate::file::open_regular(path).map_err(SnapshotError::Read)?;
        let stamp = Stamp::of(&original.metadata().map_err(SnapshotError::Read)?);
        let (mut copy, name) = unnamed_file(dir).map_err(SnapshotError::Write)?;
        let mut hasher = Sha256::new();
        let mut block = vec![0u8; 1 << 16];
        let mut source = original.take(stamp.length);
        let mut length = 0u64;
        loop {
            let read = source.read(&mut block).map_err(SnapshotError::Read)?;
            if read == 0 {
                break;
            }
            hasher.update(&block[..read]);
            copy.write_all(&block[..read])
                .map_err(SnapshotError::Write)?;
            length += read as u64;
        }
        #[cfg(unix)]
        let _ = name;
        Ok(Snapshot {
            copy: Arc::new(Mutex::new(copy)),
            length,
            sha256: crate::provider::digest::hex(&hasher.finalize()),
            path: path.to_path_buf(),
            stamp,
            #[cfg(not(unix))]
            name,
        })
    }

    /// The SHA-256 of the lines copied, in hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The copied lines, from the first; each reader reads on its own.
    pub fn lines(&self) -> Lines {
        Lines::of(Reader {
            copy: self.copy.clone(),
            offset: 0,
            end: self.length,
        })
    }

    /// Whether the TASKS file, by its path, is no longer the file that was
    /// copied: lines were appended or rewritten, it was replaced or removed.
    pub fn changed(&self) -> bool {
        std::fs::metadata(&self.path).map_or(true, |metadata| Stamp::of(&metadata) != self.stamp)
    }
}

#[cfg(not(unix))]
impl Drop for Snapshot {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.name);
    }
}

/// A new file in `dir`, opened to read and write, with no name left on Unix.
fn unnamed_file(dir: &Path) -> io::Result<(File, PathBuf)> {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut attempt = 0;
    loop {
        let number = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = dir.join(format!(".tasks.{}-{number}.snapshot", std::process::id()));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&name)
        {
            Ok(file) => {
                #[cfg(unix)]
                std::fs::remove_file(&name)?;
                return Ok((file, name));
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempt < ATTEMPTS => {
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// One reader of the copy, at its own offset (readers share the file).
struct Reader {
    copy: Arc<Mutex<File>>,
    offset: u64,
    end: u64,
}

impl Read for Reader {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let room = (self.end - self.offset).min(buffer.len() as u64) as usize;
        if room == 0 {
            return Ok(0);
        }
        let mut copy = self
            .copy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        copy.seek(SeekFrom::Start(self.offset))?;
        let read = copy.read(&mut buffer[..room])?;
        self.offset += read as u64;
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_lines(snapshot: &Snapshot) -> Vec<String> {
        let mut lines = snapshot.lines();
        let mut found = Vec::new();
        while let Some(line) = lines.next_line() {
            found.push(line.unwrap().1.to_string());
        }
        found
    }

    #[test]
    fn the_copy_is_the_file_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        std::fs::write(&path, "\"a\"\n\"b\"\n").unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let snapshot = Snapshot::take(&path, &out).unwrap();
        assert!(!snapshot.changed());
        assert_eq!(
            snapshot.sha256(),
            super::super::directory::file_sha256(&path).unwrap()
        );
        // Two readers at once each read the whole copy.
        let (mut first, mut second) = (snapshot.lines(), snapshot.lines());
        assert_eq!(first.next_line().unwrap().unwrap().1, "\"a\"\n");
        assert_eq!(second.next_line().unwrap().unwrap().1, "\"a\"\n");
        assert_eq!(first.next_line().unwrap().unwrap().1, "\"b\"\n");
        assert!(first.next_line().is_none());

        // Appended, rewritten in place, replaced: the copy stays, and the
        // change is seen.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"\"c\"\n").unwrap();
        assert!(snapshot.changed());
        assert_eq!(all_lines(&snapshot), ["\"a\"\n", "\"b\"\n"]);
        std::fs::write(&path, "\"x\"\n").unwrap();
        assert_eq!(all_lines(&snapshot), ["\"a\"\n", "\"b\"\n"]);
        let again = Snapshot::take(&path, &out).unwrap();
        std::fs::write(dir.path().join("new.jsonl"), "\"yy\"\n").unwrap();
        std::fs::rename(dir.path().join("new.jsonl"), &path).unwrap();
        assert!(again.changed());
        assert_eq!(all_lines(&again), ["\"x\"\n"]);
        // Nothing is left in the output directory (on Unix, not even a name).
        #[cfg(unix)]
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    }

    #[test]
    fn what_cannot_be_copied_says_which_side() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Snapshot::take(&dir.path().join("gone.jsonl"), dir.path());
        assert!(matches!(missing, Err(SnapshotError::Read(_))));
        let path = dir.path().join("tasks.jsonl");
        std::fs::write(&path, "\"a\"\n").unwrap();
        let nowhere = Snapshot::take(&path, &dir.path().join("no/such/dir"));
        assert!(matches!(nowhere, Err(SnapshotError::Write(_))));
    }
}
