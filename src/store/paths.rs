//! A record file's path as the store keeps it, byte for byte: in the index
//! (an SQLite value) and in `records.list`. A path is bytes on unix, not
//! text: one that is not UTF-8, or that holds a newline, must come back as
//! the same file (issue 26: a non-UTF-8 path broke `logs show`, a newline
//! was lost by `records.list`, and one bad byte in `records.list` made
//! `reindex` index nothing).
//!
//! In the index a UTF-8 path is TEXT, as stores of earlier versions hold
//! it, and any other one is a BLOB of its bytes. In `records.list` a path
//! that is UTF-8 without a newline is a line of its own, as earlier versions
//! wrote every path; any other is `NUL path NUL` and a newline (a path never
//! holds a NUL byte, and no plain line starts with one). What reads them is
//! here too; where they are written and read is `Store`'s.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

/// The bytes of `path`: its own on unix, its UTF-8 text elsewhere.
pub(crate) fn bytes_of(path: &Path) -> Cow<'_, [u8]> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Cow::Borrowed(path.as_os_str().as_bytes())
    }
    #[cfg(not(unix))]
    {
        match path.to_string_lossy() {
            Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
            Cow::Owned(text) => Cow::Owned(text.into_bytes()),
        }
    }
}

/// The path of `bytes`; `None` where a path must be text and they are not.
pub(crate) fn path_of(bytes: &[u8]) -> Option<PathBuf> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }
    #[cfg(not(unix))]
    {
        std::str::from_utf8(bytes).ok().map(PathBuf::from)
    }
}

/// A path bound as an SQLite value: TEXT when it is UTF-8, else a BLOB.
pub(crate) struct SqlPath<'a>(pub &'a Path);

impl ToSql for SqlPath<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match bytes_of(self.0) {
            Cow::Borrowed(bytes) if std::str::from_utf8(bytes).is_ok() => {
                ToSqlOutput::Borrowed(ValueRef::Text(bytes))
            }
            Cow::Borrowed(bytes) => ToSqlOutput::Borrowed(ValueRef::Blob(bytes)),
            Cow::Owned(bytes) => ToSqlOutput::Owned(rusqlite::types::Value::Blob(bytes)),
        })
    }
}

/// A path read back from the index, TEXT or BLOB.
pub(crate) struct StoredPath(pub PathBuf);

impl FromSql for StoredPath {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Text(bytes) | ValueRef::Blob(bytes) => path_of(bytes)
                .map(StoredPath)
                .ok_or_else(|| FromSqlError::Other("a path that is not UTF-8 text".into())),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

/// A stored path as text for people and JSON (`logs --json`): the path
/// itself when it is UTF-8, else with U+FFFD for the bytes that are not.
pub(crate) struct PathText(pub String);

impl FromSql for PathText {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
                Ok(PathText(String::from_utf8_lossy(bytes).into_owned()))
            }
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

/// Appends `path` to `list` as `records.list` holds it (see the module docs).
pub(crate) fn push_entry(list: &mut Vec<u8>, path: &Path) {
    let bytes = bytes_of(path);
    if std::str::from_utf8(&bytes).is_ok() && !bytes.contains(&b'\n') {
        list.extend_from_slice(&bytes);
    } else {
        list.push(0);
        list.extend_from_slice(&bytes);
        list.push(0);
    }
    list.push(b'\n');
}

/// One path of `records.list` and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListEntry {
    pub path: PathBuf,
    pub line: usize,
}

