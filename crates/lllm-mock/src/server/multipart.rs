//! `multipart/form-data` bodies (RFC 7578), for OpenAI's file upload: the
//! parts' names, file names and bytes. Just what `POST /v1/files` needs; a
//! body this cannot read is refused with one line saying why, as the real
//! API refuses it.

use axum::body::Bytes;

/// One part of a form.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// The form field's name.
    pub name: String,
    /// The file name, for a file part.
    pub filename: Option<String>,
    pub data: Bytes,
}

/// The parts of `body`, sent with the `content_type` header `content_type`.
pub fn parse(content_type: &str, body: &Bytes) -> Result<Vec<Part>, String> {
    let (kind, parameters) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return Err(format!(
            "the body must be multipart/form-data, not `{}`",
            kind.trim()
        ));
    }
    let boundary = parameters_of(parameters)
        .into_iter()
        .find(|(key, _)| key.eq_ignore_ascii_case("boundary"))
        .map(|(_, value)| value)
        .filter(|boundary| !boundary.is_empty())
        .ok_or("the multipart/form-data content type has no boundary")?;
    let opening = format!("--{boundary}");
    let delimiter = format!("\r\n--{boundary}");
    let mut at = find(body, opening.as_bytes(), 0)
        .ok_or("the multipart body does not start with its boundary")?
        + opening.len();
    let mut parts = Vec::new();
    loop {
        let rest = &body[at..];
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        if !rest.starts_with(b"\r\n") {
            return Err("a multipart boundary is not followed by a line break".into());
        }
        let headers_start = at + 2;
        let headers_end = find(body, b"\r\n\r\n", headers_start)
            .ok_or("a multipart part has no end of its headers")?;
        let data_end = find(body, delimiter.as_bytes(), headers_end + 4)
            .ok_or("the multipart body ends before its closing boundary")?;
        let headers = std::str::from_utf8(&body[headers_start..headers_end])
            .map_err(|_| "a multipart part's headers are not UTF-8")?;
        parts.push(part(headers, body.slice(headers_end + 4..data_end))?);
        at = data_end + delimiter.len();
    }
}

fn part(headers: &str, data: Bytes) -> Result<Part, String> {
    let disposition = headers
        .split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-disposition"))
        .map(|(_, value)| value.trim())
        .ok_or("a multipart part has no Content-Disposition header")?;
    let (kind, parameters) = disposition.split_once(';').unwrap_or((disposition, ""));
    if !kind.trim().eq_ignore_ascii_case("form-data") {
        return Err(format!(
            "a multipart part's disposition is `{}`, not form-data",
            kind.trim()
        ));
    }
    let parameters = parameters_of(parameters);
    let value = |wanted: &str| {
        parameters
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(wanted))
            .map(|(_, value)| value.clone())
    };
    Ok(Part {
        name: value("name").ok_or("a multipart part has no name")?,
        filename: value("filename"),
        data,
    })
}

/// `; key=value; key="quoted; value"` as pairs, quotes removed.
fn parameters_of(text: &str) -> Vec<(String, String)> {
    let mut pieces = Vec::new();
    let mut piece = String::new();
    let mut quoted = false;
    let mut escaped = false;
    for character in text.chars() {
        match character {
            _ if escaped => {
                piece.push(character);
                escaped = false;
            }
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ';' if !quoted => pieces.push(std::mem::take(&mut piece)),
            _ => piece.push(character),
        }
    }
    pieces.push(piece);
    pieces
        .into_iter()
        .filter_map(|piece| {
            let (key, value) = piece.split_once('=')?;
            Some((key.trim().to_string(), value.trim().to_string()))
        })
        .collect()
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|window| window == needle)
        .map(|at| at + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPE: &str = "multipart/form-data; boundary=XyZ";

    #[track_caller]
    fn refused(content_type: &str, body: &str, expected: &str) {
        let error = parse(content_type, &Bytes::from(body.to_string())).unwrap_err();
        assert!(error.contains(expected), "{error}");
    }

    #[test]
    fn reads_fields_and_files() {
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in; put.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n{\"a\":1}\r\n{\"b\":2}\n\r\n--XyZ--\r\n";
        let parts = parse(TYPE, &Bytes::from(body)).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].name.as_str(), &parts[0].data[..]),
            ("purpose", &b"batch"[..])
        );
        assert_eq!(parts[1].filename.as_deref(), Some("in; put.jsonl"));
        assert_eq!(&parts[1].data[..], b"{\"a\":1}\r\n{\"b\":2}\n");
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        refused("application/json", "{}", "must be multipart/form-data");
        refused("multipart/form-data", "", "no boundary");
        refused(TYPE, "nothing", "does not start with its boundary");
        refused(
            TYPE,
            "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end",
            "ends before its closing boundary",
        );
        refused(
            TYPE,
            "--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--",
            "no Content-Disposition",
        );
    }
}
