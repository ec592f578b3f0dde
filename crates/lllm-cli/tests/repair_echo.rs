//! A repair hint never passes as the answer (issue 27): a small model
//! echoed the tag parser's hint, whose example parsed, and the run ended
//! `success` with the error text as its delivery. Offline, with the
//! `mock/script` provider's `echo` reply standing in for the model.

mod common;

use common::Test;

/// A review step whose prompt requires a `<verdict>` tag, with
/// `front_matter` added, and the script `replies`.
fn test(front_matter: &str, replies: &str, max_exception_retry: u32) -> Test {
    Test::new()
        .file(
            "t.yaml",
            &format!(
                "global: {{model_name: mock/script, max_exception_retry: {max_exception_retry}}}
agent_configs: [{{name: critic, system_prompt: You review.}}]
providers:
  mock: {{script: replies.yaml}}
flow:
  - step: review
    agent: critic
    prompt: review
"
            ),
        )
        .file(
            "prompts/review.md",
            &format!(
                "---\nparser: {{type: tags, required_xml_tags: [verdict]}}\n{front_matter}---\nReview: {{{{ task }}}}\n"
            ),
        )
        .file("replies.yaml", replies)
}

#[test]
fn an_echoed_repair_message_is_repaired_not_delivered() {
    // A handler text with a complete example: the echo parses, and used
    // to be the answer.
    let test = test(
        "handler: {exception: \"Your reply was invalid: {{ error_message }}\\nReply exactly like this: <verdict>ok</verdict> or <verdict>fix</verdict>\"}\n",
        "replies:\n  - text: Looks fine to me.\n  - echo: true\n  - text: <verdict>fix</verdict>\n",
        3,
    );
    let output = test.run(&["run", "t.yaml", "--task", "a draft", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "<verdict>fix</verdict>\n");
    let record = test.read_json("r.json");
    let retries = record["agent_calls"][0]["exception_retries"].to_string();
    assert_eq!(
        record["agent_calls"][0]["exception_retries"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{retries}"
    );
    assert!(
        retries.contains("the reply repeats the message lllm sent"),
        "{retries}"
    );
}

#[test]
fn an_echoed_hint_never_ends_a_run_as_success() {
    // The default hint, echoed until the repairs run out: a failure whose
    // delivery is no hint.
    let test = test(
        "",
        "replies:\n  - text: Looks fine to me.\n  - echo: true\n",
        1,
    );
    let output = test.run(&["run", "t.yaml", "--task", "a draft", "--record", "r.json"]);
    output.expect_code(1);
    assert_eq!(output.stdout, "");
    let record = test.read_json("r.json");
    assert_eq!(record["state"], "failure");
    assert!(record["delivery"].is_null(), "{}", record["delivery"]);
    assert!(
        output.stderr.contains("still does not parse"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_placeholder_is_no_verdict() {
    let test = test(
        "",
        "replies:\n  - text: <verdict>...</verdict>\n  - text: <verdict>ok</verdict>\n",
        3,
    );
    let output = test.run(&["run", "t.yaml", "--task", "a draft", "--record", "r.json"]);
    output.expect_code(0);
    assert_eq!(output.stdout, "<verdict>ok</verdict>\n");
    let retries = test.read_json("r.json")["agent_calls"][0]["exception_retries"].to_string();
    assert!(retries.contains("only a placeholder"), "{retries}");
}
