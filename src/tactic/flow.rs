//! The flow engine: sequential steps over agents and their dialogs, each
//! finished step visible to later templates as `{content, parsed, model, cost}`.
//!
//! The template context of a run is, from lowest to highest precedence: each
//! task argument at top level, every finished step by name, `task` and `args`,
//! and (for a step's own prompt) the step's rendered `args`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use indexmap::IndexMap;

use serde_json::{Map, Value, json};

use super::record::{self, RunState, SessionRecord, StepRecord, TacticInfo};
use super::{ArgValue, Ctx, Node, Step, SubStep, SubTarget, Tactic, Task};
use crate::agent::{Agent, AgentCallSession, AgentSpec, Fork};
use crate::dialog::{ContentPart, Dialog, DialogRecord, InvokeCost, Message};
use crate::event::{Emitter, EventKind};
use crate::redact::Scrubber;

/// What a task brings besides its text (issue 15): the first dialog opened
/// for it starts with the task's system messages in place of the agent's
/// system prompt and its history after them, and its first user turn
/// carries the attachments. Parallel branches at the start each get it.
#[derive(Clone)]
struct Intro {
    system: Option<String>,
    history: Vec<Message>,
    attachments: Vec<ContentPart>,
}

impl Intro {
    fn of(task: &Task) -> Option<Intro> {
        let intro = Intro {
            system: task.system_prompt(),
            history: task.history().cloned().collect(),
            attachments: task.attachments.clone(),
        };
        let empty =
            intro.system.is_none() && intro.history.is_empty() && intro.attachments.is_empty();
        (!empty).then_some(intro)
    }
}

/// The dialog the first agent answers in when a tactic has no flow.
const DEFAULT_DIALOG: &str = "main";

struct Run<'a> {
    tactic: &'a Tactic,
    /// The tactic's agents with the task's `model_args` over their own.
    specs: Arc<IndexMap<String, Arc<AgentSpec>>>,
    /// The task's conversation and attachments, until the first step that
    /// opens a dialog takes them.
    intro: Option<Intro>,
    /// The task's model and model arguments, passed on to sub-tactics.
    model: Option<String>,
    model_args: Map<String, Value>,
    agents: HashMap<String, Agent>,
    calls: Vec<AgentCallSession>,
    steps: Vec<StepRecord>,
    context: Map<String, Value>,
    /// Where the run says what happens (`crate::event`): its event stream,
    /// or the final turn's text as it arrives (`lllm run --stream`).
    events: Option<Emitter>,
    /// Dialogs of agents that ran in parallel branches.
    branch_dialogs: Vec<DialogRecord>,
    /// Sessions of sub-tactics, in the order they ran.
    subs: Vec<SessionRecord>,
    /// Passed on to sub-tactics.
    task_id: Option<String>,
    tags: Map<String, Value>,
    metadata: Map<String, Value>,
}

/// The dialogs of a run's agents for its record, moved out (not copied), in
/// the tactic's agent order.
fn dialog_records(tactic: &Tactic, agents: HashMap<String, Agent>) -> Vec<DialogRecord> {
    let mut agents: Vec<(String, Agent)> = agents.into_iter().collect();
    agents.sort_by_key(|(name, _)| tactic.agents.get_index_of(name.as_str()));
    agents
        .into_iter()
        .flat_map(|(_, agent)| agent.into_dialogs())
        .map(Dialog::into_record)
        .collect()
}

/// The calls of a run's agents that were dropped before they ended, in the
/// tactic's agent order, then in the order they started.
fn interrupted_calls(
    tactic: &Tactic,
    agents: &mut HashMap<String, Agent>,
) -> Vec<AgentCallSession> {
    let mut calls: Vec<AgentCallSession> = agents
        .values_mut()
        .flat_map(Agent::take_interrupted)
        .collect();
    calls.sort_by(|left, right| {
        let place = |call: &AgentCallSession| tactic.agents.get_index_of(call.agent.as_str());
        place(left)
            .cmp(&place(right))
            .then_with(|| left.started_at.cmp(&right.started_at))
    });
    calls
}

