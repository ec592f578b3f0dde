//! Which files an attachment may be read from (issue 26). A path the user
//! typed (`lllm run --attach`) may name any file; a path in a task line,
//! which came with a dataset someone else may have written, only a file
//! inside the TASKS file's directory or a directory the user named
//! (`lllm batch --attachments-dir`). Either way only a regular file is read
//! (no device, named pipe or socket, nor a file the kernel makes up under
//! `/proc` or `/sys`), and never one of lllm's own secrets: the files and
//! directories the caller names (the keys file, the env files, the config
//! directory), and any file named `.env` or `.env.*`.
//!
//! Places are compared resolved (every `..` and symbolic link followed), and
//! checked again on the open handle, so a link swapped in between the check
//! and the open is caught. What the file holds is `attachment`'s business.

use std::fs::File;
use std::path::{Path, PathBuf};

/// Which files attachments given by path may be read from, relative paths
/// taken from where.
///
/// ```
/// use lllm::dialog::{Attachment, AttachmentScope};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("notes.txt"), "owls")?;
/// std::fs::write(dir.path().join(".env"), "OPENAI_API_KEY=sk-…")?;
/// let task_line = AttachmentScope::default().confine_to(dir.path())?;
/// let read = |spec: &str| Attachment::parse(spec)?.to_part(&task_line);
/// assert!(read("notes.txt").is_ok());
/// assert!(read("../../../etc/hostname").unwrap_err().to_string().contains("outside"));
/// assert!(read(".env").unwrap_err().to_string().contains("never attached"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct AttachmentScope {
    /// Where a relative path starts.
    base: PathBuf,
    reach: Reach,
    /// With [`Reach::Inside`]: the directories (resolved) a file must be in.
    roots: Vec<PathBuf>,
    secrets: Vec<Secret>,
}

/// How far paths may lead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Reach {
    /// No file is read: an attachment is a URL or inline bytes.
    #[default]
    NoFiles,
    /// Any file (a path the user typed).
    Anywhere,
    /// Files inside `roots` only (a path from a task line).
    Inside,
}

/// A file or directory of lllm's own secrets.
#[derive(Debug, Clone)]
struct Secret {
    /// Resolved.
    path: PathBuf,
    /// Everything inside it, rather than the file itself.
    directory: bool,
    /// Its identity on disk (device, inode), when it exists: a hard link
    /// to it elsewhere is it too.
    identity: Option<(u64, u64)>,
    /// What it is, in words (`lllm's keys file`).
    what: String,
}

/// Where the kernel makes up files that look regular (`/proc/self/environ`
/// says it is a regular file of 0 bytes); refused by place before anything
/// is opened, and by file system once open.
const KERNEL_PLACES: [&str; 3] = ["/proc", "/sys", "/dev"];

impl AttachmentScope {
    /// Paths a user typed: any file, relative paths from `base` (`""` is the
    /// working directory).
    pub fn anywhere(base: impl Into<PathBuf>) -> AttachmentScope {
        AttachmentScope {
            base: base.into(),
            reach: Reach::Anywhere,
            ..AttachmentScope::default()
        }
    }

    /// The same scope for paths from a task line: relative paths start at
    /// `base` (a TASKS file's directory; `""` is the working directory),
    /// and a file must resolve inside `base` or a directory added with
    /// [`allow_directory`](Self::allow_directory). Fails when `base` does
    /// not resolve.
    pub fn confine_to(mut self, base: impl Into<PathBuf>) -> std::io::Result<AttachmentScope> {
        self.base = base.into();
        self.roots.push(resolved(&self.base)?);
        self.reach = Reach::Inside;
        Ok(self)
    }

