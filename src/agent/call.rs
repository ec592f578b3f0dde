//! The agent loop (seed 003): per tool round a working fork, the context
//! manager, the provider call through the one retry loop, parser repairs, tool
//! execution with repeat detection, and the interrupt-final prompt.
//!
//! Where the Python loop is wrong we do what docs/decisions.md says instead
//! (D1–D8, each marked below).

use std::collections::BTreeSet;
use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::{Map, Value};

use super::handler::Handler;
use super::in_flight::{InFlight, Pending};
use super::repeats::Repeats;
use super::session::{AgentCallSession, CallState, InvokeTrace, RequestDigest};
use super::{AgentSpec, Runtime};
use crate::dialog::{Dialog, FunctionCall, Message, Role};
use crate::event::{Emitter, EventKind};
use crate::prompt::Prompt;
use crate::provider::http::watching_sends;
use crate::provider::retry::{self, FailedAttempt};
use crate::provider::{ChatRequest, ToolSpec, cache, pricing};
use crate::tool;

/// D3: `max_interrupt_steps: 0` means unlimited, up to this many tool rounds.
const UNLIMITED_TOOL_ROUNDS: u32 = 100;

/// The most tool calls of one reply that run. The rest are answered with an
/// error saying so (every call has its answer, so the message sequence
/// stays valid): a reply of 2,000 calls started 2,000 processes.
pub(crate) const MAX_TOOL_CALLS_PER_REPLY: usize = 128;

/// How many tool calls of one reply run at once; the others wait their
/// turn, and the results still go back in call order.
pub(crate) const TOOL_CALLS_AT_ONCE: usize = 8;

pub(super) struct Call<'a> {
    pub spec: &'a AgentSpec,
    pub runtime: &'a Runtime,
    /// Where the call says what happens (`crate::event`), if anywhere.
    pub events: Option<&'a Emitter>,
    pub alias: &'a str,
    /// The call's own model arguments, parser arguments and metadata.
    pub options: &'a super::CallOptions,
}

fn now() -> String {
    crate::time::timestamp()
}

fn one_arg(name: &str, value: String) -> Map<String, Value> {
    let mut args = Map::new();
    args.insert(name.into(), Value::String(value));
    args
}

/// The handler a prompt names (`handler: NAME`), if any; a name the run
/// does not register (a prompt made in code) falls back to the prompt's
/// texts, with a warning.
fn named_handler<'r>(runtime: &'r Runtime, top: &Prompt) -> Option<&'r Arc<dyn Handler>> {
    let name = top.handler_name.as_deref()?;
    let found = runtime.handlers.get(name);
    if found.is_none() {
        crate::report::warn(&format!(
            "prompt `{}` names handler `{name}`, which is not registered; its texts are used",
            top.path
        ));
    }
    found
}

/// The trace of a request of tool round `step` (its `repair`th repair)
/// before anything came back.
fn request_trace(step: u32, repair: u32, request: RequestDigest) -> InvokeTrace {
    InvokeTrace {
        step,
        repair,
        attempt: 1,
        request,
        response: None,
        response_in_dialog: false,
        error: None,
        parse_error: None,
        latency_ms: 0,
        waited_ms: 0,
        cached: false,
    }
}

/// A handler's text, or why there is none (it panicked).
fn ask_handler(top: &Prompt, write: impl FnOnce() -> String) -> Result<String, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(write)).map_err(|_| {
        format!(
            "handler `{}` panicked",
            top.handler_name.as_deref().unwrap_or_default()
        )
    })
}

