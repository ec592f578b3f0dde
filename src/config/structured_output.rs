//! A provider's `structured_output:` setting (`api: anthropic`): how a
//! prompt's `format` goes on the Messages API. It is a setting of the config,
//! defined here so the config names nothing of the provider room (issue 28);
//! what each value sends is `provider::anthropic::structured`'s.

use serde::{Deserialize, Serialize};

/// How a `format` goes on the Messages API (`structured_output:` under `providers:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// `output_config` where the model table says the model has it and the
    /// schema fits, else `tool`.
    #[default]
    Auto,
    /// The API's `output_config.format`.
    OutputConfig,
    /// A forced call of an `answer` tool whose input is the reply.
    Tool,
    /// A sentence of the system prompt (not enforced).
    Prompt,
}

impl StructuredOutput {
    /// The names a config may give, in the order the docs list them.
    pub const NAMES: [&'static str; 4] = ["auto", "output_config", "tool", "prompt"];

    /// The setting named `name`, if it is one.
    pub fn from_name(name: &str) -> Option<StructuredOutput> {
        match name {
            "auto" => Some(StructuredOutput::Auto),
            "output_config" => Some(StructuredOutput::OutputConfig),
            "tool" => Some(StructuredOutput::Tool),
            "prompt" => Some(StructuredOutput::Prompt),
            _ => None,
        }
    }
}
