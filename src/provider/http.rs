//! The one module that talks HTTP: a pooled client, a JSON POST with timeouts,
//! network errors classified for the retry loop. Reading `Retry-After` and
//! the rate-limit headers is `rate_headers`'s.
//! Provider modules build bodies and read replies; they never see a socket.
//!
//! What leaves and what comes back is kept clean here, so that no caller can
//! forget: error texts name a URL only as `redact::place` shows it (no
//! credentials, no query) and never a header; credentials in a URL travel
//! only as a basic-auth header; a redirect is followed only within the
//! endpoint's origin (`follow`); every reply body is scrubbed of the secrets
//! the endpoint sends before anyone reads it.

use std::time::{Duration, Instant};

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION};

use super::{ErrorKind, ProviderError, trace};
use crate::redact::{self, Secrets};

const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// Same-origin redirects followed for one request, at most.
const MAX_REDIRECTS: usize = 10;

/// A JSON request body: `value` serialized. Serializing a tree of strings and
/// numbers cannot fail; if it ever did, nothing is sent.
pub fn json_body<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, ProviderError> {
    serde_json::to_vec(value).map_err(|error| {
        ProviderError::permanent(format!("cannot write the request as JSON: {error}"))
    })
}

/// A reply as received: status, headers and body text (scrubbed of the
/// endpoint's secrets).
pub struct HttpReply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

/// One client per run: connections are pooled across every agent and task.
/// It follows no redirect by itself: `send` decides (see `follow`).
pub fn client(connect_timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .pool_max_idle_per_host(1024)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|error| format!("cannot build the HTTP client: {error}"))
}

/// Builds a header map; a header that is not valid HTTP is an error naming it
/// (never its value, which may be a key).
pub fn headers<'a, I>(pairs: I) -> Result<HeaderMap, String>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name `{name}`"))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| format!("invalid value for header `{name}`"))?;
        if matches!(
            name.to_ascii_lowercase().as_str(),
            "authorization" | "x-api-key" | "api-key"
        ) {
            value.set_sensitive(true);
        }
        map.insert(header, value);
    }
    Ok(map)
}

/// Where a provider's requests go and the headers they carry, parsed and
/// checked once when the provider is built: a bad URL or header is a
/// configuration error, and no request pays for parsing them again.
///
/// `url` holds no credentials: `user:password@` in the given URL becomes an
/// `Authorization: Basic` header (as reqwest would send it; an explicit
/// `Authorization` header wins), so nothing that prints `url` can show them.
#[derive(Clone)]
pub struct Endpoint {
    pub url: reqwest::Url,
    pub headers: HeaderMap,
    /// What this endpoint sends that must not come back into text: every
    /// header value but the public ones, and the URL's credentials.
    pub secrets: Secrets,
    /// The URL as errors name it (`redact::place`).
    place: String,
}