    /// Lets confined paths also lead inside `directory` (`--attachments-dir`).
    /// Fails when it is not an existing directory.
    pub fn allow_directory(mut self, directory: &Path) -> std::io::Result<AttachmentScope> {
        let real = resolved(directory)?;
        if !std::fs::metadata(&real)?.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a directory",
            ));
        }
        self.roots.push(real);
        Ok(self)
    }

    /// Never attaches the file at `path`, whatever names it (a link, a hard
    /// link, `..`); `what` says what it is (`lllm's keys file`). A file
    /// that does not exist yet is known by its place.
    pub fn refuse_file(self, path: &Path, what: impl Into<String>) -> AttachmentScope {
        self.refuse(path, false, what.into())
    }

    /// Never attaches anything inside `directory` (`lllm's config directory`).
    pub fn refuse_directory(self, directory: &Path, what: impl Into<String>) -> AttachmentScope {
        self.refuse(directory, true, what.into())
    }

    fn refuse(mut self, path: &Path, directory: bool, what: String) -> AttachmentScope {
        let Some(real) = crate::file::same::real_path(path) else {
            return self;
        };
        let identity = match directory {
            true => None,
            false => std::fs::metadata(&real)
                .ok()
                .and_then(|meta| identity(&meta)),
        };
        self.secrets.push(Secret {
            path: real,
            directory,
            identity,
            what,
        });
        self
    }

    /// Where relative paths start.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Opens the regular file `path` names (relative to the base) when this
    /// scope allows it, with its size; the error says why not, in words.
    pub(crate) fn open(&self, path: &str) -> Result<(File, u64), String> {
        match self.reach {
            Reach::NoFiles => {
                return Err(
                    "files are not read here; an attachment is an http(s) URL or a base64 \
                     data: URL"
                        .into(),
                );
            }
            Reach::Anywhere | Reach::Inside => {}
        }
        let written = Path::new(path);
        if let Some(name) = env_file_name(written) {
            return Err(format!(
                "`{}` is an env file, where keys live; lllm's secrets are never attached",
                crate::suggest::printable(&name)
            ));
        }
        let full = self.base.join(written);
        let real =
            std::fs::canonicalize(&full).map_err(|error| format!("cannot read it: {error}"))?;
        self.check_place(&real)?;
        // Only a regular file is opened at all: opening a device or a pipe
        // is not harmless (a tape rewinds, a waiting writer is let go).
        let metadata =
            std::fs::metadata(&real).map_err(|error| format!("cannot read it: {error}"))?;
        if !metadata.is_file() {
            return Err(not_regular(&metadata));
        }
        let file = open_no_follow(&real).map_err(|error| format!("cannot read it: {error}"))?;
        let opened = file
            .metadata()
            .map_err(|error| format!("cannot read it: {error}"))?;
        if !opened.is_file() {
            return Err(not_regular(&opened));
        }
        // The file open is the one checked: a directory swapped for a link
        // between the two shows here.
        match opened_path(&file) {
            Some(now) if now != real => self.check_place(&now)?,
            Some(_) => {}
            None if identity(&opened) != identity(&metadata) => {
                return Err("the file changed while it was opened".into());
            }
            None => {}
        }
        if let Some(found) = identity(&opened) {
            for secret in &self.secrets {
                if secret.identity == Some(found) {
                    return Err(format!(
                        "it is {} (`{}`); lllm's secrets are never attached",
                        secret.what,
                        shown(&secret.path)
                    ));
                }
            }
        }
        kernel_file_system(&file)?;
        Ok((file, opened.len()))
    }

    /// Whether the resolved path `real` may be read: not a kernel's file,
    /// not a secret, inside the roots when confined.
    fn check_place(&self, real: &Path) -> Result<(), String> {
        if let Some(place) = KERNEL_PLACES.iter().find(|place| real.starts_with(place)) {
            return Err(format!(
                "`{}` is a file of {place}, which the kernel makes up, not a regular file",
                shown(real)
            ));
        }
        if let Some(name) = env_file_name(real) {
            return Err(format!(
                "it leads to `{}`, an env file, where keys live; lllm's secrets are never \
                 attached",
                crate::suggest::printable(&name)
            ));
        }
        for secret in &self.secrets {
            let hit = if secret.directory {
                real.starts_with(&secret.path)
            } else {
                real == secret.path
            };
            if hit {
                return Err(format!(
                    "`{}` is {}; lllm's secrets are never attached",
                    shown(real),
                    secret.what
                ));
            }
        }
        if self.reach == Reach::Inside && !self.roots.iter().any(|root| real.starts_with(root)) {
            let roots: Vec<String> = self
                .roots
                .iter()
                .map(|root| format!("`{}`", shown(root)))
                .collect();
            return Err(format!(
                "it resolves to `{}`, outside the directories a task line's attachments may \
                 come from ({}); hint: `--attachments-dir DIR` allows another",
                shown(real),
                roots.join(", ")
            ));
        }
        Ok(())
    }
}

