//! `Ctx`: one run of a programmed tactic as its [`Flow`](super::Flow) sees
//! it — the task, the prompt registry, and the tactic's agents, each made on
//! first use from its `agent_configs` entry exactly as a YAML flow's step
//! makes it. Every call an agent finishes goes to the run's recorder; the
//! engine (`flow.rs`) turns the agents' dialogs and those calls into the
//! session record when the flow returns.

use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::record::StepRecord;
use super::{Tactic, Task};
use crate::agent::{Agent, AgentCallSession, AgentSpec, Recorder, Runtime};
use crate::prompt::{JsonParser, Prompt, Registry as PromptRegistry};

/// What `Ctx` refuses.
#[derive(Debug, thiserror::Error)]
pub enum CtxError {
    /// The tactic has no agent of that name.
    #[error("tactic `{tactic}` has no agent `{agent}` (its agents: {known}){hint}")]
    NoAgent {
        /// The tactic's name.
        tactic: String,
        /// The name asked for.
        agent: String,
        /// The tactic's agents.
        known: String,
        /// A "did you mean" suffix, or nothing.
        hint: String,
    },
    /// `agents([..])` named one agent twice (it cannot be lent twice).
    #[error("agent `{0}` is asked for twice; `agents` lends each agent once")]
    Twice(String),
    /// A prompt key the registry lacks.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::Error),
}

/// One run of a programmed tactic: hands out its agents and shows the task
/// and the prompts. Agents are made on first use and keep their dialogs for
/// the whole run.
///
/// ```
/// # use lllm::{Ctx, Flow, FlowResult, Task};
/// # struct Both;
/// # impl Flow for Both {
/// #     const NAME: &'static str = "both";
/// #     const AGENTS: &'static [&'static str] = &["a", "b"];
/// async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
///     assert_eq!(cx.task().text(), "hi");
///     let [a, b] = cx.agents(["a", "b"])?; // two agents at once
///     a.open("main")?;
///     b.open("main")?;
///     a.receive("from a")?;
///     b.receive("from b")?;
///     let (x, y) = tokio::join!(a.respond(), b.respond());
///     Ok(format!("{} {}", x?.content, y?.content))
/// }
/// # }
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("both.yaml");
/// # std::fs::write(&path, "tactic_type: both\nglobal: {model_name: mock/echo}\nagent_configs: [{name: a}, {name: b}]\n").unwrap();
/// # let registry = lllm::Registry::new().flow(Both);
/// # let tactic = lllm::Tactic::load(&path, &registry).unwrap();
/// # let record = tokio::runtime::Runtime::new().unwrap().block_on(tactic.run("hi".into()));
/// # assert_eq!(record.delivery.as_deref(), Some("from a from b"), "{:?}", record.error);
/// ```
pub struct Ctx {
    tactic_name: String,
    specs: Arc<IndexMap<String, Arc<AgentSpec>>>,
    runtime: Arc<Runtime>,
    prompts: Arc<PromptRegistry>,
    /// What prompts see under their own arguments: `task`, `args` and each
    /// task argument by name (as a YAML flow's templates do).
    context: Map<String, Value>,
    task: Task,
    agents: HashMap<String, Agent>,
    recorder: Recorder,
    /// Where its agents' calls say what happens (the run's event stream).
    events: Option<crate::event::Emitter>,
    /// What the run's delivery must fit (`output_schema`, `call_typed`).
    output: Option<JsonParser>,
}

impl Ctx {
    pub(super) fn new(tactic: &Tactic, task: &Task) -> Ctx {
        Ctx {
            tactic_name: tactic.config.name.clone(),
            specs: tactic.agents_for(task),
            runtime: tactic.runtime.clone(),
            prompts: tactic.registry.clone(),
            context: super::flow::base_context(task),
            task: task.clone(),
            agents: HashMap::new(),
            recorder: Recorder::default(),
            events: None,
            output: tactic.output.clone(),
        }
    }

    /// Its agents' calls say what happens through `events` (a text sink,
    /// which wants the final turn only, sees none of a programmed flow's:
    /// nothing says which turn is final).
    pub(super) fn with_events(mut self, events: Option<crate::event::Emitter>) -> Ctx {
        self.events = events.filter(|events| !events.final_turn_only());
        self
    }

