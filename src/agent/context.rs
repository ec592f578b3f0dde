//! Context managers: applied to the working copy of a dialog before each
//! model call, so a request fits the model's window. The canonical dialog is
//! never rewritten; a pruned copy is a new fork in the tree (seed 000, D13).
//!
//! Managers are registered by name (`default`, `last_n`, or your own) and
//! picked in YAML with `context_manager: {type: NAME, …}`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::tokens::{self, TokenCounter};
use crate::dialog::{ContentPart, Dialog, Message, Role};
use crate::provider::models::ModelTable;

/// Kept clear of the window's edge on every call.
pub const SAFETY_BUFFER: u64 = 5_000;
/// The marker put before the newest text of a message cut to fit the window.
pub const TRUNCATION_PREFIX: &str = "[...earlier content truncated...]";

/// Fits a dialog into the model's window before each request. Implement it
/// for your own policy, register a [`Factory`] for it with
/// [`Registry::context_manager`](crate::Registry::context_manager), and name
/// it in YAML (`context_manager: {type: NAME}`).
pub trait ContextManager: Send + Sync {
    /// The manager's name, as YAML's `type` names it.
    fn name(&self) -> &str;
    /// `None`: send `dialog` as it is. `Some(child)`: send this fork instead.
    fn apply(&self, dialog: &mut Dialog) -> Option<Dialog>;
}

/// What a factory gets from the agent's config.
pub struct ContextSettings {
    /// The manager asked for: `context_manager.type`.
    pub kind: String,
    /// The agent's provider (`openai` of `openai/gpt-4o`).
    pub model_provider: String,
    /// The agent's model on that provider (`gpt-4o`).
    pub model: String,
    /// The window in tokens (`context_manager.max_tokens`); `None` means the
    /// model table's window, if it knows one.
    pub max_tokens: Option<u64>,
    /// The rest of the `context_manager` mapping (`n` of `last_n`, or your
    /// manager's own keys).
    pub options: Map<String, Value>,
}

/// Makes a context manager from an agent's settings, or says in one line
/// what is wrong with them (the caller adds the manager's name).
pub type Factory =
    Arc<dyn Fn(&ContextSettings) -> Result<Arc<dyn ContextManager>, String> + Send + Sync>;

/// Context managers by name (a program adds its own through
/// [`Registry::context_manager`](crate::Registry::context_manager)).
#[derive(Clone)]
pub struct ContextManagers {
    factories: BTreeMap<String, Factory>,
}

impl ContextManagers {
    /// The built-in managers: `default` ([`DefaultContextManager`]) and
    /// `last_n` ([`LastN`], from `n`).
    pub fn with_builtins() -> ContextManagers {
        let mut managers = ContextManagers {
            factories: BTreeMap::new(),
        };
        managers.register(
            "default",
            Arc::new(|settings| Ok(Arc::new(DefaultContextManager::new(settings)))),
        );
        managers.register(
            "last_n",
            Arc::new(|settings| {
                let n = settings
                    .options
                    .get("n")
                    .and_then(Value::as_u64)
                    .ok_or("`last_n` needs `n: NUMBER`")?;
                Ok(Arc::new(LastN { n: n as usize }))
            }),
        );
        managers
    }

    /// Registers `factory` under `name`, replacing one of that name.
    pub fn register(&mut self, name: &str, factory: Factory) {
        self.factories.insert(name.to_string(), factory);
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, &Factory)> {
        self.factories
            .iter()
            .map(|(name, factory)| (name.as_str(), factory))
    }

    /// The manager `settings.kind` made for `settings`; an unknown name or a
    /// factory's error is one line naming the manager (with the known names).
    pub fn build(&self, settings: &ContextSettings) -> Result<Arc<dyn ContextManager>, String> {
        let factory = self.factories.get(&settings.kind).ok_or_else(|| {
            let names: Vec<&str> = self.factories.keys().map(String::as_str).collect();
            format!(
                "unknown context manager `{}`{} (known: {})",
                settings.kind,
                crate::suggest::hint(&settings.kind, names.iter().copied()),
                names.join(", ")
            )
        })?;
        factory(settings)
            .map_err(|message| format!("context manager `{}`: {message}", settings.kind))
    }
}

