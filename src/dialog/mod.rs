//! Dialogs: append-only message sequences owned by one agent, forked into a tree.
//!
//! `message` holds what one turn says, `cost` what it cost, `tree` where a dialog
//! sits among its forks; this file holds the `Dialog` itself and its puts.

mod attachment;
mod cost;
pub mod import;
mod message;
mod message_json;
mod put;
mod scrub;
mod shared_prefix;
mod tree;

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::prompt::{Prompt, Registry};

/// The deepest indentation of [`Dialog::tree_overview`]: deeper forks are
/// listed at this depth (a real tree is a few levels deep; a chain of
/// thousands indented in full would grow with the square of its length).
pub const TREE_INDENT: usize = 32;

/// The largest image file `put_image` reads.
const IMAGE_CAP: u64 = 20 << 20;

pub use attachment::{Attachment, AttachmentScope, file_element};
pub use cost::{InvokeCost, MAX_CALL_TOKENS};
pub(crate) use cost::{clamp_details, clamp_tokens, token_count, total_count};
pub use message::{
    ApiType, ContentPart, FunctionCall, ImageRef, ImageUrl, Message, Modality, Role, TokenLogprob,
    TopLogprob, sanitize_name,
};
pub use put::Put;
pub use shared_prefix::{PrefixPlan, expand_shared_prefixes, share_prefixes};
pub use tree::{DialogTreeNode, new_dialog_id};

