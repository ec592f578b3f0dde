//! A task line's `messages` (issue 26): the input is the JSON value of
//! `messages`, read the three ways `lllm batch` reads a conversation: an
//! lllm task line without `task` (the last user turn is the task), the same
//! with a `task` (every message is history), and an OpenAI Batch API line's
//! `body.messages`; and, as `params.messages`, an Anthropic Message Batches
//! line. Whatever the input: an error is one line; the lllm line and the
//! OpenAI line agree (one conversation reader), on the task and its images
//! alike; only a user turn holds images, each an `http(s)` URL or a base64
//! `data:` URL of an image type of at most 20 MiB, never a file's; every
//! message written as the record writes it reads back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lllm::batch::formats::{InputFormat, LineReader};
use lllm::batch::tasks::parse_line;
use lllm::dialog::{AttachmentScope, ContentPart, Message, Role};
use lllm_fuzz::assert_one_line;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Ok(messages) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    // No file is read for a message, whatever it says: a scope that reads
    // none makes any attempt an error, which the lllm line would show.
    let no_files = AttachmentScope::default();
    let lllm = parse_line(
        &json!({"id": "a", "messages": messages}).to_string(),
        1,
        &no_files,
    );
    let reader = |format| LineReader {
        format,
        attachments: AttachmentScope::default(),
    };
    let openai = reader(InputFormat::OpenAi).parse(
        &json!({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "gpt-4o-mini", "messages": messages}})
        .to_string(),
        1,
    );
    match (&lllm, &openai) {
        (Ok(Some(lllm)), Ok(Some(openai))) => {
            assert_eq!(lllm.input.task, openai.input.task, "the task differs");
            assert_eq!(
                lllm.input.messages, openai.input.messages,
                "the history differs"
            );
            assert_eq!(
                lllm.input.attachments, openai.input.attachments,
                "the images differ"
            );
            check(&lllm.input.messages, &lllm.input.attachments);
        }
        (Err(lllm), Err(openai)) => {
            assert_one_line(lllm);
            assert_one_line(openai);
        }
        (lllm, openai) => panic!("the readers disagree: {lllm:?} against {openai:?}"),
    }
    match parse_line(
        &json!({"id": "a", "task": "t", "messages": messages}).to_string(),
        1,
        &no_files,
    ) {
        Ok(Some(task)) => check(&task.input.messages, &task.input.attachments),
        Ok(None) => panic!("a line with a task was skipped"),
        Err(error) => assert_one_line(&error),
    }
    match reader(InputFormat::Anthropic).parse(
        &json!({"custom_id": "a", "params": {"model": "claude-haiku-4-5", "messages": messages}})
            .to_string(),
        1,
    ) {
        Ok(Some(task)) => check(&task.input.messages, &task.input.attachments),
        Ok(None) => panic!("a line with a task was skipped"),
        Err(error) => assert_one_line(&error),
    }
});

fn check(messages: &[Message], attachments: &[ContentPart]) {
    for message in messages {
        for part in &message.parts {
            if part.image_ref().is_some() {
                assert_eq!(
                    message.role,
                    Role::User,
                    "an image in a {} turn",
                    message.role
                );
            }
            image(part);
        }
        let written = serde_json::to_value(message)
            .unwrap_or_else(|error| panic!("a message does not write: {error}"));
        let read: Message = serde_json::from_value(written.clone())
            .unwrap_or_else(|error| panic!("a written message does not read: {error}: {written}"));
        assert_eq!(&read, message, "a message reads back otherwise: {written}");
    }
    for part in attachments {
        assert!(
            part.image_ref().is_some(),
            "a task's attachment from messages is an image"
        );
        image(part);
    }
}

/// An image part is an `http(s)` URL or a base64 `data:` URL of a known
/// image type (told by its bytes), at most 20 MiB.
fn image(part: &ContentPart) {
    let ContentPart::ImageUrl { image_url } = part else {
        return;
    };
    let url = &image_url.url;
    if url.starts_with("http://") || url.starts_with("https://") {
        return;
    }
    let rest = url
        .strip_prefix("data:image/")
        .unwrap_or_else(|| panic!("an image that is neither a URL nor data: {url:.80}"));
    let (kind, data) = rest
        .split_once(";base64,")
        .unwrap_or_else(|| panic!("an image data: URL without base64: {url:.80}"));
    assert!(
        ["png", "jpeg", "gif", "webp"].contains(&kind),
        "an image of type {kind}"
    );
    assert!(
        data.len() as u64 / 4 * 3 <= 20 << 20,
        "an image over 20 MiB"
    );
}
