//! Turning a model's JSON arguments into a tool's typed arguments, or a precise error.
//!
//! Five rooms: this module normalises (the typed round trip whose result the fingerprint
//! covers) and holds the one refusal of arguments that are not an object; `located` reads
//! typed arguments in one pass that knows its JSON pointer; `same` tells, without building
//! anything, that arguments already are what the round trip would give; `fields` gives the
//! same round trip for a list of named fields, as most `#[tool]`s read them; `differ` names
//! where two calls' arguments differ. Pointers are built
//! by the crate's one JSON-pointer module, and the error type lives with the crate's other
//! shared errors (it is re-exported here, where it always was).

use std::borrow::Cow;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use crate::error::ArgumentError;
use crate::pointer;
pub use differ::differing;

mod differ;
pub(crate) mod fields;
pub(crate) mod located;
mod same;

/// Deserialise typed arguments, then serialise them back: the result is what the
/// fingerprint covers (defaults applied, aliases resolved, unknown fields refused).
///
/// ```
/// #[derive(serde::Deserialize, serde::Serialize)]
/// #[serde(deny_unknown_fields)]
/// struct Args { to: String, #[serde(default)] cc: Vec<String> }
///
/// let typed = idem_registry::args::normalise::<Args>(&serde_json::json!({"to": "a@b.c"})).unwrap();
/// assert_eq!(typed, serde_json::json!({"to": "a@b.c", "cc": []}));
///
/// let err = idem_registry::args::normalise::<Args>(&serde_json::json!({"to": 5})).unwrap_err();
/// assert_eq!(err.pointer, "/to");
/// ```
pub fn normalise<T: DeserializeOwned + Serialize>(
    arguments: &Value,
) -> Result<Value, ArgumentError> {
    normalise_borrowed::<T>(arguments).map(Cow::into_owned)
}

/// [`normalise`] without a copy when there is nothing to normalise: arguments that already
/// are what the typed round trip gives (every field present, nothing defaulted or renamed,
/// the common case) come back borrowed. Whether they are is found by serialising the typed
/// value against them, which allocates nothing.
///
/// ```
/// use std::borrow::Cow;
///
/// #[derive(serde::Deserialize, serde::Serialize)]
/// #[serde(deny_unknown_fields)]
/// struct Args { to: String, #[serde(default)] cc: Vec<String> }
///
/// let full = serde_json::json!({"to": "a@b.c", "cc": []});
/// let typed = idem_registry::args::normalise_borrowed::<Args>(&full).unwrap();
/// assert!(matches!(typed, Cow::Borrowed(_)));
///
/// let short = serde_json::json!({"to": "a@b.c"});
/// let typed = idem_registry::args::normalise_borrowed::<Args>(&short).unwrap();
/// assert_eq!(*typed, full);
/// ```
pub fn normalise_borrowed<T: DeserializeOwned + Serialize>(
    arguments: &Value,
) -> Result<Cow<'_, Value>, ArgumentError> {
    // The deserialiser the `#[tool]` handler uses too: one copy of `T`'s visitor is compiled.
    let typed: T = located::parse(arguments)?;
    normal_form(&typed, arguments)
}

/// The normal form of `arguments` once read into `typed`: `typed` serialised, or `arguments`
/// themselves, lent, when that is what they already are.
pub(crate) fn normal_form<'a, T: Serialize>(
    typed: &T,
    arguments: &'a Value,
) -> Result<Cow<'a, Value>, ArgumentError> {
    if same::serializes_to(typed, arguments) {
        return Ok(Cow::Borrowed(arguments));
    }
    serde_json::to_value(typed)
        .map(Cow::Owned)
        .map_err(not_re_encoded)
}

/// The refusal of arguments whose typed value has no JSON form (a map with non-string keys).
fn not_re_encoded(e: impl std::fmt::Display) -> ArgumentError {
    ArgumentError::new("", format!("arguments could not be re-encoded: {e}"))
}

/// Deserialise typed arguments with the JSON pointer of the first error.
pub fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, ArgumentError> {
    parse_ref(&arguments)
}

