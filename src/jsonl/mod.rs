//! Record files in either form: a plain JSONL file, or the same lines in
//! zstd frames (`sessions.jsonl.zst`, `lllm batch --compress`). Every reader
//! opens them through [`Lines`], which tells the forms apart by the file's
//! first bytes (the zstd magic number), not by its name, and reads either
//! form a line at a time with a cap on a line's length, so a hostile file (a
//! decompression bomb, a giant line) costs bounded memory.
//!
//! The writer's side ([`FrameWriter`]) compresses each flush of the batch
//! writer's queue as one complete frame: a crash can leave at most a torn
//! last frame, which [`repair`] cuts off before a resumed run appends. A
//! line's place is its byte offset in a plain file and a [`pack`]ed (frame
//! offset, offset inside the frame) in a compressed one, so `lllm logs show`
//! decompresses one frame, never the whole file. What the lines hold is the
//! callers' business.

use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};
use std::path::Path;

mod codec;
mod cursor;
mod repair;

pub(crate) use codec::encode_all;
pub use cursor::Cursor;
pub use repair::repair;

/// The first four bytes of a zstd frame (RFC 8878, little-endian 0xFD2FB528).
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The longest line read (a record past it is refused, as `lllm logs show`
/// refuses a `.json` record past it): bounds what a decompression bomb or
/// a file without newlines can make a reader hold.
pub const LINE_CAP: u64 = 1 << 30;

/// The compression level of written frames. Measured on 20,000 batch
/// records in 1 MiB frames (docs/decisions.md): level 1 compresses them
/// 32:1 at ~8 µs a record with this build, level 3 (zstd's default) 29:1 at
/// twice the CPU, levels 5-9 at most 34:1 for 5-10 times the CPU.
pub const LEVEL: i32 = 1;

/// The bytes of lines a frame holds when a whole file is written at once
/// (`lllm merge`): large enough to compress as well as one frame would,
/// small enough that `lllm logs show` decompresses little to show one.
pub const FRAME: usize = 1 << 20;

/// The largest window a frame may ask of the reader (16 MiB): frames written
/// at [`LEVEL`] use 2 MiB at most; a frame asking more is refused, not
/// allocated.
const WINDOW_LOG_MAX: u32 = 24;

/// Bits of a packed place that hold the offset inside a frame.
const WITHIN_BITS: u32 = 26;

/// The form of a record file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Lines as they are.
    Plain,
    /// zstd frames.
    Compressed,
}

/// The form of the file at `path` by its first bytes; an empty or missing
/// file is plain (nothing to decompress).
pub fn form_of(path: &Path) -> io::Result<Form> {
    let mut head = [0u8; 4];
    let read = match crate::file::open_regular(path) {
        Ok((file, _)) => file.take(4).read(&mut head)?,
        Err(error) if error.kind() == io::ErrorKind::NotFound => 0,
        Err(error) => return Err(error),
    };
    Ok(if read == 4 && head == ZSTD_MAGIC {
        Form::Compressed
    } else {
        Form::Plain
    })
}

/// Whether `path` holds lines (a `.jsonl` file, plain or compressed, or any
/// zstd file but a `.json.zst`) rather than one JSON document.
pub fn is_lines(path: &Path) -> io::Result<bool> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    if name.ends_with(".jsonl") || name.ends_with(".jsonl.zst") {
        return Ok(true);
    }
    Ok(!name.ends_with(".json.zst") && form_of(path)? == Form::Compressed)
}

/// The text of the regular file at `path`, decompressed if it is zstd, of
/// at most `cap` bytes (`crate::file::read_text` for either form).
pub fn read_text(path: &Path, cap: u64) -> io::Result<String> {
    if form_of(path)? == Form::Plain {
        return crate::file::read_text(path, cap);
    }
    let mut bytes = Vec::new();
    let mut lines = Lines::open(path)?;
    lines.cap = u64::MAX;
    lines.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than the {} MiB such a file may hold", cap >> 20),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// What [`read_text_line`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    /// Nothing: the end of the file.
    End,
    /// A line of text, with its newline if it had one.
    Text,
    /// A line that is not UTF-8 (a torn or corrupted line), read past:
    /// readers skip it, or refuse it, as they do a line that is not JSON.
    NotText,
}