/// A path in an error line: control characters escaped.
fn shown(path: &Path) -> String {
    crate::suggest::printable(&path.to_string_lossy()).into_owned()
}

/// `path` resolved; the empty path is the working directory.
fn resolved(path: &Path) -> std::io::Result<PathBuf> {
    if path.as_os_str().is_empty() {
        std::fs::canonicalize(".")
    } else {
        std::fs::canonicalize(path)
    }
}

/// The file name of `path` when it is an env file's: `.env` or `.env.*`
/// (`.env.local`, `.env.production`), which hold keys by convention.
fn env_file_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    (name == ".env" || name.starts_with(".env.")).then(|| name.to_string())
}

fn not_regular(metadata: &std::fs::Metadata) -> String {
    format!(
        "{}, not a regular file",
        crate::file::describe(&metadata.file_type())
    )
}

/// Opens `path` for reading without following a link at its last
/// component, without blocking on a named pipe put there meanwhile, and
/// without making a terminal the controlling one.
fn open_no_follow(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY);
    }
    options.open(path)
}

/// Where the open file is, as the kernel knows it (Linux); `None` where
/// that cannot be asked.
fn opened_path(file: &File) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// A file's device and inode.
fn identity(metadata: &std::fs::Metadata) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((metadata.dev(), metadata.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = metadata;
        None
    }
}

