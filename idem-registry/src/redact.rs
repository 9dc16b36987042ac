//! Secret arguments: what a record, an error or an approval request shows instead of them.
//!
//! A parameter marked secret (`#[secret]` on a `#[tool]` parameter, [`ToolBuilder::secret`]
//! or `"secret": [...]` in a [`ToolSpec`]) reaches the tool's body as given, and nowhere
//! else in clear. Before the arguments are fingerprinted or stored, each secret value is
//! replaced by a *seal*: `"[secret hmac-sha256:<32 hex digits>]"`, an HMAC-SHA-256 of the
//! value under the dispatcher's [`SecretKey`]. Two different secrets give different seals,
//! so different fingerprints (a reused key with another card number is still `KeyReused`);
//! the same secret gives the same seal, so a retry still replays. Without the key, a stored
//! seal cannot be tested against guesses: a four-digit PIN hashed plainly would fall to
//! ten thousand tries, an HMAC under a 32-byte key to none. Keep the key out of the store
//! (a secret manager, an environment variable) and the same on every worker: a worker with
//! another key computes other fingerprints and finds its records `KeyReused`.
//!
//! Validation and parse errors of such a tool have every secret's text cut out of their
//! messages, and so have a terminal error's message and details before they are recorded;
//! so have its outputs (returned and recorded alike), its verify hook's answers and its
//! journaled steps' values.
//!
//! [`ToolBuilder::secret`]: crate::ToolBuilder::secret
//! [`ToolSpec`]: crate::ToolSpec

use std::fmt;
use std::sync::Arc;

use hmac::{KeyInit, Mac};
use serde_json::Value;

use crate::pointer::within;

/// How every seal begins: recovery refuses stored arguments that hold one.
pub(crate) const SEAL_PREFIX: &str = "[secret hmac-sha256:";

/// Whether `value` holds a seal anywhere: arguments with a secret in them, as stored.
pub(crate) fn holds_seal(value: &Value) -> bool {
    match value {
        Value::String(s) => s.starts_with(SEAL_PREFIX),
        Value::Array(items) => items.iter().any(holds_seal),
        Value::Object(fields) => fields.values().any(holds_seal),
        _ => false,
    }
}

/// What a secret's text is replaced by in messages.
pub const REDACTED: &str = "[redacted]";

/// The key secret arguments are sealed with: at least 32 bytes, the same on every worker of
/// a deployment.
///
/// ```
/// # use idem_registry as idem;
/// use idem::SecretKey;
///
/// let key = SecretKey::new(*b"0123456789abcdef0123456789abcdef").unwrap();
/// assert_eq!(format!("{key:?}"), "SecretKey(..)");
/// assert!(SecretKey::new(b"short".to_vec()).is_err());
/// ```
#[derive(Clone)]
pub struct SecretKey(Arc<[u8]>);

/// The shortest [`SecretKey`] accepted, in bytes (SHA-256's output size).
pub const MIN_SECRET_KEY_BYTES: usize = 32;

/// A [`SecretKey`] shorter than [`MIN_SECRET_KEY_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a secret key must be at least {MIN_SECRET_KEY_BYTES} bytes, got {0}: use 32 random bytes (e.g. `openssl rand -hex 32`, decoded)"
)]
pub struct SecretKeyTooShort(pub usize);

