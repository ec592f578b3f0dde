//! `AgentCallSession`: the full trace of one agent call — every invoke with its
//! request digest, response, usage, latency and error; the repairs, tool rounds
//! and provider recalls; the delivery or the failure; the cost.
//!
//! Failed calls are recorded as completely as successful ones (D7).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dialog::{FunctionCall, InvokeCost, Message};
/// Kept here for callers that name it by its old place; it lives in the provider layer.
pub use crate::provider::digest::request_sha256;
use crate::provider::{ChatRequest, ProviderError};
use crate::redact::{Scrub, Scrubber, Secrets};

/// Where an agent call is in its loop (the seeds' states), written in
/// records in `snake_case` (`llm_recall`). A finished call is `success` or
/// `failure`; the others are only seen while a call runs (by a handler). A
/// call stopped before it ended (the run was interrupted) is a `failure`
/// with error `interrupted`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    /// Nothing sent yet.
    #[default]
    Initial,
    /// The last reply did not parse; it is being repaired (see
    /// [`AgentCallSession::exception_retries`]).
    Exception,
    /// The last reply called tools; their results are going back to the
    /// model (see [`AgentCallSession::interrupts`]).
    Interrupt,
    /// The last attempt at the provider failed; it is being retried (see
    /// [`AgentCallSession::llm_recalls`]).
    LlmRecall,
    /// The call delivered a reply that parsed.
    Success,
    /// The call gave up; [`AgentCallSession::error`] says why.
    Failure,
}

/// What was sent, compactly: enough to tell whether a later request is the same
/// (`sha256` over the canonical request) and to find its messages again (the
/// first `messages` messages of dialog `dialog_id` in the record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestDigest {
    /// Hex SHA-256 of the canonical request (messages, model, tools, format,
    /// model arguments) as the record holds it, each known secret `***`
    /// (`digest::scrubbed_sha256`): equal digests mean the same request,
    /// which is how `replay --rerun` finds a recorded reply.
    pub sha256: String,
    /// The dialog the request was sent from (the working fork), by id.
    pub dialog_id: String,
    /// How many messages were sent: the first `messages` of that dialog.
    pub messages: usize,
    /// The model as the provider was asked for it (without the provider prefix).
    pub model: String,
    /// Names of the tools offered; absent when none were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Whether a structured-output format (JSON schema) was requested.
    #[serde(default, skip_serializing_if = "is_false")]
    pub format: bool,
    /// The model arguments sent (`temperature`, `max_tokens`, …); absent when none.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub model_args: Map<String, Value>,
}

fn is_false(value: &bool) -> bool {
    !value
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn is_zero_u32(value: &u32) -> bool {
    *value == 0
}

impl RequestDigest {
    /// The digest of `request`, sent from dialog `dialog_id`.
    pub(crate) fn of(request: &ChatRequest<'_>, dialog_id: &str) -> RequestDigest {
        RequestDigest {
            sha256: request_sha256(request),
            dialog_id: dialog_id.to_string(),
            messages: request.messages.len(),
            model: request.model.to_string(),
            tools: request.tools.iter().map(|tool| tool.name.clone()).collect(),
            format: request.format.is_some(),
            model_args: request.model_args.clone(),
        }
    }

    /// This digest as a session record keeps it: over the request with
    /// `secrets` written `***`, as the record holds its messages
    /// (`digest::scrubbed_sha256`).
    pub(crate) fn recorded(
        mut self,
        request: &ChatRequest<'_>,
        secrets: &Secrets,
    ) -> RequestDigest {
        if let Some(sha256) = crate::provider::digest::scrubbed_sha256(request, secrets) {
            self.sha256 = sha256;
        }
        self
    }
}

/// One attempt at the provider: a reply (which may still fail to parse) or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvokeTrace {
    /// Tool round (0-based) this invoke belongs to.
    pub step: u32,
    /// Which request of its tool round this is: 0 the first, N the Nth
    /// repair (a reply the parser refused, sent back to be fixed); absent
    /// when 0. Added during format 3: each repair's request was `attempt 1`
    /// like the first (issue 27).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub repair: u32,
    /// 1-based attempt within one request (provider retries).
    pub attempt: u32,
    /// What was sent.
    pub request: RequestDigest,
    /// In memory, the very message appended to the working fork (dialog id
    /// and all), shared with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Arc<Message>>,
    /// In a written record: the response is left out here because it is
    /// message `request.messages` of dialog `request.dialog_id` (the reply
    /// appended to the working fork), less that message's `dialog_id`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub response_in_dialog: bool,
    /// The provider's error when the attempt failed (the call then retried
    /// or gave up); absent when a reply came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ProviderError>,
    /// Why the reply was rejected by the prompt's parser, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse_error: Option<String>,
    /// Milliseconds from sending the request to the reply or the error.
    pub latency_ms: u64,
    /// Milliseconds the retry loop waited after this failed attempt before
    /// the next one; absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waited_ms: u64,
    /// The reply came from the response cache (`provider::cache`): nothing
    /// was sent, and it cost nothing; absent when it was sent.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cached: bool,
}

