//! What a local server says of its capacity: llama.cpp's `GET /props` and
//! its `total_slots` (llama-server's `--parallel`, 4 when left to it), the
//! number of requests it serves at once; the others wait in its queue,
//! where their time counts against our `timeout_s`. The limiter asks once
//! per provider and run, before the first request (`Limiter::learn`), and
//! caps the provider there unless the user set `max_concurrency`.
//!
//! Only a server on this machine or the user's network is asked
//! ([`is_local`]): a hosted API never gets the request. The probe goes to
//! the origin of the provider's own base URL with its own headers (the
//! server checks the key on `/props` as on a model call), follows no
//! redirect and waits [`TIMEOUT`] at most; any failure, a 404 (Ollama,
//! vLLM, LM Studio) or an answer without a sane `total_slots` means
//! "unknown", never an error.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use serde_json::Value;

use super::http;

/// How long the probe waits for the server's answer.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// The most of `/props` read: it holds the chat template, kilobytes.
const MAX_BYTES: usize = 1 << 20;

/// More slots than any server has: a larger number is clamped to it.
pub const MAX_SLOTS: usize = 1024;

/// How to ask one provider's server.
pub struct Probe {
    /// The provider's name, for what lllm says about it.
    pub provider: String,
    client: reqwest::Client,
    endpoint: http::Endpoint,
}

impl std::fmt::Debug for Probe {
    /// The provider and where the probe goes; never a header.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Probe")
            .field("provider", &self.provider)
            .field("place", &self.place())
            .finish()
    }
}

impl Probe {
    /// Asks the server of `model_endpoint` (`…/v1/chat/completions`,
    /// `…/v1/messages`: `suffix` is the part after the base URL) at the root
    /// of the same origin, where llama-server serves `/props` whatever its
    /// API paths. The headers are the endpoint's.
    pub fn new(
        provider: &str,
        client: reqwest::Client,
        model_endpoint: &http::Endpoint,
        suffix: &str,
    ) -> Probe {
        Probe {
            provider: provider.to_string(),
            client,
            endpoint: model_endpoint.with_path(|path| props_path(path, suffix)),
        }
    }

    /// Where the probe goes, as errors show a URL.
    pub fn place(&self) -> &str {
        self.endpoint.place()
    }

    /// The server's slots, if it says.
    pub async fn slots(&self) -> Option<usize> {
        let reply = http::get(&self.client, &self.endpoint, TIMEOUT, MAX_BYTES)
            .await
            .ok()?;
        (reply.status == 200)
            .then(|| total_slots(&reply.body))
            .flatten()
    }
}

/// `/props` beside a model endpoint's path: `suffix` and a `/v1` before it
/// taken off (llama-server's `--api-prefix` stays in front).
pub fn props_path(path: &str, suffix: &str) -> String {
    let base = path.strip_suffix(suffix).unwrap_or(path);
    let root = base.strip_suffix("/v1").unwrap_or(base);
    format!("{root}/props")
}

/// `total_slots` of a `/props` body: a whole number from 1, clamped to
/// [`MAX_SLOTS`]; anything else is unknown.
pub fn total_slots(body: &str) -> Option<usize> {
    let props: Value = serde_json::from_str(body).ok()?;
    let slots = props.get("total_slots")?.as_u64()?;
    (slots >= 1).then(|| slots.min(MAX_SLOTS as u64) as usize)
}

/// Whether `url` is a server on this machine or the user's network, which
/// lllm asks for its capacity and paces by its latency: a loopback,
/// private (RFC 1918, IPv6 unique-local), link-local, unspecified or
/// shared (RFC 6598: Tailscale, carrier NAT) address; `localhost`; a name
/// without a dot (`gpu-box`, a Compose service); or a name under `.local`,
/// `.internal`, `.lan` or `.home.arpa` (Kubernetes' `svc.cluster.local`
/// among them). Any other host, hosted APIs first, is left alone.
pub fn is_local(url: &str) -> bool {
    let Some(host) = reqwest::Url::parse(url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_ascii_lowercase))
    else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(address)) => local_v4(address),
        Ok(IpAddr::V6(address)) => local_v6(address),
        Err(_) => {
            let name = host.trim_end_matches('.');
            name == "localhost"
                || !name.contains('.')
                || [".localhost", ".local", ".internal", ".lan", ".home.arpa"]
                    .iter()
                    .any(|suffix| name.ends_with(suffix))
        }
    }
}

