//! The one module that talks HTTP: a pooled client, a JSON POST with timeouts,
//! network errors classified for the retry loop, and `Retry-After` parsing.
//! Provider modules build bodies and read replies; they never see a socket.
//!
//! Error texts carry no URL query and no header, so no key can leak into them.

use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::{ErrorKind, ProviderError};

const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// A JSON request body: `value` serialized. Serializing a tree of strings and
/// numbers cannot fail; if it ever did, nothing is sent.
pub fn json_body<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, ProviderError> {
    crate::json::to_vec(value).map_err(|error| {
        ProviderError::permanent(format!("cannot write the request as JSON: {error}"))
    })
}

/// A reply as received: status, headers and body text.
pub struct HttpReply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

/// One client per run: connections are pooled across every agent and task.
pub fn client(connect_timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .pool_max_idle_per_host(1024)
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
#[derive(Clone)]
pub struct Endpoint {
    pub url: reqwest::Url,
    pub headers: HeaderMap,
}

impl Endpoint {
    pub fn new<'a, I>(url: &str, pairs: I) -> Result<Endpoint, String>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let parsed = reqwest::Url::parse(url)
            .map_err(|error| format!("invalid URL `{}`: {error}", strip_query(url)))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "invalid URL `{}`: not http or https",
                strip_query(url)
            ));
        }
        let mut headers = headers(pairs)?;
        // Every body we send is JSON; a configured `Content-Type` stays.
        if !headers.contains_key(CONTENT_TYPE) {
            headers.insert(CONTENT_TYPE, JSON);
        }
        Ok(Endpoint {
            url: parsed,
            headers,
        })
    }

    /// The URL as errors show it: without its query.
    fn place(&self) -> &str {
        strip_query(self.url.as_str())
    }
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
    let response = send(client, endpoint, body, timeout).await?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .bytes()
        .await
        .map_err(|error| network_error(error, endpoint, timeout))?;
    let body = utf8_text(&body);
    Ok(HttpReply {
        status,
        headers,
        body,
    })
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
) -> Result<Option<HttpReply>, ProviderError>
where
    F: FnMut(&str) -> Result<bool, ProviderError>,
{
    let mut response = send(client, endpoint, body, timeout).await?;
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|error| network_error(error, endpoint, timeout))?;
        let body = utf8_text(&body);
        return Ok(Some(HttpReply {
            status,
            headers,
            body,
        }));
    }
    let mut events = super::sse::SseDecoder::default();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| network_error(error, endpoint, timeout))?
    {
        if !events.push(&chunk, &mut on_data)? {
            return Ok(None);
        }
    }
    events.finish(&mut on_data)?;
    Ok(None)
}

async fn send(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<reqwest::Response, ProviderError> {
    client
        .post(endpoint.url.clone())
        .headers(endpoint.headers.clone())
        .body(body)
        .timeout(timeout)
        .send()
        .await
        .map_err(|error| network_error(error, endpoint, timeout))
}

fn network_error(error: reqwest::Error, endpoint: &Endpoint, timeout: Duration) -> ProviderError {
    let place = endpoint.place();
    let message = if error.is_timeout() {
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
    ProviderError::new(ErrorKind::Transient, message)
}

fn strip_query(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

/// What the server asked us to wait: `retry-after-ms`, else `Retry-After` in
/// seconds (fractions allowed) or as an HTTP date.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    // `try_from`: `inf`, `1e400` or `1e30` is no duration (it panicked).
    if let Some(millis) = text("retry-after-ms").and_then(|value| value.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(millis / 1000.0).ok();
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// The retry class of an HTTP status (DESIGN §4), before looking at the body.
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
    fn retry_after_reads_every_form() {
        assert_eq!(
            retry_after(&map(&[("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(&map(&[("retry-after", "1.5")])),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(&map(&[("retry-after-ms", "20"), ("retry-after", "9")])),
            Some(Duration::from_millis(20))
        );
        assert_eq!(
            retry_after(&map(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")])),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&map(&[("retry-after", "soon")])), None);
        // Found by fuzzing `anthropic_reply`: these panicked.
        for (name, value) in [
            ("retry-after-ms", "1e400"),
            ("retry-after-ms", "1e30"),
            ("retry-after-ms", "NaN"),
            ("retry-after", "inf"),
            ("retry-after", "-1"),
        ] {
            assert_eq!(retry_after(&map(&[(name, value)])), None, "{name}: {value}");
        }
        assert_eq!(retry_after(&map(&[])), None);
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
    fn urls_lose_their_query_in_messages() {
        assert_eq!(
            strip_query("https://h/v1/chat?key=secret"),
            "https://h/v1/chat"
        );
    }
}
