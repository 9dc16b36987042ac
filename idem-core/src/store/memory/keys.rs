//! How a shard files a key: which shard holds it, the 32 bytes of a digest key (half the
//! size of its text, and cheaper to hash), and the seeded hash of the digest table.

use std::hash::{BuildHasher, Hasher, RandomState};

use crate::canonical::hex;
use crate::key::RecordKey;

/// How many shards, each behind its own lock, a memory store splits its records into.
pub(super) const SHARDS: usize = 16;

/// The 32 bytes spelled by a key of 64 lower-case hex digits.
pub(super) type Digest = [u8; 32];

/// A record's key as a shard files it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyRef<'a> {
    /// 64 lower-case hex digits (every key [`crate::LogicalKey::record_key`] derives), kept as
    /// the 32 bytes they spell: half the size, and cheaper to hash.
    Digest(Digest),
    /// Any other key (one read back from elsewhere, a test's name), kept as written so that it
    /// comes back byte for byte.
    Text(&'a str),
}

impl<'a> KeyRef<'a> {
    pub(super) fn of(key: &'a RecordKey) -> Self {
        match decode_digest(key.as_str()) {
            Some(d) => KeyRef::Digest(d),
            None => KeyRef::Text(key.as_str()),
        }
    }

    pub(super) fn to_record_key(self) -> RecordKey {
        match self {
            KeyRef::Digest(d) => RecordKey::from_stored(hex(&d)),
            KeyRef::Text(t) => RecordKey::from_stored(t),
        }
    }

    /// Which shard holds the key.
    pub(super) fn shard(self) -> usize {
        match self {
            // A digest's bytes are uniformly spread.
            KeyRef::Digest(d) => usize::from(d[0]) % SHARDS,
            KeyRef::Text(t) => {
                let h = t.bytes().take(4).fold(0usize, |acc, x| {
                    acc.wrapping_mul(31).wrapping_add(usize::from(x))
                });
                h % SHARDS
            }
        }
    }
}

/// The bytes of exactly 64 lower-case hex digits. Upper case is refused: encoding the bytes
/// again must give back the very same text.
pub(super) fn decode_digest(s: &str) -> Option<Digest> {
    // Each input byte's value as a hex digit, or 0xff. The loop only looks up and merges, and
    // checks once at the end: every key of every call goes through here.
    const DIGIT: [u8; 256] = {
        let mut table = [0xff; 256];
        let mut i = 0;
        while i < 10 {
            table[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            table[b'a' as usize + i] = 10 + i as u8;
            i += 1;
        }
        table
    };
    let bytes: &[u8; 64] = s.as_bytes().try_into().ok()?;
    let mut out = [0u8; 32];
    let mut invalid = 0u8;
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let (hi, lo) = (DIGIT[usize::from(pair[0])], DIGIT[usize::from(pair[1])]);
        invalid |= hi | lo;
        *o = (hi << 4) | (lo & 0x0f);
    }
    (invalid & 0xf0 == 0).then_some(out)
}

/// How the digest table hashes its keys. A key there is a SHA-256 output, already uniform, so
/// two of its words folded with a secret per-table seed make the hash, at a fraction of
/// SipHash's cost. The seed matters: a caller could grind key material offline until many
/// digests share the bits that pick a bucket; without the seed it cannot know which bits.
/// (The first byte picks the shard, so the words come from further in.)
#[derive(Debug, Clone)]
pub(super) struct DigestHashing {
    seed: [u64; 2],
}

impl Default for DigestHashing {
    fn default() -> Self {
        let random = RandomState::new();
        DigestHashing {
            seed: [random.hash_one(1u8), random.hash_one(2u8)],
        }
    }
}

impl BuildHasher for DigestHashing {
    type Hasher = DigestHasher;

    fn build_hasher(&self) -> DigestHasher {
        DigestHasher {
            seed: self.seed,
            hash: 0,
        }
    }
}

#[derive(Debug)]
pub(super) struct DigestHasher {
    seed: [u64; 2],
    hash: u64,
}

impl DigestHasher {
    /// Multiply as 128 bits and fold the halves: every input bit reaches the low bits.
    fn fold(a: u64, b: u64) -> u64 {
        let product = u128::from(a) * u128::from(b);
        (product as u64) ^ ((product >> 64) as u64)
    }

    fn word(bytes: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(bytes);
        u64::from_le_bytes(w)
    }
}

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        if bytes.len() == 32 {
            // A digest's 32 bytes, the only input this table hashes.
            self.hash ^= Self::fold(
                Self::word(&bytes[8..16]) ^ self.seed[0],
                Self::word(&bytes[16..24]) ^ self.seed[1],
            );
        } else {
            // Anything else (never, in this table) is still hashed, byte by byte.
            for &b in bytes {
                self.hash = Self::fold(self.hash ^ u64::from(b) ^ self.seed[0], self.seed[1] | 1);
            }
        }
    }

    fn write_usize(&mut self, n: usize) {
        // The length a slice's hash writes first; always 32 here, and mixed in all the same.
        self.hash = Self::fold(self.hash ^ n as u64 ^ self.seed[1], self.seed[0] | 1);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}
