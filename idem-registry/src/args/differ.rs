//! Where two calls' arguments differ, as JSON Pointers: what a find-or-create replay tells
//! its caller about the call it stands for.

use serde_json::Value;

use crate::pointer;

/// The JSON Pointers at which `call` differs from `recorded`, in sorted order: each member
/// of an object that one has and the other lacks or holds otherwise (inside nested objects,
/// the deepest member that differs); an array or a value of another type counts as one
/// value. Empty when they are equal.
///
/// ```
/// use serde_json::json;
/// use idem_registry::args::differing;
///
/// let recorded = json!({"customer": "c-1", "subject": "Printer", "meta": {"lang": "en", "tag": 1}});
/// let call = json!({"customer": "c-1", "subject": "printer", "meta": {"lang": "en", "tag": 2}, "cc": []});
/// assert_eq!(differing(&recorded, &call), ["/cc", "/meta/tag", "/subject"]);
/// assert!(differing(&call, &call).is_empty());
/// ```
pub fn differing(recorded: &Value, call: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk(recorded, call, &mut String::new(), &mut found);
    found.sort();
    found
}

fn walk(recorded: &Value, call: &Value, at: &mut String, found: &mut Vec<String>) {
    match (recorded, call) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, left) in a {
                let depth = at.len();
                pointer::push(at, key);
                match b.get(key) {
                    Some(right) => walk(left, right, at, found),
                    None => found.push(at.clone()),
                }
                at.truncate(depth);
            }
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                found.push(pointer::join(at, key));
            }
        }
        (a, b) if a != b => found.push(at.clone()),
        _ => {}
    }
}
