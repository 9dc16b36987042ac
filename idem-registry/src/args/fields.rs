//! The normal form of arguments read as a list of named fields, `(a, (b, ()))` beside
//! `["a", "b"]`: the object a derived `Serialize` of a struct with those fields would give,
//! without a `Serialize` impl per tool.
//!
//! A `#[tool]` whose parameters carry no attribute that changes how they serialise uses this
//! instead of deriving `Serialize` on its arguments struct: the code here is generic over the
//! parameters' types only, so tools with parameters of the same types share it (the per-tool
//! impl was most of what a tool crate's build paid over rmcp's, BENCHMARKS.md §5). The value
//! is the same to the byte, which record keys depend on: each field is written under its name
//! in order, by its type's own `Serialize`, as the derive does.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Map, Value};

use super::same::serializes_to;
use crate::error::ArgumentError;

/// A list of field values, `(first, (second, ()))`, each serialised under the name at its
/// position in a list of names.
pub trait FieldList {
    /// Whether each field serialises exactly to the entry of its name in `map`.
    fn same_as(&self, names: &[&str], map: &Map<String, Value>) -> bool;
    /// Insert each field's serialisation under its name.
    fn write(&self, names: &[&str], map: &mut Map<String, Value>) -> Result<(), String>;
}

impl FieldList for () {
    fn same_as(&self, names: &[&str], _: &Map<String, Value>) -> bool {
        names.is_empty()
    }
    fn write(&self, names: &[&str], _: &mut Map<String, Value>) -> Result<(), String> {
        if names.is_empty() {
            Ok(())
        } else {
            Err(format!("{} names left without a field", names.len()))
        }
    }
}

impl<H: Serialize, T: FieldList> FieldList for (H, T) {
    fn same_as(&self, names: &[&str], map: &Map<String, Value>) -> bool {
        let Some((name, rest)) = names.split_first() else {
            return false;
        };
        map.get(*name).is_some_and(|v| serializes_to(&self.0, v)) && self.1.same_as(rest, map)
    }
    fn write(&self, names: &[&str], map: &mut Map<String, Value>) -> Result<(), String> {
        let Some((name, rest)) = names.split_first() else {
            return Err("a field has no name".to_owned());
        };
        let value = serde_json::to_value(&self.0).map_err(|e| e.to_string())?;
        map.insert((*name).to_owned(), value);
        self.1.write(rest, map)
    }
}

/// The normal form of `arguments` (an object, already read into `fields`): borrowed when it
/// already is exactly what the fields serialise to, else built.
pub(crate) fn normalise<'a, F: FieldList>(
    names: &[&str],
    fields: &F,
    arguments: &'a Value,
) -> Result<Cow<'a, Value>, ArgumentError> {
    if let Value::Object(map) = arguments
        && map.len() == names.len()
        && fields.same_as(names, map)
    {
        return Ok(Cow::Borrowed(arguments));
    }
    let mut map = Map::new();
    fields
        .write(names, &mut map)
        .map(|()| Cow::Owned(Value::Object(map)))
        .map_err(super::not_re_encoded)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    /// What the derive gives for the same fields: the value field lists must match.
    #[derive(Serialize)]
    struct Derived {
        to: String,
        n: u32,
        cc: Option<Vec<String>>,
        at: f64,
    }

    fn both(to: &str, n: u32, cc: Option<Vec<String>>, at: f64) -> (Value, Value) {
        let derived = serde_json::to_value(Derived {
            to: to.into(),
            n,
            cc: cc.clone(),
            at,
        })
        .unwrap();
        let list = (to.to_owned(), (n, (cc, (at, ()))));
        let names = ["to", "n", "cc", "at"];
        let mine = normalise(&names, &list, &json!({})).unwrap().into_owned();
        // And the derived value, given back, is recognised as normal without a copy.
        assert!(matches!(
            normalise(&names, &list, &derived).unwrap(),
            Cow::Borrowed(_)
        ));
        (derived, mine)
    }

    #[test]
    fn a_field_list_serialises_as_the_derived_struct_does() {
        for (to, n, cc, at) in [
            ("a@b.c", 1, None, 1.0),
            ("", 0, Some(vec![]), 0.5),
            ("é\"\\", u32::MAX, Some(vec!["x".into(), "y".into()]), -3.0),
        ] {
            let (derived, mine) = both(to, n, cc, at);
            assert_eq!(derived, mine);
            assert_eq!(
                serde_json::to_string(&derived).unwrap(),
                serde_json::to_string(&mine).unwrap()
            );
        }
    }

    #[test]
    fn arguments_that_differ_from_the_fields_are_rebuilt() {
        let names = ["n", "cc"];
        let list = (1.0_f64, (None::<Vec<String>>, ()));
        for arguments in [
            json!({"n": 1, "cc": null}), // an integer where the field is a float
            json!({"n": 1.0}),           // a defaulted field left out
            json!({"n": 1.0, "cc": null, "x": 1}), // one entry more
            json!({"cc": null, "m": 1.0}), // the same count, another name
        ] {
            let normal = normalise(&names, &list, &arguments).unwrap();
            assert!(matches!(normal, Cow::Owned(_)), "{arguments}");
            assert_eq!(*normal, json!({"n": 1.0, "cc": null}));
        }
    }

    #[test]
    fn a_field_that_cannot_be_serialised_is_an_argument_error() {
        let bad: BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let err = normalise(&["m"], &(bad, ()), &json!({})).unwrap_err();
        assert!(err.to_string().contains("could not be re-encoded"), "{err}");
    }

    #[test]
    fn names_and_fields_of_different_lengths_are_never_normal() {
        assert!(!(1_u8, ()).same_as(&[], &Map::new()));
        assert!(!().same_as(&["a"], &Map::new()));
        assert!(normalise(&["a", "b"], &(1_u8, ()), &json!({})).is_err());
        assert!(normalise(&[], &(1_u8, ()), &json!({})).is_err());
    }
}
