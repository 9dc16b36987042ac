//! The located parser against `serde_path_to_error`: the same typed value, or the same
//! pointer and message, for every shape of argument serde can read.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::*;

#[derive(Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Inner {
    n: u32,
    #[serde(default)]
    tags: Vec<String>,
}

#[derive(Debug, PartialEq, Deserialize, Serialize)]
enum Shape {
    Dot,
    Circle(f64),
    Pair(u8, u8),
    Rect { w: u16, h: u16 },
}

#[derive(Debug, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
enum Either {
    Num(i64),
    Text(String),
}

#[derive(Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Tagged {
    Email { to: String },
    Sms { number: u64 },
}

#[derive(Debug, PartialEq, Deserialize, Serialize)]
struct Id(u64);

#[derive(Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Args {
    items: Vec<Inner>,
    note: Option<String>,
    #[serde(default, alias = "shapes")]
    shape: Option<Vec<Shape>>,
    #[serde(default)]
    either: Option<Either>,
    #[serde(default)]
    tagged: Option<Tagged>,
    #[serde(default)]
    by_num: HashMap<u16, bool>,
    #[serde(default)]
    by_name: BTreeMap<String, (i8, char)>,
    #[serde(default)]
    id: Option<Id>,
    #[serde(default)]
    unit: (),
    #[serde(default, rename = "a/b~c")]
    escaped: Option<Vec<u8>>,
}

#[derive(Debug, PartialEq, Deserialize, Serialize)]
struct Flat {
    top: bool,
    #[serde(flatten)]
    rest: BTreeMap<String, i32>,
}

/// Both parsers agree: the same value, or the same pointer and message.
fn same<T: DeserializeOwned + PartialEq + std::fmt::Debug>(v: Value) {
    let ours = parse::<T>(&v);
    let theirs = crate::args::parse_ref::<T>(&v);
    assert_eq!(ours, theirs, "{v}");
}

#[test]
fn agrees_with_serde_path_to_error() {
    let cases = [
        json!({"items": []}),
        json!({"items": [{"n": 1}, {"n": 2, "tags": ["a"]}], "note": "x"}),
        json!({"items": [{"n": 1}, {"n": -1}]}),
        json!({"items": [{"n": 1.5}]}),
        json!({"items": [{"n": 1, "tags": [1]}]}),
        json!({"items": [{"n": 1, "extra": 0}]}),
        json!({"items": [], "extra": 1}),
        json!({}),
        json!({"items": {}}),
        json!({"items": null}),
        json!({"items": [], "note": 5}),
        json!({"items": [], "shape": ["Dot", {"Circle": 1.0}, {"Pair": [1, 2]}, {"Rect": {"w": 1, "h": 2}}]}),
        json!({"items": [], "shapes": ["Dot"]}),
        json!({"items": [], "shape": ["Square"]}),
        json!({"items": [], "shape": [{"Circle": "big"}]}),
        json!({"items": [], "shape": [{"Pair": [1, 300]}]}),
        json!({"items": [], "shape": [{"Pair": [1]}]}),
        json!({"items": [], "shape": [{"Pair": [1, 2, 3]}]}),
        json!({"items": [], "shape": [{"Pair": 1}]}),
        json!({"items": [], "shape": [{"Rect": {"w": 1}}]}),
        json!({"items": [], "shape": [{"Rect": {"w": 1, "h": -2}}]}),
        json!({"items": [], "shape": [{"Rect": [1, 2]}]}),
        json!({"items": [], "shape": [{"Rect": 3}]}),
        json!({"items": [], "shape": ["Circle"]}),
        json!({"items": [], "shape": ["Rect"]}),
        json!({"items": [], "shape": ["Pair"]}),
        json!({"items": [], "shape": [{"Dot": null}]}),
        json!({"items": [], "shape": [{"Dot": 1}]}),
        json!({"items": [], "shape": [{"Dot": null, "Circle": 1}]}),
        json!({"items": [], "shape": [{}]}),
        json!({"items": [], "shape": [7]}),
        json!({"items": [], "either": 3}),
        json!({"items": [], "either": "x"}),
        json!({"items": [], "either": [1]}),
        json!({"items": [], "tagged": {"kind": "email", "to": "a"}}),
        json!({"items": [], "tagged": {"kind": "sms", "number": "x"}}),
        json!({"items": [], "tagged": {"kind": "fax"}}),
        json!({"items": [], "by_num": {"1": true, "20": false}}),
        json!({"items": [], "by_num": {"1": 3}}),
        json!({"items": [], "by_num": {"x": true}}),
        json!({"items": [], "by_num": {"70000": true}}),
        json!({"items": [], "by_name": {"a": [1, "c"], "b/c": [2, "d"]}}),
        json!({"items": [], "by_name": {"a": [1, "cd"]}}),
        json!({"items": [], "by_name": {"x~y": [1000, "c"]}}),
        json!({"items": [], "id": 5}),
        json!({"items": [], "id": "5"}),
        json!({"items": [], "unit": null}),
        json!({"items": [], "unit": 1}),
        json!({"items": [], "a/b~c": [1, 2, 256]}),
        json!({"items": [], "a/b~c": "bytes"}),
        json!([1]),
        json!("args"),
    ];
    for case in cases {
        same::<Args>(case);
    }
    for case in [
        json!({"top": true, "a": 1, "b": 2}),
        json!({"top": true, "a": "x"}),
        json!({"a": 1}),
    ] {
        same::<Flat>(case);
    }
}

#[test]
fn pointers_escape_and_index() {
    let e = parse::<Args>(&json!({"items": [], "by_name": {"x/y~z": [1000, "c"]}})).unwrap_err();
    assert_eq!(e.pointer, "/by_name/x~1y~0z/0");
    let e = parse::<Args>(&json!({"items": [{"n": 1}, {"n": "2"}]})).unwrap_err();
    assert_eq!(e.pointer, "/items/1/n");
    assert!(e.message.contains("invalid type"), "{}", e.message);
}
