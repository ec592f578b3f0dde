//! What every program a tool starts (command tools, MCP servers) shares: its
//! own process group, ended as a whole, and an environment without the
//! credentials lllm reads (issue 12).
//!
//! A program's children are in its group, so ending the group ends them too:
//! a grandchild can neither outlive a timeout or a Ctrl-C nor keep a finished
//! tool waiting on the pipe it inherited. How long a tool may run and when its
//! group ends is `command.rs`' and `mcp.rs`' business.

use std::collections::BTreeMap;
use std::ffi::OsString;

#[cfg(unix)]
pub(super) use nix::sys::signal::Signal;

/// Signals on systems without process groups: nothing is sent.
#[cfg(not(unix))]
#[derive(Clone, Copy)]
pub(super) enum Signal {
    SIGTERM,
    SIGKILL,
}

/// The process group of a program started with `process_group(0)` (its id is
/// the program's pid). Dropping it kills whatever is left in the group.
pub(super) struct ProcessGroup {
    #[cfg(unix)]
    id: Option<nix::unistd::Pid>,
}

impl ProcessGroup {
    /// The group led by the program with process id `pid` (`None`: a program
    /// that never started; then nothing is signalled).
    pub fn led_by(pid: Option<u32>) -> ProcessGroup {
        #[cfg(unix)]
        return ProcessGroup {
            id: pid
                .and_then(|pid| i32::try_from(pid).ok())
                .filter(|pid| *pid > 1)
                .map(nix::unistd::Pid::from_raw),
        };
        #[cfg(not(unix))]
        {
            let _ = pid;
            ProcessGroup {}
        }
    }

    /// Sends `signal` to every process of the group. A group that is already
    /// empty is fine (the signal has nobody to reach).
    pub fn signal(&self, signal: Signal) {
        #[cfg(unix)]
        if let Some(id) = self.id {
            let _ = nix::sys::signal::killpg(id, signal);
        }
        #[cfg(not(unix))]
        let _ = signal;
    }

    /// Kills every process of the group at once.
    pub fn kill(&self) {
        self.signal(Signal::SIGKILL);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Variables lllm itself reads credentials from, which a tool's program does
/// not inherit: every `*_API_KEY` (the presets' and any other provider's keys;
/// matched without regard to case), `ANTHROPIC_AUTH_TOKEN`, the variables
/// named by the tactic's `api_key_env` (`also`), and a base-URL variable
/// (`*_BASE_URL`, `OLLAMA_HOST`) whose value holds a password
/// (`https://user:PASSWORD@host`).
pub(super) fn is_credential(name: &str, value: &OsString, also: &[String]) -> bool {
    let upper = name.to_ascii_uppercase();
    if upper.ends_with("_API_KEY")
        || upper == "ANTHROPIC_AUTH_TOKEN"
        || also.iter().any(|hidden| hidden == name)
    {
        return true;
    }
    (upper.ends_with("_BASE_URL") || upper == "OLLAMA_HOST")
        && value.to_str().is_some_and(has_userinfo)
}

/// Whether a URL (or a `host:port`) carries `user[:password]@` before its host.
fn has_userinfo(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    authority.contains('@')
}

/// Sets up the environment of a tool's program: lllm's own environment
/// without its credentials (`is_credential`), plus `explicit` (a tool's or
/// server's `env:`), which may pass any variable, a credential too. A value
/// written as exactly `${NAME}` is NAME's value in lllm's environment (the
/// way to pass a key on without writing it into the tactic); when NAME is not
/// set, the variable is not set either.
pub(super) fn set_environment(
    command: &mut tokio::process::Command,
    explicit: &BTreeMap<String, String>,
    hidden: &[String],
) {
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if !explicit.contains_key(name) && is_credential(name, &value, hidden) {
            command.env_remove(name);
        }
    }
    for (name, value) in explicit {
        let reference = value
            .strip_prefix("${")
            .and_then(|rest| rest.strip_suffix('}'))
            .filter(|inner| !inner.is_empty() && !inner.contains(['$', '{', '}']));
        match reference {
            Some(source) => match std::env::var_os(source) {
                Some(value) => {
                    command.env(name, value);
                }
                None => {
                    command.env_remove(name);
                }
            },
            None => {
                command.env(name, value);
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::time::Duration;

    /// Whether process `pid`, started as `program`, has ended: gone, a zombie
    /// its reaper has not collected yet, or its id taken by another program.
    pub(in crate::tool) fn ended(pid: u32, program: &str) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return true;
        };
        let state = stat.rsplit(')').next().unwrap_or_default().trim_start();
        let command_line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        state.starts_with('Z') || !String::from_utf8_lossy(&command_line).contains(program)
    }

    /// Waits (up to a generous minute; killing is asynchronous) for `pid` to end.
    pub(in crate::tool) async fn assert_ends(pid: u32, program: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !ended(pid, program) {
            assert!(
                std::time::Instant::now() < deadline,
                "process {pid} (`{program}`) is still running"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[test]
    fn credentials_are_recognized_by_name_and_by_a_password_in_a_url() {
        #[track_caller]
        fn case(name: &str, value: &str, expected: bool) {
            let also = ["MY_LLM_TOKEN".to_string()];
            assert_eq!(
                is_credential(name, &OsString::from(value), &also),
                expected,
                "{name}={value}"
            );
        }
        case("OPENAI_API_KEY", "sk-1", true);
        case("GROQ_API_KEY", "k", true);
        case("some_api_key", "k", true);
        case("ANTHROPIC_AUTH_TOKEN", "t", true);
        case("MY_LLM_TOKEN", "t", true);
        case(
            "OPENAI_BASE_URL",
            "https://user:secret@proxy.example/v1",
            true,
        );
        case("OLLAMA_HOST", "user:secret@127.0.0.1:11434", true);
        case("OPENAI_BASE_URL", "https://proxy.example/v1?a=b@c", false);
        case("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1", false);
        case("PATH", "/usr/bin", false);
        case("HOME", "/home/x", false);
        case("API_KEYS_DIR", "/x", false);
    }
}
