//! Typed arguments from a borrowed JSON value in one pass that knows where it is, so that an
//! error names its JSON pointer without a second, path-tracking deserialiser.
//!
//! [`super::parse_ref`] deserialises from `&Value` and, on failure, again through
//! `serde_path_to_error`: two deserialisers, so rustc compiles every arguments type's visitor
//! twice. [`parse`] accepts exactly what `&Value` accepts, with the same messages (it defers
//! to `&Value` for every scalar), and reports the pointer `serde_path_to_error` reports: that
//! of the innermost value whose deserialisation failed. Keeping the path costs a reference per
//! level and nothing on the heap until something fails. One difference: a numeric map key
//! that fails after a number was read from it (`HashMap<u16, _>` given `"1x"`) is reported at
//! the key as written (`/1x`), where serde_path_to_error reports the number read (`/1`).

use std::cell::Cell;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess,
    SeqAccess, Unexpected, VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::{Error, Map, Value};

use self::key::Key;
use crate::error::ArgumentError;
use crate::pointer;

/// Deserialise typed arguments, naming the JSON pointer of the first error.
pub(crate) fn parse<T: DeserializeOwned>(arguments: &Value) -> Result<T, ArgumentError> {
    // What does not depend on `T` is in functions that are not generic, compiled once.
    super::require_object(arguments)?;
    let failed = Cell::new(None);
    let root = Top(Located {
        value: arguments,
        at: &At::Root,
        failed: &failed,
    });
    match T::deserialize(root) {
        Ok(typed) => Ok(typed),
        Err(e) => Err(located(e, failed)),
    }
}

fn located(error: Error, failed: Cell<Option<String>>) -> ArgumentError {
    ArgumentError::new(failed.take().unwrap_or_default(), error.to_string())
}

/// Where a value is: a chain of borrowed steps up to the root.
enum At<'a> {
    Root,
    Key(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl At<'_> {
    fn pointer(&self, out: &mut String) {
        match self {
            At::Root => {}
            At::Key(parent, key) => {
                parent.pointer(out);
                pointer::push(out, key);
            }
            At::Index(parent, index) => {
                parent.pointer(out);
                pointer::push_index(out, *index);
            }
        }
    }
}

/// The first (innermost) failure wins: outer levels see the error on its way up.
fn mark(failed: &Cell<Option<String>>, at: &At<'_>) {
    let known = failed.take();
    failed.set(known.or_else(|| {
        let mut pointer = String::new();
        at.pointer(&mut pointer);
        Some(pointer)
    }));
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Unexpected::Unsigned(u),
            (None, Some(i)) => Unexpected::Signed(i),
            (None, None) => Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

#[derive(Clone, Copy)]
struct Located<'de, 'a> {
    value: &'de Value,
    at: &'a At<'a>,
    failed: &'a Cell<Option<String>>,
}

impl<'de, 'a> Located<'de, 'a> {
    fn tracked<T>(self, result: Result<T, Error>) -> Result<T, Error> {
        if result.is_err() {
            mark(self.failed, self.at);
        }
        result
    }

    fn invalid<T>(self, expected: &dyn de::Expected) -> Result<T, Error> {
        self.tracked(Err(de::Error::invalid_type(
            unexpected(self.value),
            expected,
        )))
    }

    fn seq<V: Visitor<'de>>(self, items: &'de [Value], visitor: V) -> Result<V::Value, Error> {
        let mut access = Items {
            iter: items.iter(),
            index: 0,
            at: self.at,
            failed: self.failed,
        };
        let out = visitor.visit_seq(&mut access)?;
        if access.iter.len() == 0 {
            Ok(out)
        } else {
            Err(de::Error::invalid_length(
                items.len(),
                &"fewer elements in array",
            ))
        }
    }

    fn map<V: Visitor<'de>>(
        self,
        map: &'de Map<String, Value>,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let mut access = Entries {
            iter: map.iter(),
            value: None,
            at: self.at,
            failed: self.failed,
        };
        let out = visitor.visit_map(&mut access)?;
        if access.iter.len() == 0 {
            Ok(out)
        } else {
            Err(de::Error::invalid_length(
                map.len(),
                &"fewer elements in map",
            ))
        }
    }
}

/// The scalar methods defer to `&Value`'s, which visit no nested value.
macro_rules! scalar {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.tracked(self.value.$method(visitor))
        }
    )*};
}

