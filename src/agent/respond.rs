//! `Agent::respond()`: the awaited builder of one agent call (the seed's
//! `respond(alias, metadata, args, parser_args, return_session)`), and the
//! error a failed call is when awaited as a message.
//!
//! The builder only gathers options; awaiting it runs `Agent::call`, the one
//! path every call takes (YAML flows' steps included). Its two outputs are
//! a typestate, as rig's `PromptRequest<Standard | Extended>`: the accepted
//! `Message` by default, the whole `AgentCallSession` after `.session()`.

use std::future::IntoFuture;
use std::marker::PhantomData;

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{Agent, AgentCallSession, Error};
use crate::dialog::Message;

/// The options of one call, as `Respond` gathers them.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Model arguments of this call, merged over the agent's `model_args`
    /// (a key here wins).
    pub model_args: Map<String, Value>,
    /// Arguments for the governing prompt's parser, kept on the call session.
    pub parser_args: Map<String, Value>,
    /// Stored on the call session (and so in the record); never sent.
    pub metadata: Map<String, Value>,
    /// The name of the call in the record's `steps` (a programmed run's).
    pub step: Option<String>,
}

/// One agent call, to be awaited: `agent.respond().await?` gives the accepted
/// [`Message`]; `agent.respond().session().await?` the whole
/// [`AgentCallSession`] (also when the call failed).
///
/// ```
/// # use lllm::{Ctx, Flow, FlowResult, Task};
/// # use serde_json::json;
/// # struct Ask;
/// # impl Flow for Ask {
/// #     const NAME: &'static str = "ask";
/// #     const AGENTS: &'static [&'static str] = &["echo"];
/// async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
///     let echo = cx.agent("echo")?;
///     echo.open("main")?;
///     echo.receive(task.text())?;
///     let session = echo
///         .respond()
///         .dialog("main")                                 // the active dialog unless given
///         .args(json!({"temperature": 0}))                // over the agent's model_args
///         .metadata(json!({"round": 1}))                  // kept on the call session
///         .session()
///         .await?;
///     assert_eq!(session.metadata["round"], 1);
///     Ok(session.delivery().map(|reply| reply.content.clone()).unwrap_or_default())
/// }
/// # }
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("ask.yaml");
/// # std::fs::write(&path, "tactic_type: ask\nagent_configs:\n  - {name: echo, model_name: mock/echo}\n").unwrap();
/// # let registry = lllm::Registry::new().flow(Ask);
/// # let tactic = lllm::Tactic::load(&path, &registry).unwrap();
/// # let record = tokio::runtime::Runtime::new().unwrap().block_on(tactic.run("hi".into()));
/// # assert_eq!(record.delivery.as_deref(), Some("hi"), "{:?}", record.error);
/// # assert_eq!(record.agent_calls[0].metadata["round"], 1);
/// ```
#[must_use = "a response is only requested when awaited"]
pub struct Respond<'a, Output = Message> {
    agent: &'a mut Agent,
    dialog: Option<String>,
    options: CallOptions,
    /// A problem with an option, reported when awaited.
    misuse: Option<Error>,
    output: PhantomData<fn() -> Output>,
}

impl<'a> Respond<'a, Message> {
    pub(super) fn new(agent: &'a mut Agent) -> Respond<'a, Message> {
        Respond {
            agent,
            dialog: None,
            options: CallOptions::default(),
            misuse: None,
            output: PhantomData,
        }
    }

    /// Awaits to the whole [`AgentCallSession`] instead of the message: `Ok`
    /// for a failed call too (state `failure`, D7); `Err` only for misuse (no
    /// such dialog, arguments that are not an object).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// let mut agent = lllm::Agent::builder("mock/echo").build()?;
    /// agent.open("chat")?;
    /// agent.receive("Hello")?;
    /// let session = agent.respond().session().await?;
    /// assert!(session.is_success());
    /// assert_eq!(session.invokes.len(), 1);
    /// assert_eq!(session.exception_retry_count() + session.llm_recall_count(), 0);
    /// assert_eq!(session.delivery().map(|reply| reply.content.as_str()), Some("Hello"));
    /// # Ok(()) }
    /// ```
    pub fn session(self) -> Respond<'a, AgentCallSession> {
        Respond {
            agent: self.agent,
            dialog: self.dialog,
            options: self.options,
            misuse: self.misuse,
            output: PhantomData,
        }
    }
}

