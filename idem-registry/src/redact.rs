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
//! so have its outputs (returned and recorded alike, an object's keys as its strings) and its
//! verify hook's answers. A short secret (under [`CUT_INSIDE_VALUES`] characters) is cut from
//! an output only where a whole string or key equals it: a chance match inside other data (`1`
//! in `auth_1x71`) is left alone.
//! A journaled step's value must read back as it was made, so a step whose value holds a
//! secret is not journaled at all: the step fails as ambiguous, naming the argument.
//!
//! [`ToolBuilder::secret`]: crate::ToolBuilder::secret
//! [`ToolSpec`]: crate::ToolSpec

use std::fmt;
use std::sync::Arc;

use hmac::{KeyInit, Mac};
use serde_json::{Map, Value};

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

/// A secret text at least this long is cut wherever it appears inside a string of an output,
/// a step's value or an error's details, an object's keys included. A shorter one (a CVC, a
/// short PIN) cannot be told from ordinary data there (`1` inside `auth_1x71`, or a count of
/// 1): it is cut only where a whole string or key equals it, so that data is never corrupted
/// by a chance match.
pub const CUT_INSIDE_VALUES: usize = 8;

/// In a message (prose), a secret text shorter than this is cut only where it stands as a
/// word of its own (not touching a letter or a digit); a longer one wherever it appears.
const CUT_INSIDE_WORDS: usize = 4;

/// `message` with the text of every secret value in `arguments` cut out.
pub(crate) fn scrub(message: &str, arguments: &Value, pointers: &[String]) -> String {
    let mut out = message.to_owned();
    for text in pointers
        .iter()
        .filter_map(|p| arguments.pointer(p))
        .flat_map(secret_texts)
    {
        if text.chars().count() >= CUT_INSIDE_WORDS {
            out = out.replace(&text, REDACTED);
        } else if !text.is_empty() {
            out = cut_words(&out, &text);
        }
    }
    out
}