impl<'a> Run<'a> {
    fn new(
        tactic: &'a Tactic,
        task: &Task,
        context: Map<String, Value>,
        events: Option<Emitter>,
    ) -> Run<'a> {
        Run {
            tactic,
            specs: tactic.agents_for(task),
            intro: Intro::of(task),
            model: task.model.clone(),
            model_args: task.model_args.clone(),
            task_id: task.id.clone(),
            tags: task.tags.clone(),
            metadata: task.metadata.clone(),
            agents: HashMap::new(),
            calls: Vec::new(),
            steps: Vec::new(),
            context,
            events,
            branch_dialogs: Vec::new(),
            subs: Vec::new(),
        }
    }

    /// Where a step says what happens: everywhere for an event stream; for
    /// a text sink, only in the `final_turn`.
    fn events_for(&self, final_turn: bool) -> Option<Emitter> {
        self.events
            .clone()
            .filter(|events| final_turn || !events.final_turn_only())
    }
}

/// The error of a run stopped from outside (Ctrl-C).
pub const INTERRUPTED: &str = "interrupted";

/// Runs `task`; when `interrupt` completes first, the run stops there and the
/// record holds every agent call that had finished, and the one in flight
/// as a failure (`interrupted`) with the requests of it that came back. The
/// calls of `parallel` branches and sub-tactics still running are dropped.
/// The record is in its written form: scrubbed of the run's secrets, compacted.
pub(super) async fn run(
    tactic: &Tactic,
    task: Box<Task>,
    events: Option<Emitter>,
    interrupt: impl std::future::Future<Output = ()>,
) -> SessionRecord {
    let (trace, nested) = crate::trace_context::run_starting();
    let whole = run_whole(tactic, task, events, interrupt);
    let mut record = crate::trace_context::in_run(trace.as_ref(), whole).await;
    record.trace = trace;
    // The written form: what the requests sent is kept without the run's
    // secrets, then each text once. Exported in between, scrubbed and with
    // each reply still where its invoke is (no copy to expand); a nested
    // run with the record that holds it.
    record.scrub_own(&mut Scrubber::new(&tactic.runtime.secrets));
    if !nested && record.trace.is_some() {
        let hook = *FINISHED
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(finished) = hook {
            finished(&record);
        }
    }
    super::compact::compact(&mut record, &tactic.shared_templates);
    record
}

/// Told of each finished run that is not nested in another and has a
/// trace, its record scrubbed and not yet compacted: the OpenTelemetry
/// exporter when one is installed (`telemetry`, a module above this one,
/// sets it with `tactic::on_finished`).
static FINISHED: std::sync::RwLock<Option<fn(&SessionRecord)>> = std::sync::RwLock::new(None);

/// Sets (or with `None` clears) what is told of each finished run.
#[cfg(feature = "otel")]
pub(super) fn on_finished(hook: Option<fn(&SessionRecord)>) {
    *FINISHED
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = hook;
}

/// A fresh record in its written form: what the requests sent is kept
/// without the run's secrets, then each text once.
fn finish(tactic: &Tactic, record: &mut SessionRecord) {
    record.scrub_own(&mut Scrubber::new(&tactic.runtime.secrets));
    super::compact::compact(record, &tactic.shared_templates);
}