    /// The agent `name` (an `agent_configs` entry), made on first use.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Ctx, Flow, FlowResult, Registry, Tactic, Task};
    ///
    /// struct Answer;
    ///
    /// impl Flow for Answer {
    ///     const NAME: &'static str = "answer";
    ///     const AGENTS: &'static [&'static str] = &["assistant"];
    ///
    ///     async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
    ///         let agent = cx.agent("assistant")?;
    ///         agent.open("main")?;
    ///         agent.receive(task.text())?;
    ///         Ok(agent.respond().await?.content)
    ///     }
    /// }
    ///
    /// let yaml = "tactic_type: answer\nagent_configs: [{name: assistant, model_name: mock/echo}]";
    /// let tactic = Tactic::from_yaml(yaml, ".", &Registry::new().flow(Answer))?;
    /// assert_eq!(tactic.call("Hello").await?, "Hello");
    /// # Ok(()) }
    /// ```
    pub fn agent(&mut self, name: &str) -> Result<&mut Agent, CtxError> {
        self.make(name)?;
        Ok(self.agents.get_mut(name).expect("made above"))
    }

    /// Several agents at once, each lent once, so that two can run at the
    /// same time (`tokio::join!(a.respond(), b.respond())`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lllm::BoxError> {
    /// use lllm::{Ctx, Flow, FlowResult, Registry, Tactic, Task};
    ///
    /// struct Both;
    ///
    /// impl Flow for Both {
    ///     const NAME: &'static str = "both";
    ///     const AGENTS: &'static [&'static str] = &["left", "right"];
    ///
    ///     async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
    ///         let [left, right] = cx.agents(["left", "right"])?;
    ///         for agent in [&mut *left, &mut *right] {
    ///             agent.open("main")?;
    ///             agent.receive(task.text())?;
    ///         }
    ///         let (a, b) = tokio::join!(left.respond(), right.respond()); // at the same time
    ///         Ok(format!("{} / {}", a?.content, b?.content))
    ///     }
    /// }
    ///
    /// let yaml = "tactic_type: both\nglobal: {model_name: mock/echo}\nagent_configs: [{name: left}, {name: right}]";
    /// let tactic = Tactic::from_yaml(yaml, ".", &Registry::new().flow(Both))?;
    /// assert_eq!(tactic.call("Hi").await?, "Hi / Hi");
    /// # Ok(()) }
    /// ```
    pub fn agents<const N: usize>(
        &mut self,
        names: [&str; N],
    ) -> Result<[&mut Agent; N], CtxError> {
        for (index, name) in names.iter().enumerate() {
            if names[..index].contains(name) {
                return Err(CtxError::Twice(name.to_string()));
            }
            self.make(name)?;
        }
        Ok(self
            .agents
            .get_disjoint_mut(names)
            .map(|agent| agent.expect("made above")))
    }

