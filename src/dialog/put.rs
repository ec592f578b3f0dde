//! The puts (issue 29): `put_text`, `put_image`, `put_parts` and
//! `put_prompt` for the common call (a role and what is said, one short
//! line), and the [`Put`] builder for the rest (a speaker's name, metadata,
//! an image's caption or detail). The message itself is `message`'s; the
//! dialog's bookkeeping (stamping, the top prompt) is `mod.rs`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{ContentPart, Dialog, ImageSource, Message, Result, Role, text_prompt};
use crate::args::{self, ArgsError};
use crate::prompt::{Prompt, Registry};

impl Dialog {
    /// Starts a message from `role` with more than what is said: its
    /// speaker's [`name`](Put::name), [`metadata`](Put::metadata), an
    /// image's [`caption`](Put::caption) or [`detail`](Put::detail). The
    /// builder ends with what is said: [`text`](Put::text),
    /// [`image`](Put::image), [`parts`](Put::parts) or
    /// [`prompt`](Put::prompt).
    ///
    /// ```
    /// use lllm::dialog::{Dialog, Role};
    /// use serde_json::json;
    ///
    /// let mut dialog = Dialog::new("panel", "main");
    /// let said = dialog
    ///     .put(Role::User)
    ///     .name("ann")
    ///     .metadata(json!({"round": 1}))
    ///     .text("Owls hunt at night.")?;
    /// assert_eq!((said.name.as_str(), &said.metadata["round"]), ("ann", &json!(1)));
    ///
    /// let owl = dialog
    ///     .put(Role::User)
    ///     .caption("Which bird is this?")
    ///     .detail("low")
    ///     .image(b"GIF89a...")?;
    /// assert_eq!(owl.content, "Which bird is this?");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put(&mut self, role: Role) -> Put<'_> {
        Put {
            dialog: self,
            role,
            name: None,
            metadata: Map::new(),
            misuse: None,
            caption: None,
            detail: None,
        }
    }

    /// Appends `text` from `role` (the speaker named after the role:
    /// `user`, `system`, …); the next turn is governed by a bare prompt (no
    /// parser, no format, no prompt tools). [`put`](Dialog::put) names
    /// another speaker or adds metadata.
    ///
    /// ```
    /// use lllm::dialog::{Dialog, Role};
    ///
    /// let mut dialog = Dialog::new("assistant", "main");
    /// dialog.put_text(Role::System, "You are concise.");
    /// let said = dialog.put_text(Role::User, "Why do owls hunt at night?");
    /// assert_eq!((said.role, said.name.as_str()), (Role::User, "user"));
    /// assert_eq!(dialog.len(), 2);
    /// ```
    pub fn put_text(&mut self, role: Role, text: impl Into<String>) -> &Message {
        self.put_message(Message::new(role, role.as_str(), text))
    }

    /// Appends a multipart message (text and images, seed 000: content as a
    /// list of parts) from `role`; like `put_text`, the next turn is
    /// governed by a bare prompt. Providers send the parts in their own form.
    ///
    /// ```
    /// use lllm::dialog::{ContentPart, Dialog, Role};
    ///
    /// let mut dialog = Dialog::new("vision", "main");
    /// let owl = ContentPart::image_bytes(b"GIF89a...")?;
    /// let message = dialog.put_parts(Role::User, vec![ContentPart::text("Which bird is this?"), owl]);
    /// assert_eq!(message.content, "Which bird is this?");
    /// assert_eq!(message.parts[1].to_string(), "<image image/gif>");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put_parts(&mut self, role: Role, parts: Vec<ContentPart>) -> &Message {
        self.put_message(Message::with_parts(role, role.as_str(), parts))
    }

    /// Appends an image from `role`: a path (`&Path`, `&PathBuf`, or a
    /// `&str` that is not a URL), bytes (`&[u8]`, `&Vec<u8>`, a byte
    /// string), an `http(s)` or `data:` URL, or an explicit
    /// [`ImageSource`] (base64 text). It is a multipart message made the
    /// way a task's attachments are ([`Attachment`](super::Attachment)), so
    /// every API gets it as its own image part; the media type comes from
    /// the magic bytes (D10), a URL is sent as it is. A caption or OpenAI's
    /// `detail` go through [`put`](Dialog::put).
    ///
    /// An unreadable file or bytes that are not PNG, JPEG, WebP or GIF are
    /// an error, and nothing is appended.
    ///
    /// ```
    /// use lllm::dialog::{Dialog, Role};
    ///
    /// let mut dialog = Dialog::new("vision", "main");
    /// let image = dialog.put_image(Role::User, b"GIF89a...")?;
    /// assert_eq!(image.parts[0].to_string(), "<image image/gif>");
    /// dialog.put_image(Role::User, "https://example.com/owl.png")?; // fetched by the provider
    /// assert!(dialog.put_image(Role::User, "no/such/owl.png").is_err());
    /// assert_eq!(dialog.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put_image<'i>(
        &mut self,
        role: Role,
        image: impl Into<ImageSource<'i>>,
    ) -> Result<&Message> {
        self.put(role).image(image)
    }

    /// Renders `prompt` with `args` (a `json!`, a struct or a map; `()` for
    /// none), appends it from `role` and makes it the top prompt: it governs
    /// the next turn (parser, format, tools, handlers). Arguments that are
    /// not a JSON object are an error ([`ArgsError`]), as is a template
    /// variable they lack; nothing is appended then.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lllm::dialog::{Dialog, Role};
    /// use lllm::prompt::Prompt;
    /// use serde_json::json;
    ///
    /// let draft = Arc::new(Prompt::new("writer/draft", "Write about {{ topic }}.")?);
    /// let mut dialog = Dialog::new("writer", "main");
    /// dialog.put_prompt(Role::User, draft.clone(), json!({"topic": "owls"}))?;
    /// assert_eq!(dialog.tail().unwrap().content, "Write about owls.");
    /// assert!(dialog.put_prompt(Role::User, draft, json!(["owls"])).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put_prompt(
        &mut self,
        role: Role,
        prompt: impl Into<Arc<Prompt>>,
        args: impl Serialize,
    ) -> Result<&Message> {
        self.put(role).prompt(prompt, args)
    }

    /// Renders the prompt registered under `key` with `args`, appends it and
    /// makes it the top prompt: the seeds' `put_prompt("writer/draft", …)`.
    /// An unknown key is an error that names it, with a "did you mean" when a
    /// registered key is close; nothing is appended.
    ///
    /// ```
    /// use lllm::dialog::{Dialog, Role};
    /// use lllm::prompt::{Prompt, Registry};
    /// use serde_json::json;
    ///
    /// let mut registry = Registry::empty();
    /// registry.insert(Prompt::new("writer/draft", "Write about {{ topic }}.")?);
    /// let mut dialog = Dialog::new("writer", "main");
    /// dialog.put_prompt_key(Role::User, "writer/draft", &registry, json!({"topic": "owls"}))?;
    /// assert_eq!(dialog.tail().unwrap().content, "Write about owls.");
    ///
    /// let error = dialog
    ///     .put_prompt_key(Role::User, "writer/drfat", &registry, json!({"topic": "owls"}))
    ///     .unwrap_err();
    /// assert_eq!(error.to_string(), "unknown prompt `writer/drfat`; did you mean `writer/draft`?");
    /// assert_eq!(dialog.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put_prompt_key(
        &mut self,
        role: Role,
        key: &str,
        registry: &Registry,
        args: impl Serialize,
    ) -> Result<&Message> {
        let prompt = registry.get(key)?.clone();
        self.put_prompt(role, prompt, args)
    }

    /// `put_prompt` with `parts` (a task's attachments) after the rendered
    /// text, in one multipart message; without parts, `put_prompt`.
    pub(crate) fn put_prompt_with(
        &mut self,
        prompt: Arc<Prompt>,
        args: &Map<String, Value>,
        role: Role,
        name: &str,
        parts: Vec<ContentPart>,
    ) -> Result<&Message> {
        let content = prompt.render_map(args)?;
        let message = if parts.is_empty() {
            Message::new(role, name, content)
        } else {
            let parts = std::iter::once(ContentPart::text(content))
                .chain(parts)
                .collect();
            Message::with_parts(role, name, parts)
        };
        self.top_prompt = Some(prompt);
        Ok(self.append(message))
    }

    /// The engine's `put_prompt`: arguments already a map (no copy), a
    /// speaker's name and metadata (a tool result's `tool_call_id`).
    pub(crate) fn put_prompt_as(
        &mut self,
        prompt: Arc<Prompt>,
        args: &Map<String, Value>,
        role: Role,
        name: &str,
        metadata: Map<String, Value>,
    ) -> Result<&Message> {
        let mut message = Message::new(role, name, prompt.render_map(args)?);
        message.metadata = metadata;
        self.top_prompt = Some(prompt);
        Ok(self.append(message))
    }

    /// The engine's `put_text`: a speaker's name and metadata.
    pub(crate) fn put_text_as(
        &mut self,
        text: &str,
        role: Role,
        name: &str,
        metadata: Map<String, Value>,
    ) -> &Message {
        let mut message = Message::new(role, name, text);
        message.metadata = metadata;
        self.put_message(message)
    }

    /// Appends `message` as a bare-prompt turn (`put_text`, `put_parts`).
    fn put_message(&mut self, message: Message) -> &Message {
        self.top_prompt = Some(text_prompt());
        self.append(message)
    }
}

