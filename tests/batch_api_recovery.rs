//! `--via batch-api` after a kill between a batch's creation and the line
//! that names it in the journal: `BatchApi::start` finds the batch at the
//! provider (OpenAI: by the submission id in its metadata; Anthropic: among
//! the batches created since that the journal does not name, by the
//! custom_ids of their results) and answers from it, submitting nothing
//! again; a
//! submission the provider never got is counted as never sent and its
//! request goes out in a new batch. Against the in-process `lllm-mock`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

use lllm::dialog::{ApiType, Message};
use lllm::provider::batch_api::journal::{Entry, Journal, Request};
use lllm::provider::batch_api::service::{Api, Service};
use lllm::provider::batch_api::{BatchApi, BatchApiProvider, Settings, digest};
use lllm::provider::http::Endpoint;
use lllm::provider::{ChatRequest, Provider, ProviderError, WireRequest, anthropic, openai};

/// Builds the bodies of one API; never sends.
struct Wire(Api);

impl Provider for Wire {
    fn invoke<'a>(
        &'a self,
        _request: ChatRequest<'a>,
    ) -> BoxFuture<'a, Result<Message, ProviderError>> {
        Box::pin(async { Err(ProviderError::permanent("not sent: batched")) })
    }

    fn wire_request(&self, request: &ChatRequest<'_>) -> WireRequest {
        let body = match self.0 {
            Api::OpenAi => openai::build_request(request, &openai::WireOptions::default()),
            Api::Anthropic => anthropic::build_request(request),
        };
        WireRequest {
            url: String::new(),
            body,
        }
    }
}

fn service(api: Api, url: &str) -> Service {
    let endpoint = match api {
        Api::OpenAi => Endpoint::new(
            &format!("{url}/v1/chat/completions"),
            [("authorization", "Bearer sk-test")],
        ),
        Api::Anthropic => Endpoint::new(
            &format!("{url}/v1/messages"),
            [
                ("x-api-key", "sk-test"),
                ("anthropic-version", "2023-06-01"),
            ],
        ),
    }
    .unwrap();
    Service::new("remote", api, reqwest::Client::new(), &endpoint).unwrap()
}

fn endpoint(api: Api) -> &'static str {
    match api {
        Api::OpenAi => "/v1/chat/completions",
        Api::Anthropic => "/v1/messages",
    }
}

async fn recover(api: Api) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.yaml"), "default: {echo: true}\n").unwrap();
    let log = dir.path().join("requests.jsonl");
    let options = lllm_mock::server::ServerOptions {
        script: dir.path().join("script.yaml"),
        host: "127.0.0.1".into(),
        port: 0,
        latency_ms: None,
        log: Some(log.clone()),
        ..Default::default()
    };
    let server = lllm_mock::server::Server::bind(&options).await.unwrap();
    let url = server.url();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();

    let messages = |text: &str| vec![Arc::new(Message::user(text))];
    let (lost, created) = (messages("never sent"), messages("created, not journaled"));
    let arguments = Map::new();
    let request = |messages: &'static [Arc<Message>]| ChatRequest {
        model: "m",
        messages,
        tools: &[],
        format: None,
        model_args: Box::leak(Box::new(arguments.clone())),
        api_type: ApiType::Completion,
        stream: None,
    };
    let (lost, created): (&'static [_], &'static [_]) = (
        Box::leak(lost.into_boxed_slice()),
        Box::leak(created.into_boxed_slice()),
    );
    let body = |messages| Wire(api).wire_request(&request(messages)).body;

    // The killed run: both submissions journaled; only the second one's
    // batch created (the kill came before its `batch` line), and with it a
    // batch the journal names, of as many requests, to be told apart.
    let first = service(api, &url);
    let (mut journal, _) = Journal::open(&out).unwrap();
    let now = chrono::Utc::now().timestamp();
    let named = first
        .submit(
            "named",
            now,
            endpoint(api),
            &[("named-0".into(), body(created))],
        )
        .await
        .unwrap();
    journal
        .append(&Entry::Submission {
            submission: "named".into(),
            service: first.key.clone(),
            endpoint: endpoint(api).into(),
            submitted_at: now,
            requests: vec![Request {
                custom_id: "named-0".into(),
                digest: "another request".into(),
            }],
        })
        .unwrap();
    journal
        .append(&Entry::Batch {
            submission: "named".into(),
            batch_id: named,
        })
        .unwrap();
    journal
        .append(&Entry::Ended {
            submission: "named".into(),
            state: "ended".into(),
        })
        .unwrap();
    for (submission, messages) in [("lost", lost), ("created", created)] {
        journal
            .append(&Entry::Submission {
                submission: submission.into(),
                service: first.key.clone(),
                endpoint: endpoint(api).into(),
                submitted_at: now,
                requests: vec![Request {
                    custom_id: format!("{submission}-0"),
                    digest: digest(&first.key, endpoint(api), &body(messages)),
                }],
            })
            .unwrap();
    }
    // Created after `lost` was journaled: it must not be taken for `lost`.
    let batch = first
        .submit(
            "created",
            now,
            endpoint(api),
            &[("created-0".into(), body(created))],
        )
        .await
        .unwrap();
    drop(journal);

    // The resumed run.
    let settings = Settings {
        poll_interval: Duration::from_millis(1),
        poll_max: Duration::from_millis(1),
        gather_window: Duration::ZERO,
        cancel_on_interrupt: false,
    };
    let hub = Arc::new(BatchApi::open(&out, settings, true).unwrap());
    let service = hub.register(service(api, &url));
    let collector = hub.start().await;
    let provider = BatchApiProvider {
        inner: Arc::new(Wire(api)),
        service,
        hub: hub.clone(),
    };
    let answer = provider.invoke(request(created)).await.unwrap();
    assert_eq!(answer.content, "created, not journaled");
    let answer = provider.invoke(request(lost)).await.unwrap();
    assert_eq!(answer.content, "never sent");
    collector.abort();

    let journal = std::fs::read_to_string(out.join("batch-api.jsonl")).unwrap();
    assert!(
        journal.contains(&format!(
            "{{\"type\":\"batch\",\"submission\":\"created\",\"batch_id\":\"{batch}\"}}"
        )),
        "{journal}"
    );
    assert!(
        journal.contains("{\"type\":\"abandoned\",\"submission\":\"lost\""),
        "{journal}"
    );
    // Three batches in all: the two of the killed run and one for `lost`.
    let text = std::fs::read_to_string(&log).unwrap();
    let creations: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|entry| entry.get("custom_ids").is_some())
        .collect();
    assert_eq!(creations.len(), 3, "{creations:?}");
    let _ = stop.send(());
    let _ = serving.await;
}

#[tokio::test]
async fn an_openai_batch_not_journaled_is_found_by_its_metadata() {
    recover(Api::OpenAi).await;
}

#[tokio::test]
async fn an_anthropic_batch_not_journaled_is_told_by_the_custom_ids_of_its_results() {
    recover(Api::Anthropic).await;
}
