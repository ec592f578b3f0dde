//! `lllm-mock`'s provider quotas over real HTTP: the rate-limit headers of
//! each wire on every reply, counting prompt tokens and `max_tokens` at
//! admission, 429s in the provider's shape with `retry-after`, buckets that
//! refill continuously, one quota per key, refused flags.

mod common;

use std::time::{Duration, Instant};

use common::{MockServer, Test};
use serde_json::{Value, json};

const ECHO: &str = "default: {echo: true}\n";

async fn post(
    mock: &MockServer,
    path: &str,
    key: &str,
    body: Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", mock.url))
        .header("authorization", format!("Bearer {key}"))
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .expect("a response");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.expect("a JSON body"))
}

/// 40 characters of prompt (10 tokens) and `max_tokens`, if any.
fn chat(max_tokens: Option<u64>) -> Value {
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(40)}]});
    if let Some(max_tokens) = max_tokens {
        body["max_tokens"] = json!(max_tokens);
    }
    body
}

fn number(headers: &reqwest::header::HeaderMap, name: &str) -> f64 {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no number in `{name}`: {headers:?}"))
}

#[tokio::test]
async fn openai_replies_carry_the_windows_and_429s_say_when_to_retry() {
    let test = Test::new();
    // 3 requests and 600 tokens a minute: 10 tokens a second refill.
    let mock = MockServer::start_with(test.dir.path(), ECHO, &["--rpm", "3", "--tpm", "600"]);
    let started = Instant::now();
    let (status, first, _) = post(&mock, "/v1/chat/completions", "k", chat(Some(50))).await;
    assert_eq!(status, 200);
    assert_eq!(number(&first, "x-ratelimit-limit-requests"), 3.0);
    assert_eq!(number(&first, "x-ratelimit-remaining-requests"), 2.0);
    assert_eq!(number(&first, "x-ratelimit-limit-tokens"), 600.0);
    assert_eq!(
        number(&first, "x-ratelimit-remaining-tokens"),
        540.0,
        "10 prompt tokens and max_tokens 50 counted at admission"
    );
    assert_eq!(
        first["x-ratelimit-reset-tokens"], "6s",
        "60 tokens at 10 a second"
    );
    assert_eq!(first["x-ratelimit-reset-requests"], "20s");
    let (status, second, _) = post(&mock, "/v1/chat/completions", "k", chat(Some(50))).await;
    assert_eq!(status, 200);
    assert_eq!(number(&second, "x-ratelimit-remaining-requests"), 1.0);
    let tokens = number(&second, "x-ratelimit-remaining-tokens");
    let refilled = 10.0 * started.elapsed().as_secs_f64();
    assert!(
        (480.0..=480.0 + refilled + 1.0).contains(&tokens),
        "{tokens}: decreasing by 60, refilling 10 a second"
    );

    // More than what is left: a 429 in OpenAI's shape, nothing counted.
    let (status, refused, body) = post(&mock, "/v1/chat/completions", "k", chat(Some(500))).await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert_eq!(body["error"]["type"], "tokens");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("tokens per min (TPM): Limit 600") && message.contains("Requested 510"),
        "{message}"
    );
    let wait_ms = number(&refused, "retry-after-ms");
    assert!(
        (0.0..=3000.0).contains(&wait_ms),
        "{wait_ms}: 30 tokens short at most"
    );
    assert_eq!(number(&refused, "retry-after"), (wait_ms / 1000.0).ceil());
    assert_eq!(
        number(&refused, "x-ratelimit-remaining-requests"),
        1.0,
        "not counted"
    );
    // More than the whole limit never fits: no retry-after.
    let (status, too_large, _) = post(&mock, "/v1/chat/completions", "k", chat(Some(1000))).await;
    assert_eq!(status, 429);
    assert!(too_large.get("retry-after").is_none());

    let (status, _, _) = post(&mock, "/v1/chat/completions", "k", chat(None)).await;
    assert_eq!(status, 200, "10 tokens fit");
    let (status, refused, body) = post(&mock, "/v1/chat/completions", "k", chat(None)).await;
    assert_eq!(status, 429, "the fourth request of 3 a minute");
    assert_eq!(body["error"]["type"], "requests");
    assert!(number(&refused, "retry-after") >= 1.0);
    assert_eq!(number(&refused, "x-ratelimit-remaining-requests"), 0.0);
    // Another key has its own quota.
    let (status, other, _) = post(&mock, "/v1/chat/completions", "other", chat(None)).await;
    assert_eq!(status, 200);
    assert_eq!(number(&other, "x-ratelimit-remaining-requests"), 2.0);

    let statuses: Vec<(Value, Value)> = mock
        .requests()
        .iter()
        .map(|line| (line["status"].clone(), line["quota"].clone()))
        .collect();
    let exceeded = (json!(429), json!("exceeded"));
    let served = (json!(200), Value::Null);
    assert_eq!(
        statuses,
        [
            served.clone(),
            served.clone(),
            exceeded.clone(),
            exceeded.clone(),
            served.clone(),
            exceeded,
            served
        ],
        "the log counts the 429s"
    );
}

