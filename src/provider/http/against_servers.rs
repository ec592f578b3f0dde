//! `send`'s redirect policy, basic auth from URL credentials and the scrubbing
//! of reply bodies, against real HTTP servers on 127.0.0.1 that each test
//! starts (two ports are two origins).

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// One request as a test server read it.
#[derive(Clone, Debug)]
struct Received {
    /// Request line and headers.
    head: String,
    body: String,
}

impl Received {
    fn path(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or_default()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// A server that answers every request with `answer(request)` (a whole
/// HTTP response) and keeps what it received, in order.
struct Server {
    origin: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Server {
    async fn start(answer: impl Fn(&Received) -> String + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = received.clone();
        let answer = Arc::new(answer);
        // One connection at a time, so what was received is complete and in
        // order once a later request has been answered.
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let Some(request) = read_request(&mut stream).await else {
                    continue;
                };
                kept.lock().unwrap().push(request.clone());
                let _ = stream.write_all(answer(&request).as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        Server { origin, received }
    }

    /// Every request received before this call: asks the server itself
    /// for `/sentinel` and returns what came before it.
    async fn received_before_now(&self) -> Vec<Received> {
        // Our client: it follows no redirect the server may answer with.
        let client = client(Duration::from_secs(30)).unwrap();
        let sentinel = format!("{}/sentinel", self.origin);
        client.get(sentinel).send().await.unwrap();
        let mut received = self.received.lock().unwrap().clone();
        assert_eq!(received.pop().unwrap().path(), "/sentinel");
        received.retain(|request| request.path() != "/sentinel");
        received
    }
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Received> {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
            break at;
        }
        let read = stream.read(&mut buffer).await.ok()?;
        if read == 0 {
            return None;
        }
        bytes.extend_from_slice(&buffer[..read]);
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    let mut request = Received {
        head,
        body: String::new(),
    };
    let length: usize = request
        .header("content-length")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let mut body = bytes[head_end + 4..].to_vec();
    while body.len() < length {
        let read = stream.read(&mut buffer).await.ok()?;
        if read == 0 {
            break;
        }
        body.extend_from_slice(&buffer[..read]);
    }
    request.body = String::from_utf8_lossy(&body).into_owned();
    Some(request)
}

fn response(status: u16, headers: &[(&str, &str)], body: &str) -> String {
    let mut text = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text
}

const KEY: &str = "sk-ant-very-secret-key";
const CUSTOM: &str = "custom-header-secret";

fn endpoint(url: &str) -> Endpoint {
    Endpoint::new(url, [("x-api-key", KEY), ("x-custom", CUSTOM)]).unwrap()
}

async fn post(endpoint: &Endpoint) -> Result<HttpReply, ProviderError> {
    let client = client(Duration::from_secs(30)).unwrap();
    let body = br#"{"messages": [{"role": "user", "content": "the prompt"}]}"#.to_vec();
    post_json(&client, endpoint, body, Duration::from_secs(60)).await
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_nothing_reaches_it() {
    let elsewhere = Server::start(|_| response(200, &[], "{}")).await;
    for status in [301, 302, 303, 307, 308] {
        let target = format!("{}/v1/messages", elsewhere.origin);
        let first = Server::start(move |_| response(status, &[("location", &target)], "")).await;
        let error = post(&endpoint(&format!("{}/v1/messages", first.origin)))
            .await
            .err()
            .unwrap();
        assert_eq!(error.kind, ErrorKind::Permanent);
        assert_eq!(error.status, Some(status));
        let text = error.to_string();
        assert!(text.contains(&format!("`{}`", first.origin)), "{text}");
        assert!(
            text.contains(&format!(
                "`{}/v1/messages`, another origin",
                elsewhere.origin
            )),
            "{text}"
        );
        assert!(text.contains("not followed"), "{text}");
        assert_eq!(first.received_before_now().await.len(), 1);
    }
    let reached = elsewhere.received_before_now().await;
    assert!(reached.is_empty(), "the other origin got {reached:?}");
}

#[tokio::test]
async fn a_307_within_the_origin_is_followed_with_its_body_and_headers() {
    let server = Server::start(|request| match request.path() {
        "/v1/messages" => response(307, &[("location", "/v2/messages")], ""),
        _ => response(200, &[], r#"{"ok": true}"#),
    })
    .await;
    let reply = post(&endpoint(&format!("{}/v1/messages", server.origin)))
        .await
        .unwrap();
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (200, r#"{"ok": true}"#)
    );
    let received = server.received_before_now().await;
    assert_eq!(received.len(), 2);
    let (first, second) = (&received[0], &received[1]);
    assert!(second.head.starts_with("POST /v2/messages "), "{second:?}");
    assert_eq!(second.body, first.body);
    assert!(second.body.contains("the prompt"));
    assert_eq!(second.header("x-api-key"), Some(KEY));
    assert_eq!(second.header("x-custom"), Some(CUSTOM));
}

#[tokio::test]
async fn a_redirect_that_would_drop_the_body_or_loop_is_an_error() {
    let moved = Server::start(|_| response(301, &[("location", "/v2/messages?x=1")], "")).await;
    let error = post(&endpoint(&format!("{}/v1/messages", moved.origin)))
        .await
        .err()
        .unwrap();
    assert_eq!(
        (error.kind, error.status),
        (ErrorKind::Permanent, Some(301))
    );
    let text = error.to_string();
    assert!(
        text.contains(&format!("redirected to `{}/v2/messages`", moved.origin)),
        "{text}"
    );
    assert!(
        text.contains("hint: point `base_url` at the new place"),
        "{text}"
    );
    assert_eq!(moved.received_before_now().await.len(), 1);

    let looping = Server::start(|_| response(308, &[("location", "/v1/messages")], "")).await;
    let error = post(&endpoint(&format!("{}/v1/messages", looping.origin)))
        .await
        .err()
        .unwrap();
    assert!(
        error.to_string().contains("more than 10 redirects"),
        "{error}"
    );
    assert_eq!(looping.received_before_now().await.len(), 11);

    let nowhere = Server::start(|_| response(307, &[], "")).await;
    let error = post(&endpoint(&format!("{}/v1/messages", nowhere.origin)))
        .await
        .err()
        .unwrap();
    assert!(
        error.to_string().contains("without a usable `Location`"),
        "{error}"
    );
}

#[tokio::test]
async fn url_credentials_authenticate_and_echoed_secrets_are_scrubbed() {
    // The server echoes every credential it was sent, as some proxies do in
    // their error pages.
    let server = Server::start(|request| {
        let echo = format!(
            "{{\"error\": {{\"message\": \"denied: authorization={} x-api-key={} x-custom={}\"}}}}",
            request.header("authorization").unwrap_or_default(),
            request.header("x-api-key").unwrap_or_default(),
            request.header("x-custom").unwrap_or_default(),
        );
        response(401, &[], &echo)
    })
    .await;
    let address = server.origin.trim_start_matches("http://");
    let endpoint = endpoint(&format!("http://user:PASSWORD-1234@{address}/v1/messages"));
    let reply = post(&endpoint).await.unwrap();
    assert_eq!(reply.status, 401);
    assert_eq!(
        reply.body,
        r#"{"error": {"message": "denied: authorization=Basic *** x-api-key=*** x-custom=***"}}"#
    );
    let received = server.received_before_now().await;
    assert_eq!(
        received[0].header("authorization"),
        Some("Basic dXNlcjpQQVNTV09SRC0xMjM0")
    );
    assert!(received[0].head.starts_with("POST /v1/messages "));
    assert!(!received[0].head.contains("PASSWORD"), "{:?}", received[0]);
}

#[tokio::test]
async fn streamed_payloads_are_scrubbed_before_they_are_read() {
    let events = format!(
        "data: {{\"text\": \"{KEY}\"}}\n\ndata: {{\"text\": \"{}\"}}\n\n",
        CUSTOM.replace('-', "\\u002d")
    );
    let server =
        Server::start(move |_| response(200, &[("content-type", "text/event-stream")], &events))
            .await;
    let client = client(Duration::from_secs(30)).unwrap();
    let endpoint = endpoint(&format!("{}/v1/messages", server.origin));
    let mut payloads = Vec::new();
    let reply = post_sse(
        &client,
        &endpoint,
        b"{}".to_vec(),
        Duration::from_secs(60),
        |data| {
            payloads.push(data.to_string());
            Ok(true)
        },
    )
    .await
    .unwrap();
    assert!(matches!(reply, Streamed::Read(_)));
    // A value escaped beyond what JSON needs is left to the parsed-text
    // scrubbing of `provider::scrub`.
    assert_eq!(
        payloads,
        [
            "{\"text\": \"***\"}".to_string(),
            format!("{{\"text\": \"{}\"}}", CUSTOM.replace('-', "\\u002d"))
        ]
    );
}

#[tokio::test]
async fn a_json_reply_to_a_streaming_request_is_read_whole() {
    let body = format!("{{\"content\": \"hello {KEY}\"}}");
    let server =
        Server::start(move |_| response(200, &[("content-type", "application/json")], &body)).await;
    let client = client(Duration::from_secs(30)).unwrap();
    let endpoint = endpoint(&format!("{}/v1/messages", server.origin));
    let mut payloads = 0;
    let reply = post_sse(
        &client,
        &endpoint,
        b"{}".to_vec(),
        Duration::from_secs(60),
        |_| {
            payloads += 1;
            Ok(true)
        },
    )
    .await
    .unwrap();
    assert_eq!(payloads, 0);
    match reply {
        Streamed::Whole(reply) => assert_eq!(reply.body, "{\"content\": \"hello ***\"}"),
        _ => panic!("not read whole"),
    }
}

/// A server that answers one request with `head` and then `chunk` over and
/// over, until the client hangs up (a body or stream without end).
async fn endless(head: &'static str, chunk: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            if read_request(&mut stream).await.is_none() {
                continue;
            }
            if stream.write_all(head.as_bytes()).await.is_err() {
                continue;
            }
            while stream.write_all(&chunk).await.is_ok() {}
        }
    });
    origin
}

#[tokio::test]
async fn replies_without_end_stop_at_the_size_cap() {
    let client = client(Duration::from_secs(30)).unwrap();
    let megabyte = |prefix: &str| {
        let mut text = format!("{:x}\r\n{prefix}", 1 << 20);
        text.push_str(&"x".repeat((1 << 20) - prefix.len()));
        text.push_str("\r\n");
        text.into_bytes()
    };
    let chunked =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    let origin = endless(chunked, megabyte("")).await;
    let error = post_json(
        &client,
        &endpoint(&origin),
        b"{}".to_vec(),
        Duration::from_secs(300),
    )
    .await
    .err()
    .expect("an endless body is an error");
    assert!(error.message.contains("larger than 64 MiB"), "{error}");
    assert!(!error.is_retryable());

    // A length announced past the cap is refused before it is read.
    let announced =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 99999999999\r\n\r\n";
    let origin = endless(announced, b"x".repeat(1 << 16)).await;
    let error = post_json(
        &client,
        &endpoint(&origin),
        b"{}".to_vec(),
        Duration::from_secs(300),
    )
    .await
    .err()
    .expect("an announced giant is an error");
    assert!(error.message.contains("larger than 64 MiB"), "{error}");

    // A stream of events without end: each event is small, the whole is not.
    let stream =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let event = "data: {\"x\": 1}\n\n";
    let mut chunk = format!("{:x}\r\n", event.len() * 4096);
    chunk.push_str(&event.repeat(4096));
    chunk.push_str("\r\n");
    let origin = endless(stream, chunk.into_bytes()).await;
    let mut events = 0usize;
    let result = post_sse(
        &client,
        &endpoint(&origin),
        b"{}".to_vec(),
        Duration::from_secs(300),
        |_| {
            events += 1;
            Ok(true)
        },
    )
    .await;
    let error = result.err().expect("an endless stream is an error");
    assert!(error.message.contains("larger than 64 MiB"), "{error}");
    assert!(events > 0, "the events before the cap were read");
}

/// A local server's capacity (`capacity`): asked once, at `/props` at the
/// root of the provider's own origin, with the provider's own key; a
/// redirect elsewhere is not followed, and an answer without slots is
/// "unknown", never an error.
#[tokio::test]
async fn the_capacity_probe_asks_the_provider_s_own_origin_once() {
    use crate::config::{ProviderApi, ProviderConfig};
    use crate::provider::limit::{Bound, Limit};
    let elsewhere = Server::start(|_| response(200, &[], r#"{"total_slots": 64}"#)).await;
    let target = format!("{}/props", elsewhere.origin);
    let props = move |request: &Received| match request.path() {
        "/props" => response(200, &[], r#"{"total_slots": 3, "build_info": "b1"}"#),
        "/other/props" => response(307, &[("location", &target)], ""),
        _ => response(404, &[], "{}"),
    };
    let server = Server::start(props).await;
    let provider = |base_url: String, api: ProviderApi| ProviderConfig {
        api,
        base_url: Some(base_url),
        api_key_env: Some("LOCAL_KEY".into()),
        max_concurrency: None,
        rpm: None,
        tpm: None,
        timeout_s: None,
        connect_timeout_s: None,
        system_role: None,
        send_name: None,
        structured_output: None,
        retry_base_ms: None,
        retry_cap_ms: None,
        script: None,
        cache: None,
        cache_ttl_s: None,
        headers: Default::default(),
    };
    let configs = [
        (
            "local",
            provider(format!("{}/v1", server.origin), ProviderApi::OpenAi),
        ),
        (
            "claude",
            provider(server.origin.clone(), ProviderApi::Anthropic),
        ),
        (
            "moved",
            provider(format!("{}/other/v1", server.origin), ProviderApi::OpenAi),
        ),
    ]
    .into_iter()
    .map(|(name, config)| (name.to_string(), config))
    .collect();
    let providers = crate::provider::registry::Providers::new(&configs, &|name| {
        (name == "LOCAL_KEY").then(|| "sk-local-key".to_string())
    })
    .unwrap();
    let limiter_of = |model: &str| {
        let resolved = providers.resolve(model).ok().unwrap();
        resolved.provider
    };
    for model in ["local/m", "claude/m"] {
        let provider = limiter_of(model);
        let limiter = provider.limiter().unwrap();
        limiter.learn().await;
        limiter.learn().await;
        assert_eq!(
            limiter.limit(),
            Some(Limit {
                requests: 3,
                bound: Bound::Slots
            }),
            "{model}"
        );
    }
    let received = server.received_before_now().await;
    let paths: Vec<&str> = received.iter().map(Received::path).collect();
    assert_eq!(paths, ["/props", "/props"], "once per provider");
    assert!(
        received
            .iter()
            .all(|request| request.head.starts_with("GET "))
    );
    assert_eq!(
        received[0].header("authorization"),
        Some("Bearer sk-local-key")
    );
    assert_eq!(received[1].header("x-api-key"), Some("sk-local-key"));
    // Redirected elsewhere: not followed, so unknown (the adaptive limit).
    let moved = limiter_of("moved/m");
    let limiter = moved.limiter().unwrap();
    limiter.learn().await;
    assert_eq!(
        limiter.limit().map(|limit| limit.bound),
        Some(Bound::Adaptive)
    );
    assert_eq!(elsewhere.received_before_now().await.len(), 0);
}