    /// The agent `name` (as [`Ctx::agent`]) about to make the call whose
    /// reply the flow delivers: when the run has an output schema (the
    /// tactic's `output_schema`, or the type of
    /// [`Tactic::call_typed`](crate::Tactic::call_typed)) that call is held
    /// to it, and a reply that does not fit is repaired in the agent loop
    /// (the call's `exception_retries` show each repair), the repair text
    /// saying what was wrong. Take it after the agent received its last
    /// turn on its active dialog (that turn's prompt is what is held), then
    /// `respond`. Without an
    /// output schema it is [`Ctx::agent`]. Whatever the flow returns is
    /// checked against the schema after it, so a flow that delivers
    /// another text fails the run with why.
    ///
    /// ```
    /// # use lllm::{Ctx, Flow, FlowResult, Task};
    /// struct Answer;
    ///
    /// impl Flow for Answer {
    ///     const NAME: &'static str = "answer";
    ///     const AGENTS: &'static [&'static str] = &["writer"];
    ///
    ///     async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
    ///         let writer = cx.agent("writer")?;
    ///         writer.open("main")?;
    ///         writer.receive(task.text())?;
    ///         Ok(cx.delivering("writer")?.respond().await?.content)
    ///     }
    /// }
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("s.yaml"), "replies: ['{\"n\": \"one\"}', '{\"n\": 1}']").unwrap();
    /// # let yaml = "tactic_type: answer\nagent_configs: [{name: writer, model_name: mock/script}]\n\
    /// #             providers: {mock: {script: s.yaml}}\noutput_schema: {type: object, required: [n], properties: {n: {type: integer}}}";
    /// # let tactic = lllm::Tactic::from_yaml(yaml, dir.path(), &lllm::Registry::new().flow(Answer)).unwrap();
    /// # let record = tokio::runtime::Runtime::new().unwrap().block_on(tactic.run("count".into()));
    /// # assert_eq!(record.delivery.as_deref(), Some("{\"n\": 1}"), "{:?}", record.error);
    /// # assert_eq!(record.agent_calls[0].exception_retries.len(), 1);
    /// ```
    pub fn delivering(&mut self, name: &str) -> Result<&mut Agent, CtxError> {
        let output = self.output.clone();
        let agent = self.agent(name)?;
        if let Some(output) = &output {
            // An agent with no dialog open has no turn to hold; its
            // `respond` reports that, as it would without a schema.
            let _ = agent.hold_to(output);
        }
        Ok(agent)
    }

    /// The JSON Schema the run's delivery must fit, if any: the tactic's
    /// `output_schema`, or the one [`Tactic::call_typed`](crate::Tactic::call_typed)
    /// derived from its output type.
    ///
    /// ```
    /// # use lllm::{Ctx, Flow, FlowResult, Task};
    /// # struct Shape;
    /// # impl Flow for Shape {
    /// #     const NAME: &'static str = "shape";
    /// #     const AGENTS: &'static [&'static str] = &[];
    /// async fn call(&self, cx: &mut Ctx, _task: Task) -> FlowResult {
    ///     // Deliver a JSON value made in code, of the shape asked for.
    ///     let wants_object = cx.output_schema().is_some_and(|schema| schema["type"] == "object");
    ///     Ok(if wants_object { "{}".into() } else { "none".into() })
    /// }
    /// # }
    /// # let yaml = "tactic_type: shape\nagent_configs: [{name: a, model_name: mock/echo}]\noutput_schema: {type: object}";
    /// # let tactic = lllm::Tactic::from_yaml(yaml, ".", &lllm::Registry::new().flow(Shape)).unwrap();
    /// # let record = tokio::runtime::Runtime::new().unwrap().block_on(tactic.run("x".into()));
    /// # assert_eq!(record.delivery.as_deref(), Some("{}"), "{:?}", record.error);
    /// ```
    pub fn output_schema(&self) -> Option<&Value> {
        self.output.as_ref()?.schema.as_ref()
    }

    /// The task this run answers.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The task's template arguments.
    pub fn args(&self) -> &Map<String, Value> {
        &self.task.args
    }

    /// The tactic's prompt registry (its `prompts` directory).
    pub fn prompts(&self) -> &PromptRegistry {
        &self.prompts
    }

    /// The prompt `key` of the registry.
    pub fn prompt(&self, key: &str) -> Result<Arc<Prompt>, CtxError> {
        Ok(Arc::new(self.prompts.get(key)?.clone()))
    }

    /// The agent calls finished so far, in the order they finished.
    pub fn calls(&self) -> Vec<AgentCallSession> {
        self.recorder
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(_, call)| call.clone())
            .collect()
    }

    /// The agents (for their dialogs), the calls and the named ones as
    /// steps, for the record.
    pub(super) fn finish(
        self,
    ) -> (
        HashMap<String, Agent>,
        Vec<AgentCallSession>,
        Vec<StepRecord>,
    ) {
        let recorded = std::mem::take(
            &mut *self
                .recorder
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let mut steps = Vec::new();
        let mut calls = Vec::with_capacity(recorded.len());
        for (index, (step, call)) in recorded.into_iter().enumerate() {
            if let Some(step) = step {
                steps.push(StepRecord {
                    step,
                    agent: call.agent.clone(),
                    dialog: call.dialog_alias.clone(),
                    agent_call: index,
                    sub_tactic: None,
                });
            }
            calls.push(call);
        }
        (self.agents, calls, steps)
    }

    fn make(&mut self, name: &str) -> Result<(), CtxError> {
        if self.agents.contains_key(name) {
            return Ok(());
        }
        let Some(spec) = self.specs.get(name) else {
            let known: Vec<String> = self.specs.keys().map(|name| format!("`{name}`")).collect();
            return Err(CtxError::NoAgent {
                tactic: self.tactic_name.clone(),
                agent: name.to_string(),
                known: if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                },
                hint: crate::suggest::hint(name, self.specs.keys().map(String::as_str)),
            });
        };
        let mut agent = Agent::new(spec.clone(), self.runtime.clone()).in_run(
            self.context.clone(),
            self.prompts.clone(),
            Some(self.recorder.clone()),
        );
        agent.set_events(self.events.clone());
        self.agents.insert(name.to_string(), agent);
        Ok(())
    }
}

// A flow's future holds `&mut Ctx` and `&mut Agent`s across awaits, and
// `Flow::call` must be `Send`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Ctx>();
    send::<Agent>();
};

#[cfg(test)]
mod tests;
