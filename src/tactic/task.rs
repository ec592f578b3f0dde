//! A task: what one run is asked, with its id, arguments and tags.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::args::ArgsError;

use crate::dialog::{ContentPart, Message, Role};

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
    /// The model every agent of the run uses (every one, sub-tactics'
    /// included, as `--model` does); `None`: the tactic's own. A tactic runs
    /// the model it was built with: `lllm batch` builds one per model its
    /// lines name, and a program loads its tactic with
    /// [`LoadOptions::model`](crate::tactic::LoadOptions) (a task naming a
    /// model the tactic was not built for fails, saying so).
    pub model: Option<String>,
    /// Model arguments merged over every agent's `model_args` (the task's
    /// value wins).
    pub model_args: Map<String, Value>,
    /// The conversation before the task (OpenAI chat roles): system
    /// messages replace the system prompt of the first dialog a YAML flow
    /// (or a tactic without one) opens for the task, the other turns are
    /// its history, in order. A programmed tactic ([`Flow`](crate::Flow))
    /// gets the task as it is and uses these itself
    /// ([`system_prompt`](Task::system_prompt), [`history`](Task::history),
    /// `agent.receive_parts(task.parts())`).
    pub messages: Vec<Message>,
    /// Parts sent with the task's own user turn, after its text: images
    /// and text files ([`Attachment`](crate::dialog::Attachment)).
    pub attachments: Vec<ContentPart>,
}

impl Task {
    /// A task of `task` (text, or any JSON value) with no id, arguments or tags.
    ///
    /// ```
    /// use lllm::Task;
    ///
    /// let task = Task::new("Summarize the notes.").id("notes-1").arg("max_words", 40);
    /// assert_eq!(task.text(), "Summarize the notes.");
    /// assert_eq!(task.args["max_words"], 40); // templates see `{{ max_words }}`
    /// let task: Task = "Or just a string.".into();
    /// assert_eq!(task.id, None);
    /// ```
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

    /// Sets template arguments from `args` (a `json!`, a struct or a map),
    /// merged over those set before (a key given here wins). Arguments that
    /// are not a JSON object are an [`ArgsError`], and the task is not made.
    ///
    /// ```
    /// use lllm::Task;
    /// use serde::Serialize;
    /// use serde_json::json;
    ///
    /// #[derive(Serialize)]
    /// struct Review { words: u32, audience: &'static str }
    ///
    /// let task = Task::new("Review this.")
    ///     .args(Review { words: 50, audience: "maintainers" })?
    ///     .tags(json!({"team": "docs", "priority": 2}))?
    ///     .metadata(json!({"ticket": "LL-29"}))?;
    /// assert_eq!((&task.args["words"], &task.tags["team"]), (&json!(50), &json!("docs")));
    /// assert!(Task::new("x").args(["not", "an", "object"]).is_err());
    /// # Ok::<(), lllm::ArgsError>(())
    /// ```
    pub fn args(self, args: impl Serialize) -> Result<Task, ArgsError> {
        self.merge(args, "task arguments", |task| &mut task.args)
    }

    /// Sets tags from `tags` (a `json!`, a struct or a map), merged over
    /// those set before; see [`args`](Task::args).
    pub fn tags(self, tags: impl Serialize) -> Result<Task, ArgsError> {
        self.merge(tags, "tags", |task| &mut task.tags)
    }

    /// Sets metadata from `metadata` (a `json!`, a struct or a map), merged
    /// over what was set before; see [`args`](Task::args).
    pub fn metadata(self, metadata: impl Serialize) -> Result<Task, ArgsError> {
        self.merge(metadata, "metadata", |task| &mut task.metadata)
    }

    /// Sets model arguments from `model_args` (a `json!`, a struct or a
    /// map), merged over those set before; see [`args`](Task::args).
    pub fn model_args(self, model_args: impl Serialize) -> Result<Task, ArgsError> {
        self.merge(model_args, "model arguments", |task| &mut task.model_args)
    }

