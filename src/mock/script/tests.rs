use super::*;

fn request<'a>(text: &'a str, role: &'a str) -> ScriptRequest<'a> {
    ScriptRequest {
        model: "m",
        last_text: text,
        last_role: role,
        message_count: 2,
    }
}

fn parse(text: &str) -> Script {
    match Script::parse(text, "s.yaml") {
        Ok(script) => script,
        Err(error) => panic!("{error}"),
    }
}

fn text_of(served: Served) -> String {
    match served.reply {
        Reply::Message(message) => message.text.unwrap_or_default(),
        other => format!("{other:?}"),
    }
}

fn message(text: Option<&str>, tool_calls: Vec<ScriptToolCall>) -> Reply {
    Reply::Message(ScriptMessage {
        text: text.map(str::to_string),
        tool_calls,
        usage: None,
        finish_reason: None,
    })
}

fn call(id: &str, name: &str, arguments: &str) -> ScriptToolCall {
    ScriptToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn http(status: u16) -> Fault {
    Fault::Http {
        status,
        retry_after_s: None,
        retry_after_ms: None,
        code: None,
        message: None,
    }
}

#[track_caller]
fn reply_case(reply: &str, last_text: &str, expected: Reply) {
    let script = parse(&format!("replies:\n  - {reply}\n"));
    assert_eq!(script.next(&request(last_text, "user")).reply, expected);
}

#[test]
fn every_reply_form_parses() {
    reply_case("{text: Hello}", "", message(Some("Hello"), vec![]));
    reply_case("Hello", "", message(Some("Hello"), vec![]));
    reply_case("{text: 42}", "", message(Some("42"), vec![]));
    reply_case(
        "{echo: true}",
        "say this",
        message(Some("say this"), vec![]),
    );
    reply_case(
        "{tool_calls: [{name: f, arguments: {a: 1}, id: c1}]}",
        "",
        message(None, vec![call("c1", "f", "{\"a\":1}")]),
    );
    reply_case(
        "{text: let me look, tool_calls: [{name: f, arguments: '{\"a\": ', id: c1}]}",
        "",
        message(Some("let me look"), vec![call("c1", "f", "{\"a\": ")]),
    );
    reply_case(
        "{tool_calls: [{name: f}]}",
        "",
        message(None, vec![call("call_1", "f", "{}")]),
    );
    reply_case(
        "{text: a, usage: {prompt_tokens: 12, completion_tokens: 3}, finish_reason: length}",
        "",
        Reply::Message(ScriptMessage {
            text: Some("a".into()),
            tool_calls: vec![],
            usage: Some(ScriptUsage {
                prompt_tokens: 12,
                completion_tokens: 3,
            }),
            finish_reason: Some("length".into()),
        }),
    );
    reply_case("{fault: {status: 500}}", "", Reply::Fault(http(500)));
    reply_case(
        "{fault: {status: 429, retry_after_s: 1.5, retry_after_ms: 1500, code: slow_down, message: wait}}",
        "",
        Reply::Fault(Fault::Http {
            status: 429,
            retry_after_s: Some(1.5),
            retry_after_ms: Some(1500),
            code: Some("slow_down".into()),
            message: Some("wait".into()),
        }),
    );
    reply_case("{fault: timeout}", "", Reply::Fault(Fault::Timeout));
    reply_case("{fault: malformed}", "", Reply::Fault(Fault::Malformed));
    reply_case("{fault: reset}", "", Reply::Fault(Fault::Reset));
    reply_case("{fault: cut_stream}", "", Reply::Fault(Fault::CutStream));
}

#[test]
fn json_scripts_parse_too() {
    let script = parse(r#"{"replies": [{"text": "from json"}], "default": {"echo": true}}"#);
    assert_eq!(text_of(script.next(&request("x", "user"))), "from json");
    assert_eq!(text_of(script.next(&request("back", "user"))), "back");
}

#[test]
fn rules_then_replies_then_default() {
    let script = parse(
        "rules:\n  - when: {contains: weather}\n    reply: {text: sunny}\n    times: 1\n  - when: {last_role: tool, regex: '^\\d+$'}\n    reply: {text: a number came back}\n  - when: {model: big}\n    reply: {text: big model}\nreplies:\n  - text: one\n  - echo: true\ndefault: {text: later}\n",
    );
    let cases = [
        (request("weather?", "user"), "sunny"),
        (request("weather?", "user"), "one"), // the rule is used up
        (request("42", "tool"), "a number came back"),
        (request("42", "user"), "42"), // echo; the regex rule wants a tool result
        (
            ScriptRequest {
                model: "big",
                ..request("x", "user")
            },
            "big model",
        ),
        (request("x", "user"), "later"),
        (request("y", "user"), "later"),
    ];
    for (index, (request, expected)) in cases.iter().enumerate() {
        let served = script.next(request);
        assert_eq!(served.index, index);
        assert_eq!(text_of(served), *expected, "request {index}");
    }
}

#[test]
fn an_exhausted_script_says_how_many_replies_it_had() {
    let script = parse("replies: [a, b]\n");
    script.next(&request("", "user"));
    script.next(&request("", "user"));
    let served = script.next(&request("", "user"));
    assert_eq!(served.reply, Reply::Exhausted { served: 2 });
    assert_eq!(served.index, 2);
    assert_eq!(
        parse("").next(&request("", "user")).reply,
        Reply::Exhausted { served: 0 }
    );
}

#[test]
fn generated_tool_call_ids_never_repeat() {
    let script = parse("default: {tool_calls: [{name: f}, {name: g}]}\n");
    let ids: Vec<String> = (0..2)
        .flat_map(|_| match script.next(&request("", "user")).reply {
            Reply::Message(message) => message.tool_calls.into_iter().map(|call| call.id),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3", "call_4"]);
}

#[test]
fn concurrent_requests_each_take_a_different_reply() {
    let replies: Vec<String> = (0..400).map(|number| format!("  - r{number}\n")).collect();
    let script = parse(&format!("replies:\n{}", replies.concat()));
    let mut served: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    (0..50)
                        .map(|_| text_of(script.next(&request("", "user"))))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap_or_default())
            .collect()
    });
    served.sort();
    served.dedup();
    assert_eq!(served.len(), 400);
}

#[track_caller]
fn latency_case(text: &str, low: u64, high: u64) {
    let script = parse(text);
    for _ in 0..50 {
        let delay = script.next(&request("", "user")).delay;
        assert!(
            delay >= Duration::from_millis(low) && delay <= Duration::from_millis(high),
            "{delay:?} not in [{low}, {high}] ms"
        );
    }
}

#[test]
fn latency_forms() {
    latency_case("default: ok\n", 0, 0);
    latency_case("latency_ms: 50\ndefault: ok\n", 50, 50);
    latency_case("latency_ms: 2.5\ndefault: ok\n", 2, 3);
    latency_case("latency_ms: {min: 10, max: 20}\ndefault: ok\n", 10, 20);
    latency_case("latency_ms: {mean: 50, stddev: 0}\ndefault: ok\n", 50, 50);
    // A normal latency is clamped at zero, never negative.
    latency_case("latency_ms: {mean: 0, stddev: 100}\ndefault: ok\n", 0, 1000);
    latency_case("latency_ms: 500\ndefault: {text: ok, delay_ms: 5}\n", 5, 5);
    latency_case(
        "latency_ms: 500\ndefault: {text: ok, delay_ms: {min: 1, max: 2}}\n",
        1,
        2,
    );
    let mut script = parse("latency_ms: 500\ndefault: {text: ok, delay_ms: 300}\n");
    script.set_latency_ms(7.0);
    assert_eq!(
        script.next(&request("", "user")).delay,
        Duration::from_millis(7)
    );
}

#[track_caller]
fn bad_case(text: &str, expected: &str) {
    let error = match Script::parse(text, "s.yaml") {
        Ok(script) => panic!("accepted: {script:?}"),
        Err(error) => error.to_string(),
    };
    assert_eq!(error, expected);
}

#[test]
fn bad_scripts_are_explained() {
    // Each at the line and column of what it names (an unknown key: the key).
    bad_case(
        "replys: []",
        "s.yaml:1:1: unknown key `replys`; did you mean `replies`?",
    );
    bad_case(
        "replies:\n  - txt: hi",
        "s.yaml:2:5: replies[0]: unknown key `txt`; did you mean `text`?",
    );
    bad_case(
        "replies:\n  - tool_calls: [{nmae: f}]",
        "s.yaml:2:19: replies[0].tool_calls[0]: unknown key `nmae`; did you mean `name`?",
    );
    bad_case(
        "rules:\n  - when: {contians: x}\n    reply: a",
        "s.yaml:2:12: rules[0].when: unknown key `contians`; did you mean `contains`?",
    );
    bad_case(
        "default: {fault: {status: 500, retry_after: 1}}",
        "s.yaml:1:32: default.fault: unknown key `retry_after`; did you mean `retry_after_s`?",
    );
    bad_case(
        "latency_ms: {mean: 5, stdev: 1}",
        "s.yaml:1:23: latency_ms: unknown key `stdev`; did you mean `stddev`?",
    );
    bad_case(
        "replies:\n  - {text: a, usage: {prompt_tokens: 1, completion: 2}}",
        "s.yaml:2:41: replies[0].usage: unknown key `completion`; did you mean `completion_tokens`?",
    );
    bad_case(
        "replies:\n  - {zzz: 1}",
        "s.yaml:2:6: replies[0]: unknown key `zzz`; expected one of `text`, `tool_calls`, `echo`, `fault`, `usage`, `delay_ms`, `finish_reason`, `headers`, `rate_limit`",
    );
    bad_case(
        "replies:\n  - fault: crash",
        "s.yaml:2:5: replies[0].fault: unknown fault `crash`; expected one of `timeout`, `malformed`, `reset`, `cut_stream`",
    );
    bad_case(
        "replies:\n  - fault: timout",
        "s.yaml:2:5: replies[0].fault: unknown fault `timout`; did you mean `timeout`?",
    );
    bad_case(
        "rules:\n  - when: {last_role: tol}\n    reply: a",
        "s.yaml:2:12: rules[0].when.last_role: unknown role `tol`; did you mean `tool`?",
    );
    bad_case(
        "rules:\n  - when: {contains: a}",
        "s.yaml:2:5: rules[0]: a rule needs a `reply`",
    );
    bad_case(
        "default: {fault: {status: 200}}",
        "s.yaml:1:19: default.fault.status: `200` is not an HTTP error status (400 to 599)",
    );
    bad_case(
        "default: {fault: reset, usage: {prompt_tokens: 1, completion_tokens: 1}}",
        "s.yaml:1:1: default: `usage` has no meaning next to `fault`",
    );
    bad_case(
        "latency_ms: {min: 9, max: 1}",
        "s.yaml:1:1: latency_ms: `min` (9) is larger than `max` (1)",
    );
    bad_case(
        "latency_ms: -5",
        "s.yaml:1:1: latency_ms: expected a number ≥ 0, found `-5`",
    );
    bad_case(
        "latency_ms: {min: 1}",
        "s.yaml:1:1: latency_ms: a latency is a number of milliseconds, `{min, max}` or `{mean, stddev}`",
    );
    bad_case(
        "replies: hello",
        "s.yaml:1:1: replies: `replies` must be a list, found `hello`",
    );
    bad_case(
        "- a\n- b",
        "s.yaml: a script must be a mapping, found a list",
    );
    bad_case(
        "rules:\n  - when: {regex: '('}\n    reply: a",
        "s.yaml:2:12: rules[0].when.regex: invalid regex `(`: regex parse error:\n    (\n    ^\nerror: unclosed group",
    );
    bad_case("replies: [", "s.yaml:1:10: unclosed bracket '['");
    bad_case(
        "replies:\n  - fault: {status: 429, retry_after_s: .inf}",
        "s.yaml:2:26: replies[0].fault.retry_after_s: expected a number ≥ 0, found `.inf`",
    );
    bad_case(
        "replies:\n  - text: a\n    headers: {\"bad name\": x}",
        "s.yaml:3:15: replies[0].headers.bad name: `bad name` is not an HTTP header name",
    );
    bad_case(
        "replies:\n  - text: a\n    rate_limit: {requests: {limit: 5}}",
        "s.yaml:3:18: replies[0].rate_limit.requests: a rate-limit window needs `limit`, `remaining` and `reset_s`",
    );
    bad_case(
        "replies:\n  - text: a\n    rate_limit: {request: {limit: 5}}",
        "s.yaml:3:18: replies[0].rate_limit: unknown key `request`; did you mean `requests`?",
    );
}

#[test]
fn replies_carry_their_headers() {
    let script = parse(
        "replies:\n  - text: a\n    headers: {retry-after: inf, x-n: 5}\n    rate_limit: {input_tokens: {limit: 10, remaining: 0, reset_s: 1.5}}\n",
    );
    let served = script.next(&request("q", "user"));
    assert_eq!(
        served.headers.raw,
        [
            ("retry-after".to_string(), "inf".to_string()),
            ("x-n".to_string(), "5".to_string())
        ]
    );
    assert_eq!(
        served.headers.rate_limits,
        [RateLimitWindow {
            kind: WindowKind::InputTokens,
            limit: 10,
            remaining: 0,
            reset: std::time::Duration::from_millis(1500),
        }]
    );
}

#[track_caller]
fn exactly_one_case(reply: &str) {
    let error = match Script::parse(&format!("default: {reply}"), "s.yaml") {
        Ok(_) => panic!("accepted {reply}"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("a reply needs exactly one of"), "{error}");
}

#[test]
fn a_reply_is_exactly_one_kind() {
    exactly_one_case("{}");
    exactly_one_case("{usage: {prompt_tokens: 1, completion_tokens: 1}}");
    exactly_one_case("{text: a, echo: true}");
    exactly_one_case("{tool_calls: [{name: f}], echo: true}");
    exactly_one_case("{text: a, fault: reset}");
    exactly_one_case("{echo: true, fault: reset}");
    exactly_one_case("{echo: false}");
}

#[test]
fn load_names_the_file() {
    let directory = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let path = directory.path().join("script.yaml");
    let error = Script::load(&path).map(|_| ()).unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("cannot read the script `{}`: ", path.display())),
        "{error}"
    );
    std::fs::write(&path, "replies:\n  - text: a\n  text: b\n").unwrap_or_default();
    let error = Script::load(&path).map(|_| ()).unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "{}:3:3: while parsing a block collection, did not find expected '-' indicator",
            path.display()
        )
    );
}