fn local_v4(address: Ipv4Addr) -> bool {
    let [first, second, ..] = address.octets();
    address.is_loopback()
        || address.is_private()
        || address.is_link_local()
        || address.is_unspecified()
        || (first == 100 && (second & 0xc0) == 64)
}

fn local_v6(address: Ipv6Addr) -> bool {
    let first = address.segments()[0];
    address.is_loopback()
        || address.is_unspecified()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || address.to_ipv4_mapped().is_some_and(local_v4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn props_is_at_the_root_of_the_server() {
        for (path, suffix, expected) in [
            ("/v1/chat/completions", "/chat/completions", "/props"),
            ("/chat/completions", "/chat/completions", "/props"),
            (
                "/api/v1/chat/completions",
                "/chat/completions",
                "/api/props",
            ),
            ("/v1/messages", "/v1/messages", "/props"),
            ("/llama/v1/messages", "/v1/messages", "/llama/props"),
        ] {
            assert_eq!(props_path(path, suffix), expected, "{path}");
        }
        let endpoint = http::Endpoint::new(
            "http://127.0.0.1:8080/v1/chat/completions",
            [("authorization", "Bearer sk-local")],
        )
        .unwrap();
        let probe = Probe::new(
            "local",
            reqwest::Client::new(),
            &endpoint,
            "/chat/completions",
        );
        assert_eq!(probe.place(), "http://127.0.0.1:8080/props");
        assert_eq!(
            probe.endpoint.headers["authorization"], "Bearer sk-local",
            "the server checks the key on /props too"
        );
    }

    #[test]
    fn only_a_sane_slot_count_is_taken() {
        let table = [
            (
                r#"{"total_slots": 4, "default_generation_settings": {"n_ctx": 4096}}"#,
                Some(4),
            ),
            (r#"{"total_slots": 1}"#, Some(1)),
            (r#"{"total_slots": 1000000}"#, Some(MAX_SLOTS)),
            (r#"{"total_slots": 0}"#, None),
            (r#"{"total_slots": -2}"#, None),
            (r#"{"total_slots": 2.5}"#, None),
            (r#"{"total_slots": "4"}"#, None),
            (r#"{"slots": 4}"#, None),
            ("404 page not found", None),
            ("[4]", None),
        ];
        for (body, expected) in table {
            assert_eq!(total_slots(body), expected, "{body}");
        }
    }

    #[test]
    fn local_servers_are_this_machine_and_the_user_s_network() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434/v1",
            "http://LOCALHOST./v1",
            "http://[::1]:8000/v1",
            "http://0.0.0.0:8000/v1",
            "http://192.168.1.20:8080/v1",
            "http://10.0.0.7/v1",
            "http://172.16.4.2/v1",
            "http://169.254.0.3/v1",
            "http://100.101.102.103:11434/v1",
            "http://[fd12:3456::1]:8000/v1",
            "http://[fe80::1]/v1",
            "http://[::ffff:192.168.0.2]/v1",
            "http://gpu-box:8000/v1",
            "http://ollama:11434/v1",
            "http://vllm.default.svc.cluster.local:8000/v1",
            "https://llm.corp.internal/v1",
            "http://nas.lan:8080/v1",
            "http://box.home.arpa/v1",
        ] {
            assert!(is_local(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "https://api.anthropic.com",
            "https://openrouter.ai/api/v1",
            "https://my-proxy.example.com/v1",
            "http://8.8.8.8/v1",
            "http://100.200.0.1/v1",
            "http://[2001:db8::1]/v1",
            "not a url",
        ] {
            assert!(!is_local(url), "{url}");
        }
    }
}