/// One repair: a reply that did not parse, sent back to the model with the
/// prompt's exception handler (`max_exception_retry` bounds how many).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repair {
    /// Tool round (0-based) the rejected reply came in.
    pub step: u32,
    /// Why the parser rejected it.
    pub error: String,
}

/// One tool round: the tool calls of a reply, run and answered before the
/// model is asked again (`max_interrupt_steps` bounds how many).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRound {
    /// Tool round (0-based).
    pub step: u32,
    /// The calls of this round with their results or errors.
    pub calls: Vec<FunctionCall>,
}

/// One failed attempt at the provider, retried or given up on
/// (`max_llm_recall` bounds the retries); the matching invoke holds its
/// latency and wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recall {
    /// Tool round (0-based) of the request.
    pub step: u32,
    /// 1-based attempt within the request.
    pub attempt: u32,
    /// What the provider answered (or why nothing came).
    pub error: ProviderError,
}

/// The record of one agent call: what the agent was asked on which dialog,
/// every invoke of the provider, the repairs, tool rounds and retries, the
/// outcome and what it cost. A tactic run keeps one per call in
/// [`SessionRecord::agent_calls`](crate::SessionRecord::agent_calls), failed
/// calls as fully as successful ones.
///
/// A written record keeps each reply once, in its dialog: the invokes of a
/// call read from disk hold no `response` until
/// [`SessionRecord::expand`](crate::SessionRecord::expand) puts them back
/// ([`Tactic::run`](crate::Tactic::run) gives the full form).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lllm::BoxError> {
/// use lllm::agent::CallState;
/// use lllm::{Registry, Tactic};
///
/// let yaml = "agent_configs: [{name: echo, model_name: mock/echo, system_prompt: You repeat.}]";
/// let tactic = Tactic::from_yaml(yaml, ".", &Registry::new())?;
/// let record = tactic.run("hello".into()).await;
///
/// let call = &record.agent_calls[0];
/// assert_eq!(call.agent, "echo");
/// assert_eq!(call.model, "mock/echo");
/// assert_eq!(call.state, CallState::Success);
/// assert_eq!(call.delivery().map(|reply| reply.content.as_str()), Some("hello"));
/// assert_eq!(call.invokes.len(), 1); // one request, answered at once
/// assert_eq!(call.exception_retry_count(), 0);
/// assert_eq!((call.invoke_count(), call.retry_count()), (1, 0));
/// assert!(call.cost.cost_known); // the mock providers cost nothing
/// assert!(call.error.is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentCallSession {
    /// The agent called, by name.
    pub agent: String,
    /// Model as configured (`provider/model`).
    pub model: String,
    /// The agent's name for the dialog the call was made on.
    pub dialog_alias: String,
    /// That dialog's id in the record's `dialogs` (the canonical dialog, not
    /// a working fork).
    pub dialog_id: String,
    /// How the call ended: [`CallState::Success`] or [`CallState::Failure`]
    /// once it has.
    pub state: CallState,
    /// The agent's limit on repairs of replies that do not parse (left out
    /// of a record when it is the default, 3).
    #[serde(
        default = "limits::exception_retry",
        skip_serializing_if = "limits::is_exception_retry"
    )]
    pub max_exception_retry: u32,
    /// The agent's limit on tool rounds (0: unlimited up to 100; left out
    /// when it is the default, 5).
    #[serde(
        default = "limits::interrupt_steps",
        skip_serializing_if = "limits::is_interrupt_steps"
    )]
    pub max_interrupt_steps: u32,
    /// The agent's limit on retries of one request after provider errors
    /// (left out when it is the default, 3).
    #[serde(
        default = "limits::llm_recall",
        skip_serializing_if = "limits::is_llm_recall"
    )]
    pub max_llm_recall: u32,
    /// The repairs, in order; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exception_retries: Vec<Repair>,
    /// The tool rounds, in order; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interrupts: Vec<ToolRound>,
    /// The failed provider attempts, in order; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub llm_recalls: Vec<Recall>,
    /// Every attempt at the provider, failed ones included, in order.
    pub invokes: Vec<InvokeTrace>,
    /// The accepted reply: always the last invoke's response, so a call
    /// keeps it there only and this field is left out of written records
    /// (`delivery()` reads it; `restore_delivery` fills the field in for
    /// readers of a record). Private: `delivery()` is the one way to read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) delivery: Option<Message>,
    /// Why the call failed, in one line; absent when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the call's replies cost, summed over its invokes (tokens, and
    /// dollars when the model's prices are known: see `cost.cost_known`).
    pub cost: InvokeCost,
    /// When the call began: RFC 3339 in UTC, with milliseconds.
    pub started_at: String,
    /// When it ended, in the same form; absent only while it runs.
    pub ended_at: Option<String>,
    /// Milliseconds from start to end (0 while it runs).
    pub latency_ms: u64,
    /// What the caller attached to the call (`respond().metadata(…)`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// The arguments the caller gave the parser (`respond().parser_args(…)`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub parser_args: Map<String, Value>,
}