/// What one serve gave, in a word: the text, or the generated tool-call id.
fn served_word(served: Served) -> String {
    match served.reply {
        Reply::Message(message) => match message.tool_calls.first() {
            Some(call) => call.id.clone(),
            None => message.text.unwrap_or_default(),
        },
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn each_run_serves_the_script_from_its_start() {
    let script = parse(
        "rules:\n  - when: {contains: x}\n    reply: once\n    times: 1\n\
         replies: [a, b]\ndefault: {tool_calls: [{name: f}]}\n",
    );
    let script = &script;
    // Four requests of one run, taking turns with the other run's.
    let run = || {
        with_own_positions(async move {
            let mut words = Vec::new();
            for _ in 0..4 {
                words.push(served_word(script.next(&request("x", "user"))));
                tokio::task::yield_now().await;
            }
            words
        })
    };
    let (first, second) = tokio::join!(run(), run());
    assert_eq!(first, ["once", "a", "b", "call_1"]);
    assert_eq!(second, first, "the other run starts from the beginning too");
    // A run inside a run (a sub-tactic) goes on from where its parent is.
    let nested = with_own_positions(async {
        let outer = served_word(script.next(&request("x", "user")));
        let inner =
            with_own_positions(async { served_word(script.next(&request("x", "user"))) }).await;
        (outer, inner)
    })
    .await;
    assert_eq!(nested, ("once".to_string(), "a".to_string()));
    // Outside any run (the server), one position serves every request.
    let shared: Vec<String> = (0..4)
        .map(|_| served_word(script.next(&request("x", "user"))))
        .collect();
    assert_eq!(shared, ["once", "a", "b", "call_1"]);
    assert_eq!(served_word(script.next(&request("x", "user"))), "call_2");
}
