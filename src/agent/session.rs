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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    Initial,
    Exception,
    Interrupt,
    LlmRecall,
    Success,
    Failure,
}

/// What was sent, compactly: enough to tell whether a later request is the same
/// (`sha256` over the canonical request) and to find its messages again (the
/// first `messages` messages of dialog `dialog_id` in the record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestDigest {
    pub sha256: String,
    pub dialog_id: String,
    pub messages: usize,
    pub model: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub format: bool,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub model_args: Map<String, Value>,
}

fn is_false(value: &bool) -> bool {
    !value
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl RequestDigest {
    pub fn of(request: &ChatRequest<'_>, dialog_id: &str) -> RequestDigest {
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
}

/// One attempt at the provider: a reply (which may still fail to parse) or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvokeTrace {
    /// Tool round (0-based) this invoke belongs to.
    pub step: u32,
    /// 1-based attempt within one request (provider retries).
    pub attempt: u32,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ProviderError>,
    /// Why the reply was rejected by the prompt's parser, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse_error: Option<String>,
    pub latency_ms: u64,
    /// How long the retry loop waited before the next attempt.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waited_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repair {
    pub step: u32,
    pub error: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRound {
    pub step: u32,
    /// The calls of this round with their results or errors.
    pub calls: Vec<FunctionCall>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recall {
    pub step: u32,
    pub attempt: u32,
    pub error: ProviderError,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCallSession {
    pub agent: String,
    /// Model as configured (`provider/model`).
    pub model: String,
    pub dialog_alias: String,
    pub dialog_id: String,
    pub state: CallState,
    pub max_exception_retry: u32,
    pub max_interrupt_steps: u32,
    pub max_llm_recall: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exception_retries: Vec<Repair>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interrupts: Vec<ToolRound>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub llm_recalls: Vec<Recall>,
    pub invokes: Vec<InvokeTrace>,
    /// The accepted reply: always the last invoke's response, so a call
    /// keeps it there only and this field is left out of written records
    /// (`delivery()` reads it; `restore_delivery` fills the field in for
    /// readers of a record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub cost: InvokeCost,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub latency_ms: u64,
    /// What the caller attached to the call (`respond().metadata(…)`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// The arguments the caller gave the parser (`respond().parser_args(…)`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub parser_args: Map<String, Value>,
}

impl AgentCallSession {
    pub fn exception_retries_count(&self) -> u32 {
        self.exception_retries.len() as u32
    }

    pub fn llm_recalls_count(&self) -> u32 {
        self.llm_recalls.len() as u32
    }

    pub fn interrupts_count(&self) -> u32 {
        self.interrupts.len() as u32
    }

    pub fn reach_max_exception_retry(&self) -> bool {
        self.exception_retries_count() >= self.max_exception_retry
    }

    pub fn is_success(&self) -> bool {
        self.state == CallState::Success
    }

    /// Records an invoke and adds its reply's cost.
    pub fn record(&mut self, trace: InvokeTrace) {
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

    pub fn exception(&mut self, step: u32, error: String) {
        self.exception_retries.push(Repair { step, error });
        self.state = CallState::Exception;
    }

    pub fn interrupt(&mut self, step: u32, calls: Vec<FunctionCall>) {
        self.interrupts.push(ToolRound { step, calls });
        self.state = CallState::Interrupt;
    }

    /// The call ends with the last invoke's response as its delivery.
    pub fn success(&mut self) {
        self.state = CallState::Success;
    }

    /// The last response received, which a successful call delivers.
    fn last_response(&self) -> Option<&Message> {
        self.invokes
            .iter()
            .rev()
            .find_map(|invoke| invoke.response.as_deref())
    }

    /// The accepted reply of a call that succeeded.
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

    pub fn failure(&mut self, error: String) {
        self.error = Some(error);
        self.state = CallState::Failure;
    }
}
