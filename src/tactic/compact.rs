//! The written form of a session record (`lllm.session/3`): each text held
//! once. A run's record leaves out what repeats something else in it, and
//! [`SessionRecord::expand`] puts it back:
//! - each invoke's response that its working dialog holds (`response_in_dialog`);
//! - the messages a fork shares with the start of its parent (`inherited`);
//! - the `task`, the `delivery` and prompt templates where a message holds
//!   them: cut out of that message, their place kept in `shared`;
//! - each message's `dialog_id` when it is the dialog that holds it (a
//!   message without one is written with `"dialog_id": null`);
//! - the `template` of an agent's inline system prompt in `prompts` (key
//!   `AGENT/system (inline)`, 48 bytes or more): the config's
//!   `agent_configs` entry of that agent holds it as its `system_prompt`.
//!
//! A record with `shared` is in this form; expanding takes it away, so
//! expanding twice changes nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::expansion::{Budget, ExpansionLimit, Oversized, charge};
use super::record::SessionRecord;
use crate::agent::AgentCallSession;
use crate::agent::session::InvokeTrace;
use crate::dialog::{DialogRecord, Message, Role};

/// Where a text of the record was cut out of a message: the dialog's and
/// the message's indexes (in the written `dialogs` and their `messages`)
/// and the byte it started at, written `[dialog, message, byte]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextAt(pub usize, pub usize, pub usize);

/// The texts cut out of messages, by name: `task`, `delivery`, or
/// `prompt:KEY` (the template of prompt `KEY` in `prompts`).
pub type SharedTexts = BTreeMap<String, TextAt>;

/// Texts shorter than this stay where they are: a reference costs about
/// as many bytes.
const MIN_SHARED: usize = 48;

/// The metadata key `Dialog::append` stamps on each message.
const DIALOG_ID: &str = "dialog_id";

/// The key of the parser's output that holds the reply as received.
const RAW: &str = "raw";

/// Turns a fresh run's record (whole dialogs, every response in its invoke)
/// into its written form. Sub-tactic sessions are already in it.
/// `templates` are the tactic's [`shared_templates`].
pub(super) fn compact(record: &mut SessionRecord, templates: &[(String, String)]) {
    share_responses(&mut record.agent_calls, &record.dialogs);
    crate::dialog::share_prefixes(&mut record.dialogs);
    let mut shared = SharedTexts::new();
    let mut taken = Vec::new();
    if let Some(task) = record.task.as_str() {
        share_text(
            &mut record.dialogs,
            "task",
            task,
            Role::User,
            &mut taken,
            &mut shared,
        );
    }
    if let Some(delivery) = &record.delivery {
        let role = Role::Assistant;
        share_text(
            &mut record.dialogs,
            "delivery",
            delivery,
            role,
            &mut taken,
            &mut shared,
        );
    }
    for (name, template) in templates {
        share_text(
            &mut record.dialogs,
            name,
            template,
            Role::System,
            &mut taken,
            &mut shared,
        );
    }
    leave_out_dialog_ids(&mut record.dialogs);
    record.shared = Some(shared);
}

/// Puts back what [`compact`] left out, in the reverse order.
pub(super) fn expand(record: &mut SessionRecord) {
    // Without a limit nothing is refused: a run's own record.
    let _ = expand_with(record, None);
}

/// [`expand`], refused before the copies are made when they would take the
/// record (its sub-tactic sessions included) past `limit`.
pub(super) fn expand_within(
    record: &mut SessionRecord,
    limit: ExpansionLimit,
) -> Result<(), Oversized> {
    expand_with(record, Some(&mut Budget::new(limit)))
}

fn expand_with(
    record: &mut SessionRecord,
    mut budget: Option<&mut Budget>,
) -> Result<(), Oversized> {
    // These put each text back once: what they add is bounded by the record.
    restore_inline_templates(record);
    if let Some(shared) = record.shared.take() {
        restore_dialog_ids(&mut record.dialogs);
        restore_texts(record, &shared);
    }
    // These copy a message once per fork or invoke that names it.
    if let Some(budget) = budget.as_deref_mut() {
        charge(record, budget)?;
    }
    crate::dialog::expand_shared_prefixes(&mut record.dialogs);
    restore_responses(&mut record.agent_calls, &record.dialogs);
    for call in &mut record.agent_calls {
        call.restore_delivery();
    }
    for sub in &mut record.sub_tactic_sessions {
        expand_with(sub, budget.as_deref_mut())?;
    }
    Ok(())
}