/// Refuses a file of a file system the kernel makes up (procfs, sysfs and
/// their kin), wherever it is mounted.
fn kernel_file_system(file: &File) -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::statfs::{
            CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, DEBUGFS_MAGIC, PROC_SUPER_MAGIC,
            SECURITYFS_MAGIC, SYSFS_MAGIC, TRACEFS_MAGIC, fstatfs,
        };
        if let Ok(found) = fstatfs(file) {
            let kind = found.filesystem_type();
            let named = [
                (PROC_SUPER_MAGIC, "procfs"),
                (SYSFS_MAGIC, "sysfs"),
                (DEBUGFS_MAGIC, "debugfs"),
                (TRACEFS_MAGIC, "tracefs"),
                (SECURITYFS_MAGIC, "securityfs"),
                (CGROUP_SUPER_MAGIC, "cgroupfs"),
                (CGROUP2_SUPER_MAGIC, "cgroupfs"),
            ];
            if let Some((_, name)) = named.iter().find(|(magic, _)| *magic == kind) {
                return Err(format!(
                    "a file of {name}, which the kernel makes up, not a regular file"
                ));
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fails, part};
    use super::*;
    use crate::dialog::{ContentPart, file_element};

    /// A TASKS file's directory, `tasks/`, beside a file and a directory
    /// outside it.
    struct Tree {
        root: tempfile::TempDir,
    }

    impl Tree {
        fn new() -> Tree {
            let root = tempfile::tempdir().unwrap();
            let path = |relative: &str| root.path().join(relative);
            std::fs::create_dir_all(path("tasks/sub")).unwrap();
            std::fs::create_dir_all(path("images")).unwrap();
            std::fs::write(path("tasks/notes.txt"), "inside").unwrap();
            std::fs::write(path("tasks/sub/deeper.txt"), "deeper").unwrap();
            std::fs::write(path("outside.txt"), "outside").unwrap();
            std::fs::write(path("images/owl.gif"), "GIF89a").unwrap();
            Tree { root }
        }

        fn path(&self, relative: &str) -> PathBuf {
            self.root.path().join(relative)
        }

        fn confined(&self) -> AttachmentScope {
            AttachmentScope::default()
                .confine_to(self.path("tasks"))
                .unwrap()
        }
    }

    #[test]
    fn task_line_paths_resolve_inside_the_tasks_directory() {
        let tree = Tree::new();
        let scope = tree.confined();
        let text = |name: &str, text: &str| ContentPart::text(file_element(name, text));
        assert_eq!(part("notes.txt", &scope), text("notes.txt", "inside"));
        assert_eq!(part("sub/deeper.txt", &scope), text("deeper.txt", "deeper"));
        // `..` and an absolute path are fine while they stay inside.
        assert_eq!(
            part("sub/../notes.txt", &scope),
            text("notes.txt", "inside")
        );
        let absolute = tree.path("tasks/notes.txt").display().to_string();
        assert_eq!(part(&absolute, &scope), text("notes.txt", "inside"));
        fails("../outside.txt", &scope, "outside the directories");
        fails("sub/../../outside.txt", &scope, "outside the directories");
        fails(
            &tree.path("outside.txt").display().to_string(),
            &scope,
            "outside the directories",
        );
        fails("../images/owl.gif", &scope, "hint: `--attachments-dir DIR`");
        fails("/etc/hostname", &scope, "outside the directories");
        fails(
            "../../../../../../etc/passwd",
            &scope,
            "outside the directories",
        );
        std::fs::write(tree.path("out\nside.txt"), "outside").unwrap();
        fails(
            "../out\nside.txt",
            &scope,
            "out\\nside.txt`, outside the directories",
        );
        // The user widens it with a directory.
        let widened = scope.clone().allow_directory(&tree.path("images")).unwrap();
        assert_eq!(
            part("../images/owl.gif", &widened).to_string(),
            "<image image/gif>"
        );
        fails("../outside.txt", &widened, "outside the directories");
        let error = AttachmentScope::default()
            .allow_directory(&tree.path("outside.txt"))
            .unwrap_err();
        assert_eq!(error.to_string(), "not a directory");
        assert!(
            AttachmentScope::default()
                .allow_directory(&tree.path("gone"))
                .is_err()
        );
    }

    #[cfg(unix)]
    #[test]
    fn links_are_followed_and_judged_where_they_lead() {
        let tree = Tree::new();
        let scope = tree.confined();
        let link = |target: &str, name: &str| {
            std::os::unix::fs::symlink(target, tree.path(name)).unwrap();
        };
        link("notes.txt", "tasks/alias.txt");
        link("../outside.txt", "tasks/escape.txt");
        link(
            &tree.path("outside.txt").display().to_string(),
            "tasks/absolute.txt",
        );
        link("..", "tasks/up");
        link("/etc", "tasks/etc");
        assert_eq!(
            part("alias.txt", &scope),
            ContentPart::text(file_element("alias.txt", "inside"))
        );
        fails("escape.txt", &scope, "outside the directories");
        fails("absolute.txt", &scope, "outside the directories");
        fails("up/outside.txt", &scope, "outside the directories");
        fails("etc/hostname", &scope, "outside the directories");
        // `--attach` may name any file: a link out is the user's own.
        let anywhere = AttachmentScope::anywhere(tree.path("tasks"));
        assert_eq!(
            part("escape.txt", &anywhere),
            ContentPart::text(file_element("escape.txt", "outside"))
        );
    }

    #[cfg(unix)]
    #[test]
    fn only_regular_files_are_read_and_never_the_kernels() {
        let tree = Tree::new();
        let fifo = tree.path("tasks/pipe");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::os::unix::net::UnixListener::bind(tree.path("tasks/socket")).unwrap();
        for scope in [
            tree.confined(),
            AttachmentScope::anywhere(tree.path("tasks")),
        ] {
            // Without a check before the open, this would wait for a writer.
            fails("pipe", &scope, "a named pipe, not a regular file");
            fails("socket", &scope, "a socket, not a regular file");
            fails("sub", &scope, "a directory, not a regular file");
        }
        // Paths a user typed: devices and the kernel's files are refused too.
        let anywhere = AttachmentScope::anywhere("");
        fails("/dev/zero", &anywhere, "/dev, which the kernel makes up");
        fails("/dev/null", &anywhere, "/dev, which the kernel makes up");
        #[cfg(target_os = "linux")]
        {
            fails(
                "/proc/self/environ",
                &anywhere,
                "/proc, which the kernel makes up",
            );
            fails(
                "/proc/self/cmdline",
                &anywhere,
                "/proc, which the kernel makes up",
            );
            fails(
                "/sys/kernel/uevent_seqnum",
                &anywhere,
                "which the kernel makes up",
            );
            // A link to them is judged where it leads.
            std::os::unix::fs::symlink("/proc/self/environ", tree.path("tasks/env-link")).unwrap();
            let here = AttachmentScope::anywhere(tree.path("tasks"));
            fails("env-link", &here, "/proc, which the kernel makes up");
        }
    }

    #[test]
    fn lllm_secrets_are_never_attached() {
        let tree = Tree::new();
        let config = tree.path("tasks/.config/lllm");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("keys.json"), r#"{"OPENAI_API_KEY": "sk-1"}"#).unwrap();
        std::fs::write(config.join("prompt.md"), "mine").unwrap();
        std::fs::write(tree.path("tasks/.env"), "KEY=sk-2").unwrap();
        std::fs::write(tree.path("tasks/.env.local"), "KEY=sk-3").unwrap();
        std::fs::write(tree.path("tasks/prod.env"), "KEY=sk-4").unwrap();
        let secrets = |scope: AttachmentScope| {
            scope
                .refuse_file(&config.join("keys.json"), "lllm's keys file")
                .refuse_file(
                    &tree.path("tasks/prod.env"),
                    "an env file lllm reads keys from",
                )
                .refuse_directory(&config, "inside lllm's config directory")
        };
        for scope in [
            secrets(tree.confined()),
            secrets(AttachmentScope::anywhere(tree.path("tasks"))),
        ] {
            fails(".config/lllm/keys.json", &scope, "is lllm's keys file");
            fails(
                "sub/../.config/lllm/keys.json",
                &scope,
                "is lllm's keys file",
            );
            fails(
                ".config/lllm/prompt.md",
                &scope,
                "inside lllm's config directory",
            );
            fails("prod.env", &scope, "an env file lllm reads keys from");
            // Env files by name, wherever they are, whatever scope.
            fails(".env", &scope, "`.env` is an env file");
            fails(".env.local", &scope, "`.env.local` is an env file");
            fails("sub/../.env", &scope, "never attached");
            // A name with a line break stays on the error's one line.
            fails(".env.x\ny", &scope, "`.env.x\\ny` is an env file");
        }
        let anywhere = secrets(AttachmentScope::anywhere(tree.path("tasks")));
        std::fs::write(tree.path(".env"), "KEY=sk-5").unwrap();
        fails("../.env", &anywhere, "`.env` is an env file");
        #[cfg(unix)]
        {
            // Under another name: a link, a hard link.
            std::os::unix::fs::symlink(".config/lllm/keys.json", tree.path("tasks/keys.txt"))
                .unwrap();
            std::os::unix::fs::symlink(".env", tree.path("tasks/settings.txt")).unwrap();
            std::fs::hard_link(config.join("keys.json"), tree.path("tasks/copy.json")).unwrap();
            for scope in [secrets(tree.confined()), anywhere] {
                fails("keys.txt", &scope, "is lllm's keys file");
                fails("settings.txt", &scope, "it leads to `.env`");
                fails("copy.json", &scope, "it is lllm's keys file");
            }
        }
    }
}