impl<Output> Respond<'_, Output> {
    /// Calls on dialog `alias` instead of the active one (the active dialog
    /// stays as it is).
    pub fn dialog(mut self, alias: impl Into<String>) -> Self {
        self.dialog = Some(alias.into());
        self
    }

    /// Model arguments for this call (a `json!`, a struct or a map), merged
    /// over the agent's `model_args`: a key given here wins. Not a JSON
    /// object: an [`Error::Args`] when awaited.
    pub fn args(mut self, args: impl Serialize) -> Self {
        self.options.model_args = self.object(args, "model arguments");
        self
    }

    /// Arguments for the governing prompt's parser (a `json!`, a struct or
    /// a map), kept on the call session. Not a JSON object: an
    /// [`Error::Args`] when awaited.
    pub fn parser_args(mut self, args: impl Serialize) -> Self {
        self.options.parser_args = self.object(args, "parser arguments");
        self
    }

    /// Metadata (a `json!`, a struct or a map) stored on the call session
    /// and in the session record; never sent to the model. Not a JSON
    /// object: an [`Error::Args`] when awaited.
    pub fn metadata(mut self, metadata: impl Serialize) -> Self {
        self.options.metadata = self.object(metadata, "metadata");
        self
    }

    /// Names the call in the session record's `steps`, as a YAML flow's
    /// step is named (`lllm replay` shows it); in a programmed run only.
    pub fn step(mut self, name: impl Into<String>) -> Self {
        self.options.step = Some(name.into());
        self
    }

    /// The object `value`, or nothing (and the misuse noted) when it is not
    /// one; `null` is an empty object.
    fn object(&mut self, value: impl Serialize, what: &'static str) -> Map<String, Value> {
        crate::args::object(value, what).unwrap_or_else(|source| {
            self.misuse.get_or_insert(Error::Args {
                agent: self.agent.name().to_string(),
                source,
            });
            Map::new()
        })
    }

    // `&mut self`: an `async fn` holds an argument by value twice (as its
    // argument and as its local), and every served call waits in this one.
    async fn run(&mut self) -> Result<AgentCallSession, Error> {
        if let Some(misuse) = self.misuse.take() {
            return Err(misuse);
        }
        self.agent.call(self.dialog.as_deref(), &self.options).await
    }
}

impl<'a> IntoFuture for Respond<'a, Message> {
    type Output = Result<Message, CallError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(mut self) -> Self::IntoFuture {
        Box::pin(async move {
            let session = self.run().await.map_err(CallError::Agent)?;
            match session.delivery() {
                Some(reply) => Ok(reply.clone()),
                None => Err(CallError::Failed(Box::new(session))),
            }
        })
    }
}

impl<'a> IntoFuture for Respond<'a, AgentCallSession> {
    type Output = Result<AgentCallSession, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(mut self) -> Self::IntoFuture {
        Box::pin(async move { self.run().await })
    }
}

/// Why `agent.respond().await` gave no message: misuse, or a call that
/// failed (its repairs or retries spent), with its whole session.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No such dialog, or an option that is not a JSON object.
    #[error(transparent)]
    Agent(#[from] Error),
    /// The call ran and failed; the session holds every invoke and its cost.
    #[error("agent `{}` failed on dialog `{}`: {}", .0.agent, .0.dialog_alias, .0.error.as_deref().unwrap_or("no reply"))]
    Failed(Box<AgentCallSession>),
}

impl CallError {
    /// The failed call's session, if the call ran.
    pub fn session(&self) -> Option<&AgentCallSession> {
        match self {
            CallError::Failed(session) => Some(session),
            CallError::Agent(_) => None,
        }
    }
}

impl Message {
    /// The parsed reply (`parsed`) as a `T`.
    ///
    /// ```
    /// use lllm::dialog::Message;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Verdict {
    ///     verdict: String,
    /// }
    ///
    /// let mut reply = Message::assistant("critic", "<verdict>ok</verdict>");
    /// reply.parsed.insert("verdict".into(), "ok".into());
    /// assert_eq!(reply.parsed_as::<Verdict>().unwrap().verdict, "ok");
    /// ```
    pub fn parsed_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_value(Value::Object(self.parsed.clone()))
    }
}
