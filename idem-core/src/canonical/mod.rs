//! Canonical JSON and argument fingerprints.
//!
//! Two argument documents that mean the same thing must fingerprint the same, and two that
//! do not must not: object keys are sorted (by their UTF-8 bytes), insignificant whitespace
//! is dropped, strings use JSON's standard escapes, and each numeric value has one text.
//!
//! # Numbers
//!
//! A number is taken as an exact decimal, `-`? 0.d₁…dₖ × 10ⁿ with d₁ and dₖ not zero, and
//! printed by the rules of ECMAScript's `Number::toString` (which RFC 8785 also uses):
//!
//! - zero, `-0` included, is `0`;
//! - if −6 < n ≤ 21, there is no exponent: for k ≤ n the digits then n − k zeros (`100`,
//!   `18446744073709551615`), for 0 < n < k the digits with a point after the n-th (`1.5`,
//!   `-7.25`), for n ≤ 0 `0.` then −n zeros then the digits (`0.1`, `0.000001`);
//! - otherwise d₁, then `.` and d₂…dₖ if k > 1, then `e`, the sign of n − 1 (`+` or `-`)
//!   and its digits (`1e+21`, `1.5e-7`, `1e+1000000000`).
//!
//! So `1`, `1.0`, `1e0` and `10e-1` are all `1`, `1e16` is `10000000000000000`, and the text
//! is never much longer than the literal, whatever its exponent.
//!
//! Which decimal a number is depends on serde_json's `arbitrary_precision` feature, which
//! any crate in the application can turn on:
//!
//! - with it, the literal as written: every digit counts, so `18446744073709551617` and
//!   `0.1000000000000000055511151231257827` differ from `18446744073709551616` and `0.1`;
//! - without it, what serde_json parsed: an integer in the range of `i64` or `u64` exactly,
//!   any other literal as the nearest `f64`, and an `f64` as the decimal of the shortest
//!   text that reads back as it, as serde_json prints it (`0.1`, not the binary fraction's
//!   55 digits). Literals that parse to the same `f64` are then one value:
//!   `18446744073709551617` and `18446744073709551616` are both `18446744073709552000`,
//!   while `18446744073709551615` (a `u64`) stays itself.

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
/// let a = idem::key::canonical_json(&json!({"b": 1.0, "a": [true, null, "x"]}));
/// assert_eq!(a, r#"{"a":[true,null,"x"],"b":1}"#);
///
/// let n = idem::key::canonical_json(&json!([1e16, 0.5e1, 1e21, -0.0, 0.000_000_15]));
/// assert_eq!(n, "[10000000000000000,5,1e+21,0,1.5e-7]");
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

fn write_number(n: &Number, out: &mut String) {
    // Integers, nearly every number in tool arguments, print as they are without allocating.
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(i) = integral_f64(n) {
        let _ = write!(out, "{i}");
    } else {
        // An f64 prints its shortest round-trip text, which is its decimal value; with
        // `arbitrary_precision` the text is the literal as written. Either way that text is
        // read as an exact decimal, never through an f64.
        let mut text = NumberText::default();
        let _ = write!(text, "{n}");
        match Decimal::parse(text.as_mut_bytes()) {
            Some(decimal) => decimal.write(out),
            // serde_json holds JSON number literals only (its unchecked constructor is not
            // public API); anything else is kept as it is.
            None => {
                let _ = write!(out, "{n}");
            }
        }
    }
}

/// An f64 that is an integer below 2^53, as that integer. Its shortest round-trip decimal
/// (of `2.0`, `1e15`) is that integer, so it prints as one without the text, as fast as an
/// `i64`. Never with `arbitrary_precision`, where `2.0000000000000000001` is the f64 2.
fn integral_f64(n: &Number) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if literals_kept() {
        return None;
    }
    let f = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < EXACT)?;
    Some(f as i64)
}

/// Whether serde_json keeps each number's literal (its `arbitrary_precision` feature, which
/// any crate of the application may turn on): 2^64 + 1 survives only then.
fn literals_kept() -> bool {
    static KEPT: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
        serde_json::from_str::<Number>("18446744073709551617")
            .is_ok_and(|n| n.to_string() == "18446744073709551617")
    });
    *KEPT
}

