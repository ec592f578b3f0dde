//! SHA-256, from `ring`: the TLS stack (rustls) already compiles it, so the
//! digests of requests, prompts, cache keys, task files and shards cost the
//! library no crate of their own (the `sha2` crate and its six helpers
//! were 7 of the minimal build's crates; docs/benchmarks.md, "Build
//! weight"). The same function either way: `sha2`, a dev-dependency, checks
//! it in the tests below.

/// An incremental SHA-256: `update` as often as needed, then `finalize`.
pub(crate) struct Sha256(ring::digest::Context);

impl Sha256 {
    pub(crate) fn new() -> Sha256 {
        Sha256(ring::digest::Context::new(&ring::digest::SHA256))
    }

    pub(crate) fn update(&mut self, bytes: impl AsRef<[u8]>) {
        self.0.update(bytes.as_ref());
    }

    pub(crate) fn finalize(self) -> [u8; 32] {
        bytes(self.0.finish())
    }

    /// The digest of `bytes` at once.
    pub(crate) fn digest(bytes: impl AsRef<[u8]>) -> [u8; 32] {
        self::bytes(ring::digest::digest(&ring::digest::SHA256, bytes.as_ref()))
    }
}

/// Lower-case hex of `bytes`. Digits written directly: `format!("{:x}")`
/// goes through the formatting machinery once per byte.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xF)]));
    }
    text
}

fn bytes(digest: ring::digest::Digest) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::Sha256;
    use sha2::Digest;

    #[test]
    fn is_sha2s_sha256_for_empty_short_and_multi_block_inputs_fed_in_pieces() {
        let long: Vec<u8> = (0..10_000u32).map(|n| (n % 251) as u8).collect();
        for input in [&b""[..], b"abc", &long] {
            let expected: [u8; 32] = sha2::Sha256::digest(input).into();
            assert_eq!(Sha256::digest(input), expected);
            let mut pieces = Sha256::new();
            for chunk in input.chunks(7) {
                pieces.update(chunk);
            }
            assert_eq!(pieces.finalize(), expected);
        }
        assert_eq!(
            super::hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
