//! TEMPORARY: the contract API of branch `contract` (parts.md), until it lands.
#![allow(dead_code)]
use lllm::{Tactic, Task};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TacticInfo {
    pub name: String,
    pub description: String,
    pub input_schema: Option<Value>,
    pub output_schema: Option<Value>,
    pub capabilities: Vec<String>,
    pub runtime_kind: String,
    pub package_ref: Option<String>,
    pub service_ref: Option<String>,
    pub examples: Vec<Map<String, Value>>,
    pub metadata: Map<String, Value>,
}
pub struct InputProblem {
    pub pointer: String,
    pub message: String,
}
pub struct InputError {
    pub problems: Vec<InputProblem>,
}
pub trait Contract {
    fn info(&self) -> TacticInfo;
    fn check_input(&self, task: &Task) -> Result<(), InputError>;
}
impl Contract for Tactic {
    fn info(&self) -> TacticInfo {
        TacticInfo {
            name: self.config.name.clone(),
            description: self.config.description.clone().unwrap_or_default(),
            input_schema: None,
            output_schema: self.config.output_schema.clone(),
            capabilities: ["arun", "events", "run", "stream"]
                .map(String::from)
                .to_vec(),
            runtime_kind: "lllm".into(),
            package_ref: None,
            service_ref: None,
            examples: Vec::new(),
            metadata: Map::new(),
        }
    }
    fn check_input(&self, _task: &Task) -> Result<(), InputError> {
        Ok(())
    }
}
pub trait FromInput: Sized {
    fn from_input(value: Value) -> Result<Self, String>;
}
impl FromInput for Task {
    fn from_input(value: Value) -> Result<Task, String> {
        match value {
            Value::String(text) => Ok(Task::new(text)),
            Value::Object(object) => {
                let mut task = Task::new(Value::Object(object.clone()));
                task.args = object;
                Ok(task)
            }
            other => Err(format!("an input is a string or an object, not {other}")),
        }
    }
}
