//! TEMPORARY stand-in for the prompt module (being written in parallel); same
//! public names, minimal behaviour. Replaced wholesale at merge.

use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("prompt `{prompt}`: {message}")]
    Render { prompt: String, message: String },
    #[error("unknown prompt `{key}`")]
    UnknownPrompt { key: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone)]
pub struct Prompt {
    pub path: String,
    pub template: String,
    pub format: Option<Value>,
    pub tools: Vec<String>,
}

impl Prompt {
    pub fn new(path: impl Into<String>, template: impl Into<String>) -> Result<Prompt> {
        Ok(Prompt {
            path: path.into(),
            template: template.into(),
            format: None,
            tools: Vec::new(),
        })
    }

    pub fn bare(path: impl Into<String>) -> Prompt {
        Prompt {
            path: path.into(),
            template: String::new(),
            format: None,
            tools: Vec::new(),
        }
    }

    pub fn render(&self, args: &Map<String, Value>) -> Result<String> {
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.render_str(
            &self.template,
            minijinja::Value::from(minijinja::value::Serde(args)),
        )
        .map_err(|error| Error::Render {
            prompt: self.path.clone(),
            message: error.to_string(),
        })
    }
}

#[derive(Debug, Default)]
pub struct Registry {
    prompts: std::collections::BTreeMap<String, Prompt>,
}

impl Registry {
    pub fn get(&self, key: &str) -> Result<&Prompt> {
        self.prompts
            .get(key)
            .ok_or_else(|| Error::UnknownPrompt { key: key.into() })
    }
}
impl Prompt {
    pub fn template_vars(&self) -> &std::collections::BTreeSet<String> {
        static E: std::sync::OnceLock<std::collections::BTreeSet<String>> =
            std::sync::OnceLock::new();
        E.get_or_init(Default::default)
    }
    pub fn sha256(&self) -> String {
        String::new()
    }
    pub fn parse(&self, content: &str) -> std::result::Result<Value, Error> {
        Ok(serde_json::json!({"raw": content}))
    }
    pub fn on_exception(&self) -> Prompt {
        self.clone()
    }
    pub fn on_interrupt(&self) -> Prompt {
        self.clone()
    }
    pub fn on_interrupt_final(&self) -> Prompt {
        self.clone()
    }
}
impl Registry {
    pub fn load(_d: &std::path::Path) -> Result<Registry> {
        Ok(Registry::default())
    }
    pub fn empty() -> Registry {
        Registry::default()
    }
}
