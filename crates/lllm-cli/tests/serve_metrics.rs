//! `lllm serve`'s `GET /metrics` on the real binary, against `lllm-mock`:
//! the counts after known calls (success, 400, 401, 404, 429, a client
//! that went away, 504), the sessions' outcomes, tokens and cost, the budget,
//! the histogram's buckets against its count and the request counters,
//! the token (and `--metrics-public`), and every line of every scrape
//! checked against the exposition format's grammar by a strict parser.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};

use common::serve::{Events, Served, block, get, send, until_running};
use common::{MockServer, Test};

/// A tactic named `name` on the mock at `base_url`.
fn tactic(name: &str, base_url: &str) -> String {
    format!(
        r#"tactic_type: '{name}'
description: Answers through the mock.
global: {{model_name: local/m, max_llm_recall: 0}}
agent_configs:
  - name: assistant
    system_prompt: "Answer the task."
providers:
  local: {{api: openai, base_url: "{base_url}", retry_base_ms: 1, retry_cap_ms: 5}}
"#
    )
}

/// Replies `ok` (10 + 2 tokens) at once; a task holding `hold` waits a minute.
const SCRIPT: &str = "rules:\n  - when: {contains: hold}\n    reply: {text: \"ok\", delay_ms: 60000}\n\
     default: {text: \"ok\", usage: {prompt_tokens: 10, completion_tokens: 2}}\n";

fn setup() -> (Test, MockServer) {
    let test = Test::new();
    let mock = MockServer::start(test.dir.path(), SCRIPT);
    let test = test.file("t.yaml", &tactic("helper", &mock.base_url()));
    let home = test.path("home").display().to_string();
    (test.env("LLLM_HOME", &home), mock)
}

/// `method url` with the token, a JSON body if any.
#[track_caller]
fn call(method: &str, url: &str, token: Option<&str>, body: Option<&str>) -> u16 {
    block(send(
        method,
        url,
        token,
        body.map(|body| ("application/json", body)),
    ))
    .status
}

