//! Comparing a value's serialisation with a JSON value, without building the former: how
//! [`normalise_borrowed`](super::normalise_borrowed) tells that arguments are already normal
//! and can be lent on as they are.

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
