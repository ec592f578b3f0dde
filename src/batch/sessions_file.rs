//! Which records file a batch directory holds, `sessions.jsonl` or
//! `sessions.jsonl.zst` (`--compress`), and in which form: the batch writer
//! appends to it in its own form, readers open whichever is there. What the
//! lines hold and how frames are written is `crate::jsonl`'s business.

use std::path::Path;

use super::output::{SESSIONS, SESSIONS_COMPRESSED};

/// Where a batch appends its records: a file of its output directory, in
/// the form it holds (or, for a new one, the form asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionsFile {
    /// [`SESSIONS`] or [`SESSIONS_COMPRESSED`].
    pub name: &'static str,
    pub form: crate::jsonl::Form,
}

impl SessionsFile {
    /// A new directory's file: compressed when asked.
    pub fn new(compress: bool) -> SessionsFile {
        match compress {
            true => SessionsFile {
                name: SESSIONS_COMPRESSED,
                form: crate::jsonl::Form::Compressed,
            },
            false => SessionsFile {
                name: SESSIONS,
                form: crate::jsonl::Form::Plain,
            },
        }
    }

    /// The path of the records file `dir` holds (`sessions.jsonl` or
    /// `sessions.jsonl.zst`), `None` when it holds none; for readers, which
    /// take either form.
    pub fn path_in(dir: &Path) -> Result<Option<std::path::PathBuf>, String> {
        let (file, _) = SessionsFile::of_dir(dir, false)?;
        let path = dir.join(file.name);
        Ok(path.exists().then_some(path))
    }

    /// The records file `dir` holds, in its form (told by its bytes), else
    /// a new one ([`SessionsFile::new`]); with a note when `compress` asks
    /// for a form the directory's file is not in (a run continues its
    /// directory's file as it is). A directory holding records in both
    /// files is an error: which one a run should continue is not clear.
    pub fn of_dir(dir: &Path, compress: bool) -> Result<(SessionsFile, Option<String>), String> {
        let holds = |name: &str| {
            std::fs::metadata(dir.join(name)).is_ok_and(|meta| meta.is_file() && meta.len() > 0)
        };
        let read_form = |name: &'static str| {
            let path = dir.join(name);
            crate::jsonl::form_of(&path)
                .map(|form| SessionsFile { name, form })
                .map_err(|error| format!("cannot read `{}`: {error}", path.display()))
        };
        let found = match (holds(SESSIONS), holds(SESSIONS_COMPRESSED)) {
            (true, true) => {
                return Err(format!(
                    "`{}` holds records in both `{SESSIONS}` and `{SESSIONS_COMPRESSED}`; \
                     hint: a run appends to one of them: move the other away",
                    dir.display()
                ));
            }
            (true, false) => read_form(SESSIONS)?,
            (false, true) => read_form(SESSIONS_COMPRESSED)?,
            (false, false) => return Ok((SessionsFile::new(compress), None)),
        };
        let note = (compress && found.form == crate::jsonl::Form::Plain).then(|| {
            format!(
                "`{}` is not compressed: this run appends to it uncompressed \
                 (`--compress` applies to a new output directory; \
                 `lllm merge --compress` writes a compressed copy)",
                dir.join(found.name).display()
            )
        });
        Ok((found, note))
    }
}
