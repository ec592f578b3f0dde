//! The parsers and renderers a program registers by name, as prompt files
//! name them in front matter (`parser: NAME`, `renderer: NAME`). Filled by
//! `lllm::Registry`; read when prompt files load. Handlers are not here: they
//! see the call session, so the agent loop holds them and a prompt keeps
//! only a handler's name (checked when a tactic is built).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Parse, Render};

/// Named parsers and renderers.
#[derive(Clone, Default)]
pub struct Extensions {
    pub(crate) parsers: BTreeMap<String, Arc<dyn Parse>>,
    pub(crate) renderers: BTreeMap<String, Arc<dyn Render>>,
}

/// The names front matter gives the built-ins, which a program cannot take.
pub(crate) const BUILTIN_PARSERS: &[&str] = &["tags", "json"];
pub(crate) const BUILTIN_RENDERERS: &[&str] = &["jinja", "format"];

impl Extensions {
    /// Adds a parser; `Err` names the problem (a built-in's or a taken name).
    pub(crate) fn add_parser(&mut self, name: &str, parser: Arc<dyn Parse>) -> Result<(), String> {
        if BUILTIN_PARSERS.contains(&name) || self.parsers.contains_key(name) {
            return Err(format!(
                "parser `{name}` is registered twice (or is a built-in)"
            ));
        }
        self.parsers.insert(name.to_string(), parser);
        Ok(())
    }

    /// Adds a renderer; `Err` names the problem (a built-in's or a taken name).
    pub(crate) fn add_renderer(
        &mut self,
        name: &str,
        renderer: Arc<dyn Render>,
    ) -> Result<(), String> {
        if BUILTIN_RENDERERS.contains(&name) || self.renderers.contains_key(name) {
            return Err(format!(
                "renderer `{name}` is registered twice (or is a built-in)"
            ));
        }
        self.renderers.insert(name.to_string(), renderer);
        Ok(())
    }

    /// The registered parsers' names, sorted.
    pub fn parser_names(&self) -> impl Iterator<Item = &str> {
        self.parsers.keys().map(String::as_str)
    }

    /// The registered renderers' names, sorted.
    pub fn renderer_names(&self) -> impl Iterator<Item = &str> {
        self.renderers.keys().map(String::as_str)
    }
}
