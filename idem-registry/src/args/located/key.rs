//! Map keys for the located parser, read as serde_json reads the keys of a `Value`'s
//! object, and reported at the key when they cannot be read.

use std::cell::Cell;

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Error;

use super::{At, mark};

/// A map key, as serde_json reads keys of a `Value`'s object: a string, or a number or
/// boolean written as a string.
pub(super) struct Key<'de, 'a> {
    pub(super) key: &'de str,
    pub(super) at: &'a At<'a>,
    pub(super) failed: &'a Cell<Option<String>>,
}

impl Key<'_, '_> {
    /// A key that is not even read is reported at `/?`, as serde_path_to_error does.
    fn unread<T>(&self, error: Error) -> Result<T, Error> {
        mark(self.failed, &At::Key(self.at, "?"));
        Err(error)
    }
}

macro_rules! numeric_key {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            if !matches!(self.key.as_bytes().first(), Some(b'0'..=b'9' | b'-')) {
                return self.unread(de::Error::custom(
                    "invalid value: expected key to be a number in quotes",
                ));
            }
            let mut number = serde_json::Deserializer::from_str(self.key);
            let out = number.$method(visitor)?;
            number.end()?;
            Ok(out)
        }
    )*};
}

impl<'de> Deserializer<'de> for Key<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_borrowed_str(self.key)
    }

    numeric_key! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.key {
            "true" => visitor.visit_bool(true),
            "false" => visitor.visit_bool(false),
            other => self.unread(de::Error::invalid_type(Unexpected::Str(other), &visitor)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let key: de::value::BorrowedStrDeserializer<'de, Error> =
            de::value::BorrowedStrDeserializer::new(self.key);
        key.deserialize_enum(name, variants, visitor)
    }

    forward_to_deserialize_any! {
        char str string bytes byte_buf unit unit_struct seq tuple tuple_struct
        map struct identifier ignored_any
    }
}
