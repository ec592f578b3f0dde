//! Open file descriptors: the process's limit (`RLIMIT_NOFILE`), raised as
//! far as a run needs and the hard limit allows, and a failure that ran out
//! of them named as such. At a high `-j` under a low limit, connections
//! failed as "cannot connect", which sends one looking for a network fault
//! (issue 26).
//!
//! The lowest layer: the HTTP layer names an exhausted connection, the tool
//! layer an exhausted spawn, the CLI sizes a batch's `-j` with [`raise`].
//! Off Unix there is no limit to read, and nothing is named.

use std::error::Error;
use std::io;

/// The process's limit of open files (the soft limit), if known.
// `rlim_t` is `u64` here and `u32` on some 32-bit targets: the casts widen.
#[allow(clippy::unnecessary_cast)]
pub fn limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use nix::sys::resource::{Resource, getrlimit};
        getrlimit(Resource::RLIMIT_NOFILE)
            .ok()
            .map(|(soft, _)| soft as u64)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Raises the limit of open files to `wanted` when it is lower, as far as
/// the hard limit allows (a process may raise its own soft limit up to it,
/// as `ulimit -S -n` does); never lowers it. The limit afterwards, if known.
#[allow(clippy::unnecessary_cast)]
pub fn raise(wanted: u64) -> Option<u64> {
    #[cfg(unix)]
    {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
        let target = (wanted as nix::sys::resource::rlim_t).min(hard);
        if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
            return Some(target as u64);
        }
        Some(soft as u64)
    }
    #[cfg(not(unix))]
    {
        let _ = wanted;
        None
    }
}

/// Which table ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// This process's own limit (`EMFILE`).
    Process,
    /// The system's table of open files (`ENFILE`).
    System,
}

impl Exhausted {
    /// What `error` says, if it is a lack of file descriptors.
    pub fn of_io(error: &io::Error) -> Option<Exhausted> {
        #[cfg(unix)]
        {
            let code = error.raw_os_error()?;
            if code == nix::errno::Errno::EMFILE as i32 {
                return Some(Exhausted::Process);
            }
            if code == nix::errno::Errno::ENFILE as i32 {
                return Some(Exhausted::System);
            }
            None
        }
        #[cfg(not(unix))]
        {
            let _ = error;
            None
        }
    }

    /// The first lack of file descriptors in `error` or its sources (a
    /// reqwest error wraps hyper's, which wraps the `io::Error`).
    pub fn of(error: &(dyn Error + 'static)) -> Option<Exhausted> {
        let mut cause = Some(error);
        while let Some(current) = cause {
            if let Some(exhausted) = current
                .downcast_ref::<io::Error>()
                .and_then(Exhausted::of_io)
            {
                return Some(exhausted);
            }
            cause = current.source();
        }
        None
    }

    /// The words for it, with the limit and what to do.
    pub fn message(self) -> String {
        match (self, limit()) {
            (Exhausted::Process, Some(limit)) => format!(
                "too many open files (the process's limit is {limit}; raise it with `ulimit -n` \
                 or lower -j)"
            ),
            (Exhausted::Process, None) => {
                "too many open files (the process's limit; raise it with `ulimit -n` or lower -j)"
                    .into()
            }
            (Exhausted::System, _) => {
                "too many open files in the system (its table of open files is full; close \
                 other programs or lower -j)"
                    .into()
            }
        }
    }
}

/// An I/O error as lllm words it: a lack of file descriptors named as such
/// ([`Exhausted::message`]), any other error as the system says it.
pub fn describe(error: &io::Error) -> String {
    match Exhausted::of_io(error) {
        Some(exhausted) => exhausted.message(),
        None => error.to_string(),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapper(io::Error);

    impl std::fmt::Display for Wrapper {
        fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("client error (Connect)")
        }
    }

    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_lack_of_descriptors_is_found_in_the_chain_and_named() {
        let emfile = || io::Error::from_raw_os_error(nix::errno::Errno::EMFILE as i32);
        let enfile = io::Error::from_raw_os_error(nix::errno::Errno::ENFILE as i32);
        assert_eq!(Exhausted::of(&Wrapper(emfile())), Some(Exhausted::Process));
        assert_eq!(Exhausted::of(&enfile), Some(Exhausted::System));
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(Exhausted::of(&Wrapper(refused)), None);
        let limit = limit().expect("a Unix process has a limit");
        assert_eq!(
            describe(&emfile()),
            format!(
                "too many open files (the process's limit is {limit}; raise it with `ulimit -n` \
                 or lower -j)"
            )
        );
        assert!(describe(&enfile).starts_with("too many open files in the system"));
        assert_eq!(describe(&io::Error::other("disk on fire")), "disk on fire");
    }

    #[test]
    fn the_limit_is_raised_never_lowered() {
        let before = limit().unwrap();
        assert_eq!(raise(1), Some(before), "never lowered");
        // Raised at most to the hard limit, which is never passed.
        let after = raise(before + 1).unwrap();
        assert!(after == before || after == before + 1, "{before} → {after}");
    }
}
