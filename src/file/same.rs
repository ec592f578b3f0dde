//! Whether two paths name one file: what a command checks before it writes an
//! output, so that no output replaces one of its own inputs (`lllm report
//! DIR -o DIR/results.jsonl`, `lllm merge A -o A`). Paths are compared
//! resolved (symbolic links, `..`, a relative path against the working
//! directory), also when the output does not exist yet, and existing files
//! by their identity on disk too (a hard link, a case-insensitive file
//! system).

use std::path::{Path, PathBuf};

/// `path` resolved through symbolic links, also when it does not exist yet
/// (its parent resolved, then its name). `None` when neither resolves.
pub fn real_path(path: &Path) -> Option<PathBuf> {
    if let Ok(real) = std::fs::canonicalize(path) {
        return Some(real);
    }
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::canonicalize(parent)
        .ok()
        .map(|parent| parent.join(name))
}

/// Whether `a` and `b` are one file: the same resolved path, or two existing
/// paths to the same file on disk.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (real_path(a), real_path(b)) {
        (Some(a), Some(b)) if a == b => return true,
        _ => {}
    }
    same_inode(a, b)
}

#[cfg(unix)]
fn same_inode(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_inode(_: &Path, _: &Path) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_under_several_names() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("results.jsonl");
        std::fs::write(&file, "x").unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let cases: Vec<(PathBuf, bool)> = vec![
            (file.clone(), true),
            (sub.join("../results.jsonl"), true),
            (dir.path().join("./results.jsonl"), true),
            (dir.path().join("other.jsonl"), false),
            (sub.join("results.jsonl"), false),
        ];
        for (path, expected) in cases {
            assert_eq!(same_file(&path, &file), expected, "{}", path.display());
        }
        // A file that does not exist yet is still recognised by its place.
        let missing = dir.path().join("summary.json");
        assert!(same_file(&sub.join("../summary.json"), &missing));
        assert!(!same_file(&sub.join("summary.json"), &missing));
        #[cfg(unix)]
        {
            let link = dir.path().join("link");
            std::os::unix::fs::symlink(&file, &link).unwrap();
            assert!(same_file(&link, &file));
            let hard = sub.join("hard");
            std::fs::hard_link(&file, &hard).unwrap();
            assert!(same_file(&hard, &file));
        }
    }
}
