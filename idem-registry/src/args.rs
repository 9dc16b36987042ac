//! Turning a model's JSON arguments into a tool's typed arguments, or a precise error.

use std::borrow::Cow;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Arguments that do not fit the tool's parameters, with where and why, in words a model
/// can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid arguments at `{pointer}`: {message}")]
pub struct ArgumentError {
    /// JSON pointer to the offending value (`""` is the whole arguments object).
    pub pointer: String,
    /// The rule that was violated.
    pub message: String,
}

impl ArgumentError {
    /// An error at a JSON pointer.
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        ArgumentError {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

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
    normalise_typed::<T>(arguments).map(|(normal, _)| normal)
}

/// [`normalise_borrowed`], keeping the typed value when the arguments were already normal:
/// it is then exactly what deserialising them again would give, so a handler may take it.
pub(crate) fn normalise_typed<T: DeserializeOwned + Serialize>(
    arguments: &Value,
) -> Result<(Cow<'_, Value>, Option<T>), ArgumentError> {
    // The deserialiser the `#[tool]` handler uses too: one copy of `T`'s visitor is compiled.
    let typed: T = crate::located::parse(arguments)?;
    if same::serializes_to(&typed, arguments) {
        return Ok((Cow::Borrowed(arguments), Some(typed)));
    }
    serde_json::to_value(&typed)
        .map(|normal| (Cow::Owned(normal), None))
        .map_err(|e| ArgumentError::new("", format!("arguments could not be re-encoded: {e}")))
}

/// Deserialise typed arguments with the JSON pointer of the first error.
pub fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, ArgumentError> {
    parse_ref(&arguments)
}

/// [`parse`] from a borrow: the arguments stay with the caller.
pub fn parse_ref<T: DeserializeOwned>(arguments: &Value) -> Result<T, ArgumentError> {
    if !arguments.is_object() {
        return Err(ArgumentError::new(
            "",
            format!(
                "expected an object of named arguments, got {}",
                kind(arguments)
            ),
        ));
    }
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
            Segment::Seq { index } => {
                out.push('/');
                out.push_str(&index.to_string());
            }
            Segment::Map { key } | Segment::Enum { variant: key } => {
                out.push('/');
                out.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            Segment::Unknown => out.push_str("/?"),
        }
    }
    out
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

/// Comparing a value's serialisation with a JSON value, without building the former.
mod same {
    use std::fmt;

    use serde::Serialize;
    use serde::ser::{self, Impossible};
    use serde_json::{Map, Value};

    /// Whether `serde_json::to_value(value)` would give exactly `expected`. Any doubt (a map
    /// key that is not a string, an object of more than [`MAX_FIELDS`] entries) answers
    /// `false`, and the caller then builds the value the ordinary way.
    pub(super) fn serializes_to<T: Serialize + ?Sized>(value: &T, expected: &Value) -> bool {
        value.serialize(Same(expected)).is_ok()
    }

    /// Objects larger than this are not compared (the duplicate-key check uses a fixed array).
    const MAX_FIELDS: usize = 32;

    /// The serialisation differs (or could not be compared).
    #[derive(Debug)]
    pub(super) struct Differ;

    impl fmt::Display for Differ {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the serialisation differs")
        }
    }

    impl std::error::Error for Differ {}

    impl ser::Error for Differ {
        fn custom<T: fmt::Display>(_: T) -> Self {
            Differ
        }
    }

    fn check(same: bool) -> Result<(), Differ> {
        if same { Ok(()) } else { Err(Differ) }
    }

    /// A scalar as serde_json stores it (`Value::from` of a scalar allocates nothing), so that
    /// `1.0` and `1` stay different, as they are to `to_value`.
    fn same_scalar(expected: &Value, built: Value) -> Result<(), Differ> {
        check(*expected == built)
    }