impl SecretKey {
    /// A key from its bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, SecretKeyTooShort> {
        let bytes = bytes.into();
        if bytes.len() < MIN_SECRET_KEY_BYTES {
            return Err(SecretKeyTooShort(bytes.len()));
        }
        Ok(SecretKey(bytes.into()))
    }

    /// The seal of one secret value found at `pointer`.
    fn seal(&self, pointer: &str, value: &Value) -> String {
        // `new_from_slice` accepts a key of any length for HMAC: it cannot fail here.
        let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        // The pointer is part of the input: one secret in two parameters seals two ways.
        mac.update(&(pointer.len() as u64).to_be_bytes());
        mac.update(pointer.as_bytes());
        mac.update(idem_core::canonical_json(value).as_bytes());
        let tag = mac.finalize().into_bytes();
        let mut out = String::with_capacity(60);
        out.push_str(SEAL_PREFIX);
        for b in &tag[..16] {
            out.push_str(&format!("{b:02x}"));
        }
        out.push(']');
        out
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

/// The arguments with each secret value (at `pointers`) replaced by its seal: what is
/// fingerprinted, stored and shown to an approver.
pub(crate) fn seal(arguments: &Value, pointers: &[String], key: &SecretKey) -> Value {
    let mut sealed = arguments.clone();
    for pointer in pointers {
        if let Some(slot) = sealed.pointer_mut(pointer)
            && !slot.is_null()
        {
            *slot = Value::String(key.seal(pointer, slot));
        }
    }
    sealed
}

/// `message` with the text of every secret value in `arguments` cut out.
pub(crate) fn scrub(message: &str, arguments: &Value, pointers: &[String]) -> String {
    let mut out = message.to_owned();
    for pointer in pointers {
        let Some(value) = arguments.pointer(pointer) else {
            continue;
        };
        for text in secret_texts(value) {
            if !text.is_empty() {
                out = out.replace(&text, REDACTED);
            }
        }
    }
    out
}

/// The message of a refusal at `pointer`: none of the validator's words when the offending
/// value is a secret, lies inside one or holds one (a validator quotes values, cut to a
/// length that [`scrub`] could no longer recognise), only which argument and that it is
/// secret; otherwise the message with any secret's text cut out.
pub(crate) fn refusal(
    pointer: &str,
    message: &str,
    arguments: &Value,
    pointers: &[String],
) -> String {
    let overlaps =
        |secret: &String| within(pointer, secret) || within(secret, pointer) || pointer.is_empty();
    if pointers.iter().any(overlaps) {
        format!(
            "the value at `{pointer}` does not fit the schema (it is or holds a secret argument, \
             so the value and the rule's details are not shown): check it against the tool's \
             published schema"
        )
    } else {
        scrub(message, arguments, pointers)
    }
}

/// [`scrub`] applied to every string inside `value` (a terminal error's details); a number
/// equal to a secret number becomes the text `[redacted]`.
pub(crate) fn scrub_value(value: &mut Value, arguments: &Value, pointers: &[String]) {
    match value {
        Value::String(s) => *s = scrub(s, arguments, pointers),
        Value::Number(n) => {
            let text = n.to_string();
            let secret = pointers
                .iter()
                .filter_map(|p| arguments.pointer(p))
                .any(|v| secret_texts(v).contains(&text));
            if secret {
                *value = Value::String(REDACTED.to_owned());
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| scrub_value(v, arguments, pointers)),
        Value::Object(map) => map
            .values_mut()
            .for_each(|v| scrub_value(v, arguments, pointers)),
        _ => {}
    }
}

/// The spellings of a secret a message could carry: its JSON text, and each string and
/// number in it as plain text (longest first, so that a longer one is cut before a part).
fn secret_texts(value: &Value) -> Vec<String> {
    let mut texts = vec![value.to_string()];
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => texts.push(s.clone()),
            Value::Number(n) => texts.push(n.to_string()),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    texts.sort_by_key(|t| std::cmp::Reverse(t.len()));
    texts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(byte: u8) -> SecretKey {
        SecretKey::new(vec![byte; 32]).unwrap()
    }

    #[test]
    fn seals_differ_by_value_and_key_and_repeat_for_the_same_value() {
        let pointers = ["/pin".to_owned()];
        let a = seal(&json!({"pin": "1234", "to": "x"}), &pointers, &key(1));
        let b = seal(&json!({"pin": "1235", "to": "x"}), &pointers, &key(1));
        let again = seal(&json!({"pin": "1234", "to": "x"}), &pointers, &key(1));
        let other_key = seal(&json!({"pin": "1234", "to": "x"}), &pointers, &key(2));
        assert_ne!(a, b);
        assert_eq!(a, again);
        assert_ne!(a, other_key);
        assert_eq!(a["to"], "x");
        let text = a.to_string();
        assert!(
            !text.contains("1234") && text.contains("[secret hmac-sha256:"),
            "{text}"
        );
    }

    #[test]
    fn scrub_cuts_every_spelling() {
        let args = json!({"card": {"number": "4242424242424242", "cvc": 123}});
        let pointers = ["/card".to_owned()];
        let msg =
            r#"{"number":"4242424242424242","cvc":123} is not valid; 4242424242424242 and 123"#;
        let out = scrub(msg, &args, &pointers);
        assert!(!out.contains("4242") && !out.contains("123"), "{out}");
    }
}
