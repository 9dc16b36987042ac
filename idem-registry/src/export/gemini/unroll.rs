//! Recursion unrolled for both Gemini forms: Gemini follows `$ref` only "to a limited
//! degree", so every reference into `$defs` is replaced by its definition, up to
//! [`UNROLL_DEPTH`] levels of the same definition, and what lies deeper is cut and reported.

use serde_json::{Map, Value, json};

use crate::export::Notes;
use crate::pointer;

/// How many times a recursive type may nest before idem cuts it.
const UNROLL_DEPTH: usize = 3;

/// Marks a reference past [`UNROLL_DEPTH`] until [`prune`] removes it.
const CUT: &str = "$idem-cut";

/// Replace every `$ref` into `$defs` by the definition itself, up to [`UNROLL_DEPTH`]
/// levels of the same definition, then remove what lies deeper.
pub(super) fn unroll(canonical: &Value, notes: &mut Notes) -> Value {
    let mut root = canonical.clone();
    let Some(defs) = root.as_object_mut().and_then(|o| o.remove("$defs")) else {
        return root;
    };
    let mut out = expand(&root, &defs, &mut Vec::new());
    let names: Vec<&String> = defs
        .as_object()
        .map(|d| d.keys().collect())
        .unwrap_or_default();
    notes.adapted(
        "/$defs",
        format!(
            "recursive {} unrolled {UNROLL_DEPTH} levels deep (Gemini does not follow references reliably)",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    if prune(&mut out, "", notes) {
        // Only a root that is itself a cut reference could end here; the root is an object.
        return json!({"type": "object", "properties": {}});
    }
    out
}

fn expand(node: &Value, defs: &Value, stack: &mut Vec<String>) -> Value {
    let Some(obj) = node.as_object() else {
        return node.clone();
    };
    if let Some(name) = obj
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .map(|n| pointer::unescape(n).into_owned())
        && let Some(def) = defs.get(&name)
    {
        if stack.iter().filter(|s| **s == name).count() >= UNROLL_DEPTH {
            return json!({ CUT: name });
        }
        stack.push(name);
        let mut expanded = expand(def, defs, stack);
        stack.pop();
        if let Some(e) = expanded.as_object_mut() {
            for (k, v) in obj {
                if k != "$ref" {
                    e.insert(k.clone(), v.clone());
                }
            }
        }
        return expanded;
    }
    let mut out = Map::new();
    for (key, value) in obj {
        let k = key.as_str();
        let v = if crate::schema::SCHEMA_KEYWORDS.contains(&k) {
            expand(value, defs, stack)
        } else if crate::schema::SCHEMA_ARRAY_KEYWORDS.contains(&k) {
            match value.as_array() {
                Some(items) => Value::Array(items.iter().map(|i| expand(i, defs, stack)).collect()),
                None => value.clone(),
            }
        } else if crate::schema::SCHEMA_MAP_KEYWORDS.contains(&k) {
            match value.as_object() {
                Some(map) => Value::Object(
                    map.iter()
                        .map(|(n, s)| (n.clone(), expand(s, defs, stack)))
                        .collect(),
                ),
                None => value.clone(),
            }
        } else {
            value.clone()
        };
        out.insert(key.clone(), v);
    }
    Value::Object(out)
}

fn is_cut(v: &Value) -> bool {
    v.get(CUT).is_some()
}

pub(super) fn is_null_schema(v: &Value) -> bool {
    v.get("type").is_some_and(|t| t == "null") || v.get("const").is_some_and(Value::is_null)
}

/// Remove cut references; `true` when this schema cannot stay and its parent must remove it.
fn prune(node: &mut Value, pointer: &str, notes: &mut Notes) -> bool {
    if is_cut(node) {
        return true;
    }
    let Some(obj) = node.as_object_mut() else {
        return false;
    };
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = obj.get_mut(key) {
            let before = branches.len();
            let mut i = 0;
            branches.retain_mut(|b| {
                let here = format!("{pointer}/{key}/{i}");
                i += 1;
                !prune(b, &here, notes)
            });
            if branches.len() < before {
                if branches.iter().all(is_null_schema) {
                    return true;
                }
                notes.dropped(
                    &format!("{pointer}/{key}"),
                    format!(
                        "an alternative past {UNROLL_DEPTH} levels of recursion is not offered"
                    ),
                );
            }
        }
    }
    if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
        let names: Vec<String> = props.keys().cloned().collect();
        let mut removed = Vec::new();
        for name in names {
            let here = format!("{pointer}/properties/{}", pointer::escape(&name));
            if props.get_mut(&name).is_some_and(|p| prune(p, &here, notes)) {
                props.remove(&name);
                removed.push((name, here));
            }
        }
        for (name, here) in removed {
            let was_required = match obj.get_mut("required") {
                Some(Value::Array(required)) => {
                    let n = required.len();
                    required.retain(|r| r != &name);
                    required.len() < n
                }
                _ => false,
            };
            notes.dropped(
                &here,
                format!(
                    "`{name}` is not offered past {UNROLL_DEPTH} levels of recursion{}",
                    if was_required {
                        " (it is required: a call that nests deeper fails idem's validation)"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
    if obj.get_mut("items").is_some_and(|items| {
        let here = format!("{pointer}/items");
        prune(items, &here, notes)
    }) {
        obj.remove("items");
        obj.remove("minItems");
        obj.insert("maxItems".into(), 0.into());
        notes.dropped(
            pointer,
            format!("items past {UNROLL_DEPTH} levels of recursion are not offered: the array must be empty there"),
        );
    }
    let mut doomed = false;
    for key in [
        "additionalProperties",
        "prefixItems",
        "not",
        "if",
        "then",
        "else",
        "allOf",
    ] {
        if let Some(child) = obj.get_mut(key) {
            let here = format!("{pointer}/{key}");
            doomed |= match child {
                Value::Array(items) => {
                    let mut any = false;
                    for (i, item) in items.iter_mut().enumerate() {
                        any |= prune(item, &format!("{here}/{i}"), notes);
                    }
                    any
                }
                other => prune(other, &here, notes),
            };
        }
    }
    doomed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recursion_is_unrolled_and_cut() {
        let mut notes = Notes::default();
        let v = unroll(
            &json!({
                "type": "object",
                "properties": {"root": {"$ref": "#/$defs/Node"}},
                "required": ["root"],
                "$defs": {"Node": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}
                }, "required": ["name", "children"]}}
            }),
            &mut notes,
        );
        let level3 = &v["properties"]["root"]["properties"]["children"]["items"]["properties"]["children"]
            ["items"];
        assert_eq!(
            level3["properties"]["children"],
            json!({"type": "array", "maxItems": 0})
        );
        assert!(level3["properties"].get("parent").is_none());
        assert!(v.get("$defs").is_none());
        assert!(!v.to_string().contains("$ref"));
    }
}