/// Reads the next line into `line` (cleared first), as `read_line` does,
/// but a line that is not UTF-8 is read past and reported, not an error
/// that would end the reading of the whole file; `line` is then empty.
pub fn read_text_line(reader: &mut impl BufRead, line: &mut String) -> io::Result<LineRead> {
    let mut bytes = std::mem::take(line).into_bytes();
    bytes.clear();
    let read = reader.read_until(b'\n', &mut bytes);
    let text = String::from_utf8(bytes);
    let is_text = text.is_ok();
    *line = text.unwrap_or_default();
    Ok(match (read?, is_text) {
        (0, _) => LineRead::End,
        (_, true) => LineRead::Text,
        (_, false) => LineRead::NotText,
    })
}

/// The lines of `reader`, numbered from 1, without their line ends (`\n`,
/// `\r\n`): `Some(text)`, or `None` for a line that is not UTF-8 (see
/// [`read_text_line`]).
pub fn numbered_lines<R: BufRead>(reader: R) -> NumberedLines<R> {
    NumberedLines {
        reader,
        number: 0,
        line: String::new(),
    }
}

/// The iterator of [`numbered_lines`].
pub struct NumberedLines<R> {
    reader: R,
    number: usize,
    line: String,
}

impl<R: BufRead> Iterator for NumberedLines<R> {
    type Item = io::Result<(usize, Option<String>)>;

    fn next(&mut self) -> Option<Self::Item> {
        let read = match read_text_line(&mut self.reader, &mut self.line) {
            Ok(read) => read,
            Err(error) => return Some(Err(error)),
        };
        self.number += 1;
        let text = match read {
            LineRead::End => return None,
            LineRead::NotText => None,
            LineRead::Text => {
                let text = self.line.strip_suffix('\n').unwrap_or(&self.line);
                Some(text.strip_suffix('\r').unwrap_or(text).to_string())
            }
        };
        Some(Ok((self.number, text)))
    }
}

/// Reads the line at the reader's place for [`Lines::read_at`] and
/// [`Cursor`]: one that is not UTF-8 is an `InvalidData` error.
fn read_one_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    match read_text_line(reader, &mut line)? {
        LineRead::NotText => Err(not_text()),
        LineRead::End | LineRead::Text => Ok(line),
    }
}

/// The error of a line that is not UTF-8 where one line was asked for.
fn not_text() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "the line is not UTF-8 text (a torn or corrupted line)",
    )
}

/// A line's place in a compressed file: the byte its frame starts at and
/// the line's offset in the frame's decompressed bytes, in one number (what
/// the session store keeps as a record's offset). `None` when it does not fit
/// (a frame past 128 GiB, a line 64 MiB into one frame, as only a foreign
/// single-frame file has: `lllm merge` rewrites it in small frames).
pub fn pack(frame: u64, within: u64) -> Option<u64> {
    (within < 1 << WITHIN_BITS && frame < 1 << (63 - WITHIN_BITS))
        .then_some(frame << WITHIN_BITS | within)
}

/// The (frame, within) of a [`pack`]ed place.
pub fn unpack(place: u64) -> (u64, u64) {
    (place >> WITHIN_BITS, place & ((1 << WITHIN_BITS) - 1))
}

/// A record file read a line at a time, in either form ([`BufRead`]: use
/// `read_line`, `lines`); [`place`](Lines::place) says where the next line
/// starts. Errors are `InvalidData` for a corrupt frame or a line past
/// [`LINE_CAP`]; the caller names the file. A torn last frame (a killed
/// writer) is read as far as it goes, as a torn last line is: its last line
/// is usually torn too, and readers skip it as they skip a plain file's.
pub struct Lines {
    source: io::BufReader<File>,
    decoder: Option<codec::Decoder>,
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of the source consumed (compressed bytes, or the plain offset of
    /// `buffer[end]`).
    consumed: u64,
    /// The offset of the frame `buffer` came from, and of `buffer[start]`
    /// inside its decompressed bytes.
    frame: u64,
    within: u64,
    /// Whether the decoder is inside a frame (a frame ended with the last
    /// output when false).
    in_frame: bool,
    /// The offset of a last frame cut short, once read.
    torn: Option<u64>,
    /// Bytes consumed since the last newline, and the most allowed.
    run: u64,
    cap: u64,
}

impl Lines {
    /// Opens the regular file at `path` (never a pipe or a device).
    pub fn open(path: &Path) -> io::Result<Lines> {
        let (file, _) = crate::file::open_regular(path)?;
        Lines::from_file(file, 0)
    }