impl Call<'_> {
    /// Starts a call on `dialog`: a session in state `initial`, which goes
    /// to `dropped` if the guard is dropped before [`InFlight::end`].
    pub fn start<'d>(
        &self,
        dialog: &Dialog,
        dropped: &'d mut Vec<AgentCallSession>,
    ) -> InFlight<'d> {
        let limits = self.spec.limits;
        let session = AgentCallSession {
            agent: self.spec.name.clone(),
            model: self.spec.model_name.clone(),
            dialog_alias: self.alias.to_string(),
            dialog_id: dialog.dialog_id().to_string(),
            state: CallState::Initial,
            max_exception_retry: limits.max_exception_retry,
            max_interrupt_steps: limits.max_interrupt_steps,
            max_llm_recall: limits.max_llm_recall,
            exception_retries: Vec::new(),
            interrupts: Vec::new(),
            llm_recalls: Vec::new(),
            invokes: Vec::new(),
            delivery: None,
            error: None,
            cost: Default::default(),
            started_at: now(),
            ended_at: None,
            latency_ms: 0,
            metadata: self.options.metadata.clone(),
            parser_args: self.options.parser_args.clone(),
        };
        InFlight::new(session, dropped)
    }

    /// The call's tool rounds: a reply that parses and calls no tool ends
    /// it; one that calls tools gets their results, and after the last
    /// round the interrupt-final prompt asks for an answer without tools.
    pub(super) async fn run_loop(
        &self,
        dialog: &mut Dialog,
        archive: &mut Vec<Dialog>,
        session: &mut AgentCallSession,
    ) {
        // D2: the top prompt at entry governs the whole call (parser, format,
        // handlers), whatever the tool results put on the dialog later.
        let top = dialog
            .top_prompt
            .clone()
            .unwrap_or_else(|| self.spec.system_prompt.clone());
        let tools = self.offered_tools(&top);
        let tool_names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
        let max_rounds = match self.spec.limits.max_interrupt_steps {
            0 => UNLIMITED_TOOL_ROUNDS,
            steps => steps,
        };
        // D5: only calls that succeeded count as "already called".
        let mut succeeded = Repeats::default();
        let mut final_round = false;
        for step in 0..=max_rounds {
            let offered: &[ToolSpec] = if final_round { &[] } else { &tools };
            let reply = match self
                .invoke_until_parsed(dialog, archive, session, &top, offered, step)
                .await
            {
                Ok(reply) => reply,
                Err(error) => {
                    session.failure(error);
                    return;
                }
            };
            dialog.append_shared(Arc::clone(&reply));
            if !reply.is_function_call() {
                session.success();
                return;
            }
            self.announce_tools(&reply.function_calls).await;
            let results = self
                .run_tools(
                    &reply.function_calls,
                    &succeeded,
                    &tool_names,
                    offered.is_empty(),
                )
                .await;
            let executed = self.answer_tools(dialog, session, &top, results, &mut succeeded);
            session.interrupt(step, executed);
            if final_round {
                break;
            }
            if session.interrupt_count() >= max_rounds as usize {
                if let Err(error) = self.put_final_prompt(dialog, session, &top, &reply) {
                    session.failure(error);
                    return;
                }
                final_round = true;
            }
        }
        session.failure(format!(
            "agent `{}` still calling tools after {} rounds (max_interrupt_steps)",
            self.spec.name,
            session.interrupt_count()
        ));
    }

    /// Runs the tool calls of one reply: concurrently, `TOOL_CALLS_AT_ONCE`
    /// at a time; results go back in call order. A call identical to an
    /// earlier one of the same turn, or to one that `succeeded` in an
    /// earlier turn, is not run again: it gets the repeat answer. Calls past
    /// `MAX_TOOL_CALLS_PER_REPLY` are not run at all.
    async fn run_tools(
        &self,
        calls: &[FunctionCall],
        succeeded: &Repeats,
        offered: &[&str],
        final_round: bool,
    ) -> Vec<(FunctionCall, String)> {
        let (to_run, too_many) = calls.split_at(calls.len().min(MAX_TOOL_CALLS_PER_REPLY));
        let mut this_turn = Repeats::default();
        // Made up front (not lazily in the stream): the future must not
        // hold a closure, or it is no longer `Send` for every lifetime.
        let runs: Vec<_> = to_run
            .iter()
            .map(|call| {
                let repeated = !this_turn.insert(call) || succeeded.contains(call);
                self.execute(call, repeated, offered, final_round)
            })
            .collect();
        let mut results: Vec<(FunctionCall, String)> = futures_util::stream::iter(runs)
            .buffered(TOOL_CALLS_AT_ONCE)
            .collect()
            .await;
        results.extend(too_many.iter().map(|call| {
            let answered = not_run(call, calls.len());
            self.tool_answered(&answered.0, &answered.1);
            answered
        }));
        results
    }

    /// Says which tools the model asked for, once the consumer of the
    /// events has room (`event::Queue`).
    async fn announce_tools(&self, calls: &[FunctionCall]) {
        let Some(events) = self.events else { return };
        events.room().await;
        for call in calls {
            events.emit(EventKind::ToolCall {
                agent: self.spec.name.clone(),
                dialog: self.alias.to_string(),
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
    }

    /// Says how a tool call was answered (`text`: what the model reads).
    fn tool_answered(&self, call: &FunctionCall, text: &str) {
        let Some(events) = self.events else { return };
        let result = match &call.result {
            Some(Value::String(result)) => Some(result.clone()),
            Some(other) => Some(other.to_string()),
            None => None,
        };
        // A repeated call ran no tool: what the model is told is the error.
        let error = call
            .error_message
            .clone()
            .or_else(|| result.is_none().then(|| text.to_string()));
        events.emit(EventKind::ToolResult {
            agent: self.spec.name.clone(),
            dialog: self.alias.to_string(),
            call_id: call.id.clone(),
            name: call.name.clone(),
            result,
            error,
        });
    }

    /// Puts each tool result on the dialog as the governing prompt's
    /// interrupt message (or its registered handler's text), and gives the
    /// calls made; those that succeeded join `succeeded` (D5).
    fn answer_tools(
        &self,
        dialog: &mut Dialog,
        session: &mut AgentCallSession,
        top: &Prompt,
        results: Vec<(FunctionCall, String)>,
        succeeded: &mut Repeats,
    ) -> Vec<FunctionCall> {
        let handler = named_handler(self.runtime, top);
        let mut executed = Vec::with_capacity(results.len());
        for (call, result_text) in results {
            if call.success() {
                succeeded.insert(&call);
            }
            let mut metadata = Map::new();
            metadata.insert("tool_call_id".into(), Value::String(call.id.clone()));
            let put = match handler {
                Some(handler) => {
                    match ask_handler(top, || handler.on_interrupt(&result_text, session)) {
                        Ok(text) => dialog.put_prompt_as(
                            Arc::new(top.handler_reply("interrupt", text)),
                            &Map::new(),
                            Role::Tool,
                            &call.name,
                            metadata.clone(),
                        ),
                        Err(problem) => Err(crate::dialog::Error::Prompt(
                            crate::prompt::Error::Invalid {
                                path: top.path.clone(),
                                message: problem,
                            },
                        )),
                    }
                }
                None => dialog.put_prompt_as(
                    Arc::new(top.on_interrupt()),
                    &one_arg("call_results", result_text.clone()),
                    Role::Tool,
                    &call.name,
                    metadata.clone(),
                ),
            };
            if let Err(error) = put {
                // A handler text that does not render must not leave the tool
                // call unanswered (providers reject that): answer it plainly.
                dialog.put_text_as(&result_text, Role::Tool, &call.name, metadata);
                crate::report::warn(&format!(
                    "interrupt handler of prompt `{}`: {error}",
                    top.path
                ));
            }
            executed.push(call);
        }
        executed
    }

    /// Puts the interrupt-final prompt on the dialog (the governing
    /// prompt's, or its registered handler's text), as the last tool round
    /// ends: the next reply must answer without tools. Why it could not be.
    fn put_final_prompt(
        &self,
        dialog: &mut Dialog,
        session: &mut AgentCallSession,
        top: &Prompt,
        reply: &Message,
    ) -> Result<(), String> {
        let name = reply
            .function_calls
            .last()
            .map_or("user", |call| call.name.as_str())
            .to_string();
        let final_prompt = match named_handler(self.runtime, top) {
            Some(handler) => {
                let text = ask_handler(top, || handler.on_interrupt_final(session)).map_err(
                    |problem| {
                        format!(
                            "interrupt-final handler of prompt `{}`: {problem}",
                            top.path
                        )
                    },
                )?;
                Arc::new(top.handler_reply("interrupt_final", text))
            }
            None => Arc::new(top.on_interrupt_final()),
        };
        dialog
            .put_prompt_as(final_prompt, &Map::new(), Role::User, &name, Map::new())
            .map(|_| ())
            .map_err(|error| format!("interrupt-final handler of prompt `{}`: {error}", top.path))
    }

    /// D1: the agent's tools (its config and its system prompt) and the tools of
    /// the governing prompt, in that order, then every tool of the MCP servers
    /// the same three name, without duplicates.
    fn offered_tools(&self, top: &Prompt) -> Vec<ToolSpec> {
        let mut seen = BTreeSet::new();
        let named = self
            .spec
            .tools
            .iter()
            .chain(&self.spec.system_prompt.tools)
            .chain(&top.tools)
            .filter_map(|name| self.runtime.toolbox.get(name));
        let mut servers = BTreeSet::new();
        let from_servers = self
            .spec
            .mcp_servers
            .iter()
            .chain(&self.spec.system_prompt.mcp_servers)
            .chain(&top.mcp_servers)
            .filter(|server| servers.insert(server.as_str()))
            .flat_map(|server| self.runtime.mcp.tools_of(server))
            .map(|tool| tool.as_ref() as &dyn tool::Tool);
        named
            .map(|tool| tool.as_ref())
            .chain(from_servers)
            .filter(|tool| seen.insert(tool.spec().name.clone()))
            .map(|tool| tool.spec().clone())
            .collect()
    }

    /// One request to the model on a fresh working fork, repaired until the reply
    /// parses or the repair budget is spent. The working fork (with its repair
    /// exchange) goes to the archive; only the accepted reply is returned.
    async fn invoke_until_parsed(
        &self,
        dialog: &mut Dialog,
        archive: &mut Vec<Dialog>,
        session: &mut AgentCallSession,
        top: &Arc<Prompt>,
        tools: &[ToolSpec],
        step: u32,
    ) -> Result<Arc<Message>, String> {
        let mut working = dialog.fork(0, 1);
        if let Some(manager) = &self.spec.context_manager
            && let Some(pruned) = manager.apply(&mut working)
        {
            archive.push(std::mem::replace(&mut working, pruned));
        }
        let result = self
            .repair_loop(&mut working, dialog.dialog_id(), session, top, tools, step)
            .await;
        archive.push(working);
        result
    }

    /// `dialog_id` is the call's dialog, which takes the accepted reply.
    async fn repair_loop(
        &self,
        working: &mut Dialog,
        dialog_id: &str,
        session: &mut AgentCallSession,
        top: &Arc<Prompt>,
        tools: &[ToolSpec],
        step: u32,
    ) -> Result<Arc<Message>, String> {
        let model = &self.spec.model;
        let model_args = self.model_args();
        // What lllm wrote in this call's repairs: a reply that rests on it
        // is no answer (`echo`).
        let mut written: Vec<String> = Vec::new();
        // 0 for the round's first request, N for its Nth repair.
        let mut repair: u32 = 0;
        let forward = self
            .events
            .map(|events| move |text: &str| events.text_delta(&self.spec.name, self.alias, text));
        let stream = forward
            .as_ref()
            .map(|forward| forward as &(dyn Fn(&str) + Send + Sync));
        loop {
            if let Some(events) = self.events {
                events.room().await;
            }
            let request = ChatRequest {
                model: &model.model,
                messages: working.messages(),
                tools,
                format: top.format(),
                model_args: &model_args,
                api_type: self.spec.api_type,
                stream,
            };
            let digest = RequestDigest::of(&request, working.dialog_id());
            // Keyed by what goes on the wire, byte for byte (issue 26); a
            // provider that sends nothing is never cached.
            let cache_key = model.cache.as_ref().and_then(|binding| {
                let wire = model.provider.wire_digest(&request)?;
                Some((binding, binding.key(&wire)))
            });
            // The record keeps the request as it keeps the messages, without
            // the run's secrets (the cache key above is of the request as sent).
            let digest = digest.recorded(&request, &self.runtime.secrets);
            let hit = cache_key
                .as_ref()
                .and_then(|(binding, key)| binding.get(key, model.provider.as_ref()))
                .map(Box::new);
            let cached = hit.is_some();
            let trace = request_trace(step, repair, digest);
            let attempted = self.send(request, hit, session, &trace, repair).await?;
            let mut reply = attempted.message;
            reply.name = self.spec.name.clone();
            reply.role = Role::Assistant;
            self.price_and_keep(&mut reply, cached, cache_key.as_ref());
            self.finished(
                &trace,
                Some((&reply, attempted.latency)),
                attempted.attempts,
                cached,
                None,
            );
            let parse_error = self.parse_reply(&mut reply, top, &written);
            // The trace shares the reply the working fork holds. A reply
            // that parses goes on to the call's dialog too: one message for
            // both, stamped with the call's dialog (as appending one object
            // to both does in the Python loop).
            let reply = Arc::clone(if parse_error.is_none() {
                working.append_shared(Dialog::stamp(reply, dialog_id))
            } else {
                working.append(reply)
            });
            session.record(InvokeTrace {
                attempt: attempted.attempts,
                response: Some(Arc::clone(&reply)),
                parse_error: parse_error.clone(),
                latency_ms: attempted.latency.as_millis() as u64,
                cached,
                ..trace
            });
            let Some(error) = parse_error else {
                return Ok(reply);
            };
            self.ask_for_repair(working, session, top, step, error.clone(), &mut written)?;
            repair = repair.saturating_add(1);
            if let Some(events) = self.events {
                events.emit(EventKind::Repair {
                    agent: self.spec.name.clone(),
                    dialog: self.alias.to_string(),
                    step,
                    repair,
                    error,
                });
            }
        }
    }

    /// The call's model arguments over the agent's (a key of the call wins).
    fn model_args(&self) -> std::borrow::Cow<'_, Map<String, Value>> {
        if self.options.model_args.is_empty() {
            std::borrow::Cow::Borrowed(&self.spec.model_args)
        } else {
            let mut merged = self.spec.model_args.clone();
            merged.extend(self.options.model_args.clone());
            std::borrow::Cow::Owned(merged)
        }
    }

    /// The reply to `request`: the cache's `hit`, else the provider's
    /// through the one retry loop, each failed attempt recorded in `session`
    /// as it happens. The error names the model and the calls made.
    async fn send(
        &self,
        request: ChatRequest<'_>,
        // Boxed: an `async fn` holds each argument twice (as its argument
        // and as its local), and a message is 392 bytes.
        hit: Option<Box<Message>>,
        session: &mut AgentCallSession,
        trace: &InvokeTrace,
        repair: u32,
    ) -> Result<retry::Attempted, String> {
        let model = &self.spec.model;
        let outcome = match hit {
            Some(reply) => {
                self.started(trace, 1);
                if let Some(events) = self.events {
                    events.text_delta(&self.spec.name, self.alias, "");
                    events.text_delta(&self.spec.name, self.alias, &reply.content);
                }
                Ok(retry::Attempted {
                    message: cache::as_hit(*reply),
                    attempts: 1,
                    latency: std::time::Duration::ZERO,
                })
            }
            None => {
                // Every event of these calls names the provider and
                // model, and a repair's which repair it is.
                let span = tracing::info_span!(
                    "call",
                    provider = %model.provider_name,
                    model = %model.model,
                    repair = tracing::field::Empty
                );
                if repair > 0 {
                    span.record("repair", repair);
                }
                let mut pending = Pending::new(session, trace.clone());
                let sent = pending.sent();
                let attempt = std::sync::atomic::AtomicU32::new(0);
                let starting = || {
                    let number = attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    self.started(trace, number);
                };
                let observed = Observed {
                    inner: model.provider.as_ref(),
                    starting: &starting,
                };
                let provider: &dyn crate::provider::Provider = match self.events {
                    Some(_) => &observed,
                    None => model.provider.as_ref(),
                };
                let attempts = retry::invoke_with_retry(
                    provider,
                    model.target(),
                    request,
                    &model.retry,
                    self.spec.limits.max_llm_recall,
                    |failed: &FailedAttempt| {
                        self.retrying(failed);
                        pending.failed(failed)
                    },
                );
                let attempts = watching_sends(sent, attempts);
                // Each attempt goes out under the span its invoke will have.
                let dialog = &trace.request.dialog_id;
                let attempts = crate::trace_context::in_chat(dialog, trace.step, repair, attempts);
                let outcome = match self.wait_observer() {
                    Some(observer) => {
                        let observed = crate::provider::limit::observing_waits(observer, attempts);
                        tracing::Instrument::instrument(observed, span).await
                    }
                    None => tracing::Instrument::instrument(attempts, span).await,
                };
                pending.answered();
                outcome
            }
        };
        outcome.map_err(|failed| {
            let error = format!(
                "model `{}` failed after {}: {}",
                self.spec.model_name,
                crate::words::calls(failed.attempts, failed.attempts.saturating_sub(1)),
                failed.error
            );
            self.finished(trace, None, failed.attempts, false, Some(&error));
            error
        })
    }

    /// Says attempt `attempt` of the request traced as `trace` starts.
    fn started(&self, trace: &InvokeTrace, attempt: u32) {
        let Some(events) = self.events else { return };
        events.emit(EventKind::ModelCallStarted {
            agent: self.spec.name.clone(),
            dialog: self.alias.to_string(),
            model: self.spec.model_name.clone(),
            step: trace.step,
            repair: trace.repair,
            attempt,
        });
    }

    /// Says an attempt failed and another follows.
    fn retrying(&self, failed: &FailedAttempt) {
        let Some(events) = self.events.filter(|_| failed.retried) else {
            return;
        };
        events.emit(EventKind::Retry {
            agent: self.spec.name.clone(),
            dialog: self.alias.to_string(),
            model: self.spec.model_name.clone(),
            attempt: failed.attempt,
            error: failed.error.to_string(),
            wait_ms: failed.waited.as_millis() as u64,
        });
    }

    /// What tells the events of each wait for the provider's limits.
    fn wait_observer(&self) -> Option<crate::provider::limit::WaitObserver> {
        let events = self.events?.clone();
        let agent = self.spec.name.clone();
        let dialog = self.alias.to_string();
        let model = self.spec.model_name.clone();
        Some(Arc::new(
            move |why: crate::provider::limit::Waiting, waited| {
                events.emit(EventKind::Wait {
                    agent: agent.clone(),
                    dialog: dialog.clone(),
                    model: model.clone(),
                    reason: why.name().to_string(),
                    waited_ms: u64::try_from(std::time::Duration::as_millis(&waited))
                        .unwrap_or(u64::MAX),
                });
            },
        ))
    }

    /// Says the request traced as `trace` came back (`reply`, priced, and
    /// the answering attempt's latency) or failed for good (`error`).
    fn finished(
        &self,
        trace: &InvokeTrace,
        reply: Option<(&Message, std::time::Duration)>,
        attempts: u32,
        cached: bool,
        error: Option<&String>,
    ) {
        let Some(events) = self.events else { return };
        let usage = reply.map(|(reply, _)| reply.cost()).unwrap_or_default();
        let finish_reason = reply
            .and_then(|(reply, _)| reply.metadata.get("finish_reason"))
            .and_then(Value::as_str)
            .map(str::to_string);
        events.emit(EventKind::ModelCallFinished {
            agent: self.spec.name.clone(),
            dialog: self.alias.to_string(),
            model: self.spec.model_name.clone(),
            step: trace.step,
            repair: trace.repair,
            attempts,
            cost: usage.cost,
            usage,
            latency_ms: reply.map_or(0, |(_, latency)| latency.as_millis() as u64),
            cached,
            finish_reason,
            error: error.cloned(),
        });
    }

    /// A hit costs nothing (`cache::as_hit`); a reply that was sent is
    /// priced (a model without a price is warned of once), then kept under
    /// `cache_key` for the next identical request.
    fn price_and_keep(
        &self,
        reply: &mut Message,
        cached: bool,
        cache_key: Option<&(&cache::Binding, String)>,
    ) {
        if cached {
            return;
        }
        let model = &self.spec.model;
        if !pricing::apply(
            &self.runtime.prices,
            &model.provider_name,
            model.service,
            &model.model,
            &mut reply.usage,
        ) && let Some(warning) = self
            .runtime
            .price_warnings
            .warn_once(&model.provider_name, &model.model)
        {
            crate::report::warn(&warning);
        }
        if let Some((binding, key)) = cache_key {
            binding.put(
                key,
                &cache::Entry {
                    reply,
                    provider: &model.provider_name,
                    model: &model.model,
                    cost: crate::dialog::InvokeCost::from_usage(&reply.usage).cost,
                    ttl: binding.ttl,
                },
            );
        }
    }

    /// Parses a reply that is not a tool call with the governing prompt's
    /// parser, into `reply.parsed`; why it does not parse, or why it is no
    /// answer (it echoes what lllm `written` in this call's repairs).
    fn parse_reply(&self, reply: &mut Message, top: &Prompt, written: &[String]) -> Option<String> {
        if reply.is_function_call() {
            return None;
        }
        match top.parse_with(&reply.content, &self.options.parser_args) {
            Ok(Value::Object(mut parsed)) => {
                // The answer of a `format` prompt is its JSON; the
                // prose a model wrote around it is kept beside it.
                if let Some(block) = top.json_in_prose(&reply.content) {
                    let prose = std::mem::replace(&mut reply.content, block.clone());
                    reply
                        .metadata
                        .insert("text_around_json".into(), Value::String(prose));
                    parsed.insert("raw".into(), Value::String(block));
                }
                reply.parsed = parsed;
            }
            Ok(other) => {
                reply.parsed = one_arg("raw", reply.content.clone());
                reply.parsed.insert("value".into(), other);
            }
            Err(failure) => return Some(failure.to_string()),
        }
        let echo = super::echo::echoed(&reply.content, written);
        if echo.is_some() {
            reply.parsed = Map::new();
        }
        echo
    }

    /// Puts the repair prompt for `error` on the working fork (the governing
    /// prompt's exception handler, or its registered handler's text), and
    /// adds what it wrote to `written`; an error when the repairs are spent
    /// or the handler fails.
    fn ask_for_repair(
        &self,
        working: &mut Dialog,
        session: &mut AgentCallSession,
        top: &Prompt,
        step: u32,
        error: String,
        written: &mut Vec<String>,
    ) -> Result<(), String> {
        if session.reach_max_exception_retry() {
            return Err(format!(
                "reply of agent `{}` still does not parse after {}: {error}",
                self.spec.name,
                crate::words::count(session.exception_retry_count() as u64, "repair", "repairs")
            ));
        }
        // A registered handler sees the call before this repair is counted.
        let (handler, args) = match named_handler(self.runtime, top) {
            Some(handler) => {
                let text = ask_handler(top, || handler.on_exception(&error, session)).map_err(
                    |problem| format!("exception handler of prompt `{}`: {problem}", top.path),
                )?;
                (Arc::new(top.handler_reply("exception", text)), Map::new())
            }
            None => (
                Arc::new(top.on_exception()),
                one_arg("error_message", error.clone()),
            ),
        };
        session.exception(step, error.clone());
        if let Err(render_error) =
            working.put_prompt_as(handler, &args, Role::User, "exception", Map::new())
        {
            return Err(format!(
                "exception handler of prompt `{}`: {render_error}",
                top.path
            ));
        }
        written.push(error);
        if let Some(sent) = working.messages().last() {
            written.push(sent.content.clone());
        }
        Ok(())
    }

    /// Runs one requested call; returns it with its result and the text the
    /// model will read. `repeated`: an identical call came earlier in this
    /// turn or succeeded in an earlier one.
    async fn execute(
        &self,
        call: &FunctionCall,
        repeated: bool,
        offered: &[&str],
        final_round: bool,
    ) -> (FunctionCall, String) {
        let answered = self.answer(call, repeated, offered, final_round).await;
        self.tool_answered(&answered.0, &answered.1);
        answered
    }

    /// [`execute`](Call::execute), without the event.
    async fn answer(
        &self,
        call: &FunctionCall,
        repeated: bool,
        offered: &[&str],
        final_round: bool,
    ) -> (FunctionCall, String) {
        let mut call = call.clone();
        let error = if let Some(raw) = &call.raw_arguments {
            // D8: answer malformed arguments as a tool result so every tool call
            // has its answer and the message sequence stays valid.
            Some(format!(
                "the arguments of `{}` are not a JSON object: {raw}",
                call.name
            ))
        } else if repeated {
            let text = format!(
                "The function {} with identical arguments {} has been called earlier, please check the previous \
                 results and do not call it again. If you do not need to call more functions, just stop calling \
                 and provide the final response.",
                call.name,
                Value::Object(call.arguments.clone())
            );
            call.result_str = Some(text.clone());
            return (call, text);
        } else if final_round || !offered.contains(&call.name.as_str()) {
            // D4: an unknown tool is the model's mistake to fix, not an abort.
            let available = if final_round || offered.is_empty() {
                "no tools are available now".to_string()
            } else {
                format!("available tools: {}", offered.join(", "))
            };
            Some(format!("there is no tool `{}`; {available}", call.name))
        } else {
            let found = self.runtime.toolbox.get(&call.name);
            match found.or_else(|| self.runtime.mcp.tool(&call.name)) {
                Some(tool) => match tool::traced_call(tool.as_ref(), &call.arguments).await {
                    Ok(result) => {
                        let text = tool::result_text(&call.name, &call.arguments, &result);
                        call.result = Some(Value::String(result));
                        call.result_str = Some(text.clone());
                        return (call, text);
                    }
                    Err(error) => Some(error),
                },
                None => Some(format!("there is no tool `{}`", call.name)),
            }
        };
        failed(call, error.unwrap_or_default())
    }
}

/// The provider of a call whose events are wanted: each attempt it is
/// asked for is told first (`model_call_started`); everything else is the
/// provider's own.
struct Observed<'p> {
    inner: &'p dyn crate::provider::Provider,
    starting: &'p (dyn Fn() + Send + Sync),
}