/// [`run`], the record as the run made it: neither scrubbed nor compacted
/// (its sub-tactic sessions are, already).
async fn run_whole(
    tactic: &Tactic,
    task: Box<Task>,
    events: Option<Emitter>,
    interrupt: impl std::future::Future<Output = ()>,
) -> SessionRecord {
    let started = Instant::now();
    // Made at the start, so ids sort by when runs began.
    let session_id = record::new_session_id();
    let started_at = record::timestamp();
    let context = base_context(&task);
    let mut run = Run::new(tactic, &task, context, events.clone());
    // A programmed tactic's run lives here, outside the work, so that what
    // it did stays on record when the work is interrupted.
    let mut program = tactic
        .program
        .as_ref()
        .map(|flow| (flow.clone(), Ctx::new(tactic, &task).with_events(events)));
    // The calls to served tactics, the contracts its tools read at load first.
    let remote_log = crate::tactic::remote::exchange::Log::starting_with(&tactic.remote_contracts);
    let outcome = {
        // Each run serves its offline `mock/script` replies from the start
        // (a script describes one run, whatever else runs at once).
        let work = remote_log.scope(crate::mock::script::with_own_positions(async {
            // MCP servers start once per tactic, before the first request;
            // `lllm run` starts them earlier (a server that cannot start is
            // bad input there).
            if let Some(problem) = tactic.model_mismatch(&task) {
                Err(problem)
            } else if let Err(problems) = tactic.runtime.mcp.start().await {
                Err(problems.join("; "))
            } else if let Some((flow, cx)) = program.as_mut() {
                flow.call(cx, Task::clone(&task))
                    .await
                    .map_err(|error| error.to_string())
            } else if tactic.nodes.is_empty() {
                run.answer_directly(&task).await
            } else {
                run.steps().await
            }
        }));
        tokio::select! {
            outcome = work => outcome,
            () = interrupt => Err(INTERRUPTED.to_string()),
        }
    };
    if let Some((_, cx)) = program {
        let (agents, calls, steps) = cx.finish();
        run.agents = agents;
        run.calls = calls;
        run.steps = steps;
    }
    // A call the interrupt stopped midway is on record too, with what its
    // finished requests cost.
    run.calls.extend(interrupted_calls(tactic, &mut run.agents));
    // The runs of its tactic tools nest as sub-sessions no step names.
    run.subs.extend(remote_log.take_sessions());
    let outcome = outcome.and_then(|delivery| fits_output(tactic, delivery));
    let (state, delivery, error) = match outcome {
        Ok(delivery) => (RunState::Success, Some(delivery), None),
        Err(error) => (RunState::Failure, None, Some(error)),
    };
    let cost: InvokeCost = run
        .calls
        .iter()
        .map(|call| call.cost.clone())
        .chain(run.subs.iter().map(|sub| sub.cost.clone()))
        .sum();
    let mut dialogs = dialog_records(tactic, std::mem::take(&mut run.agents));
    dialogs.append(&mut run.branch_dialogs);
    SessionRecord {
        format: record::FORMAT.to_string(),
        session_id,
        tactic: TacticInfo {
            name: tactic.config.name.clone(),
            path: tactic.config.path.display().to_string(),
            config: tactic.recorded_config.clone(),
            model: tactic.config.model_override.clone(),
            model_args: tactic.config.model_args_override.clone(),
            body: tactic
                .program
                .as_ref()
                .map(|flow| format!("rust:{}", flow.name())),
            output_schema: tactic
                .output
                .as_ref()
                .and_then(|output| output.schema.clone()),
        },
        task_id: task.id,
        task: task.task,
        args: task.args,
        tags: task.tags,
        metadata: task.metadata,
        model: task.model,
        model_args: task.model_args,
        messages: task.messages,
        attachments: task.attachments,
        started_at,
        ended_at: record::timestamp(),
        latency_ms: started.elapsed().as_millis() as u64,
        state,
        delivery,
        error,
        prompts: tactic.recorded_prompts.clone(),
        steps: run.steps,
        dialogs,
        cost_known: cost.cost_known,
        cost,
        agent_calls: run.calls,
        sub_tactic_sessions: run.subs,
        remote_calls: remote_log.take(),
        trace: None,
        shared: None,
    }
}

/// The delivery, when it fits the tactic's output (`output_schema`, or the
/// type of `call_typed`); else why not. The delivering call was held to it
/// and repaired already when it could be (`delivering_step`,
/// `Ctx::delivering`); this catches the rest: a `result:` template, a flow
/// that ends in a sub-tactic or a skipped step, a prompt with its own
/// parser, a programmed flow that delivers another text.
fn fits_output(tactic: &Tactic, delivery: String) -> Result<String, String> {
    let Some(output) = &tactic.output else {
        return Ok(delivery);
    };
    match output.parse(&delivery) {
        Ok(_) => Ok(delivery),
        // One line, as every run error is.
        Err(failure) => Err(format!(
            "the delivery does not fit the output schema: {}",
            failure.0.replace('\n', "; ")
        )),
    }
}

/// The step whose call delivers a YAML flow's run, held to its output: the
/// flow's last node when it is a step, or a loop's last step (its last
/// round delivers). None when `result:` gives the delivery, or the flow
/// ends in a sub-tactic or a `parallel` block.
fn delivering_step(tactic: &Tactic) -> Option<&Step> {
    fn last(nodes: &[Node]) -> Option<&Step> {
        match nodes.last()? {
            Node::Step(step) => Some(step),
            Node::Loop { nodes, .. } => last(nodes),
            Node::Tactic(_) | Node::Parallel { .. } => None,
        }
    }
    tactic.output.as_ref()?;
    if tactic.result.is_some() {
        return None;
    }
    last(&tactic.nodes)
}

