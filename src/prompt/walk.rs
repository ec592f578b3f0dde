//! The walk of a prompt directory: which files are prompts, found without
//! reading a directory twice. Reading and parsing the files is the
//! registry's business.
//!
//! Each directory is read once (by device and inode, so links and bind
//! mounts cannot loop or multiply the walk), at most `MAX_WALK_ENTRIES`
//! entries in all: following every link made a few links an exponential
//! walk and `up -> ..` a walk of the parent tree. A symlinked directory
//! inside is read under its own name anyway (a warning); one outside (a
//! shared prompt library) is read under the link's name; one leading back
//! up to a directory that contains it is an error. A symlinked prompt file
//! is read wherever it leads.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::{Error, Result};

/// The extensions of prompt files.
const EXTENSIONS: &[&str] = &["md", "txt", "j2"];
/// The most files and directories the walk of a prompt directory lists,
/// counted through its subdirectories: more means `prompts:` names something
/// that is not a directory of prompts (`/`, a home directory).
pub(super) const MAX_WALK_ENTRIES: usize = 100_000;

/// What the walk of a prompt directory found: the prompt files, each with
/// the reason it cannot be read, if any; the problems of what is not a
/// prompt file; and the warnings.
#[derive(Default)]
pub(super) struct Walk {
    pub(super) files: Vec<(PathBuf, Option<Error>)>,
    pub(super) problems: Vec<Error>,
    pub(super) warnings: Vec<String>,
}

/// The prompt files under `directory`, recursively, each directory read once
/// (see the module documentation). More than `limit` entries is the error.
pub(super) fn walk(directory: &Path, limit: usize) -> Result<Walk> {
    let problem = |path: &Path, message: String| Error::File {
        path: path.display().to_string(),
        message,
    };
    let mut found = Walk::default();
    let root = match std::fs::canonicalize(directory) {
        Ok(root) => root,
        Err(error) => {
            found.problems.push(problem(
                directory,
                format!("cannot read the prompt directory: {error}"),
            ));
            return Ok(found);
        }
    };
    let mut visited = HashSet::new();
    let mut listed = 0;
    // Each directory by the path the user's keys come from and its canonical
    // path (the root's, joined with real names only).
    let mut pending = vec![(directory.to_path_buf(), root.clone())];
    while let Some((path, canonical)) = pending.pop() {
        if let Ok(metadata) = std::fs::metadata(&path)
            && !visited.insert(identity(&canonical, &metadata))
        {
            continue;
        }
        let listing = match std::fs::read_dir(&path) {
            Ok(listing) => listing,
            Err(error) => {
                found.problems.push(problem(
                    &path,
                    format!("cannot read the prompt directory: {error}"),
                ));
                continue;
            }
        };
        let mut entries = Vec::new();
        for entry in listing {
            listed += 1;
            if listed > limit {
                return Err(problem(
                    directory,
                    format!(
                        "the prompt directory holds more than {limit} files and \
                         directories (counted through its subdirectories); hint: point \
                         `prompts:` at a directory that holds only prompts"
                    ),
                ));
            }
            match entry {
                Ok(entry) => entries.push(entry),
                Err(error) => found
                    .problems
                    .push(problem(&path, format!("cannot list: {error}"))),
            }
        }
        entries.sort_by_key(std::fs::DirEntry::file_name);
        let mut subdirectories = Vec::new();
        for entry in entries {
            let path = entry.path();
            let is_prompt = path
                .extension()
                .and_then(|extension| extension.to_str())
                .is_some_and(|extension| EXTENSIONS.contains(&extension));
            let kind = match entry.file_type() {
                Ok(kind) => kind,
                Err(error) => {
                    found
                        .problems
                        .push(problem(&path, format!("cannot read: {error}")));
                    continue;
                }
            };
            if kind.is_dir() {
                subdirectories.push((path, canonical.join(entry.file_name())));
                continue;
            }
            if !kind.is_symlink() {
                if is_prompt {
                    let unreadable = (!kind.is_file()).then(|| not_regular(&path, &kind));
                    found.files.push((path, unreadable));
                }
                continue;
            }
            // Where the link leads, through every link, without opening it.
            let target = std::fs::canonicalize(&path).and_then(|target| {
                let metadata = std::fs::metadata(&target)?;
                Ok((target, metadata))
            });
            let (target, metadata) = match target {
                Ok(target) => target,
                // A dangling or self-referential link: an error only where a
                // prompt was meant.
                Err(error) => {
                    if is_prompt {
                        let unreadable = problem(&path, format!("cannot read: {error}"));
                        found.files.push((path, Some(unreadable)));
                    }
                    continue;
                }
            };
            if metadata.is_dir() {
                if canonical.starts_with(&target) {
                    found.problems.push(problem(
                        &path,
                        "a symlink back to a directory that contains it (a loop); remove it".into(),
                    ));
                } else if let Ok(inside) = target.strip_prefix(&root) {
                    // Read (or to be read) under its own name already.
                    let key = key_of(inside);
                    found.warnings.push(format!(
                        "{}: not followed: a symlink to `{key}`, a directory read under its own \
                         name (its prompts are keyed `{key}/…`)",
                        path.display(),
                    ));
                } else {
                    // A directory of prompts shared from elsewhere: read under
                    // the link's name, once however many links lead to it.
                    subdirectories.push((path, target));
                }
            } else if is_prompt {
                let unreadable =
                    (!metadata.is_file()).then(|| not_regular(&path, &metadata.file_type()));
                found.files.push((path, unreadable));
            }
        }
        pending.extend(subdirectories.into_iter().rev());
    }
    Ok(found)
}