/// A message being put into a dialog: [`Dialog::put`]. Set what is not the
/// default (the speaker's name is the role's, no metadata), then end with
/// what is said; metadata that is not a JSON object is an error then
/// ([`ArgsError`]), and nothing is appended.
///
/// ```
/// use std::sync::Arc;
/// use lllm::dialog::{Dialog, Role};
/// use lllm::prompt::Prompt;
/// use serde_json::json;
///
/// let mut dialog = Dialog::new("panel", "main");
/// let note = Arc::new(Prompt::new("panel/note", "Note from {{ who }}.")?);
/// let said = dialog
///     .put(Role::System)
///     .name("moderator")
///     .prompt(note, json!({"who": "the chair"}))?;
/// assert_eq!((said.name.as_str(), said.content.as_str()), ("moderator", "Note from the chair."));
/// assert_eq!(dialog.top_prompt.as_ref().unwrap().path, "panel/note");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "nothing is appended until `text`, `image`, `parts` or `prompt`"]
pub struct Put<'a> {
    dialog: &'a mut Dialog,
    role: Role,
    name: Option<String>,
    metadata: Map<String, Value>,
    misuse: Option<ArgsError>,
    caption: Option<String>,
    detail: Option<String>,
}

impl<'a> Put<'a> {
    /// The speaker's name (default: the role's, `user`, `system`, …): a
    /// second speaker, a tool's name.
    pub fn name(mut self, name: impl Into<String>) -> Put<'a> {
        self.name = Some(name.into());
        self
    }

    /// Metadata (a `json!`, a struct or a map) kept on the message, merged
    /// over what was set before; never sent to a model. Not a JSON object:
    /// an error when the message is put.
    pub fn metadata(mut self, metadata: impl Serialize) -> Put<'a> {
        match args::object(metadata, "metadata") {
            Ok(map) => self.metadata.extend(map),
            Err(error) => {
                self.misuse.get_or_insert(error);
            }
        }
        self
    }

    /// For [`image`](Put::image): text sent after the image in the same
    /// message (the order Anthropic recommends).
    pub fn caption(mut self, caption: impl Into<String>) -> Put<'a> {
        self.caption = Some(caption.into());
        self
    }

    /// For [`image`](Put::image): OpenAI's `detail` (`low`, `high`,
    /// `auto`), sent to the OpenAI APIs only.
    pub fn detail(mut self, detail: impl Into<String>) -> Put<'a> {
        self.detail = Some(detail.into());
        self
    }

    /// Appends `text`; the next turn is governed by a bare prompt.
    pub fn text(self, text: impl Into<String>) -> Result<&'a Message> {
        let (dialog, message) = self.message(|role, name| Message::new(role, name, text))?;
        Ok(dialog.put_message(message))
    }

    /// Appends a message of `parts`; the next turn is governed by a bare
    /// prompt.
    pub fn parts(self, parts: Vec<ContentPart>) -> Result<&'a Message> {
        let (dialog, message) =
            self.message(|role, name| Message::with_parts(role, name, parts))?;
        Ok(dialog.put_message(message))
    }

    /// Appends an image (see [`Dialog::put_image`] for what it takes), with
    /// the caption after it when one was set; the next turn is governed by a
    /// bare prompt.
    pub fn image<'i>(self, image: impl Into<ImageSource<'i>>) -> Result<&'a Message> {
        let mut image = ContentPart::image(image.into())?;
        if let (Some(detail), ContentPart::ImageUrl { image_url }) = (&self.detail, &mut image) {
            image_url.detail = Some(detail.clone());
        }
        let caption = self.caption.clone();
        // Image first, then its caption: the order Anthropic recommends.
        let parts = [image]
            .into_iter()
            .chain(caption.map(ContentPart::text))
            .collect();
        self.parts(parts)
    }

    /// Renders `prompt` with `args` (a `json!`, a struct or a map; `()` for
    /// none) and appends it; the prompt governs the next turn.
    pub fn prompt(
        self,
        prompt: impl Into<Arc<Prompt>>,
        args: impl Serialize,
    ) -> Result<&'a Message> {
        let prompt = prompt.into();
        let args = args::object(args, "prompt arguments")?;
        let content = prompt.render_map(&args)?;
        let (dialog, message) = self.message(|role, name| Message::new(role, name, content))?;
        dialog.top_prompt = Some(prompt);
        Ok(dialog.append(message))
    }

    /// The message `make` builds with this put's role, name and metadata,
    /// and the dialog to append it to; the metadata's misuse, if any.
    fn message(
        self,
        make: impl FnOnce(Role, String) -> Message,
    ) -> Result<(&'a mut Dialog, Message)> {
        if let Some(misuse) = self.misuse {
            return Err(misuse.into());
        }
        let name = self.name.unwrap_or_else(|| self.role.as_str().to_string());
        let mut message = make(self.role, name);
        message.metadata = self.metadata;
        Ok((self.dialog, message))
    }
}