/// The text serde_json prints for a number: on the stack for any f64 (at most 24 bytes),
/// on the heap only for a longer literal kept by `arbitrary_precision`.
#[derive(Default)]
struct NumberText {
    stack: [u8; 32],
    len: usize,
    heap: Vec<u8>,
}

impl NumberText {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        if self.heap.is_empty() {
            &mut self.stack[..self.len]
        } else {
            &mut self.heap
        }
    }
}

impl fmt::Write for NumberText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if self.heap.is_empty() && end <= self.stack.len() {
            self.stack[self.len..end].copy_from_slice(s.as_bytes());
            self.len = end;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.stack[..self.len]);
            }
            self.heap.extend_from_slice(s.as_bytes());
        }
        Ok(())
    }
}

/// The point positions n (of 0.d × 10ⁿ) printed without an exponent, ECMAScript's: 1e20
/// is `100000000000000000000` but 1e21 is `1e+21`, 1e-6 is `0.000001` but 1e-7 is `1e-7`.
const PLAIN_POINT: std::ops::RangeInclusive<i128> = -5..=21;

/// Exponents of more digits than this are not read into an `i128` (which holds 38) but
/// offset digit by digit.
const LONG_EXPONENT_DIGITS: usize = 30;

/// A number as an exact decimal: `-`? 0.`digits` × 10^n, n = `exponent` + `shift`.
struct Decimal<'a> {
    negative: bool,
    /// The significant digits, without a leading or trailing zero: none for zero.
    digits: &'a str,
    /// The literal's exponent, of any length.
    exponent: Exponent<'a>,
    /// What moving the literal's point in front of `digits` adds to the exponent: at most
    /// the literal's length either way.
    shift: i128,
}

/// A decimal exponent as written: its sign and its digits, without leading zeros.
struct Exponent<'a> {
    negative: bool,
    digits: &'a [u8],
}

impl<'a> Decimal<'a> {
    /// Read a JSON number literal, `-`? int (`.` frac)? ([eE] [+-]? exp)?, or `None`. The
    /// fraction's digits are moved over the point, so that the significant digits are one
    /// slice; `text` is changed only once it is known to be a number.
    fn parse(text: &'a mut [u8]) -> Option<Self> {
        let digits_from = |text: &[u8], at: usize| {
            at + text[at..].iter().take_while(|b| b.is_ascii_digit()).count()
        };
        let negative = text.first() == Some(&b'-');
        let int_start = usize::from(negative);
        let int_end = digits_from(text, int_start);
        let (frac_start, frac_end) = match text.get(int_end) {
            Some(b'.') => (int_end + 1, digits_from(text, int_end + 1)),
            _ => (int_end, int_end),
        };
        let (exp_negative, exp_start) = match text.get(frac_end) {
            None => (false, frac_end),
            Some(b'e' | b'E') => match text.get(frac_end + 1) {
                Some(b'-') => (true, frac_end + 2),
                Some(b'+') => (false, frac_end + 2),
                _ => (false, frac_end + 1),
            },
            Some(_) => return None,
        };
        if int_end == int_start
            || (frac_start > int_end && frac_end == frac_start)
            || (exp_start > frac_end
                && (exp_start == text.len() || digits_from(text, exp_start) != text.len()))
        {
            return None;
        }
        text.copy_within(frac_start..frac_end, int_end);
        let digits_end = int_end + (frac_end - frac_start);

        let text: &'a [u8] = text;
        let written = std::str::from_utf8(&text[int_start..digits_end]).ok()?;
        let lead = written.bytes().take_while(|&b| b == b'0').count();
        let trail = written[lead..]
            .bytes()
            .rev()
            .take_while(|&b| b == b'0')
            .count();
        let exp = &text[exp_start..];
        let exp_lead = exp.iter().take_while(|&&b| b == b'0').count();
        Some(Decimal {
            negative,
            digits: &written[lead..written.len() - trail],
            exponent: Exponent {
                negative: exp_negative,
                digits: &exp[exp_lead..],
            },
            // Lengths fit an isize, so both fit an i128 and so does their difference.
            shift: (int_end - int_start) as i128 - lead as i128,
        })
    }

    /// Print the decimal by ECMAScript's `Number::toString` rules (see the module doc).
    fn write(&self, out: &mut String) {
        if self.digits.is_empty() {
            // Zero, whatever its sign and exponent.
            out.push('0');
            return;
        }
        if self.negative {
            out.push('-');
        }
        match self.exponent.value().map(|e| e + self.shift) {
            Some(n) if PLAIN_POINT.contains(&n) => self.write_plain(n, out),
            n => self.write_scientific(n, out),
        }
    }

