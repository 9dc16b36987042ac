//! JSON Pointers ([RFC 6901](https://www.rfc-editor.org/rfc/rfc6901)): the one place that
//! escapes and unescapes their reference tokens, builds them segment by segment, and shows
//! them in messages. Argument errors point into a call's arguments, export reports into a
//! schema, secrets and natural keys name arguments: all of them go through here, so that a
//! key holding `/` or `~` is written the same way everywhere.

use std::borrow::Cow;

/// A key as one reference token: `~` becomes `~0` and `/` becomes `~1` (in that order, so
/// that `/` does not turn into `~01`). Keys without either, the common case, are borrowed.
pub fn escape(key: &str) -> Cow<'_, str> {
    if key.contains(['~', '/']) {
        Cow::Owned(key.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(key)
    }
}

/// The key a reference token stands for: `~1` becomes `/` and `~0` becomes `~` (in that
/// order, so that `~01` reads as `~1`).
pub fn unescape(token: &str) -> Cow<'_, str> {
    if token.contains('~') {
        Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(token)
    }
}

/// Append the segment for an object key to `pointer`.
pub fn push(pointer: &mut String, key: &str) {
    pointer.push('/');
    pointer.push_str(&escape(key));
}

/// Append the segment for an array index to `pointer`.
pub fn push_index(pointer: &mut String, index: usize) {
    use std::fmt::Write as _;
    // Writing to a `String` cannot fail.
    let _ = write!(pointer, "/{index}");
}

/// `pointer` with the segment for `key` appended.
pub fn join(pointer: &str, key: &str) -> String {
    let mut out = String::with_capacity(pointer.len() + key.len() + 1);
    out.push_str(pointer);
    push(&mut out, key);
    out
}

/// The key the first segment of `pointer` names, if it has one (`"/a~1b/c"` names `a/b`).
pub fn first_key(pointer: &str) -> Option<Cow<'_, str>> {
    let rest = pointer.strip_prefix('/')?;
    Some(unescape(rest.split('/').next().unwrap_or_default()))
}

/// Whether the value at `inner` is the one at `outer` or lies inside it.
pub fn within(inner: &str, outer: &str) -> bool {
    inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A pointer as a message shows it: the pointer itself, or `root` (what the message calls
/// the whole document) when it is empty.
pub fn display<'a>(pointer: &'a str, root: &'a str) -> &'a str {
    if pointer.is_empty() { root } else { pointer }
}

/// [`display`] in a sentence: the pointer in backticks, or `root` as it is.
pub fn quoted(pointer: &str, root: &str) -> String {
    if pointer.is_empty() {
        root.to_owned()
    } else {
        format!("`{pointer}`")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_round_trips_in_the_order_the_rfc_gives() {
        for key in ["plain", "a/b", "a~b", "~1", "/~", "~01", ""] {
            assert_eq!(unescape(&escape(key)), key, "{key}");
        }
        assert_eq!(escape("a/b~c"), "a~1b~0c");
        assert_eq!(escape("~1"), "~01");
        assert_eq!(unescape("~01"), "~1");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn pointers_are_built_segment_by_segment() {
        let mut p = String::new();
        push(&mut p, "items");
        push_index(&mut p, 3);
        push(&mut p, "x/y");
        assert_eq!(p, "/items/3/x~1y");
        assert_eq!(join("/properties", "a~b"), "/properties/a~0b");
        assert_eq!(first_key("/a~1b/c").as_deref(), Some("a/b"));
        assert_eq!(first_key("/").as_deref(), Some(""));
        assert_eq!(first_key("a"), None);
    }

    #[test]
    fn within_follows_segments_not_text() {
        assert!(within("/card", "/card"));
        assert!(within("/card/number", "/card"));
        assert!(!within("/cardholder", "/card"));
        assert!(within("/anything", ""));
        assert_eq!(display("", "(root)"), "(root)");
        assert_eq!(display("/a", "(root)"), "/a");
        assert_eq!(quoted("", "the arguments"), "the arguments");
        assert_eq!(quoted("/a", "the arguments"), "`/a`");
    }
}
