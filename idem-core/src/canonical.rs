//! Canonical JSON and argument fingerprints.
//!
//! Two argument documents that mean the same thing must fingerprint the same: object keys
//! are sorted (by their UTF-8 bytes), insignificant whitespace is dropped, and numbers are
//! normalised so that `1`, `1.0` and `1e0` are one value. Strings use JSON's standard escapes.

use std::fmt;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// The canonical text of a JSON value.
///
/// ```
/// use serde_json::json;
///
/// let a = idem_core::canonical_json(&json!({"b": 1.0, "a": [true, null, "x"]}));
/// assert_eq!(a, r#"{"a":[true,null,"x"],"b":1}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    // Tool arguments are usually a few hundred bytes: one allocation, no regrowth.
    let mut out = String::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // The map's own order depends on serde_json's features: sorted by default, in
            // insertion order with `preserve_order`. Sort only when it is not sorted already,
            // which spares the hot path an allocation per object.
            out.push('{');
            if map.keys().is_sorted_by(|a, b| a.as_bytes() <= b.as_bytes()) {
                write_entries(map.iter(), out);
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                write_entries(entries.into_iter(), out);
            }
            out.push('}');
        }
    }
}

fn write_entries<'a>(entries: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut String) {
    for (i, (k, v)) in entries.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(k, out);
        out.push(':');
        write_canonical(v, out);
    }
}

/// Largest integer magnitude a double represents exactly.
const EXACT_F64_INT: f64 = 9_007_199_254_740_992.0;

fn write_number(n: &Number, out: &mut String) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        if f == 0.0 {
            // Covers -0.0 as well.
            out.push('0');
        } else if f.fract() == 0.0 && f.abs() < EXACT_F64_INT {
            let _ = write!(out, "{}", f as i64);
        } else {
            // serde_json prints the shortest representation that round-trips.
            out.push_str(
                &Number::from_f64(f)
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "null".into()),
            );
        }
    } else {
        // Arbitrary-precision numbers, if a dependency enabled them: keep their text.
        out.push_str(&n.to_string());
    }
}

/// The escapes serde_json writes, and only those: `"`, `\\` and the control characters
/// (short forms where JSON has one, `\u00xx` otherwise); everything else is copied as is.
/// Written out rather than delegated to `serde_json::to_string` to avoid an allocation per
/// string; `write_string_matches_serde_json` holds the two together.
fn write_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    let bytes = s.as_bytes();
    // `bytes[start..i]` is plain text not written yet.
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        // Eight bytes at a time while none of them needs escaping (most text).
        if let Some(chunk) = bytes.get(i..i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            if !needs_escape(u64::from_le_bytes(word)) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => {
                i += 1;
                continue;
            }
        };
        // `b` is ASCII, so `i` is a char boundary.
        out.push_str(&s[start..i]);
        if short.is_empty() {
            out.push_str("\\u00");
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        } else {
            out.push_str(short);
        }
        i += 1;
        start = i;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Whether any of the eight bytes of `word` must be escaped in a JSON string: a control
/// character (below 0x20), `"` or `\`.
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Some byte of `x` is below `n` (for n <= 128) exactly when this is not zero: a byte that
    // borrows in the subtraction and had its high bit clear.
    let below = |x: u64, n: u64| x.wrapping_sub(n * ONES) & !x & HIGH;
    below(word, 0x20)
        | below(word ^ (u64::from(b'"') * ONES), 1)
        | below(word ^ (u64::from(b'\\') * ONES), 1)
        != 0
}

/// SHA-256 of the canonical JSON of a call's typed arguments.
///
/// The same key sent with a different fingerprint is refused (`KeyReused`), never replayed.
///
/// ```
/// use idem_core::Fingerprint;
/// use serde_json::json;
///
/// let a = Fingerprint::of(&json!({"to": "a@example.com", "n": 2}));
/// let b = Fingerprint::of(&json!({"n": 2.0, "to": "a@example.com"}));
/// assert_eq!(a, b);
/// assert_eq!(a.to_hex().len(), 64);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of a value.
    pub fn of(value: &Value) -> Self {
        Self::of_canonical(&canonical_json(value))
    }

    /// The fingerprint of text that is already canonical JSON.
    pub fn of_canonical(canonical: &str) -> Self {
        Fingerprint(Sha256::digest(canonical.as_bytes()).into())
    }

    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Build from a raw digest (as a store read it back).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Fingerprint(bytes)
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Parse lower- or upper-case hex of 64 digits.
    pub fn from_hex(s: &str) -> Option<Self> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Some(Fingerprint(out))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_hex(&mut s, bytes);
    s
}