/// The key in `prompts` of an agent's inline system prompt.
fn inline_key(agent: &str) -> String {
    format!("{agent}/system (inline)")
}

/// The agents' inline system prompts of a resolved config (`agent_configs`
/// entries with a `name` and a `system_prompt` text of [`MIN_SHARED`] bytes
/// or more), by their key in `prompts`.
fn inline_system_prompts(config: &Value) -> impl Iterator<Item = (String, &str)> {
    config
        .get("agent_configs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|agent| {
            let name = agent.get("name")?.as_str()?;
            let text = agent.get("system_prompt")?.as_str()?;
            (text.len() >= MIN_SHARED).then(|| (inline_key(name), text))
        })
}

/// The `prompts` of a record of a tactic with this resolved `config`: an
/// inline system prompt that the config holds has no `template` (made once
/// per tactic, not per record).
pub(super) fn recorded_prompts<T: Serialize>(
    prompts: &T,
    config: &Value,
) -> super::record::SharedJson {
    let mut prompts = serde_json::to_value(prompts).unwrap_or(Value::Null);
    for (key, text) in inline_system_prompts(config) {
        if let Some(prompt) = prompts.get_mut(&key).and_then(Value::as_object_mut)
            && prompt.get("template").and_then(Value::as_str) == Some(text)
        {
            prompt.remove("template");
        }
    }
    super::record::SharedJson::new(&prompts)
}

/// Puts an inline system prompt's `template` back from the config (the
/// `template` second, after `sha256`, where a record writes it).
fn restore_inline_templates(record: &mut SessionRecord) {
    let config = record.tactic.config.value();
    let mut prompts = record.prompts.value();
    let mut restored = false;
    for (key, text) in inline_system_prompts(&config) {
        let Some(prompt) = prompts.get_mut(&key).and_then(Value::as_object_mut) else {
            continue;
        };
        if prompt.contains_key("template") {
            continue;
        }
        let mut whole = serde_json::Map::new();
        if let Some(sha256) = prompt.remove("sha256") {
            whole.insert("sha256".into(), sha256);
        }
        whole.insert("template".into(), Value::String(text.to_string()));
        whole.append(prompt);
        *prompt = whole;
        restored = true;
    }
    if restored {
        record.prompts = super::record::SharedJson::new(&prompts);
    }
}

/// The prompt templates a record of a tactic with these prompts (`key`,
/// template) may hold once, named `prompt:KEY`: made once per tactic, not
/// per record.
pub(super) fn shared_templates<'a>(
    prompts: impl Iterator<Item = (&'a str, &'a str)>,
) -> Arc<[(String, String)]> {
    prompts
        .filter(|(_, template)| template.len() >= MIN_SHARED)
        .map(|(key, template)| (format!("prompt:{key}"), template.to_string()))
        .collect()
}

/// Cuts `text` out of the last message of `role` that holds it and no other
/// shared text (one per message keeps every place simple), and notes where.
/// A `parsed.raw` that is the content is cut too (and so still left out of
/// the written message).
fn share_text(
    dialogs: &mut [DialogRecord],
    name: &str,
    text: &str,
    role: Role,
    taken: &mut Vec<(usize, usize)>,
    shared: &mut SharedTexts,
) {
    if text.len() < MIN_SHARED {
        return;
    }
    let found = dialogs.iter().enumerate().rev().find_map(|(d, dialog)| {
        dialog
            .messages
            .iter()
            .enumerate()
            .rev()
            .find_map(|(m, message)| {
                if message.role != role || taken.contains(&(d, m)) {
                    return None;
                }
                let at = find(&message.content, text)?;
                let mut cut = message.content.clone();
                cut.replace_range(at..at + text.len(), "");
                let raw = raw(message);
                // A raw that would read back as the cut content, but is not
                // the content, could not be told apart: leave this one whole.
                let raw_is_content = raw == Some(message.content.as_str());
                (raw_is_content || raw != Some(cut.as_str())).then_some((
                    d,
                    m,
                    at,
                    cut,
                    raw_is_content,
                ))
            })
    });
    let Some((d, m, at, cut, raw_is_content)) = found else {
        return;
    };
    let message = Arc::make_mut(&mut dialogs[d].messages[m]);
    if raw_is_content {
        message
            .parsed
            .insert(RAW.into(), Value::String(cut.clone()));
    }
    message.content = cut;
    taken.push((d, m));
    shared.insert(name.to_string(), TextAt(d, m, at));
}

