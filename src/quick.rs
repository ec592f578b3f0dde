//! One agent from a model name, for code that wants no tactic file:
//! [`quick`] (one question, one answer: Python's `Tactic.quick`) and
//! [`Agent::builder`] (an agent to keep talking to: `quick(…,
//! return_agent=True)`).
//!
//! Both write a one-agent tactic config in code and build it as any tactic
//! is built, so providers resolve from the environment exactly as a YAML
//! tactic's do (keys, base URLs, presets such as `groq/…` or `ollama/…`), and
//! `quick`'s record is a session record like every run's. There is no default
//! model: `.model(…)`, else `LLLM_MODEL`, else an error (docs/decisions.md).

use std::future::IntoFuture;

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::agent::Agent;
use crate::config::{AgentEntry, TacticConfig};
use crate::dialog::Message;
use crate::tactic::{RunError, SessionRecord, Tactic, Task};

/// The variable `quick` and `Agent::builder` callers may set instead of
/// naming a model in code.
pub const MODEL_VARIABLE: &str = "LLLM_MODEL";

/// The name of the agent `quick` and `Agent::builder` make, unless
/// `.name(…)` says otherwise.
pub const AGENT_NAME: &str = "assistant";

/// Asks `question` of one model and gives its reply. Await it; set the model
/// with `.model("provider/model")` or the `LLLM_MODEL` variable, and
/// optionally `.system(text)` and model arguments with `.arg(name, value)`.
///
/// The reply is the whole [`Message`]: its `content`, and its `usage`, `cost()`
/// and `model` (as the provider names it; the offline `mock` providers name
/// none). `.record()` gives the run's [`SessionRecord`] instead. The record
/// is written to the session store, as `lllm run` writes its own
/// (`lllm logs` lists it, `lllm replay` shows it), unless
/// `.write_records(…)` says otherwise ([`Records`](crate::Records)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lllm::BoxError> {
/// // `mock/echo` answers offline with the question; any `provider/model` works.
/// let reply = lllm::quick("What is 2 + 2?").model("mock/echo").await?;
/// assert_eq!(reply.content, "What is 2 + 2?");
///
/// let record = lllm::quick("Hello")
///     .model("mock/echo")
///     .system("Answer in one sentence.")
///     .arg("temperature", 0.2)
///     .record()
///     .await?;
/// assert_eq!(record.delivery.as_deref(), Some("Hello"));
/// # Ok(())
/// # }
/// ```
pub fn quick(question: impl Into<String>) -> Quick {
    Quick {
        question: question.into(),
        agent: OneAgent::default(),
        records: crate::records::Records::default(),
    }
}

/// The question [`quick`] asks; awaiting it gives the reply.
#[must_use = "a question is only asked when awaited"]
#[derive(Debug, Clone)]
pub struct Quick {
    question: String,
    agent: OneAgent,
    /// Where its record is written (the session store unless told).
    records: crate::records::Records,
}

impl Quick {
    /// The model, `provider/model` (a bare name is an OpenAI model); without
    /// it, `LLLM_MODEL` names it.
    pub fn model(mut self, model: impl Into<String>) -> Quick {
        self.agent.model = Some(model.into());
        self
    }

    /// The system prompt (default: "You are a helpful assistant.").
    pub fn system(mut self, text: impl Into<String>) -> Quick {
        self.agent.system = Some(text.into());
        self
    }

    /// A model argument (`temperature`, `max_tokens`, …).
    pub fn arg(mut self, name: impl Into<String>, value: impl Into<Value>) -> Quick {
        self.agent.args.insert(name.into(), value.into());
        self
    }

    /// Model arguments (a `json!`, a struct or a map), merged over those set
    /// before. Not a JSON object: an [`Error::Args`] when awaited, and
    /// nothing is sent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use serde_json::json;
    ///
    /// let question = lllm::quick("Hello").model("mock/echo");
    /// let reply = question.clone().args(json!({"temperature": 0.2, "max_tokens": 50})).await?;
    /// assert_eq!(reply.content, "Hello");
    /// let error = question.args("hot").await.unwrap_err();
    /// assert!(error.to_string().contains("model arguments must be a JSON object"), "{error}");
    /// # Ok(())
    /// # }
    /// ```
    pub fn args(mut self, args: impl Serialize) -> Quick {
        self.agent.merge_args(args);
        self
    }

    /// Gives the run's session record instead of the reply; a failed run is
    /// then a record in state `failure`, not an error.
    pub fn record(self) -> QuickRecord {
        QuickRecord { quick: self }
    }