impl Endpoint {
    pub fn new<'a, I>(url: &str, pairs: I) -> Result<Endpoint, String>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let place = redact::place(url);
        let mut parsed =
            reqwest::Url::parse(url).map_err(|error| format!("invalid URL `{place}`: {error}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!("invalid URL `{place}`: not http or https"));
        }
        let mut headers = headers(pairs)?;
        let decode = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8_lossy()
                .into_owned()
        };
        let user = decode(parsed.username());
        let password = parsed.password().map(decode);
        if !user.is_empty() || password.is_some() {
            if !headers.contains_key(AUTHORIZATION) {
                headers.insert(AUTHORIZATION, basic_auth(&user, password.as_deref()));
            }
            // Setting these cannot fail on an http(s) URL, checked above.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
        }
        // Every body we send is JSON; a configured `Content-Type` stays.
        if !headers.contains_key(CONTENT_TYPE) {
            headers.insert(CONTENT_TYPE, JSON);
        }
        let mut secrets = Secrets::new();
        for (name, value) in &headers {
            if let Ok(value) = value.to_str() {
                secrets.add_header(name.as_str(), value);
            }
        }
        secrets.add_url(url);
        Ok(Endpoint {
            url: parsed,
            headers,
            secrets,
            place,
        })
    }

    /// The URL as errors show it: without credentials (`***@` marks where
    /// they were) and without its query. Every message that names an
    /// endpoint shows it through this.
    pub fn place(&self) -> &str {
        &self.place
    }

    /// The same headers and secrets at the path `edit` makes of this
    /// endpoint's path (see [`edit_path`]); the query stays. The Batch APIs'
    /// files and batch objects live beside the model endpoint, under the
    /// same key.
    pub fn with_path(&self, edit: impl FnOnce(&str) -> String) -> Endpoint {
        let mut url = self.url.clone();
        set_path(&mut url, edit);
        Endpoint {
            place: redact::place(url.as_str()),
            url,
            headers: self.headers.clone(),
            secrets: self.secrets.clone(),
        }
    }

    /// The same headers and secrets at `suffix` below this endpoint:
    /// `suffix`'s path (`/batches/b1`) added to the end of the URL's path,
    /// and its query (`?limit=100`) after the URL's own (Azure OpenAI's
    /// `api-version` stays on every request).
    pub fn below(&self, suffix: &str) -> Endpoint {
        let (path, query) = match suffix.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (suffix, None),
        };
        let mut endpoint = self.with_path(|base| format!("{base}{path}"));
        if let Some(query) = query {
            let joined = match endpoint.url.query() {
                Some(own) if !own.is_empty() => format!("{own}&{query}"),
                _ => query.to_string(),
            };
            endpoint.url.set_query(Some(&joined));
        }
        endpoint
    }

    /// Hex SHA-256 of a request of `body` to this endpoint, as the response
    /// cache keys it: the URL (its query included, credentials already
    /// taken out), every header but the credentials (an API version, a beta
    /// flag or a configured header may change the answer; the same server
    /// answers whoever asks), and the body's bytes.
    pub fn request_digest(&self, body: &[u8]) -> String {
        use crate::sha256::Sha256;
        let mut hasher = Sha256::new();
        let mut feed = |part: &[u8]| {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part);
        };
        feed(self.url.as_str().as_bytes());
        let mut headers: Vec<(&str, &[u8])> = self
            .headers
            .iter()
            .filter(|(name, _)| !CREDENTIAL_HEADERS.contains(&name.as_str()))
            .map(|(name, value)| (name.as_str(), value.as_bytes()))
            .collect();
        headers.sort_unstable();
        feed(&headers.len().to_le_bytes());
        for (name, value) in headers {
            feed(name.as_bytes());
            feed(value);
        }
        feed(body);
        super::digest::hex(&hasher.finalize())
    }
}

/// Headers that carry who asks, not what is asked: left out of
/// [`Endpoint::request_digest`].
const CREDENTIAL_HEADERS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
];

/// `url` with its path replaced by what `edit` makes of it (given without
/// trailing slashes), its query and fragment kept: `/chat/completions` added
/// to `https://h/openai/v1?api-version=2024-06-01` is
/// `https://h/openai/v1/chat/completions?api-version=2024-06-01`, where
/// formatting `{base}/chat/completions` put the path into the query (Azure
/// OpenAI takes its API version in the query). Credentials stay in the URL
/// for [`Endpoint::new`] to take out. A `url` that does not parse is edited
/// as text, for `Endpoint::new` to refuse with its own message.
pub fn edit_path(url: &str, edit: impl FnOnce(&str) -> String) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.cannot_be_a_base() => {
            set_path(&mut parsed, edit);
            parsed.into()
        }
        _ => edit(url.trim_end_matches('/')),
    }
}

fn set_path(url: &mut reqwest::Url, edit: impl FnOnce(&str) -> String) {
    let path = edit(url.path().trim_end_matches('/'));
    url.set_path(&path);
}

/// `Basic base64(user:password)`, as reqwest makes it from a URL.
fn basic_auth(user: &str, password: Option<&str>) -> HeaderValue {
    use base64::Engine;
    let credentials = format!("{user}:{}", password.unwrap_or_default());
    let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
    // Base64 is always a valid header value.
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
    value.set_sensitive(true);
    value
}

