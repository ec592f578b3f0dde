//! A task: what one run is asked, with its id, arguments and tags.

use serde_json::{Map, Value};

/// One task: what the user asks, with its id, template arguments and tags.
///
/// Made from text (`"…".into()`), from any JSON value, or with the builder
/// methods:
///
/// ```
/// use lllm::Task;
///
/// let task = Task::new("Summarize this.").id("doc-7").arg("words", 50).tag("team", "docs");
/// assert_eq!(task.text(), "Summarize this.");
/// assert_eq!(task.args["words"], 50);
/// let from_text: Task = "What is 2 + 2?".into();
/// assert_eq!(from_text.text(), "What is 2 + 2?");
/// ```
#[derive(Debug, Clone, Default)]
pub struct Task {
    /// The task's id (a batch line's `id`), recorded as `task_id`.
    pub id: Option<String>,
    /// A string, or any JSON value (templates see it as `task`).
    pub task: Value,
    /// Template arguments: each is visible to templates by name and under `args`.
    pub args: Map<String, Value>,
    /// Labels recorded with the session; not sent to any model.
    pub tags: Map<String, Value>,
    /// Free-form notes recorded with the session (a batch line's
    /// `metadata`, `lllm run --meta k=v`); not sent to any model. Tags are
    /// for filtering (`lllm logs --tag`), metadata for reading.
    pub metadata: Map<String, Value>,
}

impl Task {
    /// A task of `task` (text, or any JSON value) with no id, arguments or tags.
    pub fn new(task: impl Into<Value>) -> Task {
        Task {
            task: task.into(),
            ..Task::default()
        }
    }

    /// Sets the id.
    pub fn id(mut self, id: impl Into<String>) -> Task {
        self.id = Some(id.into());
        self
    }

    /// Adds the template argument `name`.
    pub fn arg(mut self, name: impl Into<String>, value: impl Into<Value>) -> Task {
        self.args.insert(name.into(), value.into());
        self
    }

    /// Adds the tag `name`.
    pub fn tag(mut self, name: impl Into<String>, value: impl Into<Value>) -> Task {
        self.tags.insert(name.into(), value.into());
        self
    }

    /// Adds the metadata entry `name`.
    pub fn meta(mut self, name: impl Into<String>, value: impl Into<Value>) -> Task {
        self.metadata.insert(name.into(), value.into());
        self
    }

    /// The task as text for a model: a string as is, anything else as JSON.
    pub fn text(&self) -> String {
        match &self.task {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }
}

impl From<&str> for Task {
    fn from(text: &str) -> Task {
        Task::new(text)
    }
}

impl From<String> for Task {
    fn from(text: String) -> Task {
        Task::new(text)
    }
}

impl From<Value> for Task {
    fn from(task: Value) -> Task {
        Task::new(task)
    }
}