/// [`parse`] from a borrow: the arguments stay with the caller.
pub fn parse_ref<T: DeserializeOwned>(arguments: &Value) -> Result<T, ArgumentError> {
    require_object(arguments)?;
    // Valid arguments, the common case, need no path: deserialise from a borrow, and track
    // the path only to explain a failure (serde_json's `&Value` deserialiser accepts exactly
    // what its owned one accepts, so the typed value is the same).
    if let Ok(typed) = T::deserialize(arguments) {
        return Ok(typed);
    }
    serde_path_to_error::deserialize(arguments).map_err(|e| {
        let pointer = pointer_of(e.path());
        ArgumentError::new(pointer, e.into_inner().to_string())
    })
}

fn pointer_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => pointer::push_index(&mut out, *index),
            Segment::Map { key } | Segment::Enum { variant: key } => pointer::push(&mut out, key),
            Segment::Unknown => pointer::push(&mut out, "?"),
        }
    }
    out
}

/// Refuse arguments that are not a JSON object: every tool takes one object of named
/// arguments. The only place that says so, whichever step finds it.
pub(crate) fn require_object(arguments: &Value) -> Result<(), ArgumentError> {
    if arguments.is_object() {
        Ok(())
    } else {
        Err(ArgumentError::new("", not_an_object(arguments)))
    }
}

/// The words of [`require_object`]'s refusal, for a checker that reports them itself.
pub(crate) fn not_an_object(arguments: &Value) -> String {
    format!(
        "expected an object of named arguments, got {}",
        kind(arguments)
    )
}

