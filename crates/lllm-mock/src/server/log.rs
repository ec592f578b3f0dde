//! The request log of `lllm-mock` (`--log FILE`): one JSON line per request,
//! `{"n", "ts", "method", "path", "model", "stream", "auth", "body", "status",
//! "fault"}` (and `"query"`, the query string, when the URL has one), flushed
//! before the response goes out. The key header is logged
//! only as a short SHA-256 fingerprint, never as itself.
//!
//! A request with a W3C `traceparent` header has it as `"traceparent"`.
//!
//! The Batch APIs add keys to their lines: a batch's creation names the
//! batch and its requests (`"batch"`, `"custom_ids"`), and each request a
//! batch runs is a line of its own, as if it had come in alone, with
//! `"batch"` and `"custom_id"`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use axum::http::{HeaderMap, Uri, header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What a request did, for the log.
pub struct LogEntry {
    pub index: Option<usize>,
    pub received: chrono::DateTime<chrono::Utc>,
    pub method: String,
    pub path: String,
    /// The URL's query string (`api-version=1`), when it has one.
    pub query: Option<String>,
    pub model: Option<String>,
    pub stream: bool,
    pub auth: Value,
    pub body: Value,
    pub status: Option<u16>,
    pub fault: Option<&'static str>,
    /// Keys only some lines have (the Batch APIs'), written after the others.
    pub extra: Vec<(&'static str, Value)>,
}

impl LogEntry {
    /// `logging: false` skips hashing the key header nobody will read.
    pub fn new(
        method: &str,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
        logging: bool,
    ) -> LogEntry {
        LogEntry {
            index: None,
            received: chrono::Utc::now(),
            method: method.to_string(),
            path: uri.path().to_string(),
            query: uri
                .query()
                .filter(|query| !query.is_empty())
                .map(str::to_string),
            model: None,
            stream: false,
            auth: if logging {
                fingerprint(headers)
            } else {
                Value::Null
            },
            body: serde_json::from_slice(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned())),
            status: None,
            fault: None,
            // The W3C `traceparent` a traced client sent (issue 31).
            extra: headers
                .get("traceparent")
                .and_then(|value| value.to_str().ok())
                .map(|value| vec![("traceparent", Value::String(value.to_string()))])
                .unwrap_or_default(),
        }
    }
}

/// The `--log` file: one JSON line per request, appended.
pub struct RequestLog {
    writer: Mutex<BufWriter<File>>,
}

impl RequestLog {
    pub fn open(path: &Path) -> std::io::Result<RequestLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(RequestLog {
            writer: Mutex::new(BufWriter::new(file)),
        })
    }

    /// Appends the entry as one flushed line, so the log is on disk before
    /// the client sees the response.
    pub fn write(&self, entry: LogEntry) {
        let mut line = json!({
            "n": entry.index,
            "ts": entry.received.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "method": entry.method,
            "path": entry.path,
            "model": entry.model,
            "stream": entry.stream,
            "auth": entry.auth,
            "body": entry.body,
            "status": entry.status,
            "fault": entry.fault,
        });
        if let Some(query) = entry.query {
            line["query"] = Value::String(query);
        }
        for (key, value) in entry.extra {
            line[key] = value;
        }
        let line = line.to_string();
        let mut writer = self.lock();
        let _ = writeln!(writer, "{line}");
        let _ = writer.flush();
    }

    pub fn flush(&self) {
        let _ = self.lock().flush();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BufWriter<File>> {
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `sha256:` and the first 12 hex digits of the key header's hash: enough to
/// tell keys apart, never the key.
pub fn fingerprint(headers: &HeaderMap) -> Value {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .or_else(|| headers.get("x-api-key"))
    else {
        return Value::Null;
    };
    let digest = Sha256::digest(value.as_bytes());
    let hex: String = digest[..6]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    Value::String(format!("sha256:{hex}"))
}