/// A reply body as text. JSON is UTF-8 (RFC 8259), whatever a
/// `Content-Type` charset says; bytes that are not become U+FFFD, so an error
/// body still reads. Checked as a whole first: a reply is almost always valid,
/// and the lossy decoder walks it in small steps.
fn utf8_text(body: &[u8]) -> String {
    match std::str::from_utf8(body) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    }
}

/// POSTs `body` as JSON and reads the whole reply. Network failures are
/// transient errors; HTTP statuses are the caller's to classify.
pub async fn post_json(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<HttpReply, ProviderError> {
    let started = Instant::now();
    let failed = |error| trace::failed(error, started);
    let response = send(client, endpoint, body, timeout)
        .await
        .map_err(failed)?;
    read_whole(response, endpoint, timeout, MAX_REPLY_BYTES, started).await
}

/// A request other than a model call (the Batch APIs' files and batch
/// objects): `method` to the endpoint with its headers, an optional body
/// with its content type. The whole reply is read and scrubbed like
/// `post_json`'s; a redirect is not followed (these APIs send none), so the
/// key never leaves for another place.
pub async fn request(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    method: reqwest::Method,
    body: Option<(Vec<u8>, String)>,
    timeout: Duration,
) -> Result<HttpReply, ProviderError> {
    let started = Instant::now();
    let failed = |error| trace::failed(error, started);
    let sent_body = body.as_ref().map_or(&[][..], |(body, _)| body.as_slice());
    trace::sent(
        method.as_str(),
        endpoint.place(),
        sent_body,
        &endpoint.secrets,
    );
    let mut headers = endpoint.headers.clone();
    let mut builder = client
        .request(method, endpoint.url.clone())
        .timeout(timeout);
    if let Some((body, content_type)) = body {
        let value = HeaderValue::from_str(&content_type).unwrap_or(JSON);
        headers.insert(CONTENT_TYPE, value);
        builder = builder.body(body);
    } else {
        headers.remove(CONTENT_TYPE);
    }
    let response = builder
        .headers(headers)
        .send()
        .await
        .map_err(|error| failed(network_error(error, endpoint, timeout)))?;
    read_whole(response, endpoint, timeout, MAX_DOWNLOAD_BYTES, started).await
}

/// A GET of a small document beside a model endpoint (a local server's
/// `/props`): the endpoint's headers, its key among them (the server asks
/// for it as for a model call), no redirect followed, at most `limit` bytes
/// read and scrubbed like every reply. Not traced: what it learns is said
/// once by its caller, in one line.
pub async fn get(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    timeout: Duration,
    limit: usize,
) -> Result<HttpReply, ProviderError> {
    let mut headers = endpoint.headers.clone();
    headers.remove(CONTENT_TYPE);
    let response = client
        .get(endpoint.url.clone())
        .headers(headers)
        .timeout(timeout)
        .send()
        .await
        .map_err(|error| network_error(error, endpoint, timeout))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = read_body_up_to(response, endpoint, timeout, limit).await?;
    let mut body = utf8_text(&body);
    endpoint.secrets.scrub_string(&mut body);
    Ok(HttpReply {
        status,
        headers,
        body,
    })
}

/// The most a Batch API download (a results file) may hold: the providers
/// cap a batch's input at 200 MB (OpenAI) and 256 MB (Anthropic), and its
/// answers are of the same order.
pub const MAX_DOWNLOAD_BYTES: usize = 1 << 30;

/// The most a reply (a whole body, or all of a stream) may hold. A chat reply
/// is kilobytes, one with logprobs of a long answer a few megabytes; a server
/// that sends more is broken or hostile, and reading on would only fill the
/// memory until the timeout.
pub const MAX_REPLY_BYTES: usize = 64 << 20;

fn too_large(endpoint: &Endpoint, limit: usize) -> ProviderError {
    ProviderError::permanent(format!(
        "the reply from `{}` is larger than {} MiB; not read further",
        endpoint.place(),
        limit >> 20
    ))
}

/// A whole reply of at most `limit` bytes as text, the endpoint's secrets
/// scrubbed out before anything (the trace included) sees it.
async fn read_whole(
    response: reqwest::Response,
    endpoint: &Endpoint,
    timeout: Duration,
    limit: usize,
    started: Instant,
) -> Result<HttpReply, ProviderError> {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = read_body_up_to(response, endpoint, timeout, limit)
        .await
        .map_err(|error| trace::failed(error, started))?;
    let mut body = utf8_text(&body);
    endpoint.secrets.scrub_string(&mut body);
    trace::received(endpoint.place(), status, &body, started, &endpoint.secrets);
    Ok(HttpReply {
        status,
        headers,
        body,
    })
}

/// A whole reply body, at most `limit` bytes. A body whose length the
/// server announces is read in one piece (the usual case, and the cheapest);
/// one sent in chunks is read chunk by chunk and stopped at the cap.
async fn read_body_up_to(
    mut response: reqwest::Response,
    endpoint: &Endpoint,
    timeout: Duration,
    limit: usize,
) -> Result<bytes::Bytes, ProviderError> {
    let network = |error| network_error(error, endpoint, timeout);
    match response.content_length() {
        Some(length) if length > limit as u64 => Err(too_large(endpoint, limit)),
        Some(_) => response.bytes().await.map_err(network),
        None => {
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(network)? {
                if body.len() + chunk.len() > limit {
                    return Err(too_large(endpoint, limit));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body.into())
        }
    }
}

/// How a streamed POST ended.
pub enum Streamed {
    /// The stream was read; the reply's headers (rate-limit windows).
    Read(HeaderMap),
    /// A non-2xx status, read as a whole reply.
    Refused(HttpReply),
    /// A 2xx reply with a JSON body instead of a stream (a server that does
    /// not stream), read whole.
    Whole(HttpReply),
}

/// POSTs `body` and hands each server-sent-event `data:` payload to `on_data`
/// as it arrives. A non-2xx status is returned as a whole reply instead.
/// `on_data` returns `false` to stop reading (the stream's end marker).
pub async fn post_sse<F>(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    body: Vec<u8>,
    timeout: Duration,
    mut on_data: F,
) -> Result<Streamed, ProviderError>
where
    F: FnMut(&str) -> Result<bool, ProviderError>,
{
    let started = Instant::now();
    let failed = |error| trace::failed(error, started);
    let mut response = send(client, endpoint, body, timeout)
        .await
        .map_err(failed)?;
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        let reply = read_whole(response, endpoint, timeout, MAX_REPLY_BYTES, started).await?;
        return Ok(Streamed::Refused(reply));
    }
    let json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if json {
        let reply = read_whole(response, endpoint, timeout, MAX_REPLY_BYTES, started).await?;
        return Ok(Streamed::Whole(reply));
    }
    let headers = response.headers().clone();
    let mut events = super::sse::SseDecoder::default();
    // Payloads lose the endpoint's secrets before anything parses them.
    let mut scrubbed = |data: &str| {
        let data = endpoint.secrets.scrub(data);
        trace::stream_data(&data, &endpoint.secrets);
        on_data(&data)
    };
    let mut streamed: usize = 0;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| failed(network_error(error, endpoint, timeout)))?
    {
        streamed = streamed.saturating_add(chunk.len());
        if streamed > MAX_REPLY_BYTES {
            return Err(failed(too_large(endpoint, MAX_REPLY_BYTES)));
        }
        if !events.push(&chunk, &mut scrubbed)? {
            trace::streamed(endpoint.place(), status, streamed, started);
            return Ok(Streamed::Read(headers));
        }
    }
    events.finish(&mut scrubbed)?;
    trace::streamed(endpoint.place(), status, streamed, started);
    Ok(Streamed::Read(headers))
}

