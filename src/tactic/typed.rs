//! Typed calls (issue 29): `call_typed` turns a serializable input into the
//! task and parses the delivery into the caller's type, holding the run to
//! a schema (the tactic's `output_schema`, else one derived from the output
//! type) so that a reply that does not fit is repaired in the agent loop.
//!
//! It goes through [`Tactic::call`], so it does whatever `call` does (its
//! record, its errors); how a run holds its delivering call to the schema is
//! the flow engine's (`flow.rs`, `Ctx::delivering`).

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::calls::RunError;
use super::record::SessionRecord;
use super::{Tactic, Task};
use crate::prompt::JsonParser;

/// Why [`Tactic::call_typed`] returned no value.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use lllm::{Registry, Tactic, TypedError};
///
/// let tactic = Tactic::from_yaml(
///     "agent_configs: [{name: a, model_name: mock/echo}]",
///     ".",
///     &Registry::new(),
/// )?;
/// // A number is neither a task's text nor its arguments: nothing runs.
/// let error = tactic.call_typed::<_, bool>(42).await.unwrap_err();
/// assert!(matches!(error, TypedError::Input(_)));
/// // `mock/echo` repeats the task, which never reads as a boolean: the
/// // repairs are spent, and the error holds the run's record.
/// let error = tactic.call_typed::<_, bool>("yes").await.unwrap_err();
/// assert!(error.to_string().contains("still does not parse"), "{error}");
/// assert_eq!(error.record().unwrap().agent_calls[0].exception_retries.len(), 3);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TypedError {
    /// The input serializes to neither a JSON object nor a string (or does
    /// not serialize): nothing ran.
    #[error(
        "the input of a typed call is {0}; it must serialize to a JSON object (the task's \
         arguments) or a string (the task's text)"
    )]
    Input(String),
    /// The output type's schema (from its `JsonSchema`) does not compile:
    /// nothing ran.
    #[error("the output type's JSON schema does not compile: {0}")]
    Schema(String),
    /// The run failed: its delivery still did not fit after the agent's
    /// repairs (`max_exception_retry`), or it failed otherwise. The error
    /// holds the whole record.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The run succeeded, and its delivery, which passed the same check in
    /// the run, did not read as the output type this time (a `Deserialize`
    /// that is not deterministic). The delivery is kept.
    #[error("the delivery does not read as the output type: {error}")]
    Unread {
        /// The run's delivery.
        delivery: String,
        /// What reading it said.
        error: String,
    },
}

impl TypedError {
    /// The record of the failed run, when one ran.
    pub fn record(&self) -> Option<&SessionRecord> {
        match self {
            TypedError::Run(error) => Some(error.record()),
            _ => None,
        }
    }
}