/// What the session stores is a public field (serialized as it is: `state`,
/// `cost`, `invokes`, …); what is derived from it is a method (`delivery()`,
/// the `…_count()`s, `is_success()`), and no name is both (docs/library.md,
/// "Fields and methods").
impl AgentCallSession {
    /// How many replies were repaired (the length of `exception_retries`).
    pub fn exception_retry_count(&self) -> usize {
        self.exception_retries.len()
    }

    /// How many provider attempts failed (retried or not: a call that
    /// failed for good counts too; the length of `llm_recalls`).
    pub fn llm_recall_count(&self) -> usize {
        self.llm_recalls.len()
    }

    /// Calls (`lllm::words`): requests sent to the provider, failed ones and
    /// retries included; replies from the response cache are not sent
    /// ([`cache_hit_count`](Self::cache_hit_count)).
    pub fn invoke_count(&self) -> usize {
        self.invokes.iter().filter(|invoke| !invoke.cached).count()
    }

    /// Invokes answered from the response cache.
    pub fn cache_hit_count(&self) -> usize {
        self.invokes.iter().filter(|invoke| invoke.cached).count()
    }

    /// How many retries (`lllm::words`): calls that repeated a request
    /// after a provider error, i.e. every attempt but the first.
    pub fn retry_count(&self) -> usize {
        self.invokes
            .iter()
            .filter(|invoke| !invoke.cached && invoke.attempt > 1)
            .count()
    }

    /// How many tool rounds ran (the length of `interrupts`).
    pub fn interrupt_count(&self) -> usize {
        self.interrupts.len()
    }

    /// Whether the repairs have used up `max_exception_retry`, so the next
    /// reply that does not parse fails the call.
    pub fn reach_max_exception_retry(&self) -> bool {
        self.exception_retry_count() >= self.max_exception_retry as usize
    }