/// Groups of message indices that must stay together: a tool call with its results.
fn groups(messages: &[Arc<Message>]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let joins_previous = message.role == Role::Tool
            && groups.last().is_some_and(|group| {
                let first = &messages[group[0]];
                first.is_function_call() || first.role == Role::Tool
            });
        match groups.last_mut() {
            Some(group) if joins_previous => group.push(index),
            _ => groups.push(vec![index]),
        }
    }
    groups
}

/// Truncates to the model's window: keeps the system message and the newest
/// user message, then the newest messages that fit; the border message keeps
/// its newest text behind a marker; a tool call and its results go together.
///
/// **The budget.** The window is `context_manager.max_tokens`, else the
/// model's input limit from the bundled model table; an unknown model without
/// `max_tokens` is not truncated at all (one warning when the agent is built).
/// The budget is the window minus [`SAFETY_BUFFER`] (5,000 tokens), but never
/// less than three quarters of the window: from 20,000 tokens down the budget
/// is `window × 3/4`, rounded down (a 16,000-token window keeps 12,000; a 4,000-token window
/// keeps 3,000), so a small window is not left with nothing. Tokens are counted
/// with the model's tokenizer when known (o200k, cl100k), else estimated;
/// each message adds 4 tokens of framing and an image 765.
///
/// **What a tiny window keeps**, in this order:
/// 1. the system message, whole, even when it alone exceeds the budget;
/// 2. the newest user message: whole if it fits in what is left, else its
///    newest text behind `[...earlier content truncated...]`; when not even
///    the marker fits (a budget of a few dozen tokens), it is sent whole;
/// 3. then, newest first, whole messages (a tool call with its results as
///    one group) while they fit; the first plain message that does not fit is
///    cut to its newest text if a few tokens are left, and everything older
///    is dropped.
///
/// So the request can still exceed a window smaller than the system message
/// plus the newest user message: lllm never drops either (D13), and the
/// provider's context-length error then fails the call (a permanent error,
/// not retried).
pub struct DefaultContextManager {
    budget: Option<u64>,
    counter: Arc<dyn TokenCounter>,
}

impl DefaultContextManager {
    /// The manager for the agent's model: its window from `settings` or the
    /// bundled model table (warning once when neither knows it), its tokenizer
    /// from the model table.
    pub fn new(settings: &ContextSettings) -> DefaultContextManager {
        let window = settings.max_tokens.or_else(|| {
            ModelTable::bundled()
                .lookup(&settings.model_provider, &settings.model)
                .and_then(|info| info.context_window)
        });
        if window.is_none() {
            crate::report::warn(&format!(
                "no context window known for `{}/{}`; its dialogs are not truncated (set `context_manager.max_tokens`)",
                settings.model_provider, settings.model
            ));
        }
        DefaultContextManager {
            // Small windows keep at least three quarters of themselves.
            budget: window.map(|window| window.saturating_sub(SAFETY_BUFFER).max(window * 3 / 4)),
            counter: tokens::counter_for(&settings.model_provider, &settings.model),
        }
    }

    fn truncate(&self, message: &Message, budget: usize) -> Option<Message> {
        let room = budget
            .checked_sub(tokens::MESSAGE_OVERHEAD + self.counter.count(TRUNCATION_PREFIX) + 8)?;
        let chars: Vec<char> = message.content.chars().collect();
        let mut keep = (room * 3).min(chars.len());
        while keep > 0 {
            let tail: String = chars[chars.len() - keep..].iter().collect();
            if self.counter.count(&tail) <= room {
                let mut cut = message.clone();
                cut.content = format!("{TRUNCATION_PREFIX}{tail}");
                if cut.is_multipart() {
                    // What is sent: the cut text, then the images it had.
                    cut.parts.retain(|part| part.as_text().is_none());
                    cut.parts.insert(0, ContentPart::text(cut.content.clone()));
                }
                return Some(cut);
            }
            keep = keep * 9 / 10;
        }
        None
    }
}