/// What can go wrong putting a message into a dialog.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The prompt did not render, or its key is not in the registry.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::Error),
    /// Prompt arguments or metadata that are not a JSON object.
    #[error(transparent)]
    Args(#[from] crate::args::ArgsError),
    /// An image file could not be read (missing, not a regular file, too big).
    #[error("cannot read image `{path}`: {source}")]
    ImageRead {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The bytes are not an image a provider takes.
    #[error("image {origin} is not PNG, JPEG, WebP or GIF (starts with {header:02x?})")]
    ImageFormat {
        /// Where the bytes came from (`` `path` ``, `string`, `bytes`).
        origin: String,
        /// Their first bytes.
        header: Vec<u8>,
    },
    /// An attachment that cannot be sent (not an image or UTF-8 text, too big).
    #[error("attachment {origin}: {message}")]
    Attachment {
        /// Where it came from (`` `path` ``, `data: URL`, …).
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// Base64 text that does not decode.
    #[error("image {origin} is not valid base64: {message}")]
    ImageBase64 {
        /// Where the text came from.
        origin: String,
        /// The decoder's complaint.
        message: String,
    },
}

/// A dialog operation's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where an image comes from (seed: `put_image` takes a path, base64 or
/// bytes). `put_image` takes one of these or anything that converts: a
/// `&Path` or `&PathBuf`, bytes, or a `&str` (an `http(s)` or `data:` URL,
/// else a path).
#[derive(Debug, Clone, Copy)]
pub enum ImageSource<'a> {
    /// A file, read when the image is put (a regular file of at most 20 MiB).
    Path(&'a Path),
    /// Base64 text of the image's bytes.
    Base64(&'a str),
    /// The image's bytes.
    Bytes(&'a [u8]),
    /// An `http(s)` URL the provider fetches, or a base64 `data:` URL
    /// (whose media type is taken from the bytes, not the URL).
    Url(&'a str),
}

/// An append-only message sequence owned by a single agent (seed `Dialog`).
///
/// `top_prompt` is the calling convention of the next turn: `put_prompt` sets it
/// to the prompt it rendered, `put_text`, `put_parts` and `put_image` to a bare
/// prompt (no parser, no tools).
///
/// The seeds' walkthrough: a system prompt, a user turn, a fork that keeps
/// the first message and the last one, and the tree they make. An agent
/// normally does this through `open`, `receive` and `fork`; the dialog is
/// the record underneath.
///
/// ```
/// use std::sync::Arc;
/// use lllm::dialog::{Dialog, Role};
/// use lllm::prompt::Prompt;
///
/// let system = Arc::new(Prompt::new("assistant/system", "You are concise.")?);
/// let mut dialog = Dialog::new("assistant", "demo");
/// dialog.put_prompt(Role::System, system, ())?;
/// dialog.put_text(Role::User, "Explain the native dialog model.");
///
/// let child = dialog.fork(1, 1); // first 1 + last 1 message
/// assert_eq!(child.tree_node.parent_id.as_deref(), Some(dialog.dialog_id()));
/// assert_eq!(dialog.tree_node.children_ids, [child.dialog_id()]);
/// assert_eq!(child.len(), 2);
/// assert_eq!(child.top_prompt.as_ref().unwrap().path, "__text"); // put_text's bare prompt
///
/// println!("{}", dialog.tree_overview(&[&dialog, &child]));
/// assert!(dialog.overview(40).starts_with("[0. system (system)]: You are concise."));
///
/// // Written as JSON and read back: the same messages, ids and lineage.
/// let back: Dialog = serde_json::from_str(&serde_json::to_string(&child)?)?;
/// assert_eq!(back.to_record(), child.to_record());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Dialog {
    /// A label shared by the dialogs of one session (and its forks).
    pub session_name: String,
    /// The agent that owns the dialog; its system prompt opens it.
    pub owner: String,
    /// The prompt that governs the next turn (parser, format, tools, handler).
    pub top_prompt: Option<Arc<Prompt>>,
    /// Where the dialog sits among its forks.
    pub tree_node: DialogTreeNode,
    /// Shared, not copied, by forks: a message never changes once appended.
    messages: Vec<Arc<Message>>,
}

/// The JSON form of a dialog: messages, tree node and the key of the top prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DialogRecord {
    /// The messages after the first `inherited` ones.
    pub messages: Vec<Arc<Message>>,
    /// The dialog's session name.
    pub session_name: String,
    /// The agent that owns the dialog.
    pub owner: String,
    /// Where the dialog sits among its forks.
    pub tree_node: DialogTreeNode,
    /// The top prompt's registry key (`__text` after `put_text`).
    pub top_prompt_path: Option<String>,
    /// In a session record: the dialog starts with this many messages of its
    /// parent dialog, which are not repeated here (a fork shares its parent's
    /// history; writing it out again made records quadratic in tool rounds).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inherited: usize,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

impl Dialog {
    /// An empty root dialog of agent `owner`.
    pub fn new(owner: impl Into<String>, session_name: impl Into<String>) -> Dialog {
        let owner = owner.into();
        Dialog {
            session_name: session_name.into(),
            tree_node: DialogTreeNode::root(owner.clone()),
            owner,
            top_prompt: None,
            messages: Vec::new(),
        }
    }

    /// The dialog's unique id (also in its tree node).
    pub fn dialog_id(&self) -> &str {
        &self.tree_node.dialog_id
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> &[Arc<Message>] {
        &self.messages
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The first message, usually the system prompt.
    pub fn head(&self) -> Option<&Message> {
        self.messages.first().map(|message| &**message)
    }

    /// The last message, usually the newest reply.
    pub fn tail(&self) -> Option<&Message> {
        self.messages.last().map(|message| &**message)
    }

    /// Appends, stamping `dialog_id` into the message's metadata.
    pub fn append(&mut self, message: Message) -> &Arc<Message> {
        self.messages
            .push(Dialog::stamp(message, &self.tree_node.dialog_id));
        self.messages.last().expect("just pushed")
    }

    /// `message` as `append` stamps it for dialog `dialog_id`, ready to be
    /// shared by more than one dialog (`append_shared`).
    pub fn stamp(mut message: Message, dialog_id: &str) -> Arc<Message> {
        message
            .metadata
            .insert("dialog_id".into(), Value::String(dialog_id.to_string()));
        Arc::new(message)
    }

    /// Appends a message as it is, shared with the other dialogs that hold it
    /// (the agent loop's accepted reply: its working fork and the call's
    /// dialog hold one message, stamped with the call's dialog).
    pub fn append_shared(&mut self, message: Arc<Message>) -> &Arc<Message> {
        self.messages.push(message);
        self.messages.last().expect("just pushed")
    }

    /// A child dialog, as the seeds define `fork(last_n, first_k)`: with
    /// `last_n == 0` (or `last_n >= len`) a full copy, otherwise the first
    /// `first_k` messages (clamped so they do not overlap the tail) plus the last
    /// `last_n`. The child inherits session name, owner and top prompt; this
    /// dialog records the child's id.
    ///
    /// ```
    /// use lllm::dialog::{Dialog, Role};
    ///
    /// let mut dialog = Dialog::new("coder", "coder_main");
    /// for text in ["system", "one", "two", "three", "four"] {
    ///     dialog.put_text(Role::User, text);
    /// }
    /// let full = dialog.fork(0, 1); // a full copy
    /// assert_eq!(full.len(), 5);
    /// let short = dialog.fork(2, 1); // the first message and the last two
    /// let texts: Vec<&str> = short.messages().iter().map(|message| message.content.as_str()).collect();
    /// assert_eq!(texts, ["system", "three", "four"]);
    /// assert_eq!(short.tree_node.parent_id.as_deref(), Some(dialog.dialog_id()));
    /// ```
    #[must_use = "the child dialog: this one only records its id"]
    pub fn fork(&mut self, last_n: usize, first_k: usize) -> Dialog {
        let len = self.messages.len();
        let last_n = if last_n >= len { 0 } else { last_n };
        let (messages, first_k) = if last_n > 0 {
            let tail_start = len - last_n;
            let first_k = first_k.min(tail_start);
            let mut kept = self.messages[..first_k].to_vec();
            kept.extend_from_slice(&self.messages[tail_start..]);
            (kept, first_k)
        } else {
            (self.messages.clone(), first_k)
        };
        let tree_node = self.tree_node.add_child(messages.len(), last_n, first_k);
        Dialog {
            session_name: self.session_name.clone(),
            owner: self.owner.clone(),
            top_prompt: self.top_prompt.clone(),
            tree_node,
            messages,
        }
    }

    /// Replaces the messages of a dialog just forked for pruning (context
    /// managers). The canonical dialogs of a run are never rewritten.
    pub fn replace_messages(&mut self, messages: Vec<Arc<Message>>) {
        self.messages = messages;
    }

    /// The summed cost of every message (rates zeroed).
    pub fn cost(&self) -> InvokeCost {
        self.messages.iter().map(|message| message.cost()).sum()
    }

    /// One line per message: `[i. name (role)]: preview`, cut at `max_length` characters.
    pub fn overview(&self, max_length: usize) -> String {
        let mut lines = Vec::with_capacity(self.messages.len());
        for (index, message) in self.messages.iter().enumerate() {
            let preview = match message.modality {
                Modality::Image => format!("<image {}>", message.mime_type().unwrap_or("?")),
                Modality::Text if message.is_multipart() => {
                    let parts: Vec<String> =
                        message.parts.iter().map(|part| part.to_string()).collect();
                    preview(&parts.join(" "), max_length)
                }
                Modality::Text => preview(&message.content, max_length),
            };
            let calls = if message.function_calls.is_empty() {
                String::new()
            } else {
                let names: Vec<&str> = message
                    .function_calls
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                format!(" [calls: {}]", names.join(", "))
            };
            lines.push(format!(
                "[{index}. {} ({})]: {preview}{calls}",
                message.name, message.role
            ));
        }
        lines.join("\n\n")
    }

    /// The fork tree under this dialog, one line per dialog; children are looked
    /// up by id among `dialogs` (ids not found there are skipped). Each
    /// dialog is listed once, under the first parent that names it, and
    /// indented at most [`TREE_INDENT`] levels: children lists read from a
    /// file may go round in a circle or be thousands deep.
    pub fn tree_overview(&self, dialogs: &[&Dialog]) -> String {
        let mut by_id: std::collections::HashMap<&str, &Dialog> =
            std::collections::HashMap::with_capacity(dialogs.len());
        for dialog in dialogs {
            by_id.entry(dialog.dialog_id()).or_insert(dialog);
        }
        let mut listed = std::collections::HashSet::new();
        let mut lines = Vec::new();
        // Depth first, children in order: the next to list is on top.
        let mut pending = vec![(self, 0usize)];
        while let Some((dialog, indent)) = pending.pop() {
            if !listed.insert(dialog.dialog_id()) {
                continue;
            }
            lines.push(dialog.tree_line(indent));
            for child_id in dialog.tree_node.children_ids.iter().rev() {
                if let Some(child) = by_id.get(child_id.as_str()) {
                    pending.push((child, indent + 1));
                }
            }
        }
        lines.join("\n")
    }

    fn tree_line(&self, indent: usize) -> String {
        let node = &self.tree_node;
        let branch = if indent > 0 { "└─ " } else { "" };
        // A root was split from nothing: only forks say where they split.
        let split = node
            .split_point
            .map_or(String::new(), |split| format!(" split@{split}"));
        let id_prefix: String = node.dialog_id.chars().take(8).collect();
        let mut line = format!(
            "{}{branch}[{id_prefix}] owner={} msgs={}{split}",
            "  ".repeat(indent.min(TREE_INDENT)),
            self.owner,
            self.messages.len(),
        );
        if let (Some(last_n), Some(first_k)) = (node.last_n, node.first_k)
            && last_n > 0
        {
            line.push_str(&format!(" (last_n={last_n}, first_k={first_k})"));
        }
        line
    }

    /// The dialog's JSON form (what `Serialize` writes).
    pub fn to_record(&self) -> DialogRecord {
        DialogRecord {
            messages: self.messages.clone(),
            session_name: self.session_name.clone(),
            owner: self.owner.clone(),
            tree_node: self.tree_node.clone(),
            top_prompt_path: self.top_prompt.as_ref().map(|prompt| prompt.path.clone()),
            inherited: 0,
        }
    }

    /// `to_record` without copying the messages.
    pub fn into_record(self) -> DialogRecord {
        DialogRecord {
            top_prompt_path: self.top_prompt.as_ref().map(|prompt| prompt.path.clone()),
            messages: self.messages,
            session_name: self.session_name,
            owner: self.owner,
            tree_node: self.tree_node,
            inherited: 0,
        }
    }

    /// Rebuilds a dialog from its record form. The top prompt is looked up in
    /// `registry`; when there is no registry or the key is not in it, a
    /// stand-in keeps the key (a bare prompt under that path: no parser,
    /// format or tools) so that writing the dialog again loses nothing, and
    /// [`Dialog::restore_top_prompt`] can put the real one back. The bare
    /// `__text` prompt of a `put_text` turn is recreated as it was.
    ///
    /// The record must hold all its messages: one from a session record that
    /// shares its parent's first messages (`inherited > 0`) keeps only the rest;
    /// run [`expand_shared_prefixes`] over the record's dialogs first.
    pub fn from_record(record: DialogRecord, registry: Option<&Registry>) -> Dialog {
        let top_prompt = record.top_prompt_path.as_deref().map(|path| {
            if path == TEXT_PROMPT {
                return text_prompt();
            }
            match registry.and_then(|registry| registry.get(path).ok()) {
                Some(prompt) => Arc::new(prompt.clone()),
                None => Arc::new(Prompt::bare(path)),
            }
        });
        Dialog {
            session_name: record.session_name,
            owner: record.owner,
            top_prompt,
            tree_node: record.tree_node,
            messages: record.messages,
        }
    }
}

impl Dialog {
    /// Replaces the top prompt with the one `registry` holds under its key:
    /// what a dialog read from JSON needs before it governs another turn
    /// (its JSON carries the key, not the template). No top prompt, or the
    /// bare `__text` one, is left as it is; an unknown key is an error with a
    /// "did you mean" and changes nothing.
    pub fn restore_top_prompt(&mut self, registry: &Registry) -> Result<()> {
        let Some(path) = self.top_prompt.as_ref().map(|prompt| prompt.path.clone()) else {
            return Ok(());
        };
        if path != TEXT_PROMPT {
            self.top_prompt = Some(Arc::new(registry.get(&path)?.clone()));
        }
        Ok(())
    }
}

/// A dialog reads back from the JSON it is written as (its [`DialogRecord`]
/// form): messages, ids, parent and children, split point, session name,
/// owner and the top prompt's key (see [`Dialog::from_record`] for what
/// stands in for the prompt itself). A record that shares messages with its
/// parent (`inherited` > 0, as session records write forks) is refused: it
/// does not hold the whole dialog.
impl<'de> Deserialize<'de> for Dialog {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Dialog, D::Error> {
        let record = DialogRecord::deserialize(deserializer)?;
        if record.inherited != 0 {
            return Err(serde::de::Error::custom(format!(
                "dialog `{}` holds only the messages after the first {} of its parent dialog `{}`; \
                 read it with the session record's other dialogs (`expand_shared_prefixes`)",
                record.tree_node.dialog_id,
                record.inherited,
                record.tree_node.parent_id.as_deref().unwrap_or("?"),
            )));
        }
        Ok(Dialog::from_record(record, None))
    }
}

impl Serialize for Dialog {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        self.to_record().serialize(serializer)
    }
}

/// The bytes of an image and where they came from (for messages): a path is
/// read when it names a regular file of at most 20 MiB.
fn read_image(image: ImageSource<'_>) -> Result<(String, Vec<u8>)> {
    Ok(match image {
        ImageSource::Path(path) => {
            // A regular file of at most the size the APIs take (OpenAI's
            // 20 MB per image): a pipe or a device never blocks a run.
            let (bytes, size) =
                crate::file::read_regular(path, IMAGE_CAP + 1).map_err(|source| {
                    Error::ImageRead {
                        path: path.display().to_string(),
                        source,
                    }
                })?;
            if size > IMAGE_CAP || bytes.len() as u64 > IMAGE_CAP {
                return Err(Error::ImageRead {
                    path: path.display().to_string(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{size} bytes, more than the 20 MiB an image may have"),
                    ),
                });
            }
            (format!("`{}`", path.display()), bytes)
        }
        // Held to the files' cap, counted before decoding; wrapped base64 reads.
        ImageSource::Base64(text) => (
            "string".to_string(),
            attachment::decode_base64(text, "string")?,
        ),
        ImageSource::Bytes(bytes) => ("bytes".to_string(), bytes.to_vec()),
        ImageSource::Url(url) => match Attachment::parse(url)? {
            Attachment::Bytes { bytes, .. } => ("data: URL".to_string(), bytes),
            _ => {
                return Err(Error::Attachment {
                    origin: format!("`{url}`"),
                    message: "an image URL is `http(s)://…` or a base64 `data:` URL".into(),
                });
            }
        },
    })
}

/// The key of the bare prompt that governs the turn after `put_text`.
const TEXT_PROMPT: &str = "__text";

/// That bare prompt: one for the whole process, shared by every dialog.
fn text_prompt() -> Arc<Prompt> {
    static TEXT: std::sync::OnceLock<Arc<Prompt>> = std::sync::OnceLock::new();
    Arc::clone(TEXT.get_or_init(|| Arc::new(Prompt::bare(TEXT_PROMPT))))
}

fn preview(text: &str, max_length: usize) -> String {
    match text.char_indices().nth(max_length) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

/// The media type of image bytes by their magic number.
pub fn image_mime_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF8") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