/// A short name of a JSON value's type, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, Serialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        n: u32,
    }

    #[derive(Debug, Deserialize, Serialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        items: Vec<Inner>,
        note: Option<String>,
    }

    #[test]
    fn errors_name_the_pointer_and_rule() {
        let e = parse::<Args>(json!({"items": [{"n": 1}, {"n": -1}]})).unwrap_err();
        assert_eq!(e.pointer, "/items/1/n");
        assert!(e.message.contains("invalid value"), "{}", e.message);
        let e = parse::<Args>(json!({"items": [], "extra": 1})).unwrap_err();
        assert!(e.message.contains("unknown field `extra`"), "{}", e.message);
        let e = parse::<Args>(json!({})).unwrap_err();
        assert!(e.message.contains("missing field `items`"), "{}", e.message);
        let e = parse::<Args>(json!([1])).unwrap_err();
        assert_eq!(e.pointer, "");
        assert!(e.message.contains("expected an object"));
    }

    /// What `normalise_borrowed` relies on: "same" is said only when `to_value` agrees.
    fn agrees<T: Serialize>(typed: &T, expected: &Value) -> bool {
        let same = same::serializes_to(typed, expected);
        let built = serde_json::to_value(typed).ok();
        assert!(
            !same || built.as_ref() == Some(expected),
            "said same, but to_value gives {built:?} against {expected}"
        );
        same
    }

    #[derive(Debug, Deserialize, Serialize)]
    enum Shape {
        Dot,
        Circle(f64),
        Pair(u8, u8),
        Rect { w: u32, h: u32 },
    }

    #[derive(Debug, Deserialize, Serialize)]
    struct Everything {
        flag: bool,
        small: i8,
        big: u64,
        neg: i64,
        ratio: f64,
        letter: char,
        text: String,
        list: Vec<u16>,
        pair: (String, i32),
        maybe: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        #[serde(rename = "renamed")]
        original: u8,
        shapes: Vec<Shape>,
        tags: std::collections::BTreeMap<String, String>,
        unit: (),
    }

    fn everything_json() -> Value {
        json!({
            "flag": true, "small": -3, "big": 18446744073709551615u64, "neg": -9,
            "ratio": 0.25, "letter": "é", "text": "héllo \"q\"", "list": [1, 2, 3],
            "pair": ["a", -1], "maybe": null, "renamed": 7,
            "shapes": ["Dot", {"Circle": 1.5}, {"Pair": [1, 2]}, {"Rect": {"w": 3, "h": 4}}],
            "tags": {"k": "v", "z": ""}, "unit": null
        })
    }

    #[test]
    fn already_normal_arguments_are_recognised() {
        let expected = everything_json();
        let typed: Everything = parse_ref(&expected).unwrap();
        assert!(agrees(&typed, &expected));
        assert!(matches!(
            normalise_borrowed::<Everything>(&expected).unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn every_difference_is_noticed() {
        let base = everything_json();
        let typed: Everything = parse_ref(&base).unwrap();
        let changes: Vec<(&str, Value)> = vec![
            ("flag", json!(false)),
            ("small", json!(-4)),
            ("big", json!(1)),
            ("ratio", json!(0.5)),
            ("letter", json!("e")),
            ("text", json!("hello")),
            ("list", json!([1, 2])),
            ("list", json!([1, 2, 3, 4])),
            ("pair", json!(["a", 1])),
            ("maybe", json!("x")),
            ("renamed", json!(8)),
            (
                "shapes",
                json!(["Dot", {"Circle": 1.5}, {"Pair": [1, 2]}, {"Rect": {"w": 3}}]),
            ),
            (
                "shapes",
                json!(["Dot", {"Circle": 2.5}, {"Pair": [1, 2]}, {"Rect": {"w": 3, "h": 4}}]),
            ),
            (
                "shapes",
                json!([{"Dot": null}, {"Circle": 1.5}, {"Pair": [1, 2]}, {"Rect": {"w": 3, "h": 4}}]),
            ),
            ("tags", json!({"k": "v"})),
            ("tags", json!({"k": "v", "z": "", "extra": ""})),
            ("unit", json!(0)),
        ];
        for (field, value) in changes {
            let mut expected = base.clone();
            expected[field] = value.clone();
            assert!(
                !agrees(&typed, &expected),
                "{field} = {value} was not noticed"
            );
        }
        // An entry the serialisation does not produce, and one it produces but is missing.
        let mut extra = base.clone();
        extra["skipped"] = json!(1);
        assert!(!agrees(&typed, &extra));
        let mut missing = base.clone();
        missing.as_object_mut().unwrap().remove("maybe");
        assert!(!agrees(&typed, &missing));
    }

    #[test]
    fn numbers_compare_as_serde_json_stores_them() {
        // An integer given for a float field: the typed value serialises as 1.0, not 1.
        assert!(!agrees(&1.0f64, &json!(1)));
        assert!(agrees(&1.0f64, &json!(1.0)));
        assert!(agrees(&-1i32, &json!(-1)));
        assert!(agrees(&u128::from(u64::MAX), &json!(u64::MAX)));
        assert!(!agrees(&u128::MAX, &json!(u64::MAX)));
        assert!(agrees(&f64::NAN, &Value::Null));
    }

    #[test]
    fn a_key_given_twice_is_not_taken_for_two_keys() {
        struct Twice;
        impl Serialize for Twice {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("a", &1)?;
                m.serialize_entry("a", &1)?;
                m.end()
            }
        }
        assert!(!agrees(&Twice, &json!({"a": 1, "b": 2})));
    }

    #[test]
    fn maps_with_other_keys_fall_back() {
        let numbered: std::collections::BTreeMap<u32, bool> = [(1, true)].into();
        // serde_json writes the key as "1"; the comparison declines rather than guess.
        assert!(!agrees(&numbered, &json!({"1": true})));
        let wide: std::collections::BTreeMap<String, u32> =
            (0..40).map(|i| (format!("k{i}"), i)).collect();
        let expected = serde_json::to_value(&wide).unwrap();
        assert!(!agrees(&wide, &expected));
    }

    proptest::proptest! {
        /// Any JSON value against itself and against any other: "same" exactly when equal
        /// (objects of at most 32 entries, which the strategy keeps to).
        #[test]
        fn same_exactly_when_equal(a in json_value(), b in json_value()) {
            proptest::prop_assert!(same::serializes_to(&a, &a));
            proptest::prop_assert_eq!(same::serializes_to(&a, &b), a == b);
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            (0u8..3).prop_map(|n| Value::from(n as f64)),
            (0u8..3).prop_map(Value::from),
            "[a-c]{0,3}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-c]{0,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn only_an_object_is_arguments() {
        assert!(require_object(&json!({})).is_ok());
        let err = require_object(&json!([1])).unwrap_err();
        assert_eq!(
            (err.pointer.as_str(), err.message.as_str()),
            ("", "expected an object of named arguments, got an array")
        );
    }

    #[test]
    fn normalise_fills_options() {
        assert_eq!(
            normalise::<Args>(&json!({"items": []})).unwrap(),
            json!({"items": [], "note": null})
        );
    }
}