impl crate::provider::Provider for Observed<'_> {
    fn invoke<'a>(
        &'a self,
        request: ChatRequest<'a>,
    ) -> futures_util::future::BoxFuture<'a, Result<Message, crate::provider::ProviderError>> {
        (self.starting)();
        self.inner.invoke(request)
    }

    fn wire_request(&self, request: &ChatRequest<'_>) -> crate::provider::WireRequest {
        self.inner.wire_request(request)
    }

    fn limiter(&self) -> Option<&crate::provider::limit::Limiter> {
        self.inner.limiter()
    }

    fn wire_digest(&self, request: &ChatRequest<'_>) -> Option<String> {
        self.inner.wire_digest(request)
    }

    fn check_reply(&self, reply: Message) -> Result<Message, crate::provider::ProviderError> {
        self.inner.check_reply(reply)
    }
}

/// A call past `MAX_TOOL_CALLS_PER_REPLY` of a reply of `count` calls: not
/// run, answered with an error the model can act on.
fn not_run(call: &FunctionCall, count: usize) -> (FunctionCall, String) {
    failed(
        call.clone(),
        format!(
            "not run: a reply may call at most {MAX_TOOL_CALLS_PER_REPLY} tools and this one called {count}; \
             the first {MAX_TOOL_CALLS_PER_REPLY} ran, call the others in a later turn if they are still needed"
        ),
    )
}

/// `call` answered with the error `message`, and the text the model reads.
fn failed(mut call: FunctionCall, message: String) -> (FunctionCall, String) {
    let text = format!("Error: {message}");
    call.error_message = Some(message);
    call.result_str = Some(text.clone());
    (call, text)
}