    /// Writes the session record to `records` instead of the session
    /// store, as the tactic verbs do ([`Records`](crate::Records)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// let dir = tempfile::tempdir()?;
    /// let record = lllm::quick("Hello")
    ///     .model("mock/echo")
    ///     .write_records(lllm::Records::dir(dir.path()))
    ///     .record()
    ///     .await?;
    /// assert!(dir.path().join(format!("{}.json", record.session_id)).is_file());
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_records(mut self, records: crate::records::Records) -> Quick {
        self.records = records;
        self
    }

    async fn run(self) -> Result<SessionRecord, Error> {
        let tactic = self.agent.tactic()?;
        let record = tactic.run(Task::new(self.question)).await;
        Ok(self.records.keep(record).await)
    }
}

impl IntoFuture for Quick {
    type Output = Result<Message, Error>;
    type IntoFuture = BoxFuture<'static, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let record = self.run().await?;
            let reply = record
                .agent_calls
                .last()
                .and_then(|call| call.delivery())
                .cloned();
            match crate::tactic::calls_outcome(record) {
                Ok(delivery) => {
                    Ok(reply.unwrap_or_else(|| Message::assistant(AGENT_NAME, delivery)))
                }
                Err(error) => Err(Error::Failed(error)),
            }
        })
    }
}

/// [`Quick`] giving the session record: [`Quick::record`].
#[must_use = "a question is only asked when awaited"]
#[derive(Debug, Clone)]
pub struct QuickRecord {
    quick: Quick,
}

impl IntoFuture for QuickRecord {
    type Output = Result<SessionRecord, Error>;
    type IntoFuture = BoxFuture<'static, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.quick.run())
    }
}

