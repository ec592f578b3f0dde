//! Expressions over the run context: a step's `if` and `stop`, a loop's
//! `until`, a `parallel`'s `foreach`. Checked like templates when the tactic
//! is built (`check.rs`: syntax, unknown filters, tests and functions, the
//! names they need); evaluated with strict undefined, under the render fuel.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::render;

/// A minijinja expression, checked.
pub struct Expression {
    /// The expression as written.
    pub source: String,
    /// Context names it needs (a name read only behind `is defined` or
    /// `| default` is not needed).
    pub variables: BTreeSet<String>,
    /// `(name, attribute)` pairs it reads directly on context names.
    pub attributes: BTreeSet<(String, String)>,
}

impl Expression {
    /// Compiles and checks `source`; `place` names it in errors.
    pub fn new(source: &str, place: &str) -> Result<Expression, String> {
        if let Some((message, _)) = super::check::overlong_chain(source, true) {
            return Err(format!("{place}: {message}"));
        }
        let environment = render::environment();
        environment.compile_expression(source).map_err(|error| {
            format!(
                "{place}: `{source}` is not an expression: {}",
                error.detail().unwrap_or("syntax error")
            )
        })?;
        let analysis = super::check::expression(source).map_err(|error| {
            format!(
                "{place}: `{source}` is not an expression: {}",
                error.detail().unwrap_or("syntax error")
            )
        })?;
        if !analysis.problems.is_empty() {
            let messages: Vec<&str> = analysis
                .problems
                .iter()
                .map(|(message, _)| message.as_str())
                .collect();
            return Err(format!("{place}: `{source}`: {}", messages.join("; ")));
        }
        Ok(Expression {
            source: source.to_string(),
            variables: analysis.required,
            attributes: analysis.attributes,
        })
    }

    /// The expression's value over `context`, as JSON.
    pub fn value(&self, context: &Map<String, Value>) -> Result<Value, String> {
        let value = self.evaluate(context)?;
        serde_json::to_value(&value).map_err(|error| format!("`{}`: {error}", self.source))
    }

    /// Whether the expression is true over `context`; an undefined name is an error.
    pub fn holds(&self, context: &Map<String, Value>) -> Result<bool, String> {
        Ok(self.evaluate(context)?.is_true())
    }

    fn evaluate(&self, context: &Map<String, Value>) -> Result<minijinja::Value, String> {
        let environment = render::environment();
        let expression = environment
            .compile_expression(&self.source)
            .map_err(|error| format!("`{}`: {}", self.source, render::error_text(&error)))?;
        expression
            .eval(minijinja::Value::from(minijinja::value::Serde(context)))
            .map_err(|error| format!("`{}`: {}", self.source, render::error_text(&error)))
    }
}