/// Where `text` starts in `content`. The usual cases (the whole content,
/// its start or its end) are one comparison: `str::find` prepares a search
/// of its needle first, which for a task of a few KB cost more than the
/// rest of a record's compaction.
fn find(content: &str, text: &str) -> Option<usize> {
    if content.len() < text.len() {
        None
    } else if content.starts_with(text) {
        Some(0)
    } else if content.ends_with(text) {
        Some(content.len() - text.len())
    } else {
        content.find(text)
    }
}

/// The parser's `raw` of a message, when it is text.
fn raw(message: &Message) -> Option<&str> {
    message.parsed.get(RAW).and_then(Value::as_str)
}

/// Puts each shared text back at its place (and into a `parsed.raw` that
/// is the content). A place that does not fit the record (a hand-edited
/// file) is left alone.
fn restore_texts(record: &mut SessionRecord, shared: &SharedTexts) {
    let prompts = record.prompts.value();
    for (name, &TextAt(d, m, at)) in shared {
        let text = match name.as_str() {
            "task" => record.task.as_str().map(str::to_string),
            "delivery" => record.delivery.clone(),
            other => other
                .strip_prefix("prompt:")
                .and_then(|key| prompts.get(key)?.get("template")?.as_str())
                .map(str::to_string),
        };
        let Some(text) = text else { continue };
        let Some(message) = record
            .dialogs
            .get_mut(d)
            .and_then(|dialog| dialog.messages.get_mut(m))
        else {
            continue;
        };
        if !message.content.is_char_boundary(at) {
            continue;
        }
        let raw_is_content = raw(message) == Some(message.content.as_str());
        let message = Arc::make_mut(message);
        message.content.insert_str(at, &text);
        if raw_is_content {
            message
                .parsed
                .insert(RAW.into(), Value::String(message.content.clone()));
        }
    }
}

/// Leaves out each message's `dialog_id` where it is the dialog holding it,
/// and marks a message without one (`null`) so that it reads back without.
fn leave_out_dialog_ids(dialogs: &mut [DialogRecord]) {
    for dialog in dialogs {
        let own = dialog.tree_node.dialog_id.as_str();
        for message in &mut dialog.messages {
            match message.metadata.get(DIALOG_ID) {
                Some(Value::String(id)) if id == own => {
                    Arc::make_mut(message).metadata.shift_remove(DIALOG_ID);
                }
                None => {
                    Arc::make_mut(message)
                        .metadata
                        .insert(DIALOG_ID.into(), Value::Null);
                }
                Some(_) => {}
            }
        }
    }
}

/// Puts back what `leave_out_dialog_ids` left out.
fn restore_dialog_ids(dialogs: &mut [DialogRecord]) {
    for dialog in dialogs {
        let own = dialog.tree_node.dialog_id.clone();
        for message in &mut dialog.messages {
            match message.metadata.get(DIALOG_ID) {
                None => {
                    Arc::make_mut(message)
                        .metadata
                        .insert(DIALOG_ID.into(), Value::String(own.clone()));
                }
                Some(Value::Null) => {
                    Arc::make_mut(message).metadata.shift_remove(DIALOG_ID);
                }
                Some(_) => {}
            }
        }
    }
}

/// The message each invoke's response became: the one after the request's
/// messages in the request's dialog (the working fork).
fn held_reply<'a>(
    invoke: &InvokeTrace,
    index: &HashMap<&str, usize>,
    dialogs: &'a [DialogRecord],
) -> Option<&'a Arc<Message>> {
    let at = *index.get(invoke.request.dialog_id.as_str())?;
    dialogs[at].messages.get(invoke.request.messages)
}