    /// Reads `file` from byte `start` (a frame's start in a compressed file).
    fn from_file(mut file: File, start: u64) -> io::Result<Lines> {
        let mut head = [0u8; 4];
        file.seek(SeekFrom::Start(start))?;
        let read = (&mut file).take(4).read(&mut head)?;
        file.seek(SeekFrom::Start(start))?;
        let decoder = if read == 4 && head == ZSTD_MAGIC {
            Some(codec::Decoder::new(WINDOW_LOG_MAX)?)
        } else {
            None
        };
        Ok(Lines {
            source: io::BufReader::with_capacity(1 << 16, file),
            decoder,
            buffer: vec![0; 1 << 16],
            start: 0,
            end: 0,
            consumed: start,
            frame: start,
            within: 0,
            in_frame: false,
            torn: None,
            run: 0,
            cap: LINE_CAP,
        })
    }

    /// The same reader with lines capped at `cap` bytes instead of
    /// [`LINE_CAP`] (a fuzzer's memory is smaller).
    pub fn with_line_cap(mut self, cap: u64) -> Lines {
        self.cap = cap;
        self
    }

    /// The line at `place` (a byte offset in a plain file, a [`pack`]ed one
    /// in a compressed file), with its newline; reads one frame at most.
    /// [`Cursor`] reads many lines of one file.
    pub fn read_at(path: &Path, place: u64) -> io::Result<String> {
        read_one_line(&mut Lines::at(path, place)?)
    }

    /// A reader of `path` whose next line is the one at `place`.
    fn at(path: &Path, place: u64) -> io::Result<Lines> {
        let (file, _) = crate::file::open_regular(path)?;
        let compressed = form_of(path)? == Form::Compressed;
        let (start, skip) = if compressed {
            unpack(place)
        } else {
            (place, 0)
        };
        let mut lines = Lines::from_file(file, start)?;
        if compressed && lines.decoder.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no zstd frame at byte {start}"),
            ));
        }
        let skipped = io::copy(&mut (&mut lines).take(skip), &mut io::sink())?;
        if skipped < skip {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the frame at byte {start} ends before offset {skip}"),
            ));
        }
        Ok(lines)
    }

    /// The offset of the last frame when the file ended inside it (a killed
    /// writer), once the reader got there.
    pub fn torn_frame(&self) -> Option<u64> {
        self.torn
    }

    /// Whether the file is compressed.
    pub fn form(&self) -> Form {
        if self.decoder.is_some() {
            Form::Compressed
        } else {
            Form::Plain
        }
    }

    /// Where the next unread byte is: its byte offset in a plain file, its
    /// [`pack`]ed place in a compressed one (`None` when it does not fit).
    pub fn place(&self) -> Option<u64> {
        if self.decoder.is_none() {
            return Some(self.consumed - (self.end - self.start) as u64);
        }
        if self.start == self.end && !self.in_frame {
            // The last frame was read to its end: the next byte opens the next.
            return pack(self.consumed, 0);
        }
        pack(self.frame, self.within)
    }

    /// Refills the empty buffer; `false` at the end of the file.
    fn refill(&mut self) -> io::Result<bool> {
        self.start = 0;
        self.end = 0;
        let Some(decoder) = &mut self.decoder else {
            let read = self.source.read(&mut self.buffer)?;
            self.end = read;
            self.consumed += read as u64;
            return Ok(read > 0);
        };
        if !self.in_frame {
            self.frame = self.consumed;
            self.within = 0;
        }
        loop {
            let input = self.source.fill_buf()?;
            if input.is_empty() {
                if self.in_frame {
                    self.torn = Some(self.frame);
                    self.in_frame = false;
                }
                return Ok(false);
            }
            self.in_frame = true;
            let (used, produced, hint) =
                decoder
                    .decompress(input, &mut self.buffer[..])
                    .map_err(|error| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("the zstd frame at byte {} is corrupt: {error}", self.frame),
                        )
                    })?;
            self.source.consume(used);
            self.consumed += used as u64;
            if hint == 0 {
                self.in_frame = false;
            }
            if produced > 0 {
                self.end = produced;
                return Ok(true);
            }
            if !self.in_frame {
                // An empty or skippable frame: the next one starts here.
                self.frame = self.consumed;
            }
        }
    }
}

