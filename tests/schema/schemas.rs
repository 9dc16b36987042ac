//! Provider exports and argument validation, over a fixture set of parameter shapes.
//!
//! Every fixture is a `#[tool]`. For each one and each provider, the exported entry is
//! compared with `tests/golden/<provider>/<fixture>.json` and checked against the target's
//! rules; the portability reports are compared with `tests/golden/<provider>/REPORTS.txt`;
//! valid and invalid arguments go through the dispatcher and their verdicts are compared with
//! `tests/golden/instances/<fixture>.json`, which `scripts/check_schemas.py` replays with an
//! independent validator. Regenerate with `IDEM_BLESS=1 cargo test -p idem-tests --test schema schemas` and read
//! the diff before committing.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use idem::export::{self, ChangeKind, Provider};
use idem::prelude::*;
use idem::record::StateKind;
use idem::store::ListFilter;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use support::dispatcher::linked;

// ---------------------------------------------------------------------------------------
// Fixture types.

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Paging {
    /// Page number, from 1.
    page: u32,
    /// Results per page.
    per_page: Option<u32>,
}

/// How urgent a ticket is.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Priority {
    /// Whenever someone has time.
    Low,
    /// Today.
    High,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
enum Colour {
    Red,
    Green,
    Blue,
}

/// A shape, externally tagged (serde's default).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
enum Shape {
    Circle { radius: f64 },
    Square(f64),
    Empty,
}

/// A pet, internally tagged by `kind`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "kind")]
enum Pet {
    Cat { name: String, lives: u8 },
    Dog { name: String, good: bool },
}

/// A command, adjacently tagged (`t` and `c`).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "t", content = "c")]
enum Command {
    Say(String),
    Wait(u32),
    Stop,
}