    /// Whether the call delivered a reply.
    pub fn is_success(&self) -> bool {
        self.state == CallState::Success
    }

    /// Records an invoke and adds its reply's cost.
    pub(crate) fn record(&mut self, trace: InvokeTrace) {
        if let Some(message) = &trace.response {
            self.cost += message.cost();
        }
        if let Some(error) = &trace.error {
            self.llm_recalls.push(Recall {
                step: trace.step,
                attempt: trace.attempt,
                error: error.clone(),
            });
            self.state = CallState::LlmRecall;
        }
        self.invokes.push(trace);
    }

    /// Records a repair of a reply of tool round `step` that failed to parse.
    pub(crate) fn exception(&mut self, step: u32, error: String) {
        self.exception_retries.push(Repair { step, error });
        self.state = CallState::Exception;
    }

    /// Records tool round `step` with its executed calls.
    pub(crate) fn interrupt(&mut self, step: u32, calls: Vec<FunctionCall>) {
        self.interrupts.push(ToolRound { step, calls });
        self.state = CallState::Interrupt;
    }

    /// The call ends with the last invoke's response as its delivery.
    pub(crate) fn success(&mut self) {
        self.state = CallState::Success;
    }

    /// The last response received, which a successful call delivers.
    fn last_response(&self) -> Option<&Message> {
        self.invokes
            .iter()
            .rev()
            .find_map(|invoke| invoke.response.as_deref())
    }

    /// The accepted reply of a call that succeeded; `None` for a failed
    /// call, and for one read from a written record that was not
    /// [expanded](crate::SessionRecord::expand) (its reply is in the dialog).
    pub fn delivery(&self) -> Option<&Message> {
        if !self.is_success() {
            return None;
        }
        self.delivery.as_ref().or_else(|| self.last_response())
    }

    /// Fills in `delivery` from the last invoke's response.
    pub fn restore_delivery(&mut self) {
        if self.is_success() && self.delivery.is_none() {
            self.delivery = self.last_response().cloned();
        }
    }

    /// Ends the call as a failure, for `error`.
    pub(crate) fn failure(&mut self, error: String) {
        self.error = Some(error);
        self.state = CallState::Failure;
    }
}

/// One line: agent, model, state, calls (with retries), repairs and tool
/// rounds when there were any, cost, and why it failed when it did.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lllm::BoxError> {
/// use lllm::Agent;
///
/// let mut agent = Agent::builder("mock/echo").name("echo").build()?;
/// agent.open("main")?;
/// agent.receive("hi")?;
/// let session = agent.respond().session().await?;
/// assert_eq!(
///     session.to_string(),
///     format!("echo (mock/echo) on `main`: success, 1 call, {}", session.cost),
/// );
/// assert!(session.cost.to_string().ends_with(" out), $0.000000")); // `mock` costs nothing
/// # Ok(())
/// # }
/// ```
impl std::fmt::Display for AgentCallSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::words::{calls, count};
        write!(
            f,
            "{} ({}) on `{}`: {}, {}",
            self.agent,
            self.model,
            self.dialog_alias,
            self.state,
            calls(self.invoke_count() as u64, self.retry_count() as u64)
        )?;
        let cache_hits = self.cache_hit_count() as u64;
        if cache_hits > 0 {
            write!(f, ", {}", count(cache_hits, "cache hit", "cache hits"))?;
        }
        let repairs = self.exception_retry_count() as u64;
        if repairs > 0 {
            write!(f, ", {}", count(repairs, "repair", "repairs"))?;
        }
        let rounds = self.interrupt_count() as u64;
        if rounds > 0 {
            write!(f, ", {}", count(rounds, "tool round", "tool rounds"))?;
        }
        write!(f, ", {}", self.cost)?;
        if let Some(error) = &self.error {
            write!(f, "; {}", error.lines().next().unwrap_or_default())?;
        }
        Ok(())
    }
}