tokio::task_local! {
    /// Set when a request of the model call watching it goes out (`send`).
    static SENT: std::sync::Arc<std::sync::atomic::AtomicBool>;
}

/// Runs `future` (a model call), setting `sent` when one of its requests
/// goes out to a server: an agent call interrupted while it waits for the
/// reply knows whether there was a request to count (issue 27).
// Not an `async fn`, which would hold `future` twice (`watch::scope`).
pub(crate) fn watching_sends<F: std::future::Future>(
    sent: std::sync::Arc<std::sync::atomic::AtomicBool>,
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    SENT.scope(sent, future)
}

/// The W3C trace context header's name, made once.
static TRACEPARENT: reqwest::header::HeaderName =
    reqwest::header::HeaderName::from_static(crate::trace_context::TRACEPARENT);

/// Sends the request, following redirects only as `follow` allows.
async fn send(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<reqwest::Response, ProviderError> {
    // Shared, not copied, when a redirect makes us send it again.
    let body = bytes::Bytes::from(body);
    let mut url = endpoint.url.clone();
    let mut redirects = 0;
    // The run's trace goes on (one span per attempt, redirects included).
    let traceparent = crate::trace_context::provider_request()
        .and_then(|traceparent| HeaderValue::from_bytes(&traceparent).ok());
    loop {
        if redirects == 0 {
            trace::sent("POST", endpoint.place(), &body, &endpoint.secrets);
        } else if tracing::enabled!(tracing::Level::INFO) {
            trace::sent(
                "POST",
                &redact::place(url.as_str()),
                &body,
                &endpoint.secrets,
            );
        }
        let _ = SENT.try_with(|sent| sent.store(true, std::sync::atomic::Ordering::Relaxed));
        // The request is made whole and its header map put in as it is:
        // a `RequestBuilder` inserts each header of the map it is given into
        // its own, one by one (a third of what the headers cost a request).
        let mut request = reqwest::Request::new(reqwest::Method::POST, url.clone());
        *request.headers_mut() = match &traceparent {
            Some(value) => {
                // Made with room for the header: a clone has none, and
                // growing it (reallocating and rehashing) cost more than
                // the copy.
                let mut headers = HeaderMap::with_capacity(endpoint.headers.len() + 1);
                for (name, value) in &endpoint.headers {
                    headers.append(name, value.clone());
                }
                headers.insert(&TRACEPARENT, value.clone());
                headers
            }
            None => endpoint.headers.clone(),
        };
        *request.body_mut() = Some(body.clone().into());
        *request.timeout_mut() = Some(timeout);
        let response = client
            .execute(request)
            .await
            .map_err(|error| network_error(error, endpoint, timeout))?;
        if !matches!(response.status().as_u16(), 301 | 302 | 303 | 307 | 308) {
            return Ok(response);
        }
        url = follow(endpoint, &response, redirects)?;
        redirects += 1;
    }
}

/// Where a redirect leads, if lllm follows it; otherwise a permanent error
/// naming where it led (never sent there).
///
/// - To another origin (scheme, host or port differ, `http` to `https`
///   included): never followed. The request would carry the prompt, the key
///   and the configured headers to a server nobody configured.
/// - 307 and 308 within the origin: followed, at most `MAX_REDIRECTS` times,
///   with the same method, body and headers (what those statuses mean).
/// - 301, 302 and 303 within the origin: not followed. Clients turn them
///   into a GET without a body, which no chat API answers; the error names
///   the new place so the configuration can point there.
fn follow(
    endpoint: &Endpoint,
    response: &reqwest::Response,
    redirects: usize,
) -> Result<reqwest::Url, ProviderError> {
    let status = response.status().as_u16();
    let from = response.url();
    let error = |message: String| ProviderError {
        kind: ErrorKind::Permanent,
        status: Some(status),
        code: None,
        message,
        retry_after: None,
        endpoint: None,
        network: false,
    };
    let target = response
        .headers()
        .get(LOCATION)
        .and_then(|location| location.to_str().ok())
        .and_then(|location| from.join(location.trim()).ok())
        .filter(|target| matches!(target.scheme(), "http" | "https"));
    let Some(mut target) = target else {
        return Err(error(format!(
            "`{}` answered with a redirect without a usable `Location`",
            redact::place(from.as_str())
        )));
    };
    // Credentials offered by the server are not ours to use.
    let _ = target.set_username("");
    let _ = target.set_password(None);
    let origin = endpoint.url.origin();
    if target.origin() != origin {
        return Err(error(format!(
            "the server at `{}` redirected to `{}`, another origin; not followed, so neither the \
             request nor its key and headers were sent there; hint: if that server is the right \
             one, point `base_url` (or the base-URL variable) at it",
            redact::place(&origin.ascii_serialization()),
            redact::place(target.as_str()),
        )));
    }
    if !matches!(status, 307 | 308) {
        return Err(error(format!(
            "`{}` redirected to `{}`, which would turn the POST into a GET without its body; \
             not followed; hint: point `base_url` at the new place",
            redact::place(from.as_str()),
            redact::place(target.as_str()),
        )));
    }
    if redirects >= MAX_REDIRECTS {
        return Err(error(format!(
            "`{}`: more than {MAX_REDIRECTS} redirects",
            endpoint.place()
        )));
    }
    Ok(target)
}

fn network_error(error: reqwest::Error, endpoint: &Endpoint, timeout: Duration) -> ProviderError {
    let place = endpoint.place();
    let message = if let Some(exhausted) = crate::fds::Exhausted::of(&error) {
        // Not the network's fault: no socket could be opened (issue 26).
        return ProviderError::transient(format!(
            "{}: no connection to `{place}` could be opened",
            exhausted.message()
        ));
    } else if error.is_timeout() {
        format!(
            "no reply from `{place}` within {:.1} s",
            timeout.as_secs_f64()
        )
    } else if error.is_connect() {
        format!("cannot connect to `{place}`")
    } else {
        let error = error.without_url();
        let mut text = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        format!("connection to `{place}` failed: {text}")
    };
    ProviderError {
        network: true,
        ..ProviderError::new(ErrorKind::Transient, message)
    }
}

/// What the server asked us to wait, validated and clamped
/// (`rate_headers::retry_after`: a nonsense value is ignored, never trusted).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    super::rate_headers::retry_after(headers, std::time::SystemTime::now())
}

