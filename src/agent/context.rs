//! TEMPORARY stand-in (replaced at merge).
use crate::dialog::Dialog;
use std::sync::Arc;
pub trait ContextManager: Send + Sync {
    fn name(&self) -> &str;
    fn apply(&self, dialog: &mut Dialog) -> Option<Dialog>;
}
pub struct ContextSettings {
    pub kind: String,
    pub model_provider: String,
    pub model: String,
    pub max_tokens: Option<u64>,
    pub options: serde_json::Map<String, serde_json::Value>,
}
pub struct ContextManagers;
impl ContextManagers {
    pub fn with_builtins() -> Self {
        ContextManagers
    }
    pub fn build(&self, _s: &ContextSettings) -> Result<Arc<dyn ContextManager>, String> {
        Err("stub".into())
    }
}
