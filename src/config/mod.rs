//! TEMPORARY stand-in (replaced at merge).
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);
pub type Result<T, E = Error> = std::result::Result<T, E>;
pub fn load(_path: &Path) -> Result<TacticConfig> {
    Err(Error("stub".into()))
}
#[derive(Debug, Clone)]
pub struct TacticConfig {
    pub name: String,
    pub description: Option<String>,
    pub path: PathBuf,
    pub prompts_dir: PathBuf,
    pub agents: Vec<AgentConfig>,
    pub providers: BTreeMap<String, ProviderConfig>,
    pub tools: Vec<ToolConfig>,
    pub flow: Vec<StepConfig>,
    pub result: Option<String>,
    pub pricing: Option<Value>,
    pub warnings: Vec<String>,
    pub resolved: Value,
}
impl TacticConfig {
    pub fn override_model(&mut self, _m: &str) {}
}
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub name: String,
    pub model_name: String,
    pub system_prompt: SystemPrompt,
    pub model_args: Map<String, Value>,
    pub tools: Vec<String>,
    pub max_exception_retry: u32,
    pub max_interrupt_steps: u32,
    pub max_llm_recall: u32,
    pub context_manager: Option<ContextManagerConfig>,
    pub api_type: crate::dialog::ApiType,
    pub stream: bool,
}
#[derive(Debug, Clone)]
pub enum SystemPrompt {
    Inline(String),
    Key(String),
}
#[derive(Debug, Clone)]
pub struct ContextManagerConfig {
    pub kind: String,
    pub max_tokens: Option<u64>,
    pub options: Map<String, Value>,
}
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    pub base_url: Option<String>,
}
#[derive(Debug, Clone)]
pub struct ToolConfig {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub command: Vec<String>,
    pub timeout_s: f64,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}
#[derive(Debug, Clone)]
pub struct StepConfig {
    pub name: String,
    pub agent: String,
    pub dialog: String,
    pub input: StepInput,
    pub args: Map<String, Value>,
}
#[derive(Debug, Clone)]
pub enum StepInput {
    Prompt(String),
    Text(String),
}
