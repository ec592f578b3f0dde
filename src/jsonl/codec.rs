//! The zstd calls of record files in one place: libzstd's with the `zstd`
//! feature; without it, opening a decoder or a compressor fails with an error
//! naming the feature, so a compressed file is refused, never read as plain
//! text, and `--compress` or a `.zst` record path is refused, never written
//! plain. `mod.rs` owns the framing (places, torn frames, the line cap).

use std::io;

#[cfg(all(test, feature = "zstd"))]
pub(crate) use with_zstd::zstd_error;
#[cfg(feature = "zstd")]
pub(crate) use with_zstd::{Compressor, Decoder, encode_all};
#[cfg(not(feature = "zstd"))]
pub(crate) use without_zstd::{Compressor, Decoder, encode_all};

#[cfg(feature = "zstd")]
mod with_zstd {
    use std::io;

    use zstd::zstd_safe::{CParameter, DCtx, DParameter, InBuffer, OutBuffer};

    /// A streaming decoder of zstd frames.
    pub(crate) struct Decoder(DCtx<'static>);

    impl Decoder {
        /// A decoder that refuses frames needing a window past `2^window_log_max`.
        pub(crate) fn new(window_log_max: u32) -> io::Result<Decoder> {
            // The context itself, not `zstd::stream`'s wrapper: its errors
            // keep their code (`zstd_error`).
            let mut context = DCtx::try_create()
                .ok_or_else(|| io::Error::other("cannot allocate a zstd decoder"))?;
            context
                .init()
                .and_then(|_| context.set_parameter(DParameter::WindowLogMax(window_log_max)))
                .map_err(|code| io::Error::other(zstd_error(code)))?;
            Ok(Decoder(context))
        }

        /// Decompresses from `input` into `output`: the input bytes used, the
        /// output bytes produced, and 0 when a frame ended; `Err` is zstd's
        /// error, in words.
        pub(crate) fn decompress(
            &mut self,
            input: &[u8],
            output: &mut [u8],
        ) -> Result<(usize, usize, usize), String> {
            let mut input = InBuffer::around(input);
            let mut output = OutBuffer::around(output);
            let hint = self
                .0
                .decompress_stream(&mut output, &mut input)
                .map_err(zstd_error)?;
            Ok((input.pos(), output.pos(), hint))
        }
    }

    /// A compressor of whole frames, each with its checksum and size.
    pub(crate) struct Compressor(zstd::bulk::Compressor<'static>);

    impl Compressor {
        /// A compressor at `level`.
        pub(crate) fn new(level: i32) -> io::Result<Compressor> {
            let mut compressor = zstd::bulk::Compressor::new(level)?;
            let context = compressor.context_mut();
            let flag = |result: Result<usize, usize>| {
                result.map_err(|code| io::Error::other(zstd_error(code)))
            };
            flag(context.set_parameter(CParameter::ChecksumFlag(true)))?;
            flag(context.set_parameter(CParameter::ContentSizeFlag(true)))?;
            Ok(Compressor(compressor))
        }

        /// `bytes` as one frame, in `frame` (cleared first).
        pub(crate) fn compress(&mut self, bytes: &[u8], frame: &mut Vec<u8>) -> io::Result<()> {
            frame.clear();
            frame.reserve(zstd::zstd_safe::compress_bound(bytes.len()));
            self.0.compress_to_buffer(bytes, frame)?;
            Ok(())
        }
    }

    /// `bytes` as one frame at zstd's default level (a `.json.zst` record).
    pub(crate) fn encode_all(bytes: &[u8]) -> io::Result<Vec<u8>> {
        zstd::encode_all(bytes, zstd::DEFAULT_COMPRESSION_LEVEL)
    }

    /// What a zstd error code means, in a few words. This build of libzstd has
    /// no error strings (`ZSTD_getErrorName` says only "Error strings
    /// stripped"), so the codes are told apart here: a function's result `r` is
    /// an error when `-r` is a code of `zstd_errors.h`, whose values below 100
    /// are stable.
    pub(crate) fn zstd_error(code: usize) -> String {
        let number = code.wrapping_neg();
        let what = match number {
            10 => "no zstd magic number where a frame should start",
            12 => "a zstd format version this build does not read",
            14 => "a frame parameter this build does not support",
            16 => "the frame asks for a larger window than lllm allows (16 MiB)",
            20 | 24 => "its data is corrupted",
            22 => "its checksum does not match its data",
            30 | 32 => "it needs a dictionary that lllm does not have",
            40..=42 => "a zstd parameter this build does not support",
            64 => "out of memory",
            70 | 72 | 80 | 82 => "it ends too early or runs on too long",
            _ => "zstd failed",
        };
        format!("{what} (zstd error {number})")
    }
}

#[cfg(not(feature = "zstd"))]
mod without_zstd {
    use std::convert::Infallible;
    use std::io;

    use super::unsupported;

    /// Never made: [`Decoder::new`] fails.
    pub(crate) struct Decoder(Infallible);

    impl Decoder {
        pub(crate) fn new(_window_log_max: u32) -> io::Result<Decoder> {
            Err(unsupported("reading a zstd-compressed file"))
        }

        pub(crate) fn decompress(
            &mut self,
            _input: &[u8],
            _output: &mut [u8],
        ) -> Result<(usize, usize, usize), String> {
            match self.0 {}
        }
    }

    /// Never made: [`Compressor::new`] fails.
    pub(crate) struct Compressor(Infallible);

    impl Compressor {
        pub(crate) fn new(_level: i32) -> io::Result<Compressor> {
            Err(unsupported("writing a zstd-compressed file (`--compress`)"))
        }

        pub(crate) fn compress(&mut self, _bytes: &[u8], _frame: &mut Vec<u8>) -> io::Result<()> {
            match self.0 {}
        }
    }

    pub(crate) fn encode_all(_bytes: &[u8]) -> io::Result<Vec<u8>> {
        Err(unsupported("writing a `.zst` record"))
    }
}

/// The error of a zstd call in a build without the `zstd` feature.
#[cfg_attr(feature = "zstd", allow(dead_code))]
fn unsupported(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        crate::features::missing(what, "zstd"),
    )
}

#[cfg(all(test, feature = "zstd"))]
mod tests {
    use super::*;

    #[test]
    fn a_frame_decompresses_to_what_was_compressed() {
        let mut compressor = Compressor::new(1).unwrap();
        let mut frame = Vec::new();
        compressor.compress(b"{\"a\":1}\n", &mut frame).unwrap();
        let mut decoder = Decoder::new(24).unwrap();
        let mut output = [0u8; 64];
        let (used, produced, hint) = decoder.decompress(&frame, &mut output).unwrap();
        assert_eq!((used, hint), (frame.len(), 0));
        assert_eq!(&output[..produced], b"{\"a\":1}\n");
        assert!(unsupported("x").to_string().contains("`zstd`"));
    }
}