/// `text` with every occurrence of `word` that touches no letter or digit replaced.
fn cut_words(text: &str, word: &str) -> String {
    let alnum = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for (at, _) in text.match_indices(word) {
        if at < rest {
            continue;
        }
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        if !alnum(before) && !alnum(after) {
            out.push_str(&text[rest..at]);
            out.push_str(REDACTED);
            rest = at + word.len();
        }
    }
    out.push_str(&text[rest..]);
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

/// A structured value (an output, a step's value, an error's details) with the secrets in
/// `arguments` cut out: a string equal to a secret's text becomes `[redacted]`, a secret text
/// of at least [`CUT_INSIDE_VALUES`] characters is cut inside any string, and a number equal
/// to a secret number of as many digits becomes the text `[redacted]`. Shorter secrets are
/// left where they are only part of a value: a chance match must not change data.
///
/// An object's keys are cut as its strings are, and stay unique: the keys left whole keep
/// their names, and a cut key that would take a name already used (`{"4111..": 1, "1234": 2}`
/// cuts to `[redacted]` twice) has its last `[redacted]` numbered from 2, `[redacted 2]`,
/// `[redacted 3]`, ..., the first name no other key has, in the order the object lists its
/// keys. No value is lost and the keys keep their order.
pub(crate) fn scrub_value(value: &mut Value, arguments: &Value, pointers: &[String]) {
    let texts: Vec<String> = pointers
        .iter()
        .filter_map(|p| arguments.pointer(p))
        .flat_map(secret_texts)
        .filter(|t| !t.is_empty())
        .collect();
    if !texts.is_empty() {
        scrub_texts(value, &texts);
    }
}

fn scrub_texts(value: &mut Value, texts: &[String]) {
    match value {
        Value::String(s) => {
            if let Some(cut) = scrub_string(s, texts) {
                *s = cut;
            }
        }
        Value::Number(n) => {
            let text = n.to_string();
            if text.len() >= CUT_INSIDE_VALUES && texts.contains(&text) {
                *value = Value::String(REDACTED.to_owned());
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_texts(v, texts)),
        Value::Object(map) => {
            map.values_mut().for_each(|v| scrub_texts(v, texts));
            let cuts: Vec<Option<String>> = map.keys().map(|k| scrub_string(k, texts)).collect();
            if cuts.iter().any(Option::is_some) {
                *map = rekeyed(std::mem::take(map), cuts);
            }
        }
        _ => {}
    }
}

/// `s` with the secret `texts` cut out (see [`scrub_value`]), or `None` if none is in it.
fn scrub_string(s: &str, texts: &[String]) -> Option<String> {
    if texts.iter().any(|t| t == s) {
        return Some(REDACTED.to_owned());
    }
    let mut cut: Option<String> = None;
    for text in texts
        .iter()
        .filter(|t| t.chars().count() >= CUT_INSIDE_VALUES)
    {
        let current = cut.as_deref().unwrap_or(s);
        if current.contains(text.as_str()) {
            cut = Some(current.replace(text.as_str(), REDACTED));
        }
    }
    cut
}

/// `map` with each key whose `cuts` entry is set renamed to it, numbered apart from every
/// other key (see [`scrub_value`]); `cuts` lists one entry per key, in the map's order.
fn rekeyed(map: Map<String, Value>, cuts: Vec<Option<String>>) -> Map<String, Value> {
    // The keys left whole are data of the tool's own: they keep their names.
    let mut taken: std::collections::HashSet<String> = map
        .keys()
        .zip(&cuts)
        .filter(|(_, cut)| cut.is_none())
        .map(|(key, _)| key.clone())
        .collect();
    let mut out = Map::new();
    for ((key, value), cut) in map.into_iter().zip(cuts) {
        let key = match cut {
            None => key,
            Some(cut) => {
                let mut name = cut.clone();
                let mut n = 1;
                while taken.contains(&name) {
                    n += 1;
                    name = numbered(&cut, n);
                }
                taken.insert(name.clone());
                name
            }
        };
        out.insert(key, value);
    }
    out
}

/// A cut key with its last `[redacted]` numbered `n`: `card [redacted 2]`.
fn numbered(cut: &str, n: usize) -> String {
    // A cut key always holds the marker; were it without one, a numbered one would end it.
    let at = cut.rfind(REDACTED).unwrap_or(cut.len());
    let rest = cut.get(at + REDACTED.len()..).unwrap_or("");
    let marker = REDACTED.trim_end_matches(']');
    format!("{}{marker} {n}]{rest}", &cut[..at])
}

/// The first of `pointers` whose secret `value` holds (as [`scrub_value`] would cut it).
pub(crate) fn secret_held(value: &Value, arguments: &Value, pointers: &[String]) -> Option<String> {
    pointers
        .iter()
        .find(|p| {
            let mut cut = value.clone();
            scrub_value(&mut cut, arguments, std::slice::from_ref(p));
            cut != *value
        })
        .cloned()
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

    #[test]
    fn a_short_secret_is_cut_from_prose_only_as_a_word_and_never_from_inside_a_value() {
        let args = json!({"cvc": "1"});
        let pointers = ["/cvc".to_owned()];
        assert_eq!(
            scrub("cvc 1 refused for auth_1x71 (try 1/3)", &args, &pointers),
            "cvc [redacted] refused for auth_1x71 (try [redacted]/3)"
        );
        let mut output = json!({"auth": "auth_1x71", "count": 1, "cvc": "1", "n": [11, "21"]});
        let before = output.clone();
        scrub_value(&mut output, &args, &pointers);
        assert_eq!(output["auth"], before["auth"]);
        assert_eq!(output["count"], 1);
        assert_eq!(output["n"], before["n"]);
        assert_eq!(output["cvc"], REDACTED, "a whole value equal to it is cut");
    }

    #[test]
    fn a_long_secret_is_cut_inside_values_and_as_a_number() {
        let args = json!({"card": "4242424242424242", "account": 12345678901u64});
        let pointers = ["/card".to_owned(), "/account".to_owned()];
        let mut output =
            json!({"note": "card 4242424242424242 ok", "acct": 12345678901u64, "n": 42});
        scrub_value(&mut output, &args, &pointers);
        assert_eq!(
            output,
            json!({"note": "card [redacted] ok", "acct": REDACTED, "n": 42})
        );
        let held = secret_held(&json!("x 4242424242424242"), &args, &pointers);
        assert_eq!(held.as_deref(), Some("/card"));
        assert_eq!(secret_held(&json!("auth_4242"), &args, &pointers), None);
    }

    #[test]
    fn a_key_equal_to_or_holding_a_secret_is_cut_like_a_string() {
        let args = json!({"card": "4111111111111111", "pin": "1234"});
        let pointers = ["/card".to_owned(), "/pin".to_owned()];
        let mut output = json!({
            "4111111111111111": "ok",
            "card 4111111111111111 on file": true,
            "auth_1234": 2,
            "nested": [{"1234": 1}],
        });
        scrub_value(&mut output, &args, &pointers);
        assert_eq!(
            output,
            json!({
                "[redacted]": "ok",
                "card [redacted] on file": true,
                "auth_1234": 2,
                "nested": [{"[redacted]": 1}],
            }),
            "a short secret is cut from a key only where the whole key equals it"
        );
    }

    #[test]
    fn keys_that_scrub_alike_stay_apart_numbered_in_the_objects_order() {
        let args = json!({"card": "4111111111111111", "pin": 1234});
        let pointers = ["/card".to_owned(), "/pin".to_owned()];
        // The keys to cut are written in the order of their text, so that the object lists
        // them alike with or without serde_json's `preserve_order`, and numbers them alike.
        let mut output = json!({
            "[redacted]": "a key of the tool's own",
            "1234": 2,
            "4111111111111111": {"1234": "inner"},
            "[redacted 2]": "another of its own",
            "card 4111111111111111": 3,
            "card [redacted]": 4,
        });
        scrub_value(&mut output, &args, &pointers);
        let expected = json!({
            "[redacted]": "a key of the tool's own",
            "[redacted 3]": 2,
            "[redacted 4]": {"[redacted]": "inner"},
            "[redacted 2]": "another of its own",
            "card [redacted 2]": 3,
            "card [redacted]": 4,
        });
        assert_eq!(output, expected, "no value is lost, no key is taken twice");
    }

    #[test]
    fn a_step_value_keyed_by_a_secret_holds_it() {
        let args = json!({"card": "4111111111111111", "pin": "1234"});
        let pointers = ["/card".to_owned(), "/pin".to_owned()];
        let held = |v: Value| secret_held(&v, &args, &pointers);
        assert_eq!(held(json!({"1234": 1})).as_deref(), Some("/pin"));
        assert_eq!(
            held(json!([{"card 4111111111111111": 1}])).as_deref(),
            Some("/card")
        );
        assert_eq!(held(json!({"auth_1234": 1, "[redacted]": 2})), None);
    }
}
