//! Attachments (issue 15): files given with a task — by path, URL, base64 or
//! `data:` URL — turned into the content parts a user turn carries. An image
//! (PNG, JPEG, GIF, WebP, told by its magic bytes, never by its name or a
//! declared media type: D10) becomes an image part, which each provider sends
//! in its own form; a UTF-8 text file becomes a text part naming the file.
//! Anything else is refused. `Dialog::put_image` and `Agent::receive_image`
//! make their images here too, so a task's attachment and a program's image
//! reach the wire the same way.
//!
//! Where the spec comes from (a task line, `lllm run --attach`) is the
//! caller's business; this module only reads and classifies.

use std::path::Path;

use base64::Engine;

use super::{ContentPart, Error, IMAGE_CAP, Result, image_mime_type};

/// Where an attachment comes from.
///
/// ```
/// use lllm::dialog::{Attachment, ContentPart};
///
/// let gif = Attachment::Bytes { name: "owl.gif".into(), bytes: b"GIF89a...".to_vec() };
/// assert_eq!(gif.to_part(std::path::Path::new("."))?.to_string(), "<image image/gif>");
/// let note = Attachment::parse("data:text/plain;base64,aGVsbG8=")?;
/// assert_eq!(
///     note.to_part(std::path::Path::new("."))?,
///     ContentPart::text("<file name=\"attachment\">\nhello\n</file>"),
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Attachment {
    /// A file, read when the part is made; a relative path is taken from the
    /// base directory given then (a task file's directory, the working
    /// directory of `lllm run`).
    Path(String),
    /// An image at an `http(s)` URL, which the provider fetches.
    Url(String),
    /// Bytes given inline (base64 or a `data:` URL), with a name for a text
    /// file's header.
    Bytes {
        /// Shown in a text file's part (`attachment` when none was given).
        name: String,
        /// The file's bytes.
        bytes: Vec<u8>,
    },
}

/// The name a text attachment given inline is shown under.
const UNNAMED: &str = "attachment";

impl Attachment {
    /// Reads a spec as a string: a `data:` URL, an `http://` / `https://`
    /// URL, or else a path.
    pub fn parse(spec: &str) -> Result<Attachment> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(Error::Attachment {
                origin: "``".into(),
                message: "an attachment is a path, an http(s) URL or a data: URL, not empty text"
                    .into(),
            });
        }
        if let Some(rest) = spec.strip_prefix("data:") {
            let Some((_, data)) = rest.split_once(";base64,") else {
                return Err(Error::Attachment {
                    origin: "data: URL".into(),
                    message: "only base64 data URLs are read (`data:TYPE;base64,DATA`)".into(),
                });
            };
            return Ok(Attachment::Bytes {
                name: UNNAMED.into(),
                bytes: decode_base64(data, "data: URL")?,
            });
        }
        if spec.starts_with("https://") || spec.starts_with("http://") {
            return Ok(Attachment::Url(spec.to_string()));
        }
        Ok(Attachment::Path(spec.to_string()))
    }

    /// Base64 text of a file's bytes (`name` is shown for a text file).
    pub fn base64(data: &str, name: Option<&str>) -> Result<Attachment> {
        Ok(Attachment::Bytes {
            name: name.unwrap_or(UNNAMED).to_string(),
            bytes: decode_base64(data, "base64")?,
        })
    }

    /// The part a user turn carries: an image part (media type from the
    /// magic bytes), a URL image part, or a text part holding a UTF-8 file
    /// as `<file name="NAME">…</file>`. `base_dir` resolves a relative path.
    pub fn to_part(&self, base_dir: &Path) -> Result<ContentPart> {
        match self {
            Attachment::Url(url) => Ok(ContentPart::image_url(url.clone())),
            Attachment::Bytes { name, bytes } => classify(bytes, name, &format!("`{name}`")),
            Attachment::Path(path) => {
                let full = base_dir.join(path);
                let (bytes, size) =
                    crate::file::read_regular(&full, IMAGE_CAP + 1).map_err(|source| {
                        Error::Attachment {
                            origin: format!("`{}`", full.display()),
                            message: format!("cannot read it: {source}"),
                        }
                    })?;
                if size > IMAGE_CAP || bytes.len() as u64 > IMAGE_CAP {
                    return Err(Error::Attachment {
                        origin: format!("`{}`", full.display()),
                        message: format!(
                            "{size} bytes, more than the 20 MiB an attachment may have"
                        ),
                    });
                }
                let name = Path::new(path)
                    .file_name()
                    .map_or_else(|| path.clone(), |name| name.to_string_lossy().into_owned());
                classify(&bytes, &name, &format!("`{}`", full.display()))
            }
        }
    }
}

/// An image part for image bytes, a text part for UTF-8 text, else an error.
fn classify(bytes: &[u8], name: &str, origin: &str) -> Result<ContentPart> {
    if image_mime_type(bytes).is_some() {
        return ContentPart::image_bytes(bytes);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => Ok(ContentPart::text(format!(
            "<file name=\"{name}\">\n{}\n</file>",
            text.trim_end_matches('\n')
        ))),
        _ => Err(Error::Attachment {
            origin: origin.to_string(),
            message: format!(
                "neither an image (PNG, JPEG, GIF or WebP, told by its first bytes {:02x?}) nor UTF-8 text",
                bytes.iter().take(8).collect::<Vec<_>>()
            ),
        }),
    }
}

fn decode_base64(data: &str, origin: &str) -> Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|error| Error::ImageBase64 {
            origin: origin.into(),
            message: error.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn part(spec: &str, dir: &Path) -> ContentPart {
        Attachment::parse(spec).unwrap().to_part(dir).unwrap()
    }

    #[track_caller]
    fn fails(spec: &str, dir: &Path, expected: &str) {
        let error = Attachment::parse(spec)
            .and_then(|attachment| attachment.to_part(dir))
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{error:?} lacks {expected:?}");
        assert!(!error.contains('\n'), "{error:?}");
    }

    #[test]
    fn images_by_magic_bytes_text_as_text_the_rest_refused() {
        let dir = tempfile::tempdir().unwrap();
        // The name says JPEG, the bytes say PNG: the bytes win.
        std::fs::write(dir.path().join("chart.jpg"), b"\x89PNG\r\n\x1a\nxx").unwrap();
        std::fs::write(dir.path().join("notes.md"), "line one\n").unwrap();
        std::fs::write(dir.path().join("doc.pdf"), b"%PDF-1.7\x00\xff").unwrap();
        let image = part("chart.jpg", dir.path());
        assert_eq!(image.to_string(), "<image image/png>");
        assert_eq!(
            part("notes.md", dir.path()),
            ContentPart::text("<file name=\"notes.md\">\nline one\n</file>")
        );
        assert_eq!(
            part("https://example.com/owl.jpg", dir.path()),
            ContentPart::image_url("https://example.com/owl.jpg")
        );
        assert_eq!(
            part("data:image/jpeg;base64,R0lGODlhAA==", dir.path()).to_string(),
            "<image image/gif>",
            "the declared type is not trusted"
        );
        fails("doc.pdf", dir.path(), "neither an image");
        fails("missing.png", dir.path(), "missing.png");
        fails("data:text/plain,hello", dir.path(), "only base64");
        fails("data:image/png;base64,%%%", dir.path(), "not valid base64");
        fails("  ", dir.path(), "not empty");
        let inline = Attachment::base64("aGk=", Some("hi.txt")).unwrap();
        assert_eq!(
            inline.to_part(dir.path()).unwrap(),
            ContentPart::text("<file name=\"hi.txt\">\nhi\n</file>")
        );
    }
}
