//! The constructors a program uses: `Tactic::load` (a file),
//! `Tactic::from_yaml` (a string) and `Tactic::from_config` (a config built
//! in code). Keys and base URLs come from the process environment, warnings
//! go to stderr (`report::warn`); `tactic::load` with `LoadOptions` is the
//! form with every knob (the CLI's).

use std::path::Path;

use super::{Error, LoadOptions, Result, Tactic};
use crate::Registry;
use crate::config::TacticConfig;

/// The process environment, where providers find their keys and base URLs.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A config's problems as a tactic's, one per line.
fn config_problems(error: crate::config::Error) -> Error {
    Error {
        problems: error.to_string().lines().map(str::to_string).collect(),
    }
}

impl Tactic {
    /// Loads, builds and checks the tactic file at `path` with the extensions
    /// of `registry`; the error lists every problem of every phase.
    ///
    /// ```
    /// use lllm::{Registry, Tactic};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("echo.yaml");
    /// std::fs::write(&path, "agent_configs: [{name: echo, model_name: mock/echo}]").unwrap();
    /// let tactic = Tactic::load(&path, &Registry::new()).unwrap();
    /// assert_eq!(tactic.config.agents[0].name, "echo");
    ///
    /// let error = Tactic::load(dir.path().join("nope.yaml"), &Registry::new()).unwrap_err();
    /// assert!(error.to_string().contains("not found"), "{error}");
    /// ```
    pub fn load(path: impl AsRef<Path>, registry: &Registry) -> Result<Tactic> {
        super::load(path.as_ref(), &LoadOptions::new(registry), None)
    }

    /// Builds the tactic of YAML `text` as if it were a file in `base_dir`
    /// (relative prompt directories, tool paths and `base:` resolve against
    /// it); errors name the text `<yaml>`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Registry, Tactic};
    ///
    /// let yaml = "
    /// global: {model_name: mock/echo}
    /// agent_configs: [{name: writer, system_prompt: You repeat.}]
    /// ";
    /// let tactic = Tactic::from_yaml(yaml, ".", &Registry::new())?;
    /// assert_eq!(tactic.call("hello").await?, "hello");
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_yaml(
        text: &str,
        base_dir: impl AsRef<Path>,
        registry: &Registry,
    ) -> Result<Tactic> {
        let config = crate::config::from_yaml(text, base_dir).map_err(config_problems)?;
        Tactic::from_config(config, registry)
    }

    /// Builds the tactic of a config made in code ([`TacticConfig::builder`],
    /// [`crate::config::from_yaml`]), warning on stderr of what its config
    /// warns about (keys passed through as model arguments).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::config::{AgentEntry, TacticConfig};
    /// use lllm::{Registry, Tactic};
    ///
    /// let config = TacticConfig::builder()
    ///     .agent(AgentEntry::new("echo").model("mock/echo"))
    ///     .build()?;
    /// let tactic = Tactic::from_config(config, &Registry::new())?;
    /// assert_eq!(tactic.call("ping").await?, "ping");
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_config(config: TacticConfig, registry: &Registry) -> Result<Tactic> {
        for warning in &config.warnings {
            crate::report::warn(warning);
        }
        Tactic::build_with(config, &process_env, registry)
    }
}

/// The tactic's name, file and agents (its parts are too large to show).
impl std::fmt::Debug for Tactic {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Tactic")
            .field("name", &self.config.name)
            .field("path", &self.config.path)
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}