    fn merge(
        mut self,
        value: impl Serialize,
        what: &'static str,
        field: impl FnOnce(&mut Task) -> &mut Map<String, Value>,
    ) -> Result<Task, ArgsError> {
        let map = crate::args::object(value, what)?;
        field(&mut self).extend(map);
        Ok(self)
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

    /// Sets the model of every agent (see [`Task::model`](Task#structfield.model)).
    pub fn model(mut self, model: impl Into<String>) -> Task {
        self.model = Some(model.into());
        self
    }

    /// Adds the model argument `name`, over every agent's own.
    pub fn model_arg(mut self, name: impl Into<String>, value: impl Into<Value>) -> Task {
        self.model_args.insert(name.into(), value.into());
        self
    }

    /// Adds a message to the conversation before the task.
    ///
    /// ```
    /// use lllm::dialog::{ContentPart, Message};
    /// use lllm::Task;
    ///
    /// let task = Task::new("And in French?")
    ///     .message(Message::system("Answer in one word."))
    ///     .message(Message::user("Say hello."))
    ///     .message(Message::assistant("assistant", "Hello."))
    ///     .attach(ContentPart::image_bytes(b"GIF89a...")?);
    /// assert_eq!(task.system_prompt().as_deref(), Some("Answer in one word."));
    /// assert_eq!(task.history().count(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn message(mut self, message: Message) -> Task {
        self.messages.push(message);
        self
    }

    /// Adds a part (an image, a text file) to the task's user turn.
    pub fn attach(mut self, part: ContentPart) -> Task {
        self.attachments.push(part);
        self
    }

    /// The system messages of [`messages`](Task#structfield.messages), a
    /// blank line apart; `None` when there are none.
    pub fn system_prompt(&self) -> Option<String> {
        let system: Vec<&str> = self
            .messages
            .iter()
            .filter(|message| message.role == Role::System)
            .map(|message| message.content.as_str())
            .collect();
        (!system.is_empty()).then(|| system.join("\n\n"))
    }

    /// The turns of [`messages`](Task#structfield.messages) that are not
    /// system messages, in order.
    pub fn history(&self) -> impl Iterator<Item = &Message> {
        self.messages
            .iter()
            .filter(|message| message.role != Role::System)
    }

    /// The task's user turn as parts: its text, then the attachments.
    pub fn parts(&self) -> Vec<ContentPart> {
        std::iter::once(ContentPart::text(self.text()))
            .chain(self.attachments.iter().cloned())
            .collect()
    }

    /// The task's input as its tactic's contract sees it (`input_schema`,
    /// issue 30): its [`args`](Task#structfield.args) as an object when it
    /// has any, else its [`task`](Task#structfield.task) value.
    ///
    /// ```
    /// use lllm::Task;
    /// use serde_json::json;
    ///
    /// assert_eq!(Task::new("Is the printer on fire?").input(), json!("Is the printer on fire?"));
    /// let task = Task::new("ignored by the contract").arg("ticket", "Printer on fire");
    /// assert_eq!(task.input(), json!({"ticket": "Printer on fire"}));
    /// ```
    pub fn input(&self) -> Value {
        if self.args.is_empty() {
            self.task.clone()
        } else {
            Value::Object(self.args.clone())
        }
    }

    /// The task of an input, the inverse of [`input`](Task::input): a
    /// string is the task's text; an object is its arguments (each visible
    /// to templates by name) and its task value (its text is its JSON).
    /// Anything else is an [`ArgsError`].
    ///
    /// ```
    /// use lllm::Task;
    /// use serde_json::json;
    ///
    /// let task = Task::from_input(json!({"ticket": "Printer on fire"}))?;
    /// assert_eq!(task.args["ticket"], "Printer on fire");
    /// assert_eq!(task.input(), json!({"ticket": "Printer on fire"}));
    /// assert_eq!(Task::from_input(json!("Hello"))?.text(), "Hello");
    /// assert!(Task::from_input(json!(7)).is_err());
    /// # Ok::<(), lllm::ArgsError>(())
    /// ```
    pub fn from_input(input: Value) -> Result<Task, ArgsError> {
        match input {
            Value::String(text) => Ok(Task::new(text)),
            Value::Object(args) => {
                let mut task = Task::new(Value::Object(args.clone()));
                task.args = args;
                Ok(task)
            }
            other => Err(ArgsError {
                what: "a task's input that is not a string",
                found: crate::config::describe_value(&other).to_string(),
            }),
        }
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

impl From<&String> for Task {
    fn from(text: &String) -> Task {
        Task::new(text.as_str())
    }
}

impl From<Value> for Task {
    fn from(task: Value) -> Task {
        Task::new(task)
    }
}