/// Why [`quick`] gave no reply, or [`Agent::builder`] no agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Neither `.model(…)` nor `LLLM_MODEL` names a model.
    #[error("`quick` needs a model: call `.model(\"provider/model\")` or set LLLM_MODEL")]
    NoModel,
    /// The model cannot be used: an unknown provider, a missing key, a
    /// model argument out of range (nothing was sent).
    #[error("{0}")]
    Config(#[from] crate::tactic::Error),
    /// The model was asked and the call failed; the record has every attempt.
    #[error("{0}")]
    Failed(RunError),
    /// Model arguments or provider settings that are not a JSON object
    /// (nothing was sent).
    #[error(transparent)]
    Args(#[from] crate::args::ArgsError),
}

/// The one agent `quick` and `Agent::builder` make, as settings.
#[derive(Clone)]
struct OneAgent {
    model: Option<String>,
    name: String,
    system: Option<String>,
    args: Map<String, Value>,
    /// Other keys of the agent entry.
    settings: Map<String, Value>,
    /// `providers:` entries.
    providers: Map<String, Value>,
    registry: Option<crate::Registry>,
    /// The first argument or setting that was not a JSON object, reported
    /// when the agent is made.
    misuse: Option<crate::args::ArgsError>,
}

/// Provider settings may hold a key (`headers`): only their names are shown.
impl std::fmt::Debug for OneAgent {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Agent")
            .field("model", &self.model)
            .field("name", &self.name)
            .field("system", &self.system)
            .field("args", &self.args)
            .field("settings", &self.settings)
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Default for OneAgent {
    fn default() -> OneAgent {
        OneAgent {
            model: None,
            name: AGENT_NAME.to_string(),
            system: None,
            args: Map::new(),
            settings: Map::new(),
            providers: Map::new(),
            registry: None,
            misuse: None,
        }
    }
}

impl OneAgent {
    /// The model named in code, else by `LLLM_MODEL`; an empty name is none.
    fn model_name(&self) -> Result<String, Error> {
        self.model
            .clone()
            .or_else(|| std::env::var(MODEL_VARIABLE).ok())
            .filter(|model| !model.trim().is_empty())
            .ok_or(Error::NoModel)
    }

    /// A one-agent tactic, built as a YAML tactic is.
    /// Merges `args` over the model arguments, or notes the misuse.
    fn merge_args(&mut self, args: impl Serialize) {
        match crate::args::object(args, "model arguments") {
            Ok(args) => self.args.extend(args),
            Err(error) => {
                self.misuse.get_or_insert(error);
            }
        }
    }

    fn tactic(&self) -> Result<Tactic, Error> {
        if let Some(misuse) = &self.misuse {
            return Err(misuse.clone().into());
        }
        let mut entry = AgentEntry::new(self.name.clone()).model(self.model_name()?);
        for (key, value) in &self.settings {
            entry = entry.set(key.clone(), value.clone());
        }
        if let Some(system) = &self.system {
            entry = entry.system(system.clone());
        }
        for (name, value) in &self.args {
            entry = entry.arg(name.clone(), value.clone());
        }
        let mut builder = TacticConfig::builder().name("quick").agent(entry);
        for (name, settings) in &self.providers {
            builder = builder.provider(name.clone(), settings.clone());
        }
        let config = builder.build().map_err(|error| crate::tactic::Error {
            problems: error.to_string().lines().map(str::to_string).collect(),
        })?;
        let registry = self.registry.clone().unwrap_or_default();
        Ok(Tactic::from_config(config, &registry)?)
    }
}

impl Agent {
    /// A standalone agent on `model` (`provider/model`; an empty name means
    /// `LLLM_MODEL`), to open dialogs on and talk to: Python's
    /// `quick(…, return_agent=True)`. Its provider resolves from the
    /// environment as a tactic's does.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::Agent;
    ///
    /// let mut agent = Agent::builder("mock/echo").system("You are terse.").build()?;
    /// agent.open("chat")?;
    /// agent.receive("hi")?;
    /// let reply = agent.respond().await?;
    /// assert_eq!(reply.content, "hi");
    /// assert_eq!(agent.current_dialog()?.len(), 3, "system, question, reply");
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(model: impl Into<String>) -> AgentBuilder {
        let model: String = model.into();
        AgentBuilder {
            agent: OneAgent {
                model: Some(model).filter(|model| !model.is_empty()),
                ..OneAgent::default()
            },
        }
    }
}

/// Settings of a standalone agent: [`Agent::builder`].
#[must_use = "an agent is only made by `build`"]
#[derive(Debug, Clone)]
pub struct AgentBuilder {
    agent: OneAgent,
}

impl AgentBuilder {
    /// The agent's name (default `assistant`): dialogs and records show it.
    pub fn name(mut self, name: impl Into<String>) -> AgentBuilder {
        self.agent.name = name.into();
        self
    }

    /// The system prompt's template (default: "You are a helpful assistant.").
    pub fn system(mut self, text: impl Into<String>) -> AgentBuilder {
        self.agent.system = Some(text.into());
        self
    }

    /// A model argument (`temperature`, `max_tokens`, …).
    pub fn arg(mut self, name: impl Into<String>, value: impl Into<Value>) -> AgentBuilder {
        self.agent.args.insert(name.into(), value.into());
        self
    }

    /// Model arguments (a `json!`, a struct or a map), merged over those set
    /// before. Not a JSON object: an [`Error::Args`] from
    /// [`build`](AgentBuilder::build).
    ///
    /// ```
    /// use lllm::Agent;
    /// use serde_json::json;
    ///
    /// let agent = Agent::builder("mock/echo").args(json!({"temperature": 0})).build()?;
    /// assert_eq!(agent.spec().model_args["temperature"], 0);
    /// assert!(Agent::builder("mock/echo").args([0.2]).build().is_err());
    /// # Ok::<(), lllm::BoxError>(())
    /// ```
    pub fn args(mut self, args: impl Serialize) -> AgentBuilder {
        self.agent.merge_args(args);
        self
    }

    /// Any other key of a YAML agent entry (`max_llm_recall`,
    /// `context_manager`, `api_type`, …), checked as a file's would be.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<Value>) -> AgentBuilder {
        self.agent.settings.insert(key.into(), value.into());
        self
    }

    /// Settings of provider `name` as a tactic's `providers:` writes them
    /// (`{api: openai, base_url: …, max_concurrency: 4}`, or a mock
    /// `{script: FILE}`); relative paths are taken from the working directory.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::Agent;
    /// use serde_json::json;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let script = dir.path().join("script.yaml");
    /// std::fs::write(&script, "replies: [first, second]")?;
    /// let mut agent = Agent::builder("mock/script")
    ///     .provider("mock", json!({ "script": script }))
    ///     .build()?;
    /// agent.open("chat")?;
    /// for expected in ["first", "second"] {
    ///     agent.receive("next?")?;
    ///     assert_eq!(agent.respond().await?.content, expected);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Settings are a `json!`, a struct or a map; not a JSON object, they
    /// are an [`Error::Args`] from [`build`](AgentBuilder::build).
    pub fn provider(mut self, name: impl Into<String>, settings: impl Serialize) -> AgentBuilder {
        match crate::args::object(settings, "provider settings") {
            Ok(settings) => {
                self.agent
                    .providers
                    .insert(name.into(), Value::Object(settings));
            }
            Err(error) => {
                self.agent.misuse.get_or_insert(error);
            }
        }
        self
    }

    /// Offers the agent a Rust function as the tool `name` (see
    /// [`Registry::tool`](crate::Registry::tool)): registered in the agent's
    /// registry and added to its `tools`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::Agent;
    /// use lllm::schemars::{self, JsonSchema};
    /// use serde::Deserialize;
    /// use serde_json::json;
    ///
    /// /// Count the words in a text.
    /// #[derive(Deserialize, JsonSchema)]
    /// struct WordCount {
    ///     /// The text whose words are counted.
    ///     text: String,
    /// }
    ///
    /// let dir = tempfile::tempdir()?;
    /// let script = dir.path().join("script.yaml");
    /// std::fs::write(&script, r#"
    /// replies:
    ///   - tool_calls: [{name: word_count, arguments: {text: "one two three"}}]
    ///   - text: three words
    /// "#)?;
    /// let mut agent = Agent::builder("mock/script")
    ///     .provider("mock", json!({ "script": script }))
    ///     .tool("word_count", |args: WordCount| async move {
    ///         Ok::<_, String>(args.text.split_whitespace().count())
    ///     })
    ///     .build()?;
    /// agent.open("chat")?;
    /// agent.receive("How many words in 'one two three'?")?;
    /// let session = agent.respond().session().await?;
    /// assert_eq!(session.interrupts.len(), 1); // one tool round
    /// assert_eq!(session.delivery().map(|reply| reply.content.as_str()), Some("three words"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    /// As [`Registry::tool`](crate::Registry::tool) does: a name registered
    /// twice, an argument type that is not an object.
    pub fn tool<Args, F>(mut self, name: &str, function: F) -> AgentBuilder
    where
        F: crate::tool::ToolFunction<Args>,
    {
        let registry = self.agent.registry.take().unwrap_or_default();
        self.agent.registry = Some(registry.tool(name, function));
        let tools = self
            .agent
            .settings
            .entry("tools")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(tools) = tools {
            tools.push(Value::String(name.to_string()));
        }
        self
    }

    /// The extensions the agent's settings may name (context managers, …).
    pub fn registry(mut self, registry: crate::Registry) -> AgentBuilder {
        self.agent.registry = Some(registry);
        self
    }

    /// The agent; an error when no model is named or it cannot be used (an
    /// unknown provider, a missing key, a bad setting). Nothing is sent.
    pub fn build(self) -> Result<Agent, Error> {
        let tactic = self.agent.tactic()?;
        let spec = tactic
            .agents
            .values()
            .next()
            .cloned()
            .ok_or_else(|| crate::tactic::Error {
                problems: vec!["the agent could not be built".into()],
            })?;
        Ok(Agent::new(spec, tactic.runtime.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_settings_stay_out_of_debug_output() {
        let settings = serde_json::json!({"headers": {"authorization": "Bearer sk-secret"}});
        let agent = Agent::builder("local/m").provider("local", settings.clone());
        let shown = format!("{agent:?}");
        assert!(
            shown.contains("local") && !shown.contains("sk-secret"),
            "{shown}"
        );
        let tactic = TacticConfig::builder().provider("local", settings);
        let shown = format!("{tactic:?}");
        assert!(
            shown.contains("providers") && !shown.contains("sk-secret"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn a_bad_model_is_one_clear_error_and_nothing_is_sent() {
        let error = quick("hi").model("nope/x").await.unwrap_err().to_string();
        assert!(error.contains("unknown provider `nope`"), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
        let error = Agent::builder("mock/echo")
            .set("max_llm_recall", -1)
            .build()
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.contains("max_llm_recall"), "{error}");
    }

    #[tokio::test]
    async fn the_reply_is_the_assistant_message_and_the_record_holds_the_question() {
        let reply = quick("ping").model("mock/echo").await.unwrap();
        assert_eq!(reply.content, "ping");
        assert_eq!(reply.role, crate::dialog::Role::Assistant);
        let record = quick("ping")
            .model("mock/echo")
            .system("Be brief.")
            .record()
            .await
            .unwrap();
        assert_eq!(record.task, "ping");
        assert_eq!(record.tactic.name, "quick");
        assert_eq!(record.agent_calls[0].agent, AGENT_NAME);
    }
}