/// Append the lower-case hex digits of `bytes` to `s`.
pub(crate) fn push_hex(s: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl From<Fingerprint> for String {
    fn from(f: Fingerprint) -> String {
        f.to_hex()
    }
}

impl TryFrom<String> for Fingerprint {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Fingerprint::from_hex(&s)
            .ok_or_else(|| format!("`{s}` is not a 64-digit hex SHA-256 fingerprint"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_sorted_and_whitespace_dropped() {
        let v: Value =
            serde_json::from_str("{ \"z\" : 1 , \"a\" : { \"y\": [1, 2], \"b\": \"é\\n\" } }")
                .unwrap();
        assert_eq!(canonical_json(&v), r#"{"a":{"b":"é\n","y":[1,2]},"z":1}"#);
    }

    #[test]
    fn numbers_normalised() {
        assert_eq!(
            canonical_json(&json!([1.0, -0.0, 1e3, 0.5, -7, u64::MAX, 1e300])),
            format!("[1,0,1000,0.5,-7,{},1e+300]", u64::MAX)
        );
    }

    #[test]
    fn needs_escape_on_every_byte_at_every_position() {
        for filler in [b'a', 0x20, 0x7f, 0x80, 0xff] {
            for v in 0..=255u8 {
                for at in 0..8 {
                    let mut bytes = [filler; 8];
                    bytes[at] = v;
                    let expected = bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
                    assert_eq!(
                        needs_escape(u64::from_le_bytes(bytes)),
                        expected,
                        "{bytes:02x?}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn write_string_matches_serde_json_on_any_text(s in "(?s).{0,80}", cut in 0usize..16) {
            // Escapes at every offset of the eight-byte stride, in and around multi-byte text.
            let s = format!("{}{s}\u{1}\"\\{}", "é".repeat(cut % 3), "x".repeat(cut));
            let mut out = String::new();
            write_string(&s, &mut out);
            proptest::prop_assert_eq!(out, serde_json::to_string(&s).unwrap());
        }

        #[test]
        fn needs_escape_is_exact(word: u64) {
            let bytes = word.to_le_bytes();
            let expected = bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
            proptest::prop_assert_eq!(needs_escape(word), expected, "{:02x?}", bytes);
        }
    }

    #[test]
    fn write_string_matches_serde_json() {
        let mut cases: Vec<String> = (0u32..0x80)
            .filter_map(char::from_u32)
            .map(|c| format!("a{c}b"))
            .collect();
        cases.extend(
            [
                "",
                "plain",
                "é\n\"q\"\\",
                "\u{7f}\u{80}\u{2028}😀",
                "\u{0}\u{1f}",
            ]
            .map(String::from),
        );
        for s in cases {
            let mut out = String::new();
            write_string(&s, &mut out);
            assert_eq!(out, serde_json::to_string(&s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn unsorted_maps_are_sorted() {
        // Whatever order a map iterates in, the canonical text is sorted.
        let mut map = serde_json::Map::new();
        for k in ["b", "a", "é", "A"] {
            map.insert(k.to_owned(), json!(1));
        }
        assert_eq!(
            canonical_json(&Value::Object(map)),
            r#"{"A":1,"a":1,"b":1,"é":1}"#
        );
    }

    #[test]
    fn fingerprint_changes_with_any_value() {
        let a = Fingerprint::of(&json!({"a": 1}));
        assert_ne!(a, Fingerprint::of(&json!({"a": 2})));
        assert_ne!(a, Fingerprint::of(&json!({"a": "1"})));
        assert_eq!(Fingerprint::from_hex(&a.to_hex()), Some(a));
        assert_eq!(Fingerprint::from_hex("zz"), None);
    }
}