impl<'a> From<&'a Path> for ImageSource<'a> {
    fn from(path: &'a Path) -> ImageSource<'a> {
        ImageSource::Path(path)
    }
}

impl<'a> From<&'a PathBuf> for ImageSource<'a> {
    fn from(path: &'a PathBuf) -> ImageSource<'a> {
        ImageSource::Path(path)
    }
}

/// An `http://`, `https://` or `data:` URL is a URL, anything else a path.
impl<'a> From<&'a str> for ImageSource<'a> {
    fn from(text: &'a str) -> ImageSource<'a> {
        if ["http://", "https://", "data:"]
            .iter()
            .any(|scheme| text.starts_with(scheme))
        {
            ImageSource::Url(text)
        } else {
            ImageSource::Path(Path::new(text))
        }
    }
}

/// As `&str`: a URL or a path.
impl<'a> From<&'a String> for ImageSource<'a> {
    fn from(text: &'a String) -> ImageSource<'a> {
        ImageSource::from(text.as_str())
    }
}

impl<'a> From<&'a [u8]> for ImageSource<'a> {
    fn from(bytes: &'a [u8]) -> ImageSource<'a> {
        ImageSource::Bytes(bytes)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for ImageSource<'a> {
    fn from(bytes: &'a [u8; N]) -> ImageSource<'a> {
        ImageSource::Bytes(bytes)
    }
}

impl<'a> From<&'a Vec<u8>> for ImageSource<'a> {
    fn from(bytes: &'a Vec<u8>) -> ImageSource<'a> {
        ImageSource::Bytes(bytes)
    }
}
