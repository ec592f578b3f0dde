//! Cutting what a killed writer left unfinished off a record file, before a
//! resumed batch appends to it: a torn last line of a plain file, a torn last
//! frame of a compressed one. Frames are walked by their headers (RFC 8878,
//! section 3.1), seeking over block contents, so a large file is not
//! decompressed to resume it.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::{Form, ZSTD_MAGIC, form_of};

/// Cuts what a killed writer left unfinished off the record file at `path`:
/// a torn last line of a plain file, a torn last frame of a compressed one.
/// Returns how many bytes were cut; a compressed file whose frames do not
/// parse is an `InvalidData` error naming the byte.
pub fn repair(path: &Path) -> io::Result<u64> {
    let mut file = match crate::file::open_in_place(
        path,
        std::fs::OpenOptions::new().read(true).write(true),
    ) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error),
    };
    let length = file.metadata()?.len();
    let keep = match form_of(path)? {
        Form::Plain => last_line_end(&mut file, length)?,
        Form::Compressed => last_frame_end(&mut file, length)?,
    };
    if keep < length {
        file.set_len(keep)?;
    }
    Ok(length - keep)
}

/// The end of the last newline of a plain file, walking back a block at a time.
fn last_line_end(file: &mut File, length: u64) -> io::Result<u64> {
    let mut end = length;
    let mut block = vec![0u8; 8192];
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let size = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block[..size])?;
        if let Some(position) = block[..size].iter().rposition(|byte| *byte == b'\n') {
            return Ok(start + position as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// The end of the last whole frame of a compressed file: frames are walked
/// by their headers (RFC 8878, section 3.1), seeking over block contents.
fn last_frame_end(file: &mut File, length: u64) -> io::Result<u64> {
    file.seek(SeekFrom::Start(0))?;
    let mut reader = io::BufReader::new(file);
    let mut at = 0u64;
    while at < length {
        match frame_length(&mut reader, at)? {
            Some(size) if at + size <= length => at += size,
            _ => return Ok(at),
        }
        reader.seek(SeekFrom::Start(at))?;
    }
    Ok(at)
}

/// The length of the frame starting at byte `at` of `reader` (positioned
/// there); `None` when the file ends inside it.
fn frame_length(reader: &mut io::BufReader<&mut File>, at: u64) -> io::Result<Option<u64>> {
    let corrupt = |what: &str| {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a zstd frame at byte {at}: {what}"),
        ))
    };
    let mut bytes = [0u8; 8];
    macro_rules! take {
        ($count:expr) => {
            match reader.read_exact(&mut bytes[..$count]) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(error) => return Err(error),
            }
        };
    }
    take!(4);
    let magic = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
        // A skippable frame: a 4-byte size, then that many bytes.
        take!(4);
        return Ok(Some(
            8 + u64::from(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
        ));
    }
    if bytes[..4] != ZSTD_MAGIC {
        return corrupt("no magic number");
    }
    take!(1);
    let descriptor = bytes[0];
    if descriptor & 0x08 != 0 {
        return corrupt("a reserved bit is set");
    }
    let single_segment = descriptor & 0x20 != 0;
    let content_size = match descriptor >> 6 {
        0 => u64::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let header =
        5 + u64::from(!single_segment) + [0, 1, 2, 4][usize::from(descriptor & 3)] + content_size;
    let mut size = header;
    reader.seek_relative((header - 5) as i64)?;
    loop {
        take!(3);
        let block = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], 0]);
        let content = match (block >> 1) & 3 {
            0 | 2 => u64::from(block >> 3),
            1 => 1,
            _ => return corrupt("a reserved block type"),
        };
        size += 3 + content;
        reader.seek_relative(content as i64)?;
        if block & 1 == 1 {
            break;
        }
    }
    if descriptor & 0x04 != 0 {
        size += 4;
    }
    Ok(Some(size))
}

#[cfg(all(test, feature = "zstd"))]
mod tests {
    use super::super::tests::{CHUNKS, read_all, write};
    use super::super::unpack;
    use super::*;

    #[test]
    fn repair_cuts_a_torn_last_frame_or_line_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for form in [Form::Plain, Form::Compressed] {
            let path = dir.path().join(format!("{form:?}"));
            write(&path, form, CHUNKS);
            let whole = std::fs::read(&path).unwrap();
            assert_eq!(repair(&path).unwrap(), 0, "{form:?}: a whole file stays");
            // Cut inside the last write: its line or frame goes, the rest stays.
            let last = read_all(&path).unwrap()[3].0;
            let last_start = match form {
                Form::Plain => last,
                Form::Compressed => unpack(last).0,
            };
            for cut in [1, 3, 6] {
                std::fs::write(&path, &whole[..whole.len() - cut]).unwrap();
                assert_eq!(
                    repair(&path).unwrap(),
                    (whole.len() - cut) as u64 - last_start
                );
                let texts: Vec<String> = read_all(&path)
                    .unwrap()
                    .into_iter()
                    .map(|(_, text)| text)
                    .collect();
                assert_eq!(
                    texts,
                    ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"],
                    "{form:?} cut {cut}"
                );
            }
        }
        assert_eq!(repair(&dir.path().join("missing")).unwrap(), 0);
    }
}