/// The template context before any step: each task argument at top level,
/// then `task` and `args`.
pub(super) fn base_context(task: &Task) -> Map<String, Value> {
    let mut context = task.args.clone();
    context.insert("task".into(), task.task.clone());
    context.insert("args".into(), Value::Object(task.args.clone()));
    context
}

impl Run<'_> {
    fn agent(&mut self, name: &str) -> Result<&mut Agent, String> {
        if !self.agents.contains_key(name) {
            let spec = self
                .specs
                .get(name)
                .ok_or_else(|| format!("no agent `{name}`"))?;
            let agent = Agent::new(spec.clone(), self.tactic.runtime.clone());
            self.agents.insert(name.to_string(), agent);
        }
        Ok(self.agents.get_mut(name).expect("inserted above"))
    }

    /// No flow: the first agent answers the task in dialog `main`.
    async fn answer_directly(&mut self, task: &Task) -> Result<String, String> {
        let name = self
            .tactic
            .agents
            .keys()
            .next()
            .cloned()
            .ok_or_else(|| "the tactic has no agents".to_string())?;
        let events = self.events_for(true);
        // Lent to `open`, not copied: the agent is borrowed from `self` too.
        let context = std::mem::take(&mut self.context);
        let intro = self.intro.take();
        let opened = self.agent(&name).and_then(|agent| {
            let (system, history) = seed(intro.as_ref());
            agent
                .open_seeded(DEFAULT_DIALOG, &context, true, system, history)
                .map(|_| ())
                .map_err(|error| error.to_string())
        });
        self.context = context;
        opened?;
        let tactic = self.tactic;
        let agent = self.agent(&name)?;
        let received = if task.attachments.is_empty() {
            agent.receive(task.text())
        } else {
            agent.receive_parts(task.parts())
        };
        received.map_err(|error| error.to_string())?;
        if let Some(output) = &tactic.output {
            agent.hold_to(output).map_err(|error| error.to_string())?;
        }
        agent.set_events(events);
        let session = agent
            .respond()
            .session()
            .await
            .map_err(|error| error.to_string())?;
        self.finish_call("answer", &name, DEFAULT_DIALOG, session)
    }

    async fn steps(&mut self) -> Result<String, String> {
        let tactic = self.tactic;
        // `--stream` shows the final turn: the last step, when the flow ends with one.
        let streamed = match tactic.nodes.last() {
            Some(Node::Step(step)) => Some(step.name.as_str()),
            _ => None,
        };
        let (last, _stopped) = self.run_nodes(&tactic.nodes, streamed).await?;
        match &tactic.result {
            Some(result) => result
                .render_map(&self.context)
                .map_err(|error| error.to_string()),
            None => Ok(last),
        }
    }

    /// Runs `nodes` in order; returns the content of the last step that ran and
    /// whether a step's `stop` ended the tactic.
    fn run_nodes<'b>(
        &'b mut self,
        nodes: &'b [Node],
        streamed: Option<&'b str>,
    ) -> futures_util::future::BoxFuture<'b, Result<(String, bool), String>> {
        Box::pin(async move {
            let mut last = String::new();
            for node in nodes {
                match node {
                    Node::Step(step) => {
                        if !self.holds(&step.name, step.condition.as_ref(), true)? {
                            continue;
                        }
                        last = self
                            .run_step(step, streamed == Some(step.name.as_str()))
                            .await?;
                        if self.holds(&step.name, step.stop.as_ref(), false)? {
                            return Ok((last, true));
                        }
                    }
                    Node::Tactic(step) => {
                        if !self.holds(&step.name, step.condition.as_ref(), true)? {
                            continue;
                        }
                        last = self
                            .run_sub_tactic(step, streamed == Some(step.name.as_str()))
                            .await?;
                        if self.holds(&step.name, step.stop.as_ref(), false)? {
                            return Ok((last, true));
                        }
                    }
                    Node::Parallel {
                        foreach,
                        item,
                        nodes,
                        ..
                    } => {
                        self.run_parallel(foreach.as_ref(), item, nodes).await?;
                    }
                    Node::Loop {
                        max, until, nodes, ..
                    } => {
                        for _ in 0..*max {
                            let (content, stopped) = self.run_nodes(nodes, None).await?;
                            if !content.is_empty() {
                                last = content;
                            }
                            if stopped {
                                return Ok((last, true));
                            }
                            if let Some(until) = until
                                && until.holds(&self.context)?
                            {
                                break;
                            }
                        }
                    }
                }
            }
            Ok((last, false))
        })
    }

    /// Runs the branches of a `parallel` block at once, each on fresh agents,
    /// then merges their records (in branch order) and outputs: by step name,
    /// or with `foreach` as a list per step name, in element order.
    async fn run_parallel<'n>(
        &mut self,
        foreach: Option<&Condition>,
        item: &str,
        nodes: &'n [Node],
    ) -> Result<(), String> {
        let branches: Vec<(Map<String, Value>, &'n [Node])> = match foreach {
            Some(expression) => {
                let Value::Array(elements) = expression.value(&self.context)? else {
                    return Err(format!(
                        "parallel `foreach`: `{}` is not a list",
                        expression.source
                    ));
                };
                elements
                    .into_iter()
                    .map(|element| {
                        let mut context = self.context.clone();
                        context.insert(item.to_string(), element);
                        (context, nodes)
                    })
                    .collect()
            }
            None => nodes
                .iter()
                .map(|node| (self.context.clone(), std::slice::from_ref(node)))
                .collect(),
        };
        let tactic = self.tactic;
        let intro = self.intro.take();
        let runs = branches.into_iter().map(|(context, nodes)| {
            let mut branch = Run {
                specs: self.specs.clone(),
                intro: intro.clone(),
                model: self.model.clone(),
                model_args: self.model_args.clone(),
                task_id: self.task_id.clone(),
                tags: self.tags.clone(),
                metadata: self.metadata.clone(),
                tactic,
                agents: HashMap::new(),
                calls: Vec::new(),
                steps: Vec::new(),
                context,
                events: self.events_for(false),
                branch_dialogs: Vec::new(),
                subs: Vec::new(),
            };
            async move {
                let outcome = branch.run_nodes(nodes, None).await;
                (branch, outcome)
            }
        });
        let finished = futures_util::future::join_all(runs).await;
        let mut names = Vec::new();
        step_names(nodes, &mut names);
        let mut lists: Vec<Vec<Value>> = vec![Vec::new(); names.len()];
        let mut first_error = None;
        for (mut branch, outcome) in finished {
            let offset = self.calls.len();
            let sub_offset = self.subs.len();
            self.steps.extend(branch.steps.drain(..).map(|mut step| {
                step.agent_call += offset;
                if let Some(sub) = &mut step.sub_tactic {
                    *sub += sub_offset;
                }
                step
            }));
            self.calls.append(&mut branch.calls);
            self.subs.append(&mut branch.subs);
            self.branch_dialogs
                .extend(dialog_records(tactic, std::mem::take(&mut branch.agents)));
            self.branch_dialogs.append(&mut branch.branch_dialogs);
            if let Err(error) = outcome {
                first_error.get_or_insert(error);
            }
            for (index, name) in names.iter().enumerate() {
                let output = branch.context.get(*name).cloned();
                match (foreach, output) {
                    (Some(_), output) => lists[index].push(output.unwrap_or(Value::Null)),
                    (None, Some(output)) => {
                        self.context.insert(name.to_string(), output);
                    }
                    (None, None) => {}
                }
            }
        }
        if foreach.is_some() {
            for (name, list) in names.iter().zip(lists) {
                self.context.insert(name.to_string(), Value::Array(list));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether a step's `if` (or `stop`) holds; `absent` when it has none.
    fn holds(
        &self,
        step: &str,
        condition: Option<&Condition>,
        absent: bool,
    ) -> Result<bool, String> {
        match condition {
            Some(condition) => condition
                .holds(&self.context)
                .map_err(|error| format!("step `{step}`: {error}")),
            None => Ok(absent),
        }
    }

    /// A step's `args` rendered over the run context.
    fn render_args(&self, args: &[(String, ArgValue)]) -> Result<Map<String, Value>, String> {
        let mut rendered = Map::new();
        for (name, value) in args {
            let value = match value {
                ArgValue::Template(template) => Value::String(
                    template
                        .render_map(&self.context)
                        .map_err(|error| error.to_string())?,
                ),
                ArgValue::Literal(value) => value.clone(),
            };
            rendered.insert(name.clone(), value);
        }
        Ok(rendered)
    }

    /// Runs another tactic as one step: its delivery is the step's content,
    /// its session nests in this one's record.
    async fn run_sub_tactic(&mut self, step: &SubStep, stream: bool) -> Result<String, String> {
        let task = match &step.task {
            Some(template) => Value::String(
                template
                    .render_map(&self.context)
                    .map_err(|error| format!("step `{}`: {error}", step.name))?,
            ),
            None => self.context.get("task").cloned().unwrap_or(Value::Null),
        };
        // A sub-tactic that is the run's first step is given the task's
        // conversation too; its model and model arguments hold everywhere.
        let intro = self.intro.take();
        let input = Task {
            id: self.task_id.clone(),
            task,
            args: self.render_args(&step.args)?,
            tags: self.tags.clone(),
            metadata: self.metadata.clone(),
            model: self.model.clone(),
            model_args: self.model_args.clone(),
            messages: intro
                .as_ref()
                .map(|intro| {
                    let system = intro.system.clone().map(Message::system);
                    system.into_iter().chain(intro.history.clone()).collect()
                })
                .unwrap_or_default(),
            attachments: intro.map(|intro| intro.attachments).unwrap_or_default(),
        };
        let tactic = match &step.target {
            SubTarget::Local(tactic) => tactic,
            SubTarget::Remote(remote) => return self.run_remote(step, remote, input).await,
        };
        let events = self.events_for(stream);
        if let Some(events) = &self.events {
            events.emit(EventKind::SubTacticStarted {
                step: step.name.clone(),
                tactic: tactic.config.name.clone(),
            });
        }
        // A span of this run's trace, under the running tactic's.
        let (trace, _) = crate::trace_context::run_starting();
        let whole = Box::pin(run_whole(
            tactic,
            Box::new(input),
            events,
            std::future::pending(),
        ));
        let mut record = crate::trace_context::in_run(trace.as_ref(), whole).await;
        record.trace = trace;
        // The delivery goes on to the next requests as it was made (a key
        // the task gave is sent on); the sub-session is kept in the written
        // form, as this run's own record will be: it is written inside it.
        let delivery = record.delivery.clone();
        finish(tactic, &mut record);
        if let Some(events) = &self.events {
            events.emit(EventKind::SubTacticFinished {
                step: step.name.clone(),
                tactic: record.tactic.name.clone(),
                state: record.state.name().to_string(),
                cost: record.cost.cost,
                usage: record.cost.clone(),
                error: record.error.clone(),
            });
        }
        let outcome = match (&record.state, delivery) {
            (RunState::Success, Some(delivery)) => {
                self.context.insert(
                    step.name.clone(),
                    json!({
                        "content": delivery,
                        "parsed": null,
                        "model": null,
                        "cost": record.cost.cost,
                    }),
                );
                Ok(delivery)
            }
            _ => Err(format!(
                "step `{}`: tactic `{}` failed: {}",
                step.name,
                record.tactic.name,
                record.error.as_deref().unwrap_or("no delivery")
            )),
        };
        self.steps.push(StepRecord {
            step: step.name.clone(),
            agent: record.tactic.name.clone(),
            dialog: String::new(),
            agent_call: self.calls.len(),
            sub_tactic: Some(self.subs.len()),
        });
        self.subs.push(record);
        outcome
    }

    /// Runs a served tactic as one step (issue 30): its output is the step's
    /// content (`parsed` too when it is JSON), the call is on this run's
    /// record (`remote_calls`), and a re-run gets the recorded answer.
    async fn run_remote(
        &mut self,
        step: &SubStep,
        remote: &crate::tactic::remote::RemoteTactic,
        input: Task,
    ) -> Result<String, String> {
        let tactic = remote.url().to_string();
        if let Some(events) = &self.events {
            events.emit(EventKind::SubTacticStarted {
                step: step.name.clone(),
                tactic: tactic.clone(),
            });
        }
        let outcome = crate::tactic::remote::exchange::run(remote, &step.name, &input).await;
        if let Some(events) = &self.events {
            let (state, cost, error) = match &outcome {
                Ok(answer) => ("success", answer.cost, None),
                Err(error) => ("failure", None, Some(error.clone())),
            };
            events.emit(EventKind::SubTacticFinished {
                step: step.name.clone(),
                tactic,
                state: state.to_string(),
                cost,
                usage: InvokeCost::default(),
                error,
            });
        }
        let answer = outcome.map_err(|error| format!("step `{}`: {error}", step.name))?;
        let delivery = answer.delivery();
        let parsed = match &answer.output {
            Value::String(_) => Value::Null,
            other => other.clone(),
        };
        self.context.insert(
            step.name.clone(),
            json!({"content": delivery, "parsed": parsed, "model": null, "cost": answer.cost}),
        );
        self.steps.push(StepRecord {
            step: step.name.clone(),
            agent: remote.url().to_string(),
            dialog: String::new(),
            agent_call: self.calls.len(),
            sub_tactic: None,
        });
        Ok(delivery)
    }

    async fn run_step(&mut self, step: &Step, stream: bool) -> Result<String, String> {
        let mut prompt_args = self.context.clone();
        prompt_args.extend(self.render_args(&step.args)?);
        let context = self.context.clone();
        let events = self.events_for(stream);
        let intro = self.intro.take();
        let (system, history) = seed(intro.as_ref());
        let attachments = intro
            .as_ref()
            .map(|intro| intro.attachments.clone())
            .unwrap_or_default();
        let tactic = self.tactic;
        let agent = self.agent(&step.agent)?;
        if agent.dialog(&step.dialog).is_none() {
            match &step.fork {
                Some(fork) => agent
                    .fork_with(
                        &fork.from,
                        &step.dialog,
                        Fork {
                            last_n: fork.last_n,
                            first_k: fork.first_k,
                            switch: true,
                        },
                    )
                    .map(|_| ())
                    .map_err(|error| format!("step `{}`: {error}", step.name))?,
                None => agent
                    .open_seeded(&step.dialog, &context, true, system, history)
                    .map(|_| ())
                    .map_err(|error| error.to_string())?,
            }
        }
        agent
            .switch(&step.dialog)
            .and_then(|agent| {
                agent.receive_prompt_with(step.prompt.clone(), prompt_args, attachments)
            })
            .map_err(|error| error.to_string())?;
        if let Some(output) = &tactic.output
            && delivering_step(tactic).is_some_and(|last| std::ptr::eq(last, step))
        {
            agent.hold_to(output).map_err(|error| error.to_string())?;
        }
        agent.set_events(events);
        let session = agent
            .respond()
            .dialog(&step.dialog)
            .session()
            .await
            .map_err(|error| error.to_string())?;
        self.finish_call(&step.name, &step.agent, &step.dialog, session)
    }

    /// Records a finished agent call; a failed call fails the run.
    fn finish_call(
        &mut self,
        step: &str,
        agent: &str,
        dialog: &str,
        session: AgentCallSession,
    ) -> Result<String, String> {
        let outcome = match (session.delivery(), &session.error) {
            (Some(delivery), _) if session.is_success() => {
                // The step's output is context for later steps and `result`;
                // a tactic without a flow has neither.
                if !self.tactic.nodes.is_empty() {
                    self.context.insert(
                        step.to_string(),
                        json!({
                            "content": delivery.content,
                            "parsed": delivery.parsed,
                            "model": delivery.model,
                            "cost": session.cost.cost,
                        }),
                    );
                }
                Ok(delivery.content.clone())
            }
            (_, Some(error)) => Err(format!("step `{step}`: {error}")),
            _ => Err(format!("step `{step}`: agent `{agent}` gave no reply")),
        };
        self.steps.push(StepRecord {
            step: step.to_string(),
            agent: agent.to_string(),
            dialog: dialog.to_string(),
            agent_call: self.calls.len(),
            sub_tactic: None,
        });
        self.calls.push(session);
        outcome
    }
}

/// The system prompt and history a dialog opens with, from a pending intro.
fn seed(intro: Option<&Intro>) -> (Option<&str>, &[Message]) {
    match intro {
        Some(intro) => (intro.system.as_deref(), &intro.history),
        None => (None, &[]),
    }
}

/// The names of the steps in `nodes`, at any depth.
pub(super) fn step_names<'a>(nodes: &'a [Node], names: &mut Vec<&'a str>) {
    for node in nodes {
        match node {
            Node::Step(step) => names.push(&step.name),
            Node::Tactic(step) => names.push(&step.name),
            Node::Loop { nodes, .. } | Node::Parallel { nodes, .. } => step_names(nodes, names),
        }
    }
}

/// A step's `if`/`stop`, a loop's `until`, a `parallel`'s `foreach`.
pub(crate) use crate::prompt::Expression as Condition;