#[test]
fn counts_after_known_calls() {
    let (test, mock) = setup();
    let test = test.file("token", "s3cret\n");
    let served = Served::start(
        &test,
        &["t.yaml", "--token-file", "token", "--concurrency", "1"],
    );
    let url = &served.url;
    let token = Some("s3cret");
    let run = format!("{url}/run");
    assert_eq!(call("POST", &run, token, Some(r#""one""#)), 200);
    assert_eq!(call("POST", &run, token, Some(r#""two""#)), 200);
    assert_eq!(call("POST", &run, token, Some("[1]")), 400);
    assert_eq!(call("POST", &run, None, Some(r#""three""#)), 401);
    assert_eq!(call("POST", &run, Some("wrong"), Some(r#""three""#)), 401);
    let chat = r#"{"model": "helper", "messages": [{"role": "user", "content": "hi"}]}"#;
    let completions = format!("{url}/v1/chat/completions");
    assert_eq!(call("POST", &completions, token, Some(chat)), 200);
    let unknown = r#"{"model": "nope", "messages": [{"role": "user", "content": "hi"}]}"#;
    assert_eq!(call("POST", &completions, token, Some(unknown)), 404);
    assert_eq!(
        call(
            "POST",
            &format!("{url}/tactics/nope/run"),
            token,
            Some("\"x\"")
        ),
        404
    );
    // A held stream takes the only slot: a /run is 429; then its client
    // goes away, and the run is cancelled.
    block(async {
        let client = reqwest::Client::new();
        let response = client
            .post(format!("{url}/stream"))
            .bearer_auth("s3cret")
            .body(r#""hold on""#)
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 200);
        let mut events = Events::from(response);
        events.next().await.expect("a first event");
        let busy = send("POST", &run, token, Some(("application/json", "\"x\""))).await;
        assert_eq!(busy.status, 429, "{}", busy.text);
    });
    block(until_running(url, 0));
    // A /run whose client goes away once its run is under way: 499.
    let held = run.clone();
    let url_for_thread = url.clone();
    std::thread::spawn(move || {
        block(async {
            let request = reqwest::Client::new()
                .post(held)
                .bearer_auth("s3cret")
                .body(r#""hold again""#)
                .send();
            tokio::select! {
                _ = request => panic!("the held run answered"),
                () = until_running(&url_for_thread, 1) => {}
            }
        })
    })
    .join()
    .unwrap();
    block(until_running(url, 0));

    let scrape = Scrape::of(url, token);
    let requests = |tactic: &str, route: &str, status: &str| {
        scrape.value(
            "lllm_serve_requests_total",
            &[("tactic", tactic), ("route", route), ("status", status)],
        )
    };
    assert_eq!(requests("helper", "/run", "200"), Some(2.0));
    assert_eq!(requests("helper", "/run", "400"), Some(1.0));
    assert_eq!(requests("helper", "/run", "401"), Some(2.0));
    assert_eq!(requests("helper", "/run", "429"), Some(1.0));
    assert_eq!(requests("helper", "/run", "499"), Some(1.0));
    assert_eq!(requests("helper", "/stream", "200"), Some(1.0));
    assert_eq!(requests("helper", "/v1/chat/completions", "200"), Some(1.0));
    // Names that are not served are no label: the caller cannot make series.
    assert_eq!(requests("", "/v1/chat/completions", "404"), Some(1.0));
    assert_eq!(requests("", "/tactics/{name}/run", "404"), Some(1.0));
    assert!(!scrape.text.contains("nope"), "{}", scrape.text);
    // `/health` was asked while waiting for the runs to end.
    let total: f64 = scrape
        .samples
        .iter()
        .filter(|sample| {
            sample.name == "lllm_serve_requests_total" && sample.labels["route"] != "/health"
        })
        .map(|sample| sample.value)
        .sum();
    assert_eq!(total, 11.0, "every request but this scrape, once");
    // Every (tactic, route) has a histogram whose count is its requests.
    let mut histograms = 0;
    for sample in &scrape.samples {
        if sample.name != "lllm_serve_request_duration_seconds_count" {
            continue;
        }
        histograms += 1;
        let (tactic, route) = (&sample.labels["tactic"], &sample.labels["route"]);
        let requests: f64 = scrape
            .samples
            .iter()
            .filter(|other| {
                other.name == "lllm_serve_requests_total"
                    && &other.labels["tactic"] == tactic
                    && &other.labels["route"] == route
            })
            .map(|other| other.value)
            .sum();
        assert_eq!(sample.value, requests, "{tactic} {route}");
        let sum = scrape
            .value(
                "lllm_serve_request_duration_seconds_sum",
                &[("tactic", tactic), ("route", route)],
            )
            .unwrap();
        assert!(sum > 0.0, "{tactic} {route}: {sum}");
    }
    assert_eq!(histograms, 6, "{}", scrape.text);
    assert_eq!(
        scrape.value("lllm_serve_requests_in_flight", &[]),
        Some(1.0)
    );
    assert_eq!(scrape.value("lllm_serve_runs_in_flight", &[]), Some(0.0));
    assert_eq!(scrape.value("lllm_serve_concurrency_limit", &[]), Some(1.0));
    // Sessions: two runs and a chat succeeded, two were cancelled; the 400,
    // 401s, 404s and 429 ran nothing.
    let sessions = |state: &str| {
        scrape.value(
            "lllm_serve_sessions_total",
            &[("tactic", "helper"), ("state", state)],
        )
    };
    assert_eq!(
        ["success", "failure", "skipped", "cancelled", "timeout"].map(sessions),
        [Some(3.0), Some(0.0), Some(0.0), Some(2.0), Some(0.0)]
    );
    let tokens = |kind: &str| {
        scrape.value(
            "lllm_serve_tokens_total",
            &[("tactic", "helper"), ("type", kind)],
        )
    };
    assert_eq!((tokens("input"), tokens("output")), (Some(30.0), Some(6.0)));
    // No price for `m`: cost 0, and every session's cost is unknown.
    assert_eq!(
        scrape.value("lllm_serve_cost_usd_total", &[("tactic", "helper")]),
        Some(0.0)
    );
    assert_eq!(
        scrape.value(
            "lllm_serve_cost_unknown_sessions_total",
            &[("tactic", "helper")]
        ),
        Some(5.0)
    );
    assert!(!scrape.text.contains("budget"), "no --max-cost");
    // The mock logs a request as it answers it: never, for the two held.
    assert_eq!(mock.requests().len(), 3);

    // The scrape itself is counted by the next one.
    let again = Scrape::of(url, token);
    assert_eq!(
        again.value(
            "lllm_serve_requests_total",
            &[("tactic", ""), ("route", "/metrics"), ("status", "200")]
        ),
        Some(1.0)
    );
}

#[test]
fn the_token_guards_metrics_unless_they_are_public() {
    let (test, _mock) = setup();
    let test = test.file("token", "s3cret\n");
    let served = Served::start(&test, &["t.yaml", "--token-file", "token"]);
    let metrics = format!("{}/metrics", served.url);
    for token in [None, Some("wrong")] {
        let answer = block(send("GET", &metrics, token, None));
        assert_eq!(answer.status, 401, "{token:?}");
        assert_eq!(answer.error_type(), "Unauthorized");
    }
    Scrape::of(&served.url, Some("s3cret"));
    drop(served);

    let served = Served::start(
        &test,
        &["t.yaml", "--token-file", "token", "--metrics-public"],
    );
    let scrape = Scrape::of(&served.url, None);
    // Only /metrics is opened: the runs still need the token.
    assert_eq!(
        call("POST", &format!("{}/run", served.url), None, Some("\"x\"")),
        401
    );
    assert_eq!(
        get(&format!("{}/tactics", served.url)).status,
        401,
        "{}",
        scrape.text
    );
    drop(served);

    // No token at all: open, as every route is.
    let served = Served::start(&test, &["t.yaml"]);
    Scrape::of(&served.url, None);
}

#[test]
fn cost_and_the_budget_spent() {
    let (test, mock) = setup();
    // $100 per million tokens: a call of 12 tokens costs $0.0012.
    let priced = tactic("he\"lper", &mock.base_url()).replace(
        "max_llm_recall: 0}",
        "max_llm_recall: 0, model_args: {max_tokens: 10}}\npricing:\n  m: {input_per_million: 100.0, output_per_million: 100.0}",
    );
    let test = test.file("priced.yaml", &priced);
    let served = Served::start(&test, &["priced.yaml", "--max-cost", "0.5"]);
    for _ in 0..3 {
        assert_eq!(
            call("POST", &format!("{}/run", served.url), None, Some("\"x\"")),
            200
        );
    }
    let scrape = Scrape::of(&served.url, None);
    // The tactic's name is a label value, escaped.
    assert!(
        scrape
            .text
            .contains("lllm_serve_cost_usd_total{tactic=\"he\\\"lper\"} 0.0036\n"),
        "{}",
        scrape.text
    );
    let tactic = [("tactic", "he\"lper")];
    assert_eq!(
        scrape.value("lllm_serve_cost_unknown_sessions_total", &tactic),
        Some(0.0)
    );
    assert_eq!(scrape.value("lllm_serve_budget_limit_usd", &[]), Some(0.5));
    let spent = scrape.value("lllm_serve_budget_spent_usd", &[]).unwrap();
    assert!((spent - 0.0036).abs() < 1e-12, "{spent}");
    assert_eq!(
        scrape.value("lllm_serve_budget_refused_calls_total", &[]),
        Some(0.0)
    );
}

#[test]
fn a_run_past_its_deadline_is_a_timeout_and_its_latency_is_counted() {
    let (test, _mock) = setup();
    let served = Served::start(&test, &["t.yaml", "--timeout", "1"]);
    let run = format!("{}/run", served.url);
    assert_eq!(call("POST", &run, None, Some(r#""hold""#)), 504);
    block(until_running(&served.url, 0));
    let scrape = Scrape::of(&served.url, None);
    let labels = [("tactic", "helper"), ("route", "/run")];
    assert_eq!(
        scrape.value(
            "lllm_serve_sessions_total",
            &[("tactic", "helper"), ("state", "timeout")]
        ),
        Some(1.0)
    );
    assert_eq!(
        scrape.value(
            "lllm_serve_requests_total",
            &[labels[0], labels[1], ("status", "504")]
        ),
        Some(1.0)
    );
    // It took its deadline: past the 0.5 s bucket, at least 1 s in the sum.
    let bucket = |le: &str| {
        scrape.value(
            "lllm_serve_request_duration_seconds_bucket",
            &[labels[0], labels[1], ("le", le)],
        )
    };
    assert_eq!((bucket("0.5"), bucket("+Inf")), (Some(0.0), Some(1.0)));
    let sum = scrape
        .value("lllm_serve_request_duration_seconds_sum", &labels)
        .unwrap();
    assert!(sum >= 1.0, "{sum}");
}

#[test]
fn the_parser_refuses_what_the_format_does_not_allow() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"q\\\"\\\\\\n\"} 1\n\
                # TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3.5\nh_count 2\n";
    let samples = parse(good).unwrap();
    // Empty lines and other comments are the format's too.
    assert_eq!(
        parse("# a comment\n\n# TYPE a gauge\na 1\n").unwrap().len(),
        1
    );
    assert_eq!(samples[0].labels["x"], "q\"\\\n");
    for bad in [
        "# TYPE a counter\na 1",
        "a 1\n",
        "# TYPE a counter\n# TYPE a counter\na 1\n",
        "# TYPE a counter\n# HELP a x\\y\na 1\n",
        "# TYPE a gauge\na{x=\"\n\"} 1\n",
        "# TYPE a counter\na{x=\"\\t\"} 1\n",
        "# TYPE a counter\na{x=\"1\"} 1\na{x=\"1\"} 2\n",
        "# TYPE a counter\na{x=\"1\",x=\"2\"} 1\n",
        "# TYPE a counter\na one\n",
        "# TYPE 1a counter\n1a 1\n",
        "# TYPE a counter\n# TYPE b counter\nb 1\na 1\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}

/// One sample: its name, labels (unescaped) and value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape of `/metrics`, parsed strictly.
struct Scrape {
    text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    /// `GET /metrics`: 200, the format's content type, text that parses.
    #[track_caller]
    fn of(url: &str, token: Option<&str>) -> Scrape {
        let answer = block(send("GET", &format!("{url}/metrics"), token, None));
        assert_eq!(answer.status, 200, "{}", answer.text);
        assert_eq!(
            answer.headers["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let samples = parse(&answer.text).unwrap_or_else(|error| {
            panic!("not exposition format 0.0.4: {error}\n{}", answer.text)
        });
        Scrape {
            text: answer.text,
            samples,
        }
    }

    /// The value of the series `name` with exactly `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|sample| sample.name == name && sample.labels == labels)
            .map(|sample| sample.value)
    }
}

/// The text exposition format 0.0.4, strictly: every line a `# HELP`, a
/// `# TYPE`, another comment, empty, or a sample (`name{label="value",…} value`); a family's `TYPE`
/// once, before its samples, which are together; no series twice; label
/// values only with the format's escapes; a histogram's buckets ascending
/// in `le`, their counts never falling, the last `+Inf` and equal to its
/// `_count`, with a `_sum`.
fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let body = text
        .strip_suffix('\n')
        .ok_or("the text does not end with a line feed")?;
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helped: HashSet<String> = HashSet::new();
    let mut finished: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut seen: HashSet<String> = HashSet::new();
    let mut samples = Vec::new();
    for (number, line) in body.split('\n').enumerate() {
        let at = |what: String| format!("line {}: {what}: {line:?}", number + 1);
        // Empty lines and comments other than HELP and TYPE are allowed, and ignored.
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.trim_start().strip_prefix('#') {
            let comment = comment.trim_start();
            let Some((keyword, rest)) = comment.split_once(' ') else {
                continue;
            };
            if !matches!(keyword, "HELP" | "TYPE") {
                continue;
            }
            let (name, value) = rest
                .split_once(' ')
                .ok_or_else(|| at("no name and text".into()))?;
            if !metric_name(name) {
                return Err(at(format!("`{name}` is not a metric name")));
            }
            if keyword == "HELP" {
                unescape(value, false).map_err(&at)?;
                if !helped.insert(name.to_string()) {
                    return Err(at("a second HELP".into()));
                }
                continue;
            }
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&value) {
                return Err(at(format!("type `{value}`")));
            }
            if types.insert(name.to_string(), value.to_string()).is_some() {
                return Err(at("a second TYPE".into()));
            }
            if let Some(previous) = current.replace(name.to_string()) {
                finished.insert(previous);
            }
            continue;
        }
        let sample = sample(line).map_err(&at)?;
        let family = family_of(&sample.name, &types);
        let Some(kind) = types.get(&family) else {
            return Err(at("a sample before its family's TYPE".into()));
        };
        if current.as_deref() != Some(family.as_str()) || finished.contains(&family) {
            return Err(at("a sample away from its family".into()));
        }
        if sample.labels.contains_key("le") != sample.name.ends_with("_bucket")
            || (kind == "histogram") != (family != sample.name)
        {
            return Err(at("a histogram's series outside the format".into()));
        }
        if !seen.insert(format!("{}{:?}", sample.name, sample.labels)) {
            return Err(at("a series twice".into()));
        }
        samples.push(sample);
    }
    for (family, kind) in &types {
        if kind == "histogram" {
            histograms(family, &samples)?;
        }
    }
    Ok(samples)
}

/// A histogram's buckets are cumulative, end at `+Inf` = `_count`, and
/// each label set has a `_sum`.
fn histograms(family: &str, samples: &[Sample]) -> Result<(), String> {
    /// A series' labels without `le`, and its (bound, count) buckets.
    type Buckets = Vec<(BTreeMap<String, String>, Vec<(f64, f64)>)>;
    let mut buckets: Buckets = Vec::new();
    for sample in samples
        .iter()
        .filter(|sample| sample.name == format!("{family}_bucket"))
    {
        let mut labels = sample.labels.clone();
        let le = labels.remove("le").unwrap_or_default();
        let bound = float(&le).ok_or_else(|| format!("le `{le}`"))?;
        match buckets.iter_mut().find(|(known, _)| *known == labels) {
            Some((_, series)) => series.push((bound, sample.value)),
            None => buckets.push((labels, vec![(bound, sample.value)])),
        }
    }
    for (labels, series) in &buckets {
        let find = |suffix: &str| {
            samples
                .iter()
                .find(|sample| {
                    sample.name == format!("{family}_{suffix}") && sample.labels == *labels
                })
                .map(|sample| sample.value)
        };
        for pair in series.windows(2) {
            if pair[1].0 <= pair[0].0 || pair[1].1 < pair[0].1 {
                return Err(format!(
                    "{family}{labels:?}: buckets {pair:?} not cumulative"
                ));
            }
        }
        let last = series.last().copied().unwrap_or((0.0, 0.0));
        if last.0 != f64::INFINITY || Some(last.1) != find("count") || find("sum").is_none() {
            return Err(format!(
                "{family}{labels:?}: +Inf, _count and _sum disagree"
            ));
        }
    }
    Ok(())
}

/// The family a sample's name belongs to: a histogram's `_bucket`, `_sum`
/// and `_count` are its own.
fn family_of(name: &str, types: &HashMap<String, String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && types.get(base).is_some_and(|kind| kind == "histogram")
        {
            return base.to_string();
        }
    }
    name.to_string()
}

/// One sample line.
fn sample(line: &str) -> Result<Sample, String> {
    let end = line.find(['{', ' ']).ok_or("no value after the name")?;
    let name = &line[..end];
    if !metric_name(name) {
        return Err(format!("`{name}` is not a metric name"));
    }
    let mut labels = BTreeMap::new();
    let mut rest = &line[end..];
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (label, after) = rest.split_once("=\"").ok_or("a label without =\"")?;
            if !label_name(label) || labels.contains_key(label) {
                return Err(format!("label name `{label}`"));
            }
            // The value runs to the first `"` that is not escaped.
            let mut escaped = false;
            let close = after
                .char_indices()
                .find(|(_, c)| {
                    let close = *c == '"' && !escaped;
                    escaped = *c == '\\' && !escaped;
                    close
                })
                .map(|(index, _)| index)
                .ok_or("an unclosed label value")?;
            labels.insert(label.to_string(), unescape(&after[..close], true)?);
            rest = &after[close + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    let fields: Vec<&str> = rest
        .strip_prefix(' ')
        .ok_or("no space before the value")?
        .split(' ')
        .collect();
    let value = match fields.as_slice() {
        [value] => value,
        [value, timestamp] if timestamp.parse::<i64>().is_ok() => value,
        _ => return Err("not `value [timestamp]`".into()),
    };
    let value = float(value).ok_or_else(|| format!("value `{value}`"))?;
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// A value as Go's `ParseFloat` reads one, with the format's `+Inf`,
/// `-Inf` and `NaN`.
fn float(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ if text
            .chars()
            .all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) =>
        {
            text.parse().ok()
        }
        _ => None,
    }
}

fn metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A label value (`\\`, `\"`, `\n`) or HELP text (`\\`, `\n`) unescaped;
/// any other escape, or a raw line feed, is an error.
fn unescape(text: &str, label: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('"') if label => out.push('"'),
                other => return Err(format!("the escape `\\{}`", other.unwrap_or(' '))),
            },
            '"' if label => return Err("a bare `\"` in a label value".into()),
            '\n' => return Err("a line feed".into()),
            c => out.push(c),
        }
    }
    Ok(out)
}