    /// The value inside `{variant: value}`, as serde_json encodes enum variants with data.
    fn variant<'a>(expected: &'a Value, name: &str) -> Result<&'a Value, Differ> {
        match expected {
            Value::Object(map) if map.len() == 1 => map.get(name).ok_or(Differ),
            _ => Err(Differ),
        }
    }

    struct Same<'a>(&'a Value);

    impl<'a> ser::Serializer for Same<'a> {
        type Ok = ();
        type Error = Differ;
        type SerializeSeq = Items<'a>;
        type SerializeTuple = Items<'a>;
        type SerializeTupleStruct = Items<'a>;
        type SerializeTupleVariant = Items<'a>;
        type SerializeMap = Fields<'a>;
        type SerializeStruct = Fields<'a>;
        type SerializeStructVariant = Fields<'a>;

        fn serialize_bool(self, v: bool) -> Result<(), Differ> {
            same_scalar(self.0, Value::from(v))
        }
        fn serialize_i8(self, v: i8) -> Result<(), Differ> {
            self.serialize_i64(i64::from(v))
        }
        fn serialize_i16(self, v: i16) -> Result<(), Differ> {
            self.serialize_i64(i64::from(v))
        }
        fn serialize_i32(self, v: i32) -> Result<(), Differ> {
            self.serialize_i64(i64::from(v))
        }
        fn serialize_i64(self, v: i64) -> Result<(), Differ> {
            same_scalar(self.0, Value::from(v))
        }
        fn serialize_i128(self, v: i128) -> Result<(), Differ> {
            // serde_json keeps a 128-bit integer only when it fits 64 bits.
            if let Ok(u) = u64::try_from(v) {
                self.serialize_u64(u)
            } else if let Ok(i) = i64::try_from(v) {
                self.serialize_i64(i)
            } else {
                Err(Differ)
            }
        }
        fn serialize_u8(self, v: u8) -> Result<(), Differ> {
            self.serialize_u64(u64::from(v))
        }
        fn serialize_u16(self, v: u16) -> Result<(), Differ> {
            self.serialize_u64(u64::from(v))
        }
        fn serialize_u32(self, v: u32) -> Result<(), Differ> {
            self.serialize_u64(u64::from(v))
        }
        fn serialize_u64(self, v: u64) -> Result<(), Differ> {
            same_scalar(self.0, Value::from(v))
        }
        fn serialize_u128(self, v: u128) -> Result<(), Differ> {
            u64::try_from(v)
                .map_err(|_| Differ)
                .and_then(|u| self.serialize_u64(u))
        }
        fn serialize_f32(self, v: f32) -> Result<(), Differ> {
            same_scalar(self.0, Value::from(v))
        }
        fn serialize_f64(self, v: f64) -> Result<(), Differ> {
            same_scalar(self.0, Value::from(v))
        }
        fn serialize_char(self, v: char) -> Result<(), Differ> {
            self.serialize_str(v.encode_utf8(&mut [0; 4]))
        }
        fn serialize_str(self, v: &str) -> Result<(), Differ> {
            check(self.0.as_str() == Some(v))
        }
        fn serialize_bytes(self, v: &[u8]) -> Result<(), Differ> {
            let Value::Array(items) = self.0 else {
                return Err(Differ);
            };
            check(
                items.len() == v.len()
                    && items
                        .iter()
                        .zip(v)
                        .all(|(i, b)| i.as_u64() == Some(u64::from(*b))),
            )
        }
        fn serialize_none(self) -> Result<(), Differ> {
            check(self.0.is_null())
        }
        fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Differ> {
            value.serialize(self)
        }
        fn serialize_unit(self) -> Result<(), Differ> {
            check(self.0.is_null())
        }
        fn serialize_unit_struct(self, _: &'static str) -> Result<(), Differ> {
            check(self.0.is_null())
        }
        fn serialize_unit_variant(
            self,
            _: &'static str,
            _: u32,
            variant: &'static str,
        ) -> Result<(), Differ> {
            self.serialize_str(variant)
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            value: &T,
        ) -> Result<(), Differ> {
            value.serialize(self)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            name: &'static str,
            value: &T,
        ) -> Result<(), Differ> {
            value.serialize(Same(variant(self.0, name)?))
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Items<'a>, Differ> {
            Items::of(self.0)
        }
        fn serialize_tuple(self, _: usize) -> Result<Items<'a>, Differ> {
            Items::of(self.0)
        }
        fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Items<'a>, Differ> {
            Items::of(self.0)
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            name: &'static str,
            _: usize,
        ) -> Result<Items<'a>, Differ> {
            Items::of(variant(self.0, name)?)
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Fields<'a>, Differ> {
            Fields::of(self.0)
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields<'a>, Differ> {
            Fields::of(self.0)
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            name: &'static str,
            _: usize,
        ) -> Result<Fields<'a>, Differ> {
            Fields::of(variant(self.0, name)?)
        }
    }

    /// The elements of an expected array, matched in order.
    struct Items<'a>(std::slice::Iter<'a, Value>);

    impl<'a> Items<'a> {
        fn of(expected: &'a Value) -> Result<Self, Differ> {
            match expected {
                Value::Array(items) => Ok(Items(items.iter())),
                _ => Err(Differ),
            }
        }
        fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Differ> {
            value.serialize(Same(self.0.next().ok_or(Differ)?))
        }
        fn finish(mut self) -> Result<(), Differ> {
            check(self.0.next().is_none())
        }
    }

    /// serde's four sequence traits differ only in the name of their element method.
    macro_rules! items_serialize {
        ($($trait:ident :: $method:ident),*) => {$(
            impl ser::$trait for Items<'_> {
                type Ok = ();
                type Error = Differ;
                fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Differ> {
                    self.element(value)
                }
                fn end(self) -> Result<(), Differ> {
                    self.finish()
                }
            }
        )*};
    }

    items_serialize!(
        SerializeSeq::serialize_element,
        SerializeTuple::serialize_element,
        SerializeTupleStruct::serialize_field,
        SerializeTupleVariant::serialize_field
    );

    /// The entries of an expected object, each matched by key at most once; the object must
    /// have no entry left over at the end.
    struct Fields<'a> {
        map: &'a Map<String, Value>,
        /// The expected value of the key just serialised (maps give key and value apart).
        pending: Option<&'a Value>,
        /// The entries matched so far, by address, to refuse a key given twice.
        seen: [*const Value; MAX_FIELDS],
        matched: usize,
    }

    impl<'a> Fields<'a> {
        fn of(expected: &'a Value) -> Result<Self, Differ> {
            match expected {
                Value::Object(map) if map.len() <= MAX_FIELDS => Ok(Fields {
                    map,
                    pending: None,
                    seen: [std::ptr::null(); MAX_FIELDS],
                    matched: 0,
                }),
                _ => Err(Differ),
            }
        }
        /// Count an entry as matched, unless it already was (a key given twice).
        fn mark(&mut self, value: &'a Value) -> Result<&'a Value, Differ> {
            let address = value as *const Value;
            if self.matched == MAX_FIELDS || self.seen[..self.matched].contains(&address) {
                return Err(Differ);
            }
            self.seen[self.matched] = address;
            self.matched += 1;
            Ok(value)
        }
        fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Differ> {
            let expected = self.mark(self.map.get(key).ok_or(Differ)?)?;
            value.serialize(Same(expected))
        }
        fn finish(self) -> Result<(), Differ> {
            check(self.pending.is_none() && self.matched == self.map.len())
        }
    }

    impl ser::SerializeMap for Fields<'_> {
        type Ok = ();
        type Error = Differ;
        fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Differ> {
            let expected = key.serialize(Lookup(self.map))?;
            self.pending = Some(self.mark(expected)?);
            Ok(())
        }
        fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Differ> {
            value.serialize(Same(self.pending.take().ok_or(Differ)?))
        }
        fn end(self) -> Result<(), Differ> {
            self.finish()
        }
    }

    /// A struct and a struct variant serialise their fields alike.
    macro_rules! fields_serialize {
        ($($trait:ident),*) => {$(
            impl ser::$trait for Fields<'_> {
                type Ok = ();
                type Error = Differ;
                fn serialize_field<T: Serialize + ?Sized>(
                    &mut self,
                    key: &'static str,
                    value: &T,
                ) -> Result<(), Differ> {
                    self.field(key, value)
                }
                fn end(self) -> Result<(), Differ> {
                    self.finish()
                }
            }
        )*};
    }

    fields_serialize!(SerializeStruct, SerializeStructVariant);

    /// Finds the expected entry of a map key. serde_json writes string and char keys as
    /// they are; any other key (a number, a bool) is not compared.
    struct Lookup<'a>(&'a Map<String, Value>);

    macro_rules! not_compared {
        ($($method:ident($($arg:ty),*) -> $ret:ty;)*) => {
            $(fn $method(self, $(_: $arg),*) -> Result<$ret, Differ> { Err(Differ) })*
        };
    }

    impl<'a> ser::Serializer for Lookup<'a> {
        type Ok = &'a Value;
        type Error = Differ;
        type SerializeSeq = Impossible<&'a Value, Differ>;
        type SerializeTuple = Impossible<&'a Value, Differ>;
        type SerializeTupleStruct = Impossible<&'a Value, Differ>;
        type SerializeTupleVariant = Impossible<&'a Value, Differ>;
        type SerializeMap = Impossible<&'a Value, Differ>;
        type SerializeStruct = Impossible<&'a Value, Differ>;
        type SerializeStructVariant = Impossible<&'a Value, Differ>;

        fn serialize_str(self, key: &str) -> Result<&'a Value, Differ> {
            self.0.get(key).ok_or(Differ)
        }
        fn serialize_char(self, key: char) -> Result<&'a Value, Differ> {
            self.serialize_str(key.encode_utf8(&mut [0; 4]))
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            key: &T,
        ) -> Result<&'a Value, Differ> {
            key.serialize(self)
        }
        fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<&'a Value, Differ> {
            Err(Differ)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<&'a Value, Differ> {
            Err(Differ)
        }
        not_compared! {
            serialize_bool(bool) -> &'a Value;
            serialize_i8(i8) -> &'a Value;
            serialize_i16(i16) -> &'a Value;
            serialize_i32(i32) -> &'a Value;
            serialize_i64(i64) -> &'a Value;
            serialize_u8(u8) -> &'a Value;
            serialize_u16(u16) -> &'a Value;
            serialize_u32(u32) -> &'a Value;
            serialize_u64(u64) -> &'a Value;
            serialize_f32(f32) -> &'a Value;
            serialize_f64(f64) -> &'a Value;
            serialize_bytes(&[u8]) -> &'a Value;
            serialize_none() -> &'a Value;
            serialize_unit() -> &'a Value;
            serialize_unit_struct(&'static str) -> &'a Value;
            serialize_unit_variant(&'static str, u32, &'static str) -> &'a Value;
            serialize_seq(Option<usize>) -> Self::SerializeSeq;
            serialize_tuple(usize) -> Self::SerializeTuple;
            serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
            serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
            serialize_map(Option<usize>) -> Self::SerializeMap;
            serialize_struct(&'static str, usize) -> Self::SerializeStruct;
            serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
        }
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
    fn normalise_fills_options() {
        assert_eq!(
            normalise::<Args>(&json!({"items": []})).unwrap(),
            json!({"items": [], "note": null})
        );
    }
}