#[tokio::test]
async fn buckets_refill_continuously() {
    let test = Test::new();
    let mock = MockServer::start_with(test.dir.path(), ECHO, &["--rpm", "60"]);
    // A minute's 60 at once (more if the machine is slow: they refill at one
    // a second), then a 429.
    let mut served = 0;
    let wait = loop {
        let (status, headers, _) = post(&mock, "/v1/chat/completions", "k", chat(None)).await;
        if status == 429 {
            break Duration::from_millis(number(&headers, "retry-after-ms") as u64);
        }
        served += 1;
        assert!(served < 1000, "no 429 at 60 a minute");
    };
    assert!(served >= 60, "{served}");
    assert!(wait <= Duration::from_secs(1), "{wait:?}: one a second");
    // After the wait the server asked for, a request fits again.
    tokio::time::sleep(wait).await;
    let (status, headers, _) = post(&mock, "/v1/chat/completions", "k", chat(None)).await;
    assert_eq!(status, 200);
    assert_eq!(number(&headers, "x-ratelimit-remaining-requests"), 0.0);
}

#[tokio::test]
async fn anthropic_has_input_and_output_windows_and_its_error_shape() {
    let test = Test::new();
    let mock = MockServer::start_with(
        test.dir.path(),
        ECHO,
        &["--rpm", "100", "--input-tpm", "1000", "--output-tpm", "100"],
    );
    let message = |max_tokens: u64| {
        json!({"model": "m", "max_tokens": max_tokens, "system": "x".repeat(20),
               "messages": [{"role": "user", "content": "x".repeat(20)}]})
    };
    let (status, headers, _) = post(&mock, "/v1/messages", "k", message(60)).await;
    assert_eq!(status, 200);
    assert_eq!(
        number(&headers, "anthropic-ratelimit-requests-limit"),
        100.0
    );
    assert_eq!(
        number(&headers, "anthropic-ratelimit-requests-remaining"),
        99.0
    );
    assert_eq!(
        number(&headers, "anthropic-ratelimit-input-tokens-limit"),
        1000.0
    );
    assert_eq!(
        number(&headers, "anthropic-ratelimit-input-tokens-remaining"),
        990.0,
        "the system prompt counts"
    );
    assert_eq!(
        number(&headers, "anthropic-ratelimit-output-tokens-remaining"),
        40.0
    );
    let reset = headers["anthropic-ratelimit-output-tokens-reset"]
        .to_str()
        .unwrap();
    let reset = chrono::DateTime::parse_from_rfc3339(reset).expect("an RFC 3339 reset");
    assert!(reset > chrono::Utc::now(), "{reset}");
    assert!(headers.get("x-ratelimit-limit-requests").is_none());

    let (status, refused, body) = post(&mock, "/v1/messages", "k", message(60)).await;
    assert_eq!(status, 429);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("100 output tokens per minute"),
        "{body}"
    );
    assert!(number(&refused, "retry-after") >= 1.0);
    assert!(
        refused.get("retry-after-ms").is_none(),
        "Anthropic sends seconds"
    );

    // The OpenAI wire has no input or output windows.
    let (status, headers, _) = post(&mock, "/v1/chat/completions", "k", chat(Some(500))).await;
    assert_eq!(status, 200);
    assert_eq!(number(&headers, "x-ratelimit-remaining-requests"), 98.0);
    assert!(headers.get("x-ratelimit-limit-tokens").is_none());
}

#[test]
fn quota_flags_of_zero_are_refused() {
    let test = Test::new().file("script.yaml", ECHO);
    for flag in ["--rpm", "--tpm", "--input-tpm", "--output-tpm"] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_lllm-mock"))
            .arg("--script")
            .arg(test.path("script.yaml"))
            .args([flag, "0"])
            .output()
            .expect("run lllm-mock");
        assert_eq!(output.status.code(), Some(2), "{flag}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            stderr.trim(),
            format!("error: `{flag}` must be at least 1; hint: leave it out for no limit")
        );
    }
}