impl CallState {
    /// The state as records write it: `initial`, `exception`, `interrupt`,
    /// `llm_recall`, `success` or `failure` (also its `Display`).
    ///
    /// ```
    /// use lllm::agent::CallState;
    ///
    /// assert_eq!(CallState::LlmRecall.name(), "llm_recall");
    /// assert_eq!(CallState::Success.to_string(), "success");
    /// assert_eq!(serde_json::to_value(CallState::LlmRecall)?, "llm_recall");
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            CallState::Initial => "initial",
            CallState::Exception => "exception",
            CallState::Interrupt => "interrupt",
            CallState::LlmRecall => "llm_recall",
            CallState::Success => "success",
            CallState::Failure => "failure",
        }
    }
}

/// As records write it ([`CallState::name`]).
impl std::fmt::Display for CallState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Every text of the call: what was asked (model arguments, tool calls
/// with their results, the caller's metadata and parser arguments), what
/// came back and why it failed. Ids, digests and times are lllm's own and
/// are left as they are.
impl Scrub for AgentCallSession {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        let AgentCallSession {
            agent,
            model,
            dialog_alias,
            dialog_id: _,
            state: _,
            max_exception_retry: _,
            max_interrupt_steps: _,
            max_llm_recall: _,
            exception_retries,
            interrupts,
            llm_recalls,
            invokes,
            delivery,
            error,
            cost: _,
            started_at: _,
            ended_at: _,
            latency_ms: _,
            metadata,
            parser_args,
        } = self;
        let mut found = agent.scrub(scrubber)
            | model.scrub(scrubber)
            | dialog_alias.scrub(scrubber)
            | delivery.scrub(scrubber)
            | error.scrub(scrubber)
            | metadata.scrub(scrubber)
            | parser_args.scrub(scrubber);
        for repair in exception_retries {
            found |= repair.error.scrub(scrubber);
        }
        for round in interrupts {
            found |= round.calls.scrub(scrubber);
        }
        for recall in llm_recalls {
            found |= recall.error.scrub(scrubber);
        }
        invokes.scrub(scrubber) | found
    }
}

impl Scrub for InvokeTrace {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        let InvokeTrace {
            step: _,
            repair: _,
            attempt: _,
            request,
            response,
            response_in_dialog: _,
            error,
            parse_error,
            latency_ms: _,
            waited_ms: _,
            cached: _,
        } = self;
        // The digest is made over the scrubbed request already (`recorded`).
        let RequestDigest {
            sha256: _,
            dialog_id: _,
            messages: _,
            model,
            tools,
            format: _,
            model_args,
        } = request;
        model.scrub(scrubber)
            | tools.scrub(scrubber)
            | model_args.scrub(scrubber)
            | response.scrub(scrubber)
            | error.scrub(scrubber)
            | parse_error.scrub(scrubber)
    }
}

/// The agents' default limits, which a record leaves out.
mod limits {
    use crate::config::{
        DEFAULT_MAX_EXCEPTION_RETRY, DEFAULT_MAX_INTERRUPT_STEPS, DEFAULT_MAX_LLM_RECALL,
    };

    pub(super) fn exception_retry() -> u32 {
        DEFAULT_MAX_EXCEPTION_RETRY
    }
    pub(super) fn is_exception_retry(limit: &u32) -> bool {
        *limit == DEFAULT_MAX_EXCEPTION_RETRY
    }
    pub(super) fn interrupt_steps() -> u32 {
        DEFAULT_MAX_INTERRUPT_STEPS
    }
    pub(super) fn is_interrupt_steps(limit: &u32) -> bool {
        *limit == DEFAULT_MAX_INTERRUPT_STEPS
    }
    pub(super) fn llm_recall() -> u32 {
        DEFAULT_MAX_LLM_RECALL
    }
    pub(super) fn is_llm_recall(limit: &u32) -> bool {
        *limit == DEFAULT_MAX_LLM_RECALL
    }
}