/// The paths of a `records.list` (`label` names it in problems): plain lines
/// and `NUL path NUL` entries, in either order (files written by earlier
/// versions hold plain lines only). An entry that cannot be read (cut short
/// by a crash, or not text where paths must be) is skipped with a problem
/// naming its line; the rest are read.
pub(crate) fn read_list(bytes: &[u8], label: &str) -> (Vec<ListEntry>, Vec<String>) {
    let mut listed = Vec::new();
    let mut problems = Vec::new();
    let mut at = 0;
    let mut line = 1;
    while at < bytes.len() {
        let start_line = line;
        let (path, next) = if bytes[at] == 0 {
            match memchr::memchr(0, &bytes[at + 1..]) {
                Some(length) => {
                    let end = at + 1 + length;
                    let mut next = end + 1;
                    if bytes.get(next) == Some(&b'\n') {
                        next += 1;
                    }
                    (Some(&bytes[at + 1..end]), next)
                }
                None => {
                    problems.push(format!(
                        "`{label}` line {start_line} skipped: an entry cut short (no closing NUL byte)"
                    ));
                    break;
                }
            }
        } else {
            let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |length| at + length);
            (Some(&bytes[at..end]), (end + 1).min(bytes.len()))
        };
        line += memchr::memchr_iter(b'\n', &bytes[at..next]).count();
        at = next;
        let Some(path) = path.filter(|path| !path.is_empty()) else {
            continue;
        };
        match path_of(path) {
            Some(path) => listed.push(ListEntry {
                path,
                line: start_line,
            }),
            None => problems.push(format!(
                "`{label}` line {start_line} skipped: the path is not UTF-8 text"
            )),
        }
    }
    (listed, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn raw(bytes: &[u8]) -> PathBuf {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
    }

    #[track_caller]
    fn list_case(file: &[u8], expected: &[(&[u8], usize)], problems: &[&str]) {
        let (listed, found) = read_list(file, "records.list");
        let listed: Vec<(Vec<u8>, usize)> = listed
            .iter()
            .map(|entry| (bytes_of(&entry.path).into_owned(), entry.line))
            .collect();
        let expected: Vec<(Vec<u8>, usize)> = expected
            .iter()
            .map(|(path, line)| (path.to_vec(), *line))
            .collect();
        assert_eq!(listed, expected, "{}", String::from_utf8_lossy(file));
        assert_eq!(found, problems);
    }

    #[cfg(unix)]
    #[test]
    fn every_path_goes_through_records_list_unchanged() {
        let paths: [&[u8]; 6] = [
            b"/plain/sessions.jsonl",
            b"/with\nnewline/r.json",
            b"/not-utf8-\xff\xfe/r.json",
            b"/both\n\xff",
            b"relative.json",
            b"/ends/with/newline\n",
        ];
        let mut file = Vec::new();
        for path in paths {
            push_entry(&mut file, &raw(path));
        }
        // Plain paths stay plain lines, as earlier versions wrote them.
        assert!(file.starts_with(b"/plain/sessions.jsonl\n\0/with\nnewline/r.json\0\n"));
        let (listed, problems) = read_list(&file, "records.list");
        assert!(problems.is_empty(), "{problems:?}");
        let back: Vec<Vec<u8>> = listed
            .iter()
            .map(|entry| bytes_of(&entry.path).into_owned())
            .collect();
        assert_eq!(back, paths.map(<[u8]>::to_vec));
        let lines: Vec<usize> = listed.iter().map(|entry| entry.line).collect();
        assert_eq!(lines, [1, 2, 4, 5, 7, 8]);
    }

    #[test]
    fn earlier_files_and_damaged_entries_read_as_far_as_they_can() {
        // A file of an earlier version: one path a line, blank lines skipped.
        list_case(
            b"/a.json\n\n/b.json\n",
            &[(b"/a.json", 1), (b"/b.json", 3)],
            &[],
        );
        // A last line without its newline is still a path.
        list_case(
            b"/a.json\n/b.json",
            &[(b"/a.json", 1), (b"/b.json", 2)],
            &[],
        );
        // A bad byte spoils its own line at most (on unix, not even that:
        // it is a path like any other).
        #[cfg(unix)]
        list_case(
            b"/a.json\n/b\xff.json\n/c.json\n",
            &[(b"/a.json", 1), (b"/b\xff.json", 2), (b"/c.json", 3)],
            &[],
        );
        // An entry cut short by a crash: the entries before it are read.
        list_case(
            b"/a.json\n\0/torn",
            &[(b"/a.json", 1)],
            &["`records.list` line 2 skipped: an entry cut short (no closing NUL byte)"],
        );
        // Mixed with plain lines written later by an earlier version.
        list_case(
            b"\0/x\ny\0\n/z.json\n",
            &[(b"/x\ny", 1), (b"/z.json", 3)],
            &[],
        );
    }

    #[test]
    fn paths_are_text_in_the_index_when_they_can_be() {
        let connection = rusqlite::Connection::open_in_memory().unwrap();
        let stored = |path: &Path| -> (String, PathBuf) {
            connection
                .query_row("SELECT typeof(?1), ?1", [SqlPath(path)], |row| {
                    Ok((row.get(0)?, row.get::<_, StoredPath>(1)?.0))
                })
                .unwrap()
        };
        let plain = Path::new("/a/sessions.jsonl");
        assert_eq!(stored(plain), ("text".into(), plain.to_path_buf()));
        #[cfg(unix)]
        {
            let odd = raw(b"/a/\xff/r.json");
            assert_eq!(stored(&odd), ("blob".into(), odd.clone()));
            let text: PathText = connection
                .query_row("SELECT ?1", [SqlPath(&odd)], |row| row.get(0))
                .unwrap();
            assert_eq!(text.0, "/a/\u{FFFD}/r.json");
        }
    }
}
