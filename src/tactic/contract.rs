//! STAND-IN until branch `contract` lands (issue 30): `TacticInfo` and
//! `Task::input` as parts.md fixes them, so the remote client compiles.
//! The merge takes branch `contract`'s file.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A tactic's contract, in upstream lllm-core 0.2's `TacticInfo` shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct TacticInfo {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub input_schema: Option<Value>,
    #[serde(default)]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default)]
    pub runtime_kind: String,
    #[serde(default)]
    pub package_ref: Option<String>,
    #[serde(default)]
    pub service_ref: Option<String>,
    #[serde(default)]
    pub examples: Vec<Map<String, Value>>,
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

impl super::Task {
    /// The task's input: its args as an object when it has any, else its `task` value.
    pub fn input(&self) -> Value {
        if self.args.is_empty() {
            self.task.clone()
        } else {
            Value::Object(self.args.clone())
        }
    }
}

impl super::Tactic {
    /// The tactic's contract (stand-in).
    pub fn info(&self) -> TacticInfo {
        TacticInfo {
            name: self.config.name.clone(),
            description: self.config.description.clone().unwrap_or_default(),
            input_schema: None,
            output_schema: self.config.output_schema.clone(),
            capabilities: vec!["arun".into(), "events".into(), "run".into(), "stream".into()],
            runtime_kind: "lllm".into(),
            package_ref: None,
            service_ref: None,
            examples: Vec::new(),
            metadata: Map::new(),
        }
    }
}

impl super::Tactic {
    /// Stand-in: every input passes until branch `contract` lands.
    pub fn check_input(&self, _task: &super::Task) -> Result<(), std::convert::Infallible> {
        Ok(())
    }
}