impl Tactic {
    /// Runs one task made from `input` and returns its delivery read as
    /// `Out`. A string `input` is the task's text; an object (a struct, a
    /// map, a `json!({…})`) is the task's arguments, each visible to
    /// templates by name, and the task itself (its text is its JSON: what a
    /// tactic without a flow shows the model). Anything else is
    /// [`TypedError::Input`], with nothing run.
    ///
    /// The run is held to the tactic's `output_schema`, or, when it declares
    /// none, to the schema of `Out` (schemars): the call that delivers (a
    /// tactic without a flow, a flow's last step, a programmed flow's
    /// [`Ctx::delivering`](crate::Ctx::delivering)) is asked for that JSON,
    /// and a reply that does not fit the schema or does not read as `Out`
    /// is repaired in the agent loop, the repair text saying what was wrong
    /// (the record's `exception_retries`). A run that still fails is
    /// [`TypedError::Run`], holding its record.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use lllm::schemars::JsonSchema;
    /// use lllm::{Registry, Tactic};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize)]
    /// struct Question {
    ///     city: String,
    /// }
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct Answer {
    ///     country: String,
    ///     population_millions: f64,
    /// }
    ///
    /// // The scripted model first answers without a number, then fits.
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(
    ///     dir.path().join("s.yaml"),
    ///     "replies:\n- '{\"country\": \"France\"}'\n\
    ///      - '{\"country\": \"France\", \"population_millions\": 2.1}'\n",
    /// )?;
    /// let tactic = Tactic::from_yaml(
    ///     "agent_configs: [{name: a, model_name: mock/script}]\n\
    ///      providers: {mock: {script: s.yaml}}",
    ///     dir.path(),
    ///     &Registry::new(),
    /// )?;
    /// let answer: Answer = tactic
    ///     .call_typed(Question { city: "Paris".into() })
    ///     .await?;
    /// assert_eq!(answer.country, "France");
    /// assert_eq!(answer.population_millions, 2.1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call_typed<In, Out>(&self, input: In) -> Result<Out, TypedError>
    where
        In: Serialize,
        Out: DeserializeOwned + JsonSchema,
    {
        let task = typed_task(&input)?;
        let output = self.output_reading::<Out>()?;
        let mut typed = self.clone();
        typed.output = Some(output.clone());
        let delivery = typed.call(task).await?;
        read::<Out>(&output, delivery)
    }

    /// Holds this tactic's runs to the schema a recorded run was held to,
    /// when the tactic does not declare it itself (a run of `call_typed`):
    /// what `lllm replay --rerun` re-runs. The reading as the output type
    /// is not recorded (the type is the program's); the schema derived from
    /// it is what the run's provider was asked for.
    pub(crate) fn hold_as_recorded(
        &mut self,
        recorded: &super::record::TacticInfo,
    ) -> Result<(), super::Error> {
        let Some(schema) = &recorded.output_schema else {
            return Ok(());
        };
        if self
            .output
            .as_ref()
            .and_then(|output| output.schema.as_ref())
            == Some(schema)
        {
            return Ok(());
        }
        let output = JsonParser::new(Some(schema.clone())).map_err(|problem| super::Error {
            problems: vec![format!("the record's `output_schema`: {problem}")],
        })?;
        self.output = Some(output);
        Ok(())
    }

    /// What a typed call holds the run to: the tactic's `output_schema`,
    /// else `Out`'s schema; either way read as `Out`.
    fn output_reading<Out: DeserializeOwned + JsonSchema>(&self) -> Result<JsonParser, TypedError> {
        match &self.output {
            Some(declared) => Ok(declared.clone().read_as::<Out>()),
            None => {
                let mut schema = schemars::schema_for!(Out).to_value();
                closed(&mut schema);
                JsonParser::reading_as::<Out>(schema).map_err(TypedError::Schema)
            }
        }
    }
}

/// A derived schema as OpenAI's strict structured outputs take it (chat
/// completions send `strict: true`), as its SDK's `to_strict_json_schema`
/// makes one: every object with `properties` closed
/// (`additionalProperties: false`) and all of them `required` (an `Option`
/// field's schema allows `null`, which reads as `None`), and no `$schema`
/// key. Objects without `properties` (maps) are left open.
fn closed(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get("properties") {
                let names: Vec<Value> = properties.keys().cloned().map(Value::String).collect();
                map.insert("required".into(), Value::Array(names));
                map.entry("additionalProperties")
                    .or_insert(Value::Bool(false));
            }
            map.remove("$schema");
            map.values_mut().for_each(closed);
        }
        Value::Array(items) => items.iter_mut().for_each(closed),
        _ => {}
    }
}

/// The task of a typed call's input ([`Task::from_input`]): a string is
/// its text; an object is its arguments and the task itself.
fn typed_task(input: &impl Serialize) -> Result<Task, TypedError> {
    let value = serde_json::to_value(input)
        .map_err(|error| TypedError::Input(format!("not serializable ({error})")))?;
    Task::from_input(value).map_err(|error| TypedError::Input(error.found))
}

/// The delivery read as `Out`, through the check the run held it to.
fn read<Out: DeserializeOwned>(output: &JsonParser, delivery: String) -> Result<Out, TypedError> {
    let unread = |error: String, delivery: String| TypedError::Unread { delivery, error };
    let parsed = match output.parse(&delivery) {
        Ok(parsed) => parsed,
        Err(failure) => return Err(unread(failure.0, delivery)),
    };
    Out::deserialize(&parsed["json"]).map_err(|error| unread(error.to_string(), delivery))
}

#[cfg(test)]
mod tests;
