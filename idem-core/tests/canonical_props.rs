//! Properties of canonical JSON, fingerprints and key derivation, over generated documents.

use idem_core::{Fingerprint, KeyMaterial, LogicalKey, canonical_json};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        any::<u64>().prop_map(|n| Value::Number(n.into())),
        (-1e12f64..1e12).prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((".{0,8}", inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// The same document with every object's entries inserted in reverse order.
fn reordered(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(reordered).collect()),
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map.iter().rev() {
                out.insert(k.clone(), reordered(v));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn canonical_text_is_json_that_means_the_same(v in json_value()) {
        let text = canonical_json(&v);
        let back: Value = serde_json::from_str(&text).expect("canonical JSON parses");
        // Numbers may be respelled (1.0 -> 1), so compare canonical forms.
        prop_assert_eq!(canonical_json(&back), text);
    }

    #[test]
    fn key_order_and_whitespace_do_not_change_the_fingerprint(v in json_value()) {
        let pretty = serde_json::to_string_pretty(&reordered(&v)).expect("serialise");
        let reparsed: Value = serde_json::from_str(&pretty).expect("parse");
        prop_assert_eq!(Fingerprint::of(&reparsed), Fingerprint::of(&v));
    }

    #[test]
    fn integral_floats_fingerprint_like_integers(n in -1_000_000_000i64..1_000_000_000) {
        let as_float = Value::Number(Number::from_f64(n as f64).expect("finite"));
        prop_assert_eq!(Fingerprint::of(&as_float), Fingerprint::of(&Value::Number(n.into())));
    }

    #[test]
    fn distinct_documents_fingerprint_differently(a in json_value(), b in json_value()) {
        prop_assume!(canonical_json(&a) != canonical_json(&b));
        prop_assert_ne!(Fingerprint::of(&a), Fingerprint::of(&b));
    }

    #[test]
    fn keys_differ_whenever_any_scope_field_differs(
        fields in prop::collection::vec(".{0,6}", 4),
        other in ".{0,6}",
        which in 0usize..4,
    ) {
        let make = |f: &[String]| LogicalKey::new(
            f[0].clone(), f[1].clone(), f[2].clone(), KeyMaterial::Explicit { key: f[3].clone() },
        );
        let mut changed = fields.clone();
        prop_assume!(changed[which] != other);
        changed[which] = other;
        prop_assert_ne!(make(&fields).record_key(), make(&changed).record_key());
        prop_assert_eq!(make(&fields).record_key(), make(&fields).record_key());
    }
}