pub(super) fn dialog_index(dialogs: &[DialogRecord]) -> HashMap<&str, usize> {
    dialogs
        .iter()
        .enumerate()
        .map(|(at, dialog)| (dialog.tree_node.dialog_id.as_str(), at))
        .collect()
}

/// Leaves out each invoke's response that its working dialog holds (every
/// reply the loop received: it is appended to the fork it was asked from),
/// so a record holds it once. `dialogs` must be whole (before
/// `share_prefixes`); `restore_responses` puts the responses back.
fn share_responses(calls: &mut [AgentCallSession], dialogs: &[DialogRecord]) {
    let index = dialog_index(dialogs);
    for invoke in calls.iter_mut().flat_map(|call| &mut call.invokes) {
        let Some(held) = held_reply(invoke, &index, dialogs) else {
            continue;
        };
        let Some(response) = &invoke.response else {
            continue;
        };
        // A live run's trace shares the very message; otherwise the held copy
        // must differ only by the dialog id `append` stamped on it.
        let held_copy = Arc::ptr_eq(response, held)
            || (!response.metadata.contains_key(DIALOG_ID) && {
                let mut stamped = Message::clone(response);
                let id = Value::String(invoke.request.dialog_id.clone());
                stamped.metadata.insert(DIALOG_ID.into(), id);
                stamped.is_copy_of(held)
            });
        if held_copy {
            invoke.response = None;
            invoke.response_in_dialog = true;
        }
    }
}

