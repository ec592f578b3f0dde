//! The tactic as written: every field optional, mirroring the YAML keys, so the
//! file deserializes whatever it leaves out. `resolve` turns it into the
//! validated `TacticConfig`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// Top-level keys a tactic may have (checked by hand for "did you mean").
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "tactic_type",
    "description",
    "base",
    "prompts",
    "global",
    "agent_configs",
    "providers",
    "tools",
    "builtin_tools",
    "mcp_servers",
    "flow",
    "result",
    "output_schema",
    "input_schema",
    "examples",
    "metadata",
    "pricing",
    "max_workers",
    "cache",
    "cache_ttl_s",
    "asserts",
];

/// Keys an agent entry (or `global`) may have; any other key is a model argument (D14).
pub const AGENT_KEYS: &[&str] = &[
    "name",
    "description",
    "model_name",
    "system_prompt",
    "system_prompt_path",
    "model_args",
    "tools",
    "mcp_servers",
    "max_exception_retry",
    "max_interrupt_steps",
    "max_llm_recall",
    "context_manager",
    "api_type",
    "stream",
];

pub const STEP_KEYS: &[&str] = &[
    "step",
    "agent",
    "dialog",
    "prompt",
    "text",
    "args",
    "if",
    "fork",
    "stop",
    "tactic",
    "task",
    "token_env",
];

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawTactic {
    pub tactic_type: Option<String>,
    pub description: Option<String>,
    pub prompts: Option<String>,
    pub global: Option<Map<String, Value>>,
    // Lists of entries as written: each entry is checked on its own, so one
    // that is not a mapping leaves the others' indexes as written.
    pub agent_configs: Option<Vec<Value>>,
    pub providers: Option<BTreeMap<String, RawProvider>>,
    pub tools: Option<Vec<Value>>,
    /// `name: {root: DIR}` (or `name: null` for tools that need nothing).
    pub builtin_tools: Option<std::collections::BTreeMap<String, Option<RawBuiltinTool>>>,
    pub mcp_servers: Option<Vec<Value>>,
    pub flow: Option<Vec<Value>>,
    pub result: Option<String>,
    pub output_schema: Option<Value>,
    /// The contract's keys (`contract`), as written: checked there.
    pub input_schema: Option<Value>,
    pub examples: Option<Value>,
    pub metadata: Option<Value>,
    pub pricing: Option<Value>,
    pub max_workers: Option<Value>,
    pub cache: Option<bool>,
    pub cache_ttl_s: Option<Value>,
    /// Assertion items every task of a batch is scored with (`eval`), as
    /// written: checked there.
    pub asserts: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawAgent {
    pub name: Option<String>,
    pub description: Option<String>,
    pub model_name: Option<String>,
    pub system_prompt: Option<String>,
    pub system_prompt_path: Option<String>,
    pub model_args: Option<Map<String, Value>>,
    pub tools: Option<Vec<String>>,
    /// Names of `mcp_servers` entries whose tools the agent is offered.
    pub mcp_servers: Option<Vec<String>>,
    // Numbers are read as written and checked by `numbers`, so that every
    // problem is listed, not only serde's first.
    pub max_exception_retry: Option<Value>,
    pub max_interrupt_steps: Option<Value>,
    pub max_llm_recall: Option<Value>,
    /// A mapping with `type`, or null.
    pub context_manager: Option<Value>,
    pub api_type: Option<String>,
    pub stream: Option<bool>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawProvider {
    pub api: Option<String>,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    // Numbers as written; `numbers` checks them.
    pub max_concurrency: Option<Value>,
    pub rpm: Option<Value>,
    pub tpm: Option<Value>,
    pub timeout_s: Option<Value>,
    pub connect_timeout_s: Option<Value>,
    pub system_role: Option<String>,
    pub send_name: Option<bool>,
    pub structured_output: Option<String>,
    pub retry_base_ms: Option<Value>,
    pub retry_cap_ms: Option<Value>,
    pub script: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    pub cache: Option<bool>,
    pub cache_ttl_s: Option<Value>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawTool {
    pub name: Option<String>,
    pub description: Option<String>,
    pub parameters: Option<Value>,
    pub command: Option<Vec<String>>,
    /// As written; `numbers` checks it.
    pub timeout_s: Option<Value>,
    pub cwd: Option<String>,
    pub env: Option<BTreeMap<String, String>>,
    /// A tactic (a file, or a served tactic's URL) the tool runs.
    pub tactic: Option<String>,
    /// The variable holding the served tactic's bearer token.
    pub token_env: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawMcpServer {
    pub name: Option<String>,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
    /// As written; `numbers` checks it.
    pub timeout_s: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawStep {
    pub step: Option<String>,
    pub agent: Option<String>,
    pub dialog: Option<String>,
    pub prompt: Option<String>,
    pub text: Option<String>,
    pub args: Option<Map<String, Value>>,
    #[serde(rename = "if")]
    pub condition: Option<String>,
    pub fork: Option<RawFork>,
    pub stop: Option<String>,
    /// Another tactic file run as this step (a sub-tactic).
    pub tactic: Option<String>,
    /// The sub-tactic's task, a template (default: this run's task).
    pub task: Option<String>,
    /// For a served tactic (`tactic: http://…`): the variable holding its
    /// bearer token.
    pub token_env: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFork {
    pub from: String,
    #[serde(default)]
    pub last_n: usize,
    #[serde(default = "one")]
    pub first_k: usize,
}

fn one() -> usize {
    1
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawBuiltinTool {
    pub root: Option<String>,
}