impl Read for Lines {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let count = available.len().min(out.len());
        out[..count].copy_from_slice(&available[..count]);
        self.consume(count);
        Ok(count)
    }
}

impl BufRead for Lines {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.run > self.cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a line longer than {} MiB", self.cap >> 20),
            ));
        }
        if self.start == self.end {
            self.refill()?;
        }
        Ok(&self.buffer[self.start..self.end])
    }

    fn consume(&mut self, amount: usize) {
        let amount = amount.min(self.end - self.start);
        let taken = &self.buffer[self.start..self.start + amount];
        self.run = match taken.iter().rposition(|byte| *byte == b'\n') {
            Some(newline) => (amount - newline - 1) as u64,
            None => self.run + amount as u64,
        };
        self.start += amount;
        self.within += amount as u64;
    }
}

/// Writes lines to a record file in its form: appended as they are to a
/// plain file, or as one complete zstd frame per [`write`](FrameWriter::write)
/// (with its checksum and size) to a compressed one.
pub struct FrameWriter<W: Write = File> {
    file: W,
    compressor: Option<codec::Compressor>,
    frame: Vec<u8>,
    /// The file's length: where the next write starts.
    length: u64,
}

impl FrameWriter<File> {
    /// Appends to `file` (opened for appending) in `form`.
    pub fn new(file: File, form: Form) -> io::Result<FrameWriter> {
        let length = file.metadata()?.len();
        FrameWriter::to(file, form, length)
    }

    /// Cuts the file back to `length` bytes, a [`length`](FrameWriter::length)
    /// it had before: undoes a write that failed part way (a full disk), or
    /// one whose companion write failed, so the file ends with a whole line
    /// or frame and later writes append after it.
    pub fn cut_back(&mut self, length: u64) -> io::Result<()> {
        self.file.set_len(length)?;
        self.length = length;
        Ok(())
    }
}

impl<W: Write> FrameWriter<W> {
    /// Writes to `file`, which holds `length` bytes already, in `form`.
    pub fn to(file: W, form: Form, length: u64) -> io::Result<FrameWriter<W>> {
        let compressor = match form {
            Form::Plain => None,
            Form::Compressed => Some(codec::Compressor::new(LEVEL)?),
        };
        Ok(FrameWriter {
            file,
            compressor,
            frame: Vec::new(),
            length,
        })
    }

    /// The writer, to flush or sync it.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.file
    }

    /// The file's length as this writer knows it: where the next write starts.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// The place of a line `offset` bytes into the next [`write`](FrameWriter::write)
    /// (see [`Lines::place`]).
    pub fn place(&self, offset: u64) -> Option<u64> {
        match self.compressor {
            None => Some(self.length + offset),
            Some(_) => pack(self.length, offset),
        }
    }

    /// Writes `lines` (whole lines): with one `write` call, so a crash
    /// leaves at most a torn last line or frame.
    pub fn write(&mut self, lines: &[u8]) -> io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let bytes = match &mut self.compressor {
            None => lines,
            Some(compressor) => {
                compressor.compress(lines, &mut self.frame)?;
                &self.frame[..]
            }
        };
        self.file.write_all(bytes)?;
        self.length += bytes.len() as u64;
        Ok(())
    }
}

/// The tests write both forms (without the `zstd` feature a compressed
/// file is refused: `codec`'s tests).
#[cfg(all(test, feature = "zstd"))]
mod tests {
    use super::codec::zstd_error;
    use super::*;