/// A recipient, untagged: a numeric id or an address.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
enum Recipient {
    Id(u64),
    Address(String),
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Window {
    /// First day.
    from: u32,
    /// Last day.
    to: u32,
}

/// A query whose paging is flattened into it; unknown fields are refused.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Query {
    text: String,
    #[serde(flatten)]
    paging: Paging,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Address {
    street: String,
    city: String,
    country: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ContactKind {
    Email,
    Phone,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Contact {
    kind: ContactKind,
    value: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Customer {
    name: String,
    address: Address,
    contacts: Vec<Contact>,
}

/// A tree of named nodes.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Node {
    name: String,
    children: Vec<Node>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Receipt {
    id: u64,
    echo: Value,
}

fn default_size() -> u8 {
    20
}

fn echo<T: Serialize>(value: &T) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(ToolError::terminal)
}

// ---------------------------------------------------------------------------------------
// Fixture tools: one per shape.

/// Search with optional filters.
#[tool(class = "read")]
fn optional(
    /// Free-text note.
    note: Option<String>,
    limit: Option<u32>,
    filter: Option<Paging>,
) -> Result<Value, ToolError> {
    echo(&(note, limit, filter))
}

/// List items with defaults.
#[tool(class = "idempotent_write")]
fn defaults(
    #[serde(default)] page: u32,
    /// Page size.
    #[serde(default = "default_size")]
    size: u8,
    #[serde(default)] tags: Vec<String>,
) -> Result<Value, ToolError> {
    echo(&json!({"page": page, "size": size, "tags": tags}))
}

/// Open a ticket with a priority and a colour.
#[tool(class = "non_idempotent_write")]
fn unit_enums(priority: Priority, colour: Option<Colour>) -> Result<Receipt, ToolError> {
    Ok(Receipt {
        id: 1,
        echo: echo(&(priority, colour))?,
    })
}

/// Draw a shape.
#[tool(class = "read")]
fn external(shape: Shape) -> Result<Value, ToolError> {
    echo(&shape)
}

/// Register a pet.
#[tool(class = "idempotent_write")]
fn internal(pet: Pet) -> Result<Value, ToolError> {
    echo(&pet)
}

/// Run a command.
#[tool(class = "read")]
fn adjacent(command: Command) -> Result<Value, ToolError> {
    echo(&command)
}

/// Notify a recipient.
#[tool(class = "read")]
fn untagged(
    /// Who to notify.
    to: Recipient,
) -> Result<Value, ToolError> {
    echo(&to)
}

/// Set labels and limits.
#[tool(class = "idempotent_write")]
fn hash_map(
    labels: HashMap<String, String>,
    limits: Option<BTreeMap<String, u32>>,
) -> Result<Value, ToolError> {
    echo(&(labels, limits))
}

/// Plot points.
#[tool(class = "read")]
fn tuples(
    /// Labelled points.
    points: Vec<(String, u32)>,
) -> Result<Value, ToolError> {
    echo(&points)
}

/// Store an arbitrary payload.
#[tool(class = "idempotent_write")]
fn json_value(payload: Value, meta: Option<Value>) -> Result<Value, ToolError> {
    echo(&(payload, meta))
}

/// Add three counters.
#[tool(class = "read")]
fn integers(a: u32, b: usize, c: u64) -> Result<Value, ToolError> {
    echo(&json!({"a": a, "b": b, "c": c}))
}

/// Search a window of days.
#[tool(class = "read")]
fn flatten(#[serde(flatten)] window: Window, query: Query) -> Result<Value, ToolError> {
    echo(&(window, query))
}

/// Create a customer.
#[tool(class = "irreversible")]
fn nested(customer: Customer) -> Result<Value, ToolError> {
    echo(&customer)
}

/// Import a tree.
#[tool(class = "idempotent_write")]
fn recursive(tree: Node) -> Result<Value, ToolError> {
    echo(&tree)
}

/// Schedule a message.
#[tool(class = "non_idempotent_write", open_world)]
fn formats(
    /// When to send it.
    #[schemars(extend("format" = "date-time"))]
    at: String,
    /// The message id.
    #[schemars(extend("format" = "uuid"))]
    id: String,
    /// The recipient.
    #[schemars(email)]
    email: String,
) -> Result<Value, ToolError> {
    echo(&(at, id, email))
}

/// Answer pong.
#[tool(class = "read")]
fn no_arguments() -> Result<String, ToolError> {
    Ok("pong".into())
}

// ---------------------------------------------------------------------------------------
// Fixture instances: valid arguments, and invalid ones with the pointer of the problem.

struct Fixture {
    name: &'static str,
    valid: Vec<Value>,
    invalid: Vec<(Value, &'static str)>,
}

fn fixtures() -> Vec<Fixture> {
    let f = |name, valid, invalid| Fixture {
        name,
        valid,
        invalid,
    };
    vec![
        f(
            "optional",
            vec![
                json!({}),
                json!({"note": "hi", "limit": 5, "filter": {"page": 2}}),
                // The strict form: every property sent, null for "absent".
                json!({"note": null, "limit": null, "filter": null}),
            ],
            vec![
                (json!({"limit": -1}), "/limit"),
                (json!({"filter": {"page": "two"}}), "/filter/page"),
                (json!({"filter": {"page": 1, "extra": 1}}), "/filter/extra"),
            ],
        ),
        f(
            "defaults",
            vec![
                json!({}),
                json!({"page": 2, "size": 10, "tags": ["a"]}),
                json!({"page": null, "size": null, "tags": null}),
            ],
            vec![
                (json!({"size": 300}), "/size"),
                (json!({"tags": "a"}), "/tags"),
            ],
        ),
        f(
            "unit_enums",
            vec![
                json!({"priority": "high"}),
                json!({"priority": "low", "colour": "Green"}),
            ],
            vec![
                (json!({"priority": "urgent"}), "/priority"),
                (json!({"priority": "low", "colour": "green"}), "/colour"),
                (json!({}), ""),
            ],
        ),
        f(
            "external",
            vec![
                json!({"shape": {"Circle": {"radius": 1.5}}}),
                json!({"shape": {"Square": 2}}),
                json!({"shape": "Empty"}),
            ],
            vec![
                (
                    json!({"shape": {"Circle": {"radius": "big"}}}),
                    "/shape/Circle/radius",
                ),
                (json!({"shape": {"Triangle": {}}}), "/shape"),
            ],
        ),
        f(
            "internal",
            vec![
                json!({"pet": {"kind": "Cat", "name": "Tom", "lives": 9}}),
                json!({"pet": {"kind": "Dog", "name": "Rex", "good": true}}),
            ],
            vec![
                (
                    json!({"pet": {"kind": "Cat", "name": "Tom", "lives": 300}}),
                    "/pet/lives",
                ),
                (json!({"pet": {"kind": "Fish", "name": "Nemo"}}), "/pet"),
            ],
        ),
        f(
            "adjacent",
            vec![
                json!({"command": {"t": "Say", "c": "hi"}}),
                json!({"command": {"t": "Stop"}}),
            ],
            vec![
                (json!({"command": {"t": "Wait", "c": -5}}), "/command/c"),
                (json!({"command": {"t": "Jump"}}), "/command"),
            ],
        ),
        f(
            "untagged",
            vec![json!({"to": 42}), json!({"to": "dana@example.com"})],
            vec![(json!({"to": true}), "/to"), (json!({"to": -1}), "/to")],
        ),
        f(
            "hash_map",
            vec![
                json!({"labels": {"team": "billing"}}),
                json!({"labels": {}, "limits": {"daily": 5}}),
            ],
            vec![
                (json!({"labels": {"team": 1}}), "/labels/team"),
                (
                    json!({"labels": {}, "limits": {"daily": -1}}),
                    "/limits/daily",
                ),
            ],
        ),
        f(
            "tuples",
            vec![
                json!({"points": [["a", 1], ["b", 2]]}),
                json!({"points": []}),
            ],
            vec![
                (json!({"points": [["a", "b"]]}), "/points/0/1"),
                (json!({"points": [["a", 1, 2]]}), "/points/0"),
            ],
        ),
        f(
            "json_value",
            vec![
                json!({"payload": {"any": [1, "two", null]}}),
                json!({"payload": null, "meta": 3}),
            ],
            vec![
                (json!({}), ""),
                (json!({"payload": 1, "other": 2}), "/other"),
            ],
        ),
        f(
            "integers",
            vec![
                json!({"a": 0, "b": 1, "c": 18446744073709551615u64}),
                json!({"a": 4294967295u64, "b": 0, "c": 0}),
            ],
            vec![
                (json!({"a": 4294967296u64, "b": 0, "c": 0}), "/a"),
                (json!({"a": 1, "b": -1, "c": 0}), "/b"),
                (json!({"a": 1.5, "b": 0, "c": 0}), "/a"),
            ],
        ),
        f(
            "flatten",
            vec![json!({"from": 1, "to": 7, "query": {"text": "refund", "page": 1}})],
            vec![
                (
                    json!({"from": 1, "to": 7, "query": {"text": "refund", "page": 1, "size": 3}}),
                    "/query/size",
                ),
                (
                    json!({"from": 1, "to": 7, "query": {"text": "refund", "page": 1}, "extra": true}),
                    "/extra",
                ),
                (json!({"to": 7, "query": {"text": "refund", "page": 1}}), ""),
            ],
        ),
        f(
            "nested",
            vec![json!({"customer": {
                "name": "Dana",
                "address": {"street": "1 Main St", "city": "Lyon"},
                "contacts": [{"kind": "email", "value": "dana@example.com"}]
            }})],
            vec![
                (
                    json!({"customer": {"name": "Dana", "address": {"street": "1 Main St"}, "contacts": []}}),
                    "/customer/address",
                ),
                (
                    json!({"customer": {"name": "Dana", "address": {"street": "s", "city": "c"}, "contacts": [{"kind": "fax", "value": "1"}]}}),
                    "/customer/contacts/0/kind",
                ),
            ],
        ),
        f(
            "recursive",
            vec![json!({"tree": {"name": "root", "children": [
                {"name": "a", "children": [{"name": "a1", "children": []}]},
                {"name": "b", "children": []}
            ]}})],
            vec![
                (
                    json!({"tree": {"name": "root", "children": [{"name": 5, "children": []}]}}),
                    "/tree/children/0/name",
                ),
                (
                    json!({"tree": {"name": "root", "children": [{"name": "a"}]}}),
                    "/tree/children/0",
                ),
            ],
        ),
        f(
            "formats",
            vec![json!({
                "at": "2025-01-31T09:30:00Z",
                "id": "123e4567-e89b-12d3-a456-426614174000",
                "email": "dana@example.com"
            })],
            vec![
                (
                    json!({"at": "yesterday", "id": "123e4567-e89b-12d3-a456-426614174000", "email": "dana@example.com"}),
                    "/at",
                ),
                (
                    json!({"at": "2025-01-31T09:30:00Z", "id": "not-a-uuid", "email": "dana@example.com"}),
                    "/id",
                ),
                (
                    json!({"at": "2025-01-31T09:30:00Z", "id": "123e4567-e89b-12d3-a456-426614174000", "email": "dana"}),
                    "/email",
                ),
            ],
        ),
        f(
            "no_arguments",
            vec![json!({})],
            vec![(json!({"x": 1}), "/x"), (json!([]), "")],
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Golden files.

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn blessing() -> bool {
    std::env::var_os("IDEM_BLESS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Compare `actual` with a golden file, or write it when blessing. Returns a mismatch.
fn golden(relative: &str, actual: &str) -> Option<String> {
    let path = golden_dir().join(relative);
    if blessing() {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, actual).unwrap();
        return None;
    }
    match std::fs::read_to_string(&path) {
        Ok(expected) if expected == actual => None,
        Ok(_) => Some(format!(
            "{relative} differs from the golden file; rerun with IDEM_BLESS=1 and read the diff"
        )),
        Err(e) => Some(format!("{relative}: {e}; create it with IDEM_BLESS=1")),
    }
}

/// The golden form: keys sorted, so that the files do not depend on whether a dependency
/// turned on serde_json's `preserve_order` (rig does), which keeps schemars' field order.
fn pretty(v: &Value) -> String {
    let mut v = v.clone();
    v.sort_all_objects();
    let mut s = serde_json::to_string_pretty(&v).unwrap();
    s.push('\n');
    s
}

fn registry() -> Registry {
    Registry::linked().expect("the fixtures register")
}

fn tool(registry: &Registry, name: &str) -> Arc<ToolDef> {
    registry
        .get(name)
        .unwrap_or_else(|| panic!("fixture `{name}` is not registered"))
        .clone()
}

use idem::ToolDef;

#[test]
fn exports_match_their_golden_files() {
    let registry = registry();
    let mut mismatches = Vec::new();
    for fixture in fixtures() {
        let def = tool(&registry, fixture.name);
        mismatches.extend(golden(
            &format!("canonical/{}.json", fixture.name),
            &pretty(def.input_schema()),
        ));
        for provider in Provider::ALL {
            let value = match export::export(&def, provider) {
                Ok(e) => e.tool,
                Err(e) => json!({"refused": e.to_string()}),
            };
            mismatches.extend(golden(
                &format!("{provider}/{}.json", fixture.name),
                &pretty(&value),
            ));
        }
    }
    for provider in Provider::ALL {
        let all = registry.export_all(provider);
        let mut text = String::new();
        for report in &all.reports {
            text.push_str(&report.to_string());
            text.push_str("\n\n");
        }
        for refusal in &all.refused {
            text.push_str(&format!("refused: {refusal}\n\n"));
        }
        mismatches.extend(golden(&format!("{provider}/REPORTS.txt"), &text));
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

// ---------------------------------------------------------------------------------------
// The targets' rules, checked in Rust on every exported document.

const OPENAI_STRICT_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "title",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];
const OPENAI_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];
const ANTHROPIC_STRICT_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "title",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "allOf",
    "default",
    "pattern",
    "format",
    "minItems",
];
const ANTHROPIC_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];
const GEMINI_JSON_KEYWORDS: &[&str] = &[
    "$id",
    "$defs",
    "$ref",
    "$anchor",
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "oneOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
];
const GEMINI_OPENAPI_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

/// Every subschema of a JSON Schema document with its pointer (pre-order).
fn subschemas<'a>(schema: &'a Value, pointer: String, out: &mut Vec<(String, &'a Value)>) {
    out.push((pointer.clone(), schema));
    let Some(obj) = schema.as_object() else {
        return;
    };
    for (k, v) in obj {
        let here = format!("{pointer}/{k}");
        match k.as_str() {
            // `additionalProperties: false` is a rule, not a subschema to inspect.
            "additionalProperties" if v.is_boolean() => {}
            "items" | "additionalProperties" | "not" | "contains" | "if" | "then" | "else" => {
                subschemas(v, here, out)
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                for (i, s) in v.as_array().into_iter().flatten().enumerate() {
                    subschemas(s, format!("{here}/{i}"), out);
                }
            }
            "properties" | "$defs" | "patternProperties" => {
                for (name, s) in v.as_object().into_iter().flatten() {
                    subschemas(s, format!("{here}/{name}"), out);
                }
            }
            _ => {}
        }
    }
}

fn all_subschemas(schema: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    subschemas(schema, String::new(), &mut out);
    out
}

fn is_object_schema(o: &Map<String, Value>) -> bool {
    o.get("type").is_some_and(|t| {
        t == "object"
            || t.as_array()
                .is_some_and(|ts| ts.iter().any(|t| t == "object"))
    }) || o.contains_key("properties")
}

fn name_ok(name: &str) -> bool {
    let mut c = name.chars();
    c.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.len() <= 64
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Problems with an exported entry, by the target's rules.
fn rule_violations(provider: Provider, entry: &Value, def: &ToolDef) -> Vec<String> {
    let mut bad = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            bad.push(what)
        }
    };
    macro_rules! flag {
        ($e:expr) => {
            check(false, $e)
        };
    }
    let json_schema_compiles = |schema: &Value| {
        idem::schema::ArgumentValidator::new(schema)
            .err()
            .map(|e| e.to_string())
    };
    match provider {
        Provider::OpenAiChat | Provider::OpenAiResponses => {
            let f = if provider == Provider::OpenAiChat {
                check(entry["type"] == "function", "type is not function".into());
                &entry["function"]
            } else {
                check(entry["type"] == "function", "type is not function".into());
                entry
            };
            check(f["name"] == def.name(), "name".into());
            check(f["description"] == def.description(), "description".into());
            check(
                f["strict"].is_boolean(),
                "`strict` must always be stated".into(),
            );
            let p = &f["parameters"];
            check(p["type"] == "object", "root type must be object".into());
            check(
                p.get("anyOf").is_none() && p.get("oneOf").is_none(),
                "root combinator".into(),
            );
            if let Some(e) = json_schema_compiles(p) {
                flag!(e);
            }
            if f["strict"] == true {
                let mut properties = 0;
                let mut enum_values = 0;
                for (ptr, s) in all_subschemas(p) {
                    let Some(o) = s.as_object() else {
                        flag!(format!("{ptr}: boolean schema in strict mode"));
                        continue;
                    };
                    for k in o.keys() {
                        if !OPENAI_STRICT_KEYWORDS.contains(&k.as_str()) {
                            flag!(format!("{ptr}: `{k}` in strict mode"));
                        }
                    }
                    if let Some(fmt) = o.get("format").and_then(Value::as_str)
                        && !OPENAI_FORMATS.contains(&fmt)
                    {
                        flag!(format!("{ptr}: format {fmt}"));
                    }
                    if o.contains_key("$ref") && o.len() > 1 {
                        flag!(format!("{ptr}: siblings beside $ref"));
                    }
                    enum_values += o.get("enum").and_then(Value::as_array).map_or(0, Vec::len);
                    if is_object_schema(o) {
                        let props = o.get("properties").and_then(Value::as_object);
                        check(props.is_some(), format!("{ptr}: object without properties"));
                        let props = props.cloned().unwrap_or_default();
                        properties += props.len();
                        check(
                            o.get("additionalProperties") == Some(&json!(false)),
                            format!("{ptr}: additionalProperties must be false"),
                        );
                        let required: Vec<&str> = o
                            .get("required")
                            .and_then(Value::as_array)
                            .map(|r| r.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default();
                        for k in props.keys() {
                            check(
                                required.contains(&k.as_str()),
                                format!("{ptr}: `{k}` not required"),
                            );
                        }
                    }
                }
                check(properties <= 5000, "more than 5000 properties".into());
                check(enum_values <= 1000, "more than 1000 enum values".into());
            }
        }
        Provider::Anthropic | Provider::AnthropicStrict => {
            check(entry["name"] == def.name(), "name".into());
            let s = &entry["input_schema"];
            check(
                s["type"] == "object",
                "input_schema type must be object".into(),
            );
            if let Some(e) = json_schema_compiles(s) {
                flag!(e);
            }
            if provider == Provider::AnthropicStrict {
                check(
                    entry["strict"].is_boolean(),
                    "`strict` must be stated".into(),
                );
            } else {
                check(
                    entry.get("strict").is_none(),
                    "plain form has no `strict`".into(),
                );
            }
            if entry["strict"] == true {
                for (ptr, s) in all_subschemas(s) {
                    let Some(o) = s.as_object() else {
                        flag!(format!("{ptr}: boolean schema in strict mode"));
                        continue;
                    };
                    for k in o.keys() {
                        if !ANTHROPIC_STRICT_KEYWORDS.contains(&k.as_str()) {
                            flag!(format!("{ptr}: `{k}` in strict mode"));
                        }
                    }
                    if let Some(fmt) = o.get("format").and_then(Value::as_str) {
                        check(
                            ANTHROPIC_FORMATS.contains(&fmt),
                            format!("{ptr}: format {fmt}"),
                        );
                    }
                    if let Some(n) = o.get("minItems").and_then(Value::as_u64) {
                        check(n <= 1, format!("{ptr}: minItems {n}"));
                    }
                    if is_object_schema(o) {
                        check(
                            o.get("additionalProperties") == Some(&json!(false)),
                            format!("{ptr}: additionalProperties must be false"),
                        );
                    }
                }
            }
        }
        Provider::Gemini => {
            check(entry["name"] == def.name(), "name".into());
            if let Some(s) = entry.get("parametersJsonSchema") {
                check(s["type"] == "object", "root type must be object".into());
                if let Some(e) = json_schema_compiles(s) {
                    flag!(e);
                }
                for name in s["properties"]
                    .as_object()
                    .into_iter()
                    .flat_map(|p| p.keys())
                {
                    check(name_ok(name), format!("parameter name {name}"));
                }
                for (ptr, s) in all_subschemas(s) {
                    let Some(o) = s.as_object() else {
                        flag!(format!("{ptr}: boolean schema"));
                        continue;
                    };
                    for k in o.keys() {
                        check(
                            GEMINI_JSON_KEYWORDS.contains(&k.as_str()),
                            format!("{ptr}: `{k}`"),
                        );
                    }
                    check(
                        !o.contains_key("$ref"),
                        format!("{ptr}: $ref left after unrolling"),
                    );
                    if let Some(values) = o.get("enum").and_then(Value::as_array) {
                        check(
                            values.iter().all(|v| v.is_string() || v.is_number()),
                            format!("{ptr}: enum of strings and numbers only"),
                        );
                    }
                }
            } else {
                check(
                    def.input_schema()["properties"]
                        .as_object()
                        .is_none_or(Map::is_empty),
                    "parameters left out of a tool that has some".into(),
                );
            }
        }
        Provider::GeminiOpenApi => {
            check(entry["name"] == def.name(), "name".into());
            if let Some(p) = entry.get("parameters") {
                check(p["type"] == "OBJECT", "root type must be OBJECT".into());
                let mut stack = vec![(String::new(), p)];
                while let Some((ptr, s)) = stack.pop() {
                    let Some(o) = s.as_object() else {
                        flag!(format!("{ptr}: not a schema object"));
                        continue;
                    };
                    for k in o.keys() {
                        check(
                            GEMINI_OPENAPI_KEYWORDS.contains(&k.as_str()),
                            format!("{ptr}: `{k}`"),
                        );
                    }
                    if let Some(t) = o.get("type") {
                        check(
                            [
                                "STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL",
                            ]
                            .iter()
                            .any(|n| t == n),
                            format!("{ptr}: type {t}"),
                        );
                    } else {
                        check(o.contains_key("anyOf"), format!("{ptr}: no type"));
                    }
                    if let Some(values) = o.get("enum").and_then(Value::as_array) {
                        check(
                            values.iter().all(Value::is_string),
                            format!("{ptr}: non-string enum"),
                        );
                        check(
                            o.get("format") == Some(&json!("enum")),
                            format!("{ptr}: enum without format enum"),
                        );
                    }
                    if let Some(fmt) = o.get("format").and_then(Value::as_str) {
                        check(
                            ["date-time", "enum", "int32", "int64", "float", "double"]
                                .contains(&fmt),
                            format!("{ptr}: format {fmt}"),
                        );
                    }
                    if o.get("type") == Some(&json!("OBJECT")) {
                        let props = o.get("properties").and_then(Value::as_object);
                        check(
                            props.is_some_and(|p| !p.is_empty()),
                            format!("{ptr}: OBJECT without properties"),
                        );
                        for (name, sub) in props.into_iter().flatten() {
                            if ptr.is_empty() {
                                check(name_ok(name), format!("parameter name {name}"));
                            }
                            stack.push((format!("{ptr}/properties/{name}"), sub));
                        }
                    }
                    if o.get("type") == Some(&json!("ARRAY")) {
                        check(
                            o.contains_key("items"),
                            format!("{ptr}: ARRAY without items"),
                        );
                    }
                    if let Some(items) = o.get("items") {
                        stack.push((format!("{ptr}/items"), items));
                    }
                    for (i, b) in o
                        .get("anyOf")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .enumerate()
                    {
                        stack.push((format!("{ptr}/anyOf/{i}"), b));
                    }
                }
            }
        }
        Provider::Mcp => {
            check(entry["name"] == def.name(), "name".into());
            check(entry["title"].is_string(), "title".into());
            check(
                entry["description"] == def.description(),
                "description".into(),
            );
            check(
                entry["inputSchema"]["type"] == "object",
                "inputSchema type".into(),
            );
            if let Some(e) = json_schema_compiles(&entry["inputSchema"]) {
                flag!(e);
            }
            if let Some(out) = entry.get("outputSchema") {
                check(
                    out["type"] == "object",
                    "outputSchema type must be object".into(),
                );
                if let Some(e) = json_schema_compiles(out) {
                    flag!(e);
                }
            }
            let a = &entry["annotations"];
            let hints = def.class().hints();
            check(a["readOnlyHint"] == hints.read_only, "readOnlyHint".into());
            check(
                a["destructiveHint"] == hints.destructive,
                "destructiveHint".into(),
            );
            check(
                a["idempotentHint"] == hints.idempotent,
                "idempotentHint".into(),
            );
            check(
                a["openWorldHint"] == def.policy().open_world,
                "openWorldHint".into(),
            );
        }
        _ => flag!(format!("no rules for {provider}")),
    }
    bad
}

#[test]
fn every_export_follows_its_targets_rules() {
    let registry = registry();
    let mut problems = Vec::new();
    for provider in Provider::ALL {
        let all = registry.export_all(provider);
        let tools = all.tools.as_array().unwrap();
        assert_eq!(tools.len(), all.reports.len());
        for (entry, report) in tools.iter().zip(&all.reports) {
            let def = tool(&registry, &report.tool);
            for p in rule_violations(provider, entry, &def) {
                problems.push(format!("{provider} `{}`: {p}", report.tool));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn anthropic_strict_tools_share_the_request_limits() {
    let all = registry().export_all(Provider::AnthropicStrict);
    let strict: Vec<&Value> = all
        .tools
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["strict"] == true)
        .collect();
    assert!(strict.len() <= 20);
    let mut optional_count = 0;
    let mut unions = 0;
    for t in &strict {
        for (_, s) in all_subschemas(&t["input_schema"]) {
            let Some(o) = s.as_object() else { continue };
            if o.contains_key("anyOf") || o.get("type").is_some_and(Value::is_array) {
                unions += 1;
            }
            if let Some(p) = o.get("properties").and_then(Value::as_object) {
                let required = o
                    .get("required")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                optional_count += p.len() - required;
            }
        }
    }
    assert!(
        optional_count <= 24,
        "{optional_count} optional properties across strict tools"
    );
    assert!(
        unions <= 16,
        "{unions} union properties across strict tools"
    );
}

// ---------------------------------------------------------------------------------------
// What the reports say, asserted the way a user would in their own tests.

fn report(registry: &Registry, name: &str, provider: Provider) -> idem::export::PortabilityReport {
    export::export(&tool(registry, name), provider)
        .unwrap()
        .report
}

#[test]
fn reports_say_what_changed_and_what_was_lost() {
    let r = registry();

    // Optional properties: strict OpenAI makes them required and nullable.
    let rep = report(&r, "optional", Provider::OpenAiChat);
    assert!(rep.is_strict());
    assert!(rep.changes.iter().any(|c| c.pointer == "/properties/limit"
        && c.kind == ChangeKind::Adapted
        && c.detail.contains("required")));

    // Defaults are moved into the description; the dispatcher applies them on null.
    let rep = report(&r, "defaults", Provider::OpenAiChat);
    assert!(rep.is_strict());
    assert!(
        rep.lost().any(|c| c.detail.contains("Default: 20.")),
        "{rep}"
    );

    // Free-form maps, untyped values and tuples cannot be strict, and the reason says where.
    for (name, needle) in [
        ("hash_map", "/properties/labels: a map"),
        ("json_value", "/properties/payload: any JSON value"),
        ("tuples", "/properties/points/items: a tuple"),
    ] {
        for provider in [
            Provider::OpenAiChat,
            Provider::OpenAiResponses,
            Provider::AnthropicStrict,
        ] {
            let rep = report(&r, name, provider);
            assert!(!rep.is_strict(), "{rep}");
            assert!(
                rep.not_strict_reasons().iter().any(|x| x.contains(needle)),
                "{provider} {name}: {:?}",
                rep.not_strict_reasons()
            );
        }
    }

    // Recursion: strict for OpenAI, not for Anthropic, unrolled for Gemini.
    assert!(report(&r, "recursive", Provider::OpenAiChat).is_strict());
    let rep = report(&r, "recursive", Provider::AnthropicStrict);
    assert!(
        rep.not_strict_reasons()
            .iter()
            .any(|x| x.contains("recursive"))
    );
    let rep = report(&r, "recursive", Provider::Gemini);
    assert!(
        rep.lost().any(|c| c.detail.contains("levels of recursion")),
        "{rep}"
    );

    // Gemini's OpenAPI form cannot express free-form maps or untyped values at all.
    for name in ["hash_map", "json_value"] {
        let err = export::export(&tool(&r, name), Provider::GeminiOpenApi).unwrap_err();
        assert!(err.reason.contains("Provider::Gemini"), "{err}");
    }
    // Machine-number formats are left out: adapted where minimum/maximum keep the range.
    let rep = report(&r, "integers", Provider::GeminiOpenApi);
    assert!(
        rep.of_kind(ChangeKind::Adapted)
            .any(|c| c.pointer == "/properties/a" && c.detail.contains("uint32"))
    );
    assert!(
        rep.of_kind(ChangeKind::Dropped)
            .any(|c| c.pointer == "/properties/c" && c.detail.contains("uint64"))
    );

    // MCP: the plain canonical schema, the output wrapped when it is not an object.
    let rep = report(&r, "no_arguments", Provider::Mcp);
    assert!(rep.changes.iter().any(|c| c.detail.contains("wrapped")));
    assert!(report(&r, "unit_enums", Provider::Mcp).is_lossless());

    // The plain Anthropic form is the canonical schema, untouched.
    for f in fixtures() {
        assert!(report(&r, f.name, Provider::Anthropic).is_lossless());
    }
    // Display names the tool, the provider, and each change.
    let text = report(&r, "formats", Provider::GeminiOpenApi).to_string();
    assert!(text.starts_with("formats for gemini-openapi:"), "{text}");
    assert!(
        text.contains("/properties/id: `format` moved into the description"),
        "{text}"
    );
}

#[test]
fn registry_exports_a_whole_tools_array() {
    let r = registry();
    let tools = r.export(Provider::OpenAiChat).unwrap();
    assert_eq!(tools.as_array().map(Vec::len), Some(r.len()));
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["function"]["strict"].is_boolean())
    );
    // The OpenAPI form refuses tools it cannot express, naming them.
    let err = r.export(Provider::GeminiOpenApi).unwrap_err();
    assert_eq!(err.tool, "hash_map");
    let all = r.export_all(Provider::GeminiOpenApi);
    assert_eq!(all.refused.len(), 2);
    assert_eq!(all.tools.as_array().map(Vec::len), Some(r.len() - 2));
}

// ---------------------------------------------------------------------------------------
// Validation before deserialisation, through the dispatcher.

fn run() -> RunContext {
    RunContext::new("tenant-schemas").with_run("run-1", 1)
}

#[tokio::test]
async fn arguments_are_validated_before_anything_is_recorded() {
    let store = Arc::new(MemoryStore::new());
    let dispatcher = linked(store.clone());
    let mut problems = Vec::new();
    let mut n = 0;
    for fixture in fixtures() {
        let def = tool(dispatcher.registry(), fixture.name);
        let mut verdicts = Vec::new();
        for (args, pointer) in &fixture.invalid {
            n += 1;
            let call = ToolCall::new(fixture.name, args.clone()).with_call_id(format!("bad-{n}"));
            match dispatcher.dispatch(&call, &run()).await {
                Err(DispatchError::InvalidArguments {
                    pointer: p,
                    message,
                    ..
                }) => {
                    if p != *pointer {
                        problems.push(format!(
                            "{} {args}: pointer `{p}`, expected `{pointer}` ({message})",
                            fixture.name
                        ));
                    }
                    let mut validated = args.clone();
                    idem::schema::drop_absent_nulls(def.input_schema(), &mut validated);
                    verdicts.push(json!({
                        "instance": args,
                        "validated": validated,
                        "valid": false,
                        "pointer": p,
                        "message": message,
                    }));
                }
                other => problems.push(format!(
                    "{} {args}: expected InvalidArguments, got {other:?}",
                    fixture.name
                )),
            }
        }
        for args in &fixture.valid {
            n += 1;
            let call = ToolCall::new(fixture.name, args.clone()).with_call_id(format!("good-{n}"));
            let result = dispatcher.dispatch(&call, &run()).await;
            match &result {
                Ok(_) => {}
                // Irreversible tools stop at approval, after the arguments were accepted.
                Err(DispatchError::ApprovalRequired { .. }) => {}
                Err(e) => problems.push(format!("{} {args}: {e}", fixture.name)),
            }
            let mut validated = args.clone();
            idem::schema::drop_absent_nulls(def.input_schema(), &mut validated);
            verdicts.push(json!({"instance": args, "validated": validated, "valid": true}));
        }
        if let Some(m) = golden(
            &format!("instances/{}.json", fixture.name),
            &pretty(&json!({"tool": fixture.name, "cases": verdicts})),
        ) {
            problems.push(m);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Nothing was recorded for an invalid call: the only records are those of the valid
    // calls to write tools (reads are not recorded; the irreversible one awaits approval).
    let mut written = 0;
    for f in fixtures() {
        if tool(dispatcher.registry(), f.name).class().records() && f.name != "nested" {
            written += f.valid.len();
        }
    }
    for state in [
        StateKind::Completed,
        StateKind::InProgress,
        StateKind::Unknown,
    ] {
        let records = store
            .list(ListFilter {
                state: Some(state),
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        let expected = if state == StateKind::Completed {
            written
        } else {
            0
        };
        assert_eq!(records.len(), expected, "{state:?} records");
    }
}

#[tokio::test]
async fn strict_nulls_mean_absent_and_defaults_apply() {
    let dispatcher = linked(Arc::new(MemoryStore::new()));
    let call = ToolCall::new(
        "defaults",
        json!({"page": null, "size": null, "tags": null}),
    )
    .with_call_id("strict-1");
    let out = dispatcher.dispatch(&call, &run()).await.unwrap();
    assert_eq!(out.output, json!({"page": 0, "size": 20, "tags": []}));
    let call = ToolCall::new(
        "optional",
        json!({"note": null, "limit": null, "filter": null}),
    );
    let out = dispatcher.dispatch(&call, &run()).await.unwrap();
    assert_eq!(out.output, json!([null, null, null]));
}

#[tokio::test]
async fn messages_tell_the_model_what_to_fix() {
    let dispatcher = linked(Arc::new(MemoryStore::new()));
    let cases = [
        (
            "unit_enums",
            json!({"priority": "urgent"}),
            r#"expected one of: "low" | "high"; got "urgent""#,
        ),
        (
            "unit_enums",
            json!({"priority": "low", "colour": "red"}),
            r#"expected one of "Red", "Green", "Blue", null, got "red""#,
        ),
        (
            "integers",
            json!({"a": 4294967296u64, "b": 0, "c": 0}),
            "must be at most 4294967295, got 4294967296",
        ),
        (
            "formats",
            json!({"at": "2025-01-31T09:30:00Z", "id": "x", "email": "dana@example.com"}),
            r#""x" is not a valid UUID"#,
        ),
        (
            "flatten",
            json!({"from": 1, "to": 2, "query": {"text": "t", "page": 1, "size": 3}}),
            "unknown property `size`; the allowed properties are `page`, `per_page`, `text`",
        ),
        (
            "internal",
            json!({"pet": {"kind": "Fish", "name": "Nemo"}}),
            r#"expected one of: {"kind": "Cat", ...} | {"kind": "Dog", ...}"#,
        ),
        (
            "untagged",
            json!({"to": true}),
            "expected one of: an integer | a string; got true",
        ),
        (
            "no_arguments",
            json!([]),
            "expected an object of named arguments, got an array",
        ),
    ];
    for (tool, args, needle) in cases {
        match dispatcher
            .dispatch(&ToolCall::new(tool, args.clone()).with_call_id("m"), &run())
            .await
        {
            Err(DispatchError::InvalidArguments { message, .. }) => {
                assert!(message.contains(needle), "{tool} {args}: {message}")
            }
            other => panic!("{tool} {args}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Arguments that cannot form one object are refused at registration, naming the tool.

#[derive(Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FlattenedEnumArgs {
    text: String,
    #[serde(flatten)]
    pet: Pet,
}

#[test]
fn a_flattened_enum_is_refused_at_registration() {
    let def = ToolDef::builder("adopt", ToolClass::Read)
        .description("Adopt a pet.")
        .input_schema(idem::schema::arguments::<FlattenedEnumArgs>())
        .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
        .build()
        .unwrap();
    let err = Registry::builder().add(def).build().unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("tool `adopt`") && text.contains("`oneOf`") && text.contains("flatten"),
        "{text}"
    );
}