impl ContextManager for DefaultContextManager {
    fn name(&self) -> &str {
        "default"
    }

    fn apply(&self, dialog: &mut Dialog) -> Option<Dialog> {
        let budget = self.budget? as usize;
        let messages = dialog.messages();
        // Fast path: most dialogs are far below the window, and BPE over
        // every message on every request would be paid per byte (issue 17).
        // A token is at least one byte, so each message's bytes bound its
        // tokens from above; only a dialog that may not fit is counted.
        if messages
            .iter()
            .map(|message| tokens::message_bytes(message))
            .sum::<usize>()
            <= budget
        {
            return None;
        }
        let sizes: Vec<usize> = messages
            .iter()
            .map(|message| tokens::message_tokens(self.counter.as_ref(), message))
            .collect();
        if sizes.iter().sum::<usize>() <= budget {
            return None;
        }
        let system = (messages.first().map(|m| m.role) == Some(Role::System)).then_some(0);
        let newest_user = messages
            .iter()
            .rposition(|message| message.role == Role::User);
        let mut keep: Vec<Option<Arc<Message>>> = vec![None; messages.len()];
        let mut used = 0;
        if let Some(index) = system {
            keep[index] = Some(messages[index].clone());
            used += sizes[index];
        }
        if let Some(index) = newest_user.filter(|index| Some(*index) != system) {
            let room = budget.saturating_sub(used);
            keep[index] = if sizes[index] <= room {
                used += sizes[index];
                Some(messages[index].clone())
            } else {
                let cut = self
                    .truncate(&messages[index], room)
                    .map_or_else(|| messages[index].clone(), Arc::new);
                used = budget;
                Some(cut)
            };
        }
        for group in groups(messages).into_iter().rev() {
            if group.iter().any(|index| keep[*index].is_some()) {
                continue;
            }
            let size: usize = group.iter().map(|index| sizes[*index]).sum();
            if used + size <= budget {
                used += size;
                for index in group {
                    keep[index] = Some(messages[index].clone());
                }
                continue;
            }
            // The border: a plain message keeps its newest text; a tool group goes whole.
            if let [index] = group[..]
                && messages[index].function_calls.is_empty()
                && messages[index].role != Role::Tool
            {
                keep[index] = self.truncate(&messages[index], budget - used).map(Arc::new);
            }
            break;
        }
        let mut child = dialog.fork(0, 1);
        child.replace_messages(keep.into_iter().flatten().collect());
        Some(child)
    }
}

/// Keeps the system message and the last `n` messages (never splitting a tool group).
pub struct LastN {
    /// How many of the newest messages to keep, besides the system message.
    pub n: usize,
}

impl ContextManager for LastN {
    fn name(&self) -> &str {
        "last_n"
    }