fn not_regular(path: &Path, kind: &std::fs::FileType) -> Error {
    Error::File {
        path: path.display().to_string(),
        message: format!(
            "{}, not a regular file; a prompt must be a regular file",
            crate::file::describe(kind)
        ),
    }
}

/// A relative path as a key: its components joined with `/`.
pub(super) fn key_of(relative: &Path) -> String {
    relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// What a directory is, whatever path leads to it: device and inode where
/// there are such, else the canonical path.
#[cfg(unix)]
fn identity(_canonical: &Path, metadata: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (metadata.dev(), metadata.ino())
}

#[cfg(not(unix))]
fn identity(canonical: &Path, _metadata: &std::fs::Metadata) -> PathBuf {
    canonical.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::super::Registry;
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_directory_is_walked_once_and_a_shared_one_under_its_link_s_name() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        let root = dir.path().join("prompts");
        std::fs::create_dir_all(outside.join("shared")).unwrap();
        std::fs::write(outside.join("shared/x.md"), "shared").unwrap();
        std::fs::write(outside.join("secret.txt"), "secret").unwrap();
        std::fs::create_dir_all(root.join("v2")).unwrap();
        std::fs::write(root.join("sys.md"), "sys").unwrap();
        std::fs::write(root.join("v2/real.md"), "real").unwrap();
        // 31 levels, two links from each to the next: 2^30 paths to walk
        // naively; each directory is read once.
        for level in 0..=30 {
            std::fs::create_dir_all(root.join(format!("lv{level}"))).unwrap();
        }
        for level in 0..30 {
            for name in ["a", "b"] {
                let next = format!("../lv{}", level + 1);
                symlink(&next, root.join(format!("lv{level}/{name}"))).unwrap();
            }
        }
        std::fs::write(root.join("lv30/leaf.md"), "leaf").unwrap();
        symlink("lv0", root.join("l0")).unwrap();
        symlink("v2", root.join("current")).unwrap();
        symlink("v2/real.md", root.join("latest.md")).unwrap();
        // Out: a directory (twice), a prompt file, a file that is no prompt
        // (ignored), and a link back up (a loop).
        symlink(outside.join("shared"), root.join("shared")).unwrap();
        symlink(outside.join("shared"), root.join("shared_again")).unwrap();
        symlink("../outside/secret.txt", root.join("secret.md")).unwrap();
        symlink("../outside/secret.txt", root.join("notes")).unwrap();
        symlink("..", root.join("up")).unwrap();
        let (registry, problems) = Registry::load_all(&root);
        assert_eq!(
            registry.keys().collect::<Vec<_>>(),
            [
                "latest",
                "lv30/leaf",
                "secret",
                "shared/x",
                "sys",
                "v2/real"
            ]
        );
        assert_eq!(registry.get("latest").unwrap().template(), "real");
        assert_eq!(registry.get("shared/x").unwrap().template(), "shared");
        assert_eq!(registry.get("secret").unwrap().template(), "secret");
        let shown = |text: String| {
            text.replace(
                &outside.canonicalize().unwrap().display().to_string(),
                "OUT",
            )
            .replace(&root.canonicalize().unwrap().display().to_string(), "ROOT")
            .replace(&root.display().to_string(), "ROOT")
        };
        let problems: Vec<String> = problems
            .iter()
            .map(|problem| shown(problem.to_string()))
            .collect();
        assert_eq!(
            problems,
            ["ROOT/up: a symlink back to a directory that contains it (a loop); remove it"]
        );
        let warnings: Vec<String> = registry.warnings().iter().cloned().map(shown).collect();
        assert_eq!(warnings.len(), 2 + 60, "{warnings:#?}");
        assert_eq!(
            warnings[..2],
            [
                "ROOT/current: not followed: a symlink to `v2`, a directory read under its own \
                 name (its prompts are keyed `v2/…`)",
                "ROOT/l0: not followed: a symlink to `lv0`, a directory read under its own name \
                 (its prompts are keyed `lv0/…`)",
            ]
        );
    }

    #[test]
    fn the_walk_stops_past_its_limit_with_one_problem() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for index in 0..4 {
            std::fs::create_dir_all(root.join(format!("d{index}"))).unwrap();
            std::fs::write(root.join(format!("d{index}/p.md")), "x").unwrap();
        }
        assert_eq!(walk(root, 8).unwrap().files.len(), 4);
        let Err(problem) = walk(root, 7) else {
            panic!("expected the limit");
        };
        assert_eq!(
            problem.to_string(),
            format!(
                "{}: the prompt directory holds more than 7 files and directories (counted \
                 through its subdirectories); hint: point `prompts:` at a directory that holds \
                 only prompts",
                root.display()
            )
        );
    }
}