/// The retry class of an HTTP status (docs/formats.md §6), before looking at the body.
pub fn classify_status(status: u16) -> ErrorKind {
    match status {
        429 => ErrorKind::RateLimit,
        408 | 409 | 500..=599 => ErrorKind::Transient,
        _ => ErrorKind::Permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        headers(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn bodies_read_as_utf8_and_bad_bytes_do_not_fail_them() {
        assert_eq!(utf8_text("{\"a\": \"é😀\"}".as_bytes()), "{\"a\": \"é😀\"}");
        assert_eq!(utf8_text(b"bad \xff gateway"), "bad \u{fffd} gateway");
        assert_eq!(utf8_text(b""), "");
    }

    #[test]
    fn statuses_are_classified() {
        for (status, kind) in [
            (429, ErrorKind::RateLimit),
            (500, ErrorKind::Transient),
            (503, ErrorKind::Transient),
            (529, ErrorKind::Transient),
            (408, ErrorKind::Transient),
            (400, ErrorKind::Permanent),
            (401, ErrorKind::Permanent),
            (403, ErrorKind::Permanent),
            (404, ErrorKind::Permanent),
            (422, ErrorKind::Permanent),
        ] {
            assert_eq!(classify_status(status), kind, "{status}");
        }
    }

    #[test]
    fn auth_headers_are_marked_sensitive_and_bad_ones_do_not_echo_values() {
        let headers = map(&[("Authorization", "Bearer sk-1")]);
        assert!(headers["authorization"].is_sensitive());
        assert!(!format!("{headers:?}").contains("sk-1"));
        let error = super::headers([("x-key", "bad\nvalue")]).unwrap_err();
        assert_eq!(error, "invalid value for header `x-key`");
    }

    #[test]
    fn endpoints_are_checked_once_without_echoing_secrets() {
        let endpoint = Endpoint::new(
            "http://127.0.0.1:9/v1/chat",
            [("authorization", "Bearer sk-1")],
        )
        .unwrap();
        assert_eq!(endpoint.place(), "http://127.0.0.1:9/v1/chat");
        assert!(endpoint.headers["authorization"].is_sensitive());
        assert_eq!(endpoint.headers["content-type"], "application/json");
        let own = Endpoint::new("http://h/v1", [("Content-Type", "application/json; v=2")]);
        let own = own.unwrap().headers;
        assert_eq!(own.get_all("content-type").iter().count(), 1);
        assert_eq!(own["content-type"], "application/json; v=2");
        let error = Endpoint::new("not a url?key=sk-2", []).err().unwrap();
        assert!(error.starts_with("invalid URL `not a url`"), "{error}");
        let error = Endpoint::new("ftp://host/v1?key=sk-3", []).err().unwrap();
        assert_eq!(error, "invalid URL `ftp://host/v1`: not http or https");
    }

    #[test]
    fn paths_are_added_to_the_path_and_the_query_stays() {
        let add = |url: &str| edit_path(url, |path| format!("{path}/chat/completions"));
        for (base, expected) in [
            (
                "https://r.example/openai/v1?api-version=2024-06-01",
                "https://r.example/openai/v1/chat/completions?api-version=2024-06-01",
            ),
            (
                "https://r.example/v1/?api-version=1&x=y",
                "https://r.example/v1/chat/completions?api-version=1&x=y",
            ),
            (
                "http://127.0.0.1:9/v1",
                "http://127.0.0.1:9/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:9/v1/",
                "http://127.0.0.1:9/v1/chat/completions",
            ),
            ("http://h", "http://h/chat/completions"),
            (
                "http://u:p%40w@h/v1?k=v",
                "http://u:p%40w@h/v1/chat/completions?k=v",
            ),
            ("not a url/", "not a url/chat/completions"),
        ] {
            assert_eq!(add(base), expected, "{base}");
        }
        let endpoint = Endpoint::new(&add("http://u:pw@h/v1?api-version=2"), []).unwrap();
        assert_eq!(endpoint.place(), "http://***@h/v1/chat/completions");
        let batches = endpoint.with_path(|path| {
            path.strip_suffix("/chat/completions")
                .unwrap_or(path)
                .to_string()
        });
        assert_eq!(batches.url.as_str(), "http://h/v1?api-version=2");
        assert_eq!(
            batches.below("/batches?limit=100").url.as_str(),
            "http://h/v1/batches?api-version=2&limit=100"
        );
        assert_eq!(
            batches.below("/files/f1/content").url.as_str(),
            "http://h/v1/files/f1/content?api-version=2"
        );
        let plain = Endpoint::new("http://h/v1/messages/batches", []).unwrap();
        assert_eq!(
            plain.below("?limit=100").url.as_str(),
            "http://h/v1/messages/batches?limit=100"
        );
        assert_eq!(
            plain.below("/b1").place(),
            "http://h/v1/messages/batches/b1"
        );
        assert_eq!(
            batches.headers["authorization"], endpoint.headers["authorization"],
            "the same credentials"
        );
    }

    #[test]
    fn url_credentials_become_basic_auth_and_never_show() {
        let endpoint = Endpoint::new(
            "http://user:pa%40ss-word@127.0.0.1:9/v1/chat?key=sk-in-query",
            [("x-custom", "custom-header-secret")],
        )
        .unwrap();
        assert_eq!(endpoint.place(), "http://***@127.0.0.1:9/v1/chat");
        assert_eq!(
            endpoint.url.as_str(),
            "http://127.0.0.1:9/v1/chat?key=sk-in-query"
        );
        // reqwest's own encoding of the same URL: `user:pa@ss-word`.
        assert_eq!(
            endpoint.headers["authorization"],
            "Basic dXNlcjpwYUBzcy13b3Jk"
        );
        assert!(endpoint.headers["authorization"].is_sensitive());
        assert_eq!(
            endpoint
                .secrets
                .scrub("pa@ss-word pa%40ss-word custom-header-secret dXNlcjpwYUBzcy13b3Jk"),
            "*** *** *** ***"
        );
        // An explicit key wins over the URL's credentials, as with reqwest.
        let keyed = Endpoint::new("http://u:p@h/v1", [("Authorization", "Bearer sk-x")]);
        assert_eq!(keyed.unwrap().headers["authorization"], "Bearer sk-x");
        let error = Endpoint::new("http://user:PASSWORD@[::1/v1", [])
            .err()
            .unwrap();
        assert!(
            error.starts_with("invalid URL `http://***@[::1/v1`"),
            "{error}"
        );
        assert!(!error.contains("PASSWORD"), "{error}");
    }
}

#[cfg(test)]
mod against_servers;
