//! Many lines of record files read by place, as the session store's text
//! catch-up reads the sessions a batch registered. [`Lines::read_at`]
//! decompresses a compressed file's frame from its start for each line (up
//! to a MiB per line, a thousand lines a frame); a cursor keeps the frame it
//! is in open and reads on when the next place is further in it, so reading
//! places in file order decompresses each frame once.

use std::io;
use std::path::{Path, PathBuf};

use super::{Form, LineRead, Lines, not_text, read_one_line, read_text_line, unpack};

/// Reads lines by place ([`read_at`](Cursor::read_at)); fastest when the
/// places come in file order.
#[derive(Default)]
pub struct Cursor {
    open: Option<(PathBuf, Lines)>,
}

impl Cursor {
    /// A cursor with no file open.
    pub fn new() -> Cursor {
        Cursor::default()
    }

    /// The line at `place` of `path`, as [`Lines::read_at`] reads it.
    pub fn read_at(&mut self, path: &Path, place: u64) -> io::Result<String> {
        if let Some((open, lines)) = &mut self.open
            && open == path
            && lines.form() == Form::Compressed
        {
            // Read on through the frame to `place`, if it is ahead in it
            // (past lines that are not text: they are not the one asked for).
            let frame = unpack(place).0;
            let mut line = String::new();
            while let Some(next) = lines.place()
                && unpack(next).0 == frame
                && next <= place
            {
                match read_text_line(lines, &mut line)? {
                    LineRead::End => break,
                    LineRead::NotText if next == place => return Err(not_text()),
                    LineRead::Text if next == place => return Ok(line),
                    LineRead::NotText | LineRead::Text => {}
                }
            }
        }
        let mut lines = Lines::at(path, place)?;
        let line = read_one_line(&mut lines);
        self.open = Some((path.to_path_buf(), lines));
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonl::FrameWriter;

    #[test]
    fn a_cursor_reads_every_line_at_its_place_in_any_order() {
        let dir = tempfile::tempdir().unwrap();
        for form in [Form::Plain, Form::Compressed] {
            let path = dir.path().join(format!("{form:?}.jsonl"));
            let file = std::fs::File::create(&path).unwrap();
            let mut writer = FrameWriter::new(file, form).unwrap();
            let mut places = Vec::new();
            for frame in 0..3 {
                let mut chunk = Vec::new();
                for line in 0..50 {
                    let text = format!("{{\"frame\":{frame},\"line\":{line}}}\n");
                    places.push((writer.place(chunk.len() as u64), text.clone()));
                    chunk.extend_from_slice(text.as_bytes());
                }
                writer.write(&chunk).unwrap();
            }
            drop(writer);
            let places: Vec<(u64, String)> = places
                .into_iter()
                .map(|(place, text)| (place.unwrap(), text))
                .collect();
            let mut cursor = Cursor::new();
            // In file order, then backwards, then skipping about.
            let backwards: Vec<_> = places.iter().rev().cloned().collect();
            let skipping: Vec<_> = places.iter().step_by(7).cloned().collect();
            for order in [&places, &backwards, &skipping] {
                for (place, text) in order {
                    assert_eq!(&cursor.read_at(&path, *place).unwrap(), text, "{form:?}");
                    assert_eq!(&Lines::read_at(&path, *place).unwrap(), text);
                }
            }
        }
    }
}