impl<'de> Deserializer<'de> for Located<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let out = match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => n.deserialize_any(visitor),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => self.seq(items, visitor),
            Value::Object(map) => self.map(map, visitor),
        };
        self.tracked(out)
    }

    scalar! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_unit deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::String(s) => self.tracked(visitor.visit_borrowed_str(s)),
            Value::Array(items) => {
                let out = self.seq(items, visitor);
                self.tracked(out)
            }
            _ => self.invalid(&visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let out = match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        };
        self.tracked(out)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        // serde_json's `RawValue` (feature `raw_value`) is recognised by this name.
        let out = if name == "$serde_json::private::RawValue" {
            self.value.deserialize_newtype_struct(name, visitor)
        } else {
            visitor.visit_newtype_struct(self)
        };
        self.tracked(out)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Array(items) => {
                let out = self.seq(items, visitor);
                self.tracked(out)
            }
            _ => self.invalid(&visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Object(map) => {
                let out = self.map(map, visitor);
                self.tracked(out)
            }
            _ => self.invalid(&visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let out = match self.value {
            Value::Array(items) => self.seq(items, visitor),
            Value::Object(map) => self.map(map, visitor),
            _ => return self.invalid(&visitor),
        };
        self.tracked(out)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let single_key = || de::Error::invalid_value(Unexpected::Map, &"map with a single key");
        let (variant, value) = match self.value {
            Value::Object(map) => {
                let mut entries = map.iter();
                match (entries.next(), entries.next()) {
                    (Some((variant, value)), None) => (variant.as_str(), Some(value)),
                    _ => return self.tracked(Err(single_key())),
                }
            }
            Value::String(variant) => (variant.as_str(), None),
            _ => return self.invalid(&"string or map"),
        };
        let out = visitor.visit_enum(Variant {
            variant,
            value,
            at: self.at,
            failed: self.failed,
        });
        self.tracked(out)
    }
}

/// The arguments object itself, which `#[tool]`'s arguments struct reads. It is known to be
/// an object, so it is read as a map only: the struct visitor's `visit_seq` is never called,
/// and so never compiled.
struct Top<'de, 'a>(Located<'de, 'a>);

impl<'de> Deserializer<'de> for Top<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.value {
            Value::Object(map) => {
                let out = self.0.map(map, visitor);
                self.0.tracked(out)
            }
            // `parse` checked it is an object.
            _ => self.0.invalid(&visitor),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

struct Items<'de, 'a> {
    iter: std::slice::Iter<'de, Value>,
    index: usize,
    at: &'a At<'a>,
    failed: &'a Cell<Option<String>>,
}

impl<'de> SeqAccess<'de> for Items<'de, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(value) = self.iter.next() else {
            return Ok(None);
        };
        let at = At::Index(self.at, self.index);
        self.index += 1;
        seed.deserialize(Located {
            value,
            at: &at,
            failed: self.failed,
        })
        .map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

struct Entries<'de, 'a> {
    iter: serde_json::map::Iter<'de>,
    value: Option<(&'de str, &'de Value)>,
    at: &'a At<'a>,
    failed: &'a Cell<Option<String>>,
}

impl<'de> MapAccess<'de> for Entries<'de, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.iter.next() else {
            return Ok(None);
        };
        self.value = Some((key, value));
        let read = Key {
            key,
            at: self.at,
            failed: self.failed,
        };
        seed.deserialize(read).map(Some).inspect_err(|_| {
            // An unknown or invalid key is reported at the key, as serde_path_to_error does.
            mark(self.failed, &At::Key(self.at, key));
        })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some((key, value)) = self.value.take() else {
            return Err(de::Error::custom("value is missing"));
        };
        let at = At::Key(self.at, key);
        seed.deserialize(Located {
            value,
            at: &at,
            failed: self.failed,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// An enum's variant and its content, which is reported at `/<variant>`.
struct Variant<'de, 'a> {
    variant: &'de str,
    value: Option<&'de Value>,
    at: &'a At<'a>,
    failed: &'a Cell<Option<String>>,
}

impl<'de, 'a> EnumAccess<'de> for Variant<'de, 'a> {
    type Error = Error;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let name: de::value::StrDeserializer<'_, Error> = self.variant.into_deserializer();
        seed.deserialize(name).map(|v| (v, self))
    }
}

impl<'de> VariantAccess<'de> for Variant<'de, '_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        let at = At::Key(self.at, self.variant);
        match self.value {
            Some(value) => de::Deserialize::deserialize(Located {
                value,
                at: &at,
                failed: self.failed,
            }),
            None => Ok(()),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        let at = At::Key(self.at, self.variant);
        match self.value {
            Some(value) => seed.deserialize(Located {
                value,
                at: &at,
                failed: self.failed,
            }),
            None => {
                mark(self.failed, &at);
                Err(de::Error::invalid_type(
                    Unexpected::UnitVariant,
                    &"newtype variant",
                ))
            }
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        let at = At::Key(self.at, self.variant);
        let here = |value| Located {
            value,
            at: &at,
            failed: self.failed,
        };
        match self.value {
            Some(value @ Value::Array(items)) if items.is_empty() => {
                here(value).tracked(visitor.visit_unit())
            }
            Some(value @ Value::Array(items)) => {
                let out = here(value).seq(items, visitor);
                here(value).tracked(out)
            }
            Some(other) => here(other).invalid(&"tuple variant"),
            None => {
                mark(self.failed, &at);
                Err(de::Error::invalid_type(
                    Unexpected::UnitVariant,
                    &"tuple variant",
                ))
            }
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let at = At::Key(self.at, self.variant);
        let here = |value| Located {
            value,
            at: &at,
            failed: self.failed,
        };
        match self.value {
            Some(value @ Value::Object(map)) => {
                let out = here(value).map(map, visitor);
                here(value).tracked(out)
            }
            Some(other) => here(other).invalid(&"struct variant"),
            None => {
                mark(self.failed, &at);
                Err(de::Error::invalid_type(
                    Unexpected::UnitVariant,
                    &"struct variant",
                ))
            }
        }
    }
}

mod key;
#[cfg(test)]
mod tests;