    /// Writes `chunks` as a record file in `form`; the places of their lines.
    pub(super) fn write(path: &Path, form: Form, chunks: &[&[&str]]) -> Vec<u64> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        let mut writer = FrameWriter::new(file, form).unwrap();
        let mut places = Vec::new();
        for chunk in chunks {
            let mut bytes = Vec::new();
            for line in *chunk {
                places.push(writer.place(bytes.len() as u64).unwrap());
                bytes.extend_from_slice(line.as_bytes());
                bytes.push(b'\n');
            }
            writer.write(&bytes).unwrap();
        }
        places
    }

    pub(super) fn read_all(path: &Path) -> io::Result<Vec<(u64, String)>> {
        let mut lines = Lines::open(path)?;
        let mut read = Vec::new();
        loop {
            let place = lines.place().unwrap();
            let mut line = String::new();
            if lines.read_line(&mut line)? == 0 {
                return Ok(read);
            }
            read.push((place, line.trim_end().to_string()));
        }
    }

    pub(super) const CHUNKS: &[&[&str]] =
        &[&["{\"a\":1}", "{\"b\":2}"], &["{\"c\":3}"], &["{\"d\":4}"]];

    #[test]
    fn both_forms_read_back_with_places_that_read_one_line() {
        let dir = tempfile::tempdir().unwrap();
        for form in [Form::Plain, Form::Compressed] {
            let path = dir.path().join(format!("{form:?}"));
            let places = write(&path, form, CHUNKS);
            assert_eq!(form_of(&path).unwrap(), form);
            let read = read_all(&path).unwrap();
            let texts: Vec<&str> = read.iter().map(|(_, text)| text.as_str()).collect();
            assert_eq!(texts, ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}", "{\"d\":4}"]);
            let read_places: Vec<u64> = read.iter().map(|(place, _)| *place).collect();
            assert_eq!(
                read_places, places,
                "{form:?}: the reader's places are the writer's"
            );
            for (place, text) in &read {
                assert_eq!(Lines::read_at(&path, *place).unwrap().trim_end(), text);
            }
        }
        // Compressed: one frame per write, so the third line opens a frame.
        let path = dir.path().join("Compressed");
        let read = read_all(&path).unwrap();
        assert_eq!(unpack(read[1].0).0, 0);
        assert_eq!(unpack(read[1].0).1, 8);
        assert!(unpack(read[2].0).0 > 0);
        assert_eq!(unpack(read[2].0).1, 0);
    }

    #[test]
    fn a_torn_frame_reads_as_far_as_it_goes_and_corrupt_ones_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z");
        write(
            &path,
            Form::Compressed,
            &[&["{\"a\":1}"], &["{\"b\":2}", "{\"c\":3}"]],
        );
        let whole = std::fs::read(&path).unwrap();
        // The last frame without its checksum: its block is whole.
        std::fs::write(&path, &whole[..whole.len() - 2]).unwrap();
        let mut lines = Lines::open(&path).unwrap();
        let mut text = String::new();
        lines.read_to_string(&mut text).unwrap();
        assert_eq!(text, "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
        let second = unpack(read_all(&path).unwrap()[1].0).0;
        assert_eq!(lines.torn_frame(), Some(second));
        // Cut inside the block: the frame gives nothing; the first stays.
        std::fs::write(&path, &whole[..second as usize + 8]).unwrap();
        let read = read_all(&path).unwrap();
        assert_eq!(read.len(), 1);
        let mut flipped = whole.clone();
        let middle = flipped.len() - 6;
        flipped[middle] ^= 0xFF;
        std::fs::write(&path, &flipped).unwrap();
        let error = read_all(&path).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        // This libzstd has no error strings: the code says what happened.
        let text = error.to_string();
        assert!(text.starts_with("the zstd frame at byte "), "{text}");
        assert!(!text.contains("stripped"), "{text}");
        assert!(
            text.contains("its data is corrupted (zstd error 20)")
                || text.contains("its checksum does not match its data (zstd error 22)"),
            "{text}"
        );
        // A frame asking for a 1 TiB window is refused, not allocated.
        let mut greedy = ZSTD_MAGIC.to_vec();
        greedy.extend_from_slice(&[0x00, 0xF0, 0x01, 0x00, 0x00]);
        std::fs::write(&path, &greedy).unwrap();
        let error = read_all(&path).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert_eq!(
            error.to_string(),
            "the zstd frame at byte 0 is corrupt: the frame asks for a larger window than \
             lllm allows (16 MiB) (zstd error 16)"
        );
        assert!(repair(&path).is_ok());
    }

    #[test]
    fn zstd_error_codes_are_told_apart() {
        // zstd returns error `E` as `(size_t)-E`.
        for (code, text) in [
            (20, "its data is corrupted (zstd error 20)"),
            (22, "its checksum does not match its data (zstd error 22)"),
            (
                10,
                "no zstd magic number where a frame should start (zstd error 10)",
            ),
            (99, "zstd failed (zstd error 99)"),
        ] {
            assert_eq!(zstd_error(0usize.wrapping_sub(code)), text);
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_is_read_past_in_both_forms() {
        let dir = tempfile::tempdir().unwrap();
        let bad = "{\"x\":\"\u{fffd}\"}";
        for form in [Form::Plain, Form::Compressed] {
            let path = dir.path().join(format!("{form:?}"));
            let places = write(&path, form, &[&["{\"a\":1}", bad, "{\"c\":3}"]]);
            // The replacement character's bytes made invalid: 0xEF 0xBF 0xBD → 0xFF 0xBF 0xBD.
            let mut bytes = std::fs::read(&path).unwrap();
            if form == Form::Compressed {
                let mut plain = zstd::decode_all(bytes.as_slice()).unwrap();
                let at = plain.iter().position(|byte| *byte == 0xEF).unwrap();
                plain[at] = 0xFF;
                bytes = zstd::encode_all(plain.as_slice(), LEVEL).unwrap();
            } else {
                let at = bytes.iter().position(|byte| *byte == 0xEF).unwrap();
                bytes[at] = 0xFF;
            }
            std::fs::write(&path, &bytes).unwrap();
            let lines: Vec<(usize, Option<String>)> = numbered_lines(Lines::open(&path).unwrap())
                .map(Result::unwrap)
                .collect();
            assert_eq!(
                lines,
                [
                    (1, Some("{\"a\":1}".to_string())),
                    (2, None),
                    (3, Some("{\"c\":3}".to_string()))
                ],
                "{form:?}"
            );
            // Asked for by place, it is an error; the lines around it read.
            let error = Lines::read_at(&path, places[1]).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData);
            assert!(error.to_string().contains("not UTF-8"), "{error}");
            let mut cursor = Cursor::new();
            assert_eq!(cursor.read_at(&path, places[0]).unwrap(), "{\"a\":1}\n");
            assert_eq!(cursor.read_at(&path, places[2]).unwrap(), "{\"c\":3}\n");
        }
    }

    #[test]
    fn a_bomb_is_cut_at_the_line_cap() {
        // 64 MiB of one byte, no newline, in a few kilobytes; the cap (1 GiB
        // in use) is 1 MiB here, so the test stays fast.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bomb.zst");
        let bomb = zstd::bulk::compress(&vec![b'x'; 64 << 20], 3).unwrap();
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        std::fs::write(&path, bomb).unwrap();
        let mut lines = Lines::open(&path).unwrap();
        lines.cap = 1 << 20;
        let mut gathered = Vec::new();
        let error = lines.read_until(b'\n', &mut gathered).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert_eq!(error.to_string(), "a line longer than 1 MiB");
        assert!(
            gathered.len() <= (1 << 20) + (1 << 16),
            "{}",
            gathered.len()
        );
    }

    #[test]
    fn packing_keeps_both_parts_and_refuses_what_does_not_fit() {
        assert_eq!(unpack(pack(12345, 678).unwrap()), (12345, 678));
        assert_eq!(pack(0, 1 << WITHIN_BITS), None);
        assert_eq!(pack(1 << 40, 0), None);
        assert!(pack((1 << 37) - 1, (1 << WITHIN_BITS) - 1).unwrap() <= i64::MAX as u64);
    }
}