/// Puts back the responses `share_responses` left out (`dialogs` whole).
fn restore_responses(calls: &mut [AgentCallSession], dialogs: &[DialogRecord]) {
    let index = dialog_index(dialogs);
    for invoke in calls.iter_mut().flat_map(|call| &mut call.invokes) {
        if !invoke.response_in_dialog {
            continue;
        }
        if let Some(held) = held_reply(invoke, &index, dialogs) {
            let mut response = Message::clone(held);
            response.metadata.shift_remove(DIALOG_ID);
            invoke.response = Some(Arc::new(response));
            invoke.response_in_dialog = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::session::{CallState, RequestDigest};
    use crate::dialog::{Dialog, InvokeCost};
    use serde_json::{Map, json};

    fn invoke(dialog: &Dialog, messages: usize, response: Message) -> InvokeTrace {
        InvokeTrace {
            step: 0,
            repair: 0,
            attempt: 1,
            request: RequestDigest {
                sha256: String::new(),
                dialog_id: dialog.dialog_id().to_string(),
                messages,
                model: "m".into(),
                tools: Vec::new(),
                format: false,
                model_args: Map::new(),
            },
            response: Some(Arc::new(response)),
            response_in_dialog: false,
            error: None,
            parse_error: None,
            latency_ms: 0,
            waited_ms: 0,
            cached: false,
        }
    }

    #[test]
    fn a_response_its_dialog_holds_is_written_once_and_read_back() {
        let mut working = Dialog::new("a", "main");
        working.append(Message::user("hi"));
        let reply = Message::new(Role::Assistant, "a", "hello");
        working.append(reply.clone());
        let mut edited = reply.clone();
        edited.content = "not what the dialog holds".into();
        let call = AgentCallSession {
            agent: "a".into(),
            model: "p/m".into(),
            dialog_alias: "main".into(),
            dialog_id: working.dialog_id().to_string(),
            state: CallState::Success,
            max_exception_retry: 0,
            max_interrupt_steps: 0,
            max_llm_recall: 0,
            exception_retries: Vec::new(),
            interrupts: Vec::new(),
            llm_recalls: Vec::new(),
            invokes: vec![
                invoke(&working, 1, reply.clone()),
                invoke(&working, 1, edited.clone()),
            ],
            delivery: None,
            error: None,
            cost: InvokeCost::default(),
            started_at: String::new(),
            ended_at: None,
            latency_ms: 0,
            metadata: Map::new(),
            parser_args: Map::new(),
        };
        let dialogs = vec![working.into_record()];
        let mut calls = vec![call.clone()];
        share_responses(&mut calls, &dialogs);
        assert!(calls[0].invokes[0].response.is_none());
        assert!(calls[0].invokes[0].response_in_dialog);
        assert_eq!(
            calls[0].invokes[1].response.as_ref(),
            Some(&Arc::new(edited.clone())),
            "kept: not a copy"
        );
        assert!(!calls[0].invokes[1].response_in_dialog);
        restore_responses(&mut calls, &dialogs);
        assert_eq!(calls[0], call, "read back as it was");
        assert_eq!(
            calls[0].delivery().map(|message| &message.content),
            Some(&"not what the dialog holds".to_string())
        );
    }

    fn echo_tactic(system: &str) -> crate::Tactic {
        let yaml = format!(
            "tactic_type: echo\nagent_configs: [{{name: echo, model_name: mock/echo, system_prompt: {}}}]\n",
            serde_json::to_string(system).unwrap()
        );
        crate::Tactic::from_yaml(&yaml, ".", &crate::Registry::new()).unwrap()
    }

    /// A run's written record, as `lllm run` writes it, and as JSON.
    fn written(system: &str, task: &str) -> (SessionRecord, String) {
        let tactic = echo_tactic(system);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let record = runtime.block_on(tactic.run_until(task.into(), None, std::future::pending()));
        let json = serde_json::to_string(&record).unwrap();
        (record, json)
    }

    fn read(json: &str) -> SessionRecord {
        let mut record: SessionRecord = serde_json::from_str(json).unwrap();
        record.expand();
        record
    }

    #[test]
    fn each_text_is_written_once_and_read_back_whole() {
        let system = "You repeat what you are told, word for word, and nothing else at all.";
        let task = "Repeat this \"quoted\" line,\nthen this one: naïve café, 10 % off.";
        let (record, json) = written(system, task);
        assert_eq!(record.format, "lllm.session/3");
        let escaped = |text: &str| serde_json::to_string(text).unwrap();
        let escaped = |text: &str| escaped(text)[1..escaped(text).len() - 1].to_string();
        // mock/echo delivers the task: `task` and `delivery` hold it, no message does.
        assert_eq!(json.matches(&escaped(task)).count(), 2, "{json}");
        // The system prompt: the config's inline text only; the prompt's
        // template is read back from it.
        assert_eq!(json.matches(&escaped(system)).count(), 1, "{json}");
        let written: Value = serde_json::from_str(&json).unwrap();
        let prompt = &written["prompts"]["echo/system (inline)"];
        assert_eq!(prompt["sha256"].as_str().map(str::len), Some(64), "{json}");
        assert!(prompt.get("template").is_none(), "{json}");
        assert!(
            !json.contains("\"dialog_id\":null"),
            "every message was stamped"
        );
        let shared = record.shared.as_ref().unwrap();
        assert_eq!(
            shared.keys().map(String::as_str).collect::<Vec<_>>(),
            ["delivery", "prompt:echo/system (inline)", "task"]
        );

        let mut expected = record.clone();
        expected.expand();
        assert!(expected.shared.is_none());
        let read = read(&json);
        assert_eq!(read, expected);
        let prompts = read.prompts.value();
        let prompt = prompts["echo/system (inline)"].as_object().unwrap();
        assert_eq!(
            prompt.keys().map(String::as_str).collect::<Vec<_>>(),
            ["sha256", "template"],
            "the template back in its place"
        );
        assert_eq!(prompt["template"], system);
        let main = &read.dialogs[0];
        assert_eq!(main.messages[0].content, system);
        assert_eq!(main.messages[1].content, task);
        assert_eq!(main.messages[2].content, task);
        assert_eq!(main.messages[2].parsed["raw"], task);
        for message in &main.messages {
            assert_eq!(
                message.metadata["dialog_id"],
                main.tree_node.dialog_id.as_str()
            );
        }
        assert_eq!(
            read.agent_calls[0]
                .delivery()
                .map(|reply| reply.content.as_str()),
            Some(task)
        );
        // Expanding again changes nothing; the expanded record writes and
        // reads back as itself (no `shared`: nothing is cut).
        let mut twice = read.clone();
        twice.expand();
        assert_eq!(twice, read);
        let again = serde_json::to_string(&read).unwrap();
        assert!(!again.contains("\"shared\""));
        assert_eq!(self::read(&again), read);
    }

    #[test]
    fn a_text_is_found_anywhere_in_a_message() {
        for (content, text, at) in [
            ("the task", "the task", Some(0)),
            ("the task, wrapped", "the task", Some(0)),
            ("wrapped: the task", "the task", Some(9)),
            ("a the task b", "the task", Some(2)),
            ("the tas", "the task", None),
            ("another", "the task", None),
        ] {
            assert_eq!(find(content, text), at, "{content:?}");
        }
    }

    #[test]
    fn short_texts_stay_in_their_messages() {
        let (record, json) = written("Be brief.", "hi");
        assert_eq!(record.shared, Some(SharedTexts::new()));
        let read = read(&json);
        assert_eq!(read.dialogs[0].messages[1].content, "hi");
        assert_eq!(read.dialogs[0].messages[0].content, "Be brief.");
    }

    #[test]
    fn a_message_without_a_dialog_id_and_a_raw_unlike_its_content_read_back_as_they_were() {
        let task = "A task long enough to be shared between the record and its message.";
        let (mut record, _) = written("Be brief.", task);
        record.expand();
        // As a programmed tactic might leave them: no stamp, an edited raw
        // (in the dialog and the fork that inherits its messages).
        for dialog in &mut record.dialogs {
            Arc::make_mut(&mut dialog.messages[0]).metadata.clear();
            let reply = Arc::make_mut(&mut dialog.messages[2]);
            reply
                .parsed
                .insert(RAW.into(), Value::String("the reply before an edit".into()));
        }
        let expected = record.clone();
        compact_again(&mut record);
        let json = serde_json::to_string(&record).unwrap();
        assert!(json.contains("\"dialog_id\":null"), "{json}");
        assert!(json.contains("the reply before an edit"));
        let shared = record.shared.as_ref().unwrap();
        assert_eq!(shared.get("task"), Some(&TextAt(0, 1, 0)), "{json}");
        assert_eq!(shared.get("delivery"), Some(&TextAt(0, 2, 0)), "{json}");
        assert_eq!(record.dialogs[1].inherited, 3, "{json}");
        assert_eq!(read(&json), expected);
    }

    /// `compact` on an expanded record (its calls already hold their replies).
    fn compact_again(record: &mut SessionRecord) {
        for call in &mut record.agent_calls {
            call.delivery = None;
        }
        let prompts = record.prompts.value();
        let templates = shared_templates(
            prompts
                .as_object()
                .unwrap()
                .iter()
                .map(|(key, info)| (key.as_str(), info["template"].as_str().unwrap())),
        );
        compact(record, &templates);
    }

    #[test]
    fn places_that_do_not_fit_the_record_are_left_alone() {
        let task = "Another task long enough to be shared with the message that held it.";
        let (_, json) = written("Be brief.", task);
        let mut value: Value = serde_json::from_str(&json).unwrap();
        for place in [
            json!([9, 0, 0]),
            json!([0, 9, 0]),
            json!([0, 1, 999]),
            json!("x"),
        ] {
            value["shared"]["task"] = place.clone();
            let text = value.to_string();
            match serde_json::from_str::<SessionRecord>(&text) {
                Ok(mut record) => {
                    record.expand();
                    assert_eq!(record.dialogs[0].messages[1].content, "", "{place}");
                }
                Err(error) => assert!(place.is_string(), "{place}: {error}"),
            }
        }
        // Inside a character: left alone, not a panic.
        let (_, json) = written("Be brief.", &format!("é{task}"));
        let mut value: Value = serde_json::from_str(&json).unwrap();
        value["dialogs"][0]["messages"][1]["content"] = json!("é");
        value["shared"]["task"] = json!([0, 1, 1]);
        let mut record: SessionRecord = serde_json::from_str(&value.to_string()).unwrap();
        record.expand();
        assert_eq!(record.dialogs[0].messages[1].content, "é");
    }
}