    fn apply(&self, dialog: &mut Dialog) -> Option<Dialog> {
        let messages = dialog.messages();
        if messages.len() <= self.n + 1 {
            return None;
        }
        let mut start = messages.len() - self.n;
        // Do not begin with tool results whose call was cut off.
        while start < messages.len() && messages[start].role == Role::Tool {
            start += 1;
        }
        let mut kept: Vec<Arc<Message>> = Vec::new();
        if messages[0].role == Role::System {
            kept.push(messages[0].clone());
        }
        kept.extend(messages[start.max(1)..].iter().cloned());
        let mut child = dialog.fork(0, 1);
        child.replace_messages(kept);
        Some(child)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialog::FunctionCall;

    fn settings(kind: &str, max_tokens: Option<u64>, options: Value) -> ContextSettings {
        ContextSettings {
            kind: kind.into(),
            model_provider: "openai".into(),
            model: "gpt-4o".into(),
            max_tokens,
            options: options.as_object().cloned().unwrap_or_default(),
        }
    }

    /// A manager whose budget is `budget` tokens exactly.
    fn manager(budget: u64) -> DefaultContextManager {
        let mut manager =
            DefaultContextManager::new(&settings("default", Some(100_000), Value::Null));
        manager.budget = Some(budget);
        manager
    }

    fn dialog(messages: Vec<Message>) -> Dialog {
        let mut dialog = Dialog::new("a", "s");
        for message in messages {
            dialog.append(message);
        }
        dialog
    }

    fn words(n: usize) -> String {
        vec!["word"; n].join(" ")
    }

    fn contents(dialog: &Dialog) -> Vec<String> {
        dialog
            .messages()
            .iter()
            .map(|m| m.content.chars().take(12).collect())
            .collect()
    }

    #[test]
    fn a_dialog_that_fits_is_sent_as_is() {
        let mut small = dialog(vec![Message::system("sys"), Message::user("hi")]);
        assert!(manager(1000).apply(&mut small).is_none());
    }

    #[test]
    fn the_byte_shortcut_decides_as_counting_does_at_the_windows_edge() {
        // Bytes far above tokens (multi-byte text, repeated words): below its
        // bytes, only the token count can tell whether the dialog fits.
        let messages = vec![
            Message::system("sys"),
            Message::assistant("a", "Zürich — 日本語, \"quoted\" text\n".repeat(40)),
            Message::user("the newest question"),
        ];
        let counter = manager(1).counter;
        let tokens: usize = messages
            .iter()
            .map(|message| tokens::message_tokens(counter.as_ref(), message))
            .sum();
        let bytes: usize = messages.iter().map(tokens::message_bytes).sum();
        assert!(bytes > 2 * tokens, "{bytes} bytes, {tokens} tokens");
        let applied = |budget: usize| manager(budget as u64).apply(&mut dialog(messages.clone()));
        for budget in [bytes + 1, bytes, bytes - 1, tokens + 1, tokens] {
            assert!(
                applied(budget).is_none(),
                "a budget of {budget} holds {tokens} tokens"
            );
        }
        let cut = applied(tokens - 1).expect("one token short: truncated");
        assert_eq!(contents(&cut)[0], "sys");
    }

    #[test]
    fn the_middle_goes_first_and_the_border_keeps_its_newest_text() {
        let mut long = dialog(vec![
            Message::system("sys"),
            Message::user(format!("old {}", words(300))),
            Message::assistant("a", format!("middle {}", words(300))),
            Message::user(format!("{} newest", words(20))),
        ]);
        let child = manager(200).apply(&mut long).unwrap();
        let kept = contents(&child);
        assert_eq!(kept[0], "sys");
        assert!(kept[1].starts_with("[...earlier"), "{kept:?}");
        assert!(
            child.messages()[1].content.ends_with("word"),
            "the newest text of the border survives"
        );
        assert!(child.messages().last().unwrap().content.ends_with("newest"));
        assert_eq!(child.len(), 3, "the oldest message is dropped");
        assert_eq!(
            long.tree_node.children_ids,
            [child.dialog_id().to_string()],
            "the pruned copy is a fork"
        );
    }

    #[test]
    fn system_and_newest_user_stay_even_when_alone_too_big() {
        let mut huge = dialog(vec![
            Message::system(format!("system {}", words(50))),
            Message::assistant("a", "earlier reply"),
            Message::user(format!("start {} end", words(500))),
        ]);
        let child = manager(150).apply(&mut huge).unwrap();
        assert_eq!(child.len(), 2);
        assert_eq!(
            child.messages()[0].content,
            format!("system {}", words(50)),
            "the system message is whole"
        );
        let user = &child.messages()[1].content;
        assert!(
            user.starts_with(TRUNCATION_PREFIX) && user.ends_with("end"),
            "{user}"
        );
    }

    #[test]
    fn small_windows_keep_three_quarters_of_themselves() {
        let budget = |window| {
            DefaultContextManager::new(&settings("default", Some(window), Value::Null)).budget
        };
        assert_eq!(
            budget(128_000),
            Some(123_000),
            "a large window loses the buffer"
        );
        assert_eq!(budget(20_000), Some(15_000), "where the two rules meet");
        assert_eq!(budget(16_000), Some(12_000));
        assert_eq!(budget(4_000), Some(3_000));
        assert_eq!(budget(7), Some(5), "rounded down");
    }

    #[test]
    fn a_window_too_small_for_any_cut_still_sends_system_and_newest_user_whole() {
        let mut tiny = dialog(vec![
            Message::system(format!("system {}", words(50))),
            Message::assistant("a", "earlier reply"),
            Message::user(format!("start {} end", words(500))),
        ]);
        // No room even for the truncation marker: both go whole, all else goes.
        let child = manager(10).apply(&mut tiny).unwrap();
        assert_eq!(child.len(), 2);
        assert_eq!(child.messages()[0].content, format!("system {}", words(50)));
        assert_eq!(
            child.messages()[1].content,
            format!("start {} end", words(500))
        );
    }

    #[test]
    fn a_cut_multipart_message_keeps_its_images() {
        let image = ContentPart::image_url("https://example.com/owl.png");
        let mut with_image = dialog(vec![
            Message::system("sys"),
            Message::with_parts(
                Role::User,
                "user",
                vec![
                    ContentPart::text(format!("start {} end", words(500))),
                    image.clone(),
                ],
            ),
        ]);
        let child = manager(900).apply(&mut with_image).unwrap();
        let cut = &child.messages()[1];
        assert!(cut.content.starts_with(TRUNCATION_PREFIX) && cut.content.ends_with("end"));
        assert_eq!(cut.parts.len(), 2);
        assert_eq!(cut.parts[0].as_text(), Some(cut.content.as_str()));
        assert_eq!(cut.parts[1], image);
    }

    #[test]
    fn tool_calls_and_their_results_stay_together() {
        let mut call = Message::assistant("a", "");
        call.function_calls = vec![FunctionCall::from_model("c1", "lookup", r#"{"q": "x"}"#)];
        let mut tool = Message::tool("lookup", "c1", words(400));
        tool.name = "lookup".into();
        let mut with_tools = dialog(vec![
            Message::system("sys"),
            Message::user("question"),
            call,
            tool,
            Message::user(format!("follow-up {}", words(10))),
        ]);
        let child = manager(120).apply(&mut with_tools).unwrap();
        let roles: Vec<Role> = child.messages().iter().map(|m| m.role).collect();
        // The tool group does not fit: call and result go together, and so does
        // everything older (the kept messages are always a newest suffix).
        assert_eq!(roles, [Role::System, Role::User]);
        assert!(child.messages()[1].content.starts_with("follow-up"));
        assert!(
            child
                .messages()
                .iter()
                .all(|m| m.role != Role::Tool && !m.is_function_call())
        );
    }

    #[test]
    fn unknown_models_are_not_truncated() {
        let mut local = settings("default", None, Value::Null);
        local.model_provider = "local".into();
        local.model = "my-model".into();
        let manager = DefaultContextManager::new(&local);
        let mut long = dialog(vec![Message::system("s"), Message::user(words(100_000))]);
        assert!(manager.apply(&mut long).is_none());
    }

    #[test]
    fn last_n_and_the_registry() {
        let managers = ContextManagers::with_builtins();
        let manager = managers
            .build(&settings("last_n", None, serde_json::json!({"n": 2})))
            .unwrap();
        let mut long = dialog(
            (0..6)
                .map(|n| {
                    if n == 0 {
                        Message::system("s")
                    } else {
                        Message::user(n.to_string())
                    }
                })
                .collect(),
        );
        let child = manager.apply(&mut long).unwrap();
        assert_eq!(contents(&child), ["s", "4", "5"]);
        let error = managers
            .build(&settings("defualt", None, Value::Null))
            .err()
            .unwrap();
        assert!(error.contains("did you mean `default`?"), "{error}");
        assert!(
            managers
                .build(&settings("last_n", None, Value::Null))
                .is_err()
        );
    }
}