    /// The digits with the point after the `n`-th, padded with zeros on the side it is off.
    fn write_plain(&self, n: i128, out: &mut String) {
        // `n` is in `PLAIN_POINT`, so every count here is small and not negative.
        let k = self.digits.len() as i128;
        let push_zeros = |out: &mut String, count: i128| {
            out.extend(std::iter::repeat_n('0', count as usize));
        };
        if k <= n {
            out.push_str(self.digits);
            push_zeros(out, n - k);
        } else if n > 0 {
            let (int, frac) = self.digits.split_at(n as usize);
            out.push_str(int);
            out.push('.');
            out.push_str(frac);
        } else {
            out.push_str("0.");
            push_zeros(out, -n);
            out.push_str(self.digits);
        }
    }

    /// d₁.d₂…dₖ, then the exponent n − 1 with its sign; `n` is `None` when the literal's
    /// exponent has more than `LONG_EXPONENT_DIGITS` digits.
    fn write_scientific(&self, n: Option<i128>, out: &mut String) {
        let (first, rest) = self.digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        match n {
            Some(n) => {
                let _ = write!(out, "e{:+}", n - 1);
            }
            None => {
                // n - 1 is the exponent plus (shift - 1), and the exponent (above 10^30)
                // dwarfs the shift (below 2^64), so the sum has the exponent's sign and its
                // magnitude is the exponent's plus or minus (shift - 1).
                out.push_str(if self.exponent.negative { "e-" } else { "e+" });
                let delta = if self.exponent.negative {
                    1 - self.shift
                } else {
                    self.shift - 1
                };
                push_offset_decimal(out, self.exponent.digits, delta);
            }
        }
    }
}

impl Exponent<'_> {
    /// The exponent, unless it has more than `LONG_EXPONENT_DIGITS` digits.
    fn value(&self) -> Option<i128> {
        if self.digits.len() > LONG_EXPONENT_DIGITS {
            return None;
        }
        let magnitude = self
            .digits
            .iter()
            .fold(0, |n, &d| n * 10 + i128::from(d - b'0'));
        Some(if self.negative { -magnitude } else { magnitude })
    }
}

/// Append `digits`, ASCII decimal digits (checked by `Decimal::parse`).
fn push_ascii(out: &mut String, digits: &[u8]) {
    out.extend(digits.iter().map(|&b| char::from(b)));
}

/// Append the decimal digits of `digits + delta`, where `digits` is a decimal of more than
/// `LONG_EXPONENT_DIGITS` digits and `delta` is far smaller, so the sum is positive. Only
/// exponents beyond any f64's reach come here.
fn push_offset_decimal(out: &mut String, digits: &[u8], delta: i128) {
    let mut sum = digits.to_vec();
    let mut carry = delta;
    for d in sum.iter_mut().rev() {
        if carry == 0 {
            break;
        }
        let v = i128::from(*d - b'0') + carry;
        *d = b'0' + v.rem_euclid(10) as u8;
        carry = v.div_euclid(10);
    }
    if carry > 0 {
        let _ = write!(out, "{carry}");
        push_ascii(out, &sum);
    } else {
        // A borrow may have cleared the leading digit.
        let lead = sum.iter().take_while(|&&b| b == b'0').count();
        push_ascii(out, &sum[lead..]);
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
/// use idem::key::Fingerprint;
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
    for b in bytes {
        let [hi, lo] = hex_pair(*b);
        s.push(hi as char);
        s.push(lo as char);
    }
}

/// The lower-case hex digits of `bytes`, written into `out` (twice as long), as ASCII text.
pub(crate) fn write_hex<'a>(bytes: &[u8], out: &'a mut [u8]) -> &'a str {
    debug_assert_eq!(out.len(), 2 * bytes.len());
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&hex_pair(*b));
    }
    // Every byte written is an ASCII hex digit; a prefix the caller wrote before is theirs.
    std::str::from_utf8(out).unwrap_or_default()
}

fn hex_pair(b: u8) -> [u8; 2] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    [DIGITS[(b >> 4) as usize], DIGITS[(b & 0xf) as usize]]
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
mod tests;
