//! Validating a model's arguments against a tool's canonical schema, before anything is
//! deserialised, recorded or executed.
//!
//! The validator is compiled once per tool definition (at registration, or on first use) by
//! the `jsonschema` crate, built without its HTTP and file resolvers: a schema that refers to
//! another document is refused, nothing is fetched. Errors name the JSON pointer of the
//! offending value and the violated rule in words a model can act on, and list the next few
//! problems too, so that one correction can fix them all.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Draft, ValidationError, Validator};
use serde_json::{Map, Value};

use crate::args::{ArgumentError, kind};
use crate::registry::RegistryError;
use crate::tool::ToolDef;

/// A tool's validator, compiled once and shared by the clones of its definition.
pub(crate) type CompiledValidator = Arc<OnceLock<Result<ArgumentValidator, SchemaError>>>;

/// The registration check: the arguments form one object, and the validator compiles (it
/// is compiled here, once, and kept).
pub(crate) fn check_registered(def: &ToolDef) -> Result<(), RegistryError> {
    crate::schema::check_shape(def.name(), def.input_schema())?;
    def.arguments_validator()
        .map(|_| ())
        .map_err(|e| RegistryError::Invalid {
            tool: def.name().to_owned(),
            reason: e.to_string(),
        })
}

/// How many problems after the first one an error message lists.
const MORE_PROBLEMS: usize = 3;

/// A schema the validator cannot compile.
///
/// ```
/// use idem_registry::validate::ArgumentValidator;
/// let err = ArgumentValidator::new(&serde_json::json!({"type": "text"})).unwrap_err();
/// assert!(err.to_string().starts_with("the input schema cannot be compiled"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the input schema cannot be compiled: {message}")]
pub struct SchemaError {
    /// What the compiler said.
    pub message: String,
}

/// A compiled argument schema.
///
/// ```
/// use idem_registry::validate::ArgumentValidator;
/// use serde_json::json;
///
/// let v = ArgumentValidator::new(&json!({
///     "type": "object",
///     "properties": {"to": {"type": "string", "format": "email"}},
///     "required": ["to"],
///     "additionalProperties": false
/// }))
/// .unwrap();
/// assert!(v.validate(&json!({"to": "dana@example.com"})).is_ok());
///
/// let err = v.validate(&json!({"to": "dana"})).unwrap_err();
/// assert_eq!(err.pointer, "/to");
/// assert!(err.message.contains("not a valid email address"), "{}", err.message);
///
/// let err = v.validate(&json!({"to": "dana@example.com", "cc": "x"})).unwrap_err();
/// assert_eq!(err.pointer, "/cc");
/// assert!(err.message.contains("unknown property `cc`"), "{}", err.message);
/// ```
pub struct ArgumentValidator {
    schema: Value,
    validator: Validator,
}

impl std::fmt::Debug for ArgumentValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgumentValidator").finish_non_exhaustive()
    }
}

impl ArgumentValidator {
    /// Compile a schema (JSON Schema 2020-12, formats asserted).
    pub fn new(schema: &Value) -> Result<Self, SchemaError> {
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .should_validate_formats(true)
            .build(schema)
            .map_err(|e| SchemaError {
                message: e.to_string(),
            })?;
        Ok(ArgumentValidator {
            schema: schema.clone(),
            validator,
        })
    }

    /// Check arguments. The error points at the first problem and lists a few more.
    pub fn validate(&self, arguments: &Value) -> Result<(), ArgumentError> {
        // The common case answers without building an error iterator (no allocation).
        if self.validator.is_valid(arguments) {
            return Ok(());
        }
        let mut errors = self.validator.iter_errors(arguments);
        let Some(first) = errors.next() else {
            return Ok(());
        };
        let (pointer, mut message) = explain(&self.schema, arguments, &first);
        let rest: Vec<_> = errors.take(MORE_PROBLEMS + 1).collect();
        if !rest.is_empty() {
            let shown = rest.len().min(MORE_PROBLEMS);
            message.push_str("; also");
            for (i, e) in rest.iter().take(shown).enumerate() {
                let (p, m) = explain(&self.schema, arguments, e);
                let sep = if i == 0 { "" } else { ";" };
                let at = if p.is_empty() {
                    "the arguments".to_owned()
                } else {
                    format!("`{p}`")
                };
                let _ = write!(message, "{sep} at {at}: {m}");
            }
            if rest.len() > shown {
                message.push_str("; and more");
            }
        }
        Err(ArgumentError::new(pointer, message))
    }

    /// Whether the arguments are valid.
    pub fn is_valid(&self, arguments: &Value) -> bool {
        self.validator.is_valid(arguments)
    }
}

impl ToolDef {
    /// The compiled validator of this tool's argument schema: compiled once per definition,
    /// at registration or on first use.
    ///
    /// ```
    /// use idem_registry::{ToolDef, ToolContext};
    /// use idem_core::{ToolClass, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let tool = ToolDef::builder("greet", ToolClass::Read)
    ///     .description("Greet someone.")
    ///     .input_schema(json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}))
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// let validator = tool.arguments_validator().unwrap();
    /// assert!(validator.is_valid(&json!({"name": "Dana"})));
    /// assert!(!validator.is_valid(&json!({"name": 7})));
    /// ```
    pub fn arguments_validator(&self) -> Result<&ArgumentValidator, &SchemaError> {
        self.validator
            .get_or_init(|| ArgumentValidator::new(&self.input_schema))
            .as_ref()
    }

    /// Prepare a model's arguments for deserialisation: a `null` given for an optional
    /// property that does not accept `null` is read as "absent" (strict provider modes make
    /// every property required and send `null` for the ones the model leaves out; see
    /// [`drop_absent_nulls`]), then the result is validated against the canonical schema.
    ///
    /// ```
    /// use idem_registry::{ToolDef, ToolContext};
    /// use idem_core::{ToolClass, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let tool = ToolDef::builder("page", ToolClass::Read)
    ///     .description("Read a page.")
    ///     .input_schema(json!({
    ///         "type": "object",
    ///         "properties": {"n": {"type": "integer", "minimum": 1, "default": 1}},
    ///         "additionalProperties": false
    ///     }))
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(tool.validate_arguments(json!({"n": null})).unwrap(), json!({}));
    /// let err = tool.validate_arguments(json!({"n": 0})).unwrap_err();
    /// assert_eq!((err.pointer.as_str(), err.message.as_str()), ("/n", "must be at least 1, got 0"));
    /// ```
    pub fn validate_arguments(&self, arguments: Value) -> Result<Value, ArgumentError> {
        self.check_arguments(Cow::Owned(arguments))
            .map(Cow::into_owned)
    }

    /// [`ToolDef::validate_arguments`] without taking the arguments: they are copied only
    /// when a `null` has to be dropped (the dispatcher's path, which keeps the call intact).
    pub(crate) fn check_arguments<'a>(
        &self,
        mut arguments: Cow<'a, Value>,
    ) -> Result<Cow<'a, Value>, ArgumentError> {
        let validator = self
            .arguments_validator()
            .map_err(|e| ArgumentError::new("", e.to_string()))?;
        if contains_null(&arguments, 0) {
            strip_nulls(
                &self.input_schema,
                &[&self.input_schema],
                arguments.to_mut(),
                0,
            );
        }
        validator.validate(&arguments)?;
        Ok(arguments)
    }
}

/// Remove every `null` given for a property that is optional and does not accept `null`,
/// at any depth: that is how strict provider modes say "absent", and removing it lets serde
/// apply the default. A `null` that a schema accepts, or one given for a required property,
/// is kept (the validator then reports the latter).
///
/// ```
/// use serde_json::json;
///
/// let schema = json!({
///     "type": "object",
///     "properties": {
///         "limit": {"type": "integer", "default": 10},
///         "cursor": {"type": ["string", "null"]},
///         "query": {"type": "string"}
///     },
///     "required": ["query"]
/// });
/// let mut args = json!({"limit": null, "cursor": null, "query": null});
/// idem_registry::validate::drop_absent_nulls(&schema, &mut args);
/// assert_eq!(args, json!({"cursor": null, "query": null}));
/// ```
pub fn drop_absent_nulls(schema: &Value, arguments: &mut Value) {
    // Only a `null` is ever removed: arguments without one (the common case) are left as they
    // are without walking the schema alongside them, which costs more than the validation.
    if contains_null(arguments, 0) {
        strip_nulls(schema, &[schema], arguments, 0);
    }
}

/// Whether `strip_nulls` could find a `null` in `value`: one inside any object or array it
/// visits (those at most `MAX_DEPTH` deep).
fn contains_null(value: &Value, depth: usize) -> bool {
    match value {
        Value::Null => true,
        _ if depth > MAX_DEPTH => false,
        Value::Object(map) => map.values().any(|v| contains_null(v, depth + 1)),
        Value::Array(items) => items.iter().any(|v| contains_null(v, depth + 1)),
        _ => false,
    }
}

/// Deeper than this, schemas and values are left alone (a bound on hostile input).
const MAX_DEPTH: usize = 128;

fn strip_nulls(root: &Value, schemas: &[&Value], value: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut flat = Vec::new();
    for s in schemas {
        expand(root, s, &mut flat, 0);
    }
    match value {
        Value::Object(map) => {
            let nulls: Vec<String> = map
                .iter()
                .filter(|(_, v)| v.is_null())
                .map(|(k, _)| k.clone())
                .collect();
            for key in nulls {
                let mut declared = false;
                let mut keep = false;
                for obj in flat.iter().filter_map(|s| s.as_object()) {
                    if let Some(p) = crate::schema::properties(obj).and_then(|p| p.get(&key)) {
                        declared = true;
                        keep |= is_required(obj, &key) || accepts_null(root, p, 0);
                    }
                }
                if declared && !keep {
                    map.remove(&key);
                }
            }
            for (key, v) in map.iter_mut() {
                let mut subs: Vec<&Value> = flat
                    .iter()
                    .filter_map(|s| s.get("properties")?.get(key))
                    .collect();
                if subs.is_empty() {
                    subs = flat
                        .iter()
                        .filter_map(|s| s.get("additionalProperties"))
                        .filter(|s| s.is_object())
                        .collect();
                }
                if !subs.is_empty() {
                    strip_nulls(root, &subs, v, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let subs: Vec<&Value> = flat
                    .iter()
                    .filter_map(|s| {
                        s.get("prefixItems")
                            .and_then(|p| p.get(i))
                            .or_else(|| s.get("items"))
                    })
                    .collect();
                if !subs.is_empty() {
                    strip_nulls(root, &subs, item, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// The schema and every schema it may also have to satisfy (references resolved,
/// combinator branches flattened).
fn expand<'a>(root: &'a Value, schema: &'a Value, out: &mut Vec<&'a Value>, depth: usize) {
    if depth > 16 {
        return;
    }
    if let Some(target) = resolve(root, schema) {
        expand(root, target, out, depth + 1);
    }
    out.push(schema);
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            for b in branches {
                expand(root, b, out, depth + 1);
            }
        }
    }
}

/// The target of a local `$ref` (`#` or `#/json/pointer`).
pub(crate) fn resolve<'a>(root: &'a Value, schema: &Value) -> Option<&'a Value> {
    let reference = schema.get("$ref")?.as_str()?;
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

fn is_required(obj: &Map<String, Value>, key: &str) -> bool {
    obj.get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|k| k == key))
}

/// Whether `null` can satisfy the schema (structurally, without running a validator).
pub(crate) fn accepts_null(root: &Value, schema: &Value, depth: usize) -> bool {
    if depth > 16 {
        return false;
    }
    let obj = match schema {
        Value::Bool(b) => return *b,
        Value::Object(obj) => obj,
        _ => return false,
    };
    if obj.contains_key("$ref") {
        return resolve(root, schema).is_some_and(|t| accepts_null(root, t, depth + 1));
    }
    if let Some(c) = obj.get("const") {
        return c.is_null();
    }
    if let Some(e) = obj.get("enum").and_then(Value::as_array) {
        return e.iter().any(Value::is_null);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = obj.get(key).and_then(Value::as_array) {
            return branches.iter().any(|b| accepts_null(root, b, depth + 1));
        }
    }
    match obj.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
        _ => true,
    }
}

/// The pointer and the words for one validation error.
fn explain(schema: &Value, arguments: &Value, error: &ValidationError<'_>) -> (String, String) {
    let path = error.instance_path().as_str().to_owned();
    let instance = error.instance();
    let got = describe_value(instance);
    let message = match error.kind() {
        ValidationErrorKind::Type { kind: expected } => {
            let expected = match expected {
                TypeKind::Single(t) => article(t.as_str()).to_owned(),
                TypeKind::Multiple(set) => set
                    .iter()
                    .map(|t| article(t.as_str()))
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            if path.is_empty() && expected == "an object" {
                format!(
                    "expected an object of named arguments, got {}",
                    kind(instance)
                )
            } else {
                format!("expected {expected}, got {}", kind(instance))
            }
        }
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| property.to_string());
            format!("missing required property `{name}`")
        }
        ValidationErrorKind::FalseSchema
            if error
                .schema_path()
                .as_str()
                .ends_with("/additionalProperties") =>
        {
            // `additionalProperties: false` on an object that declares no properties is
            // reported as a false schema, at the object: name the keys it got.
            let unexpected: Vec<String> = arguments
                .pointer(&path)
                .and_then(Value::as_object)
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            return unknown_properties(schema, error, &path, &unexpected);
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            return unknown_properties(schema, error, &path, unexpected);
        }
        ValidationErrorKind::Enum { options } => {
            let options = options
                .as_array()
                .map(|o| {
                    o.iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_else(|| options.to_string());
            format!("expected one of {options}, got {got}")
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("expected {expected_value}, got {got}")
        }
        ValidationErrorKind::Minimum { limit } => format!("must be at least {limit}, got {got}"),
        ValidationErrorKind::Maximum { limit } => format!("must be at most {limit}, got {got}"),
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("must be greater than {limit}, got {got}")
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("must be less than {limit}, got {got}")
        }
        ValidationErrorKind::MultipleOf { multiple_of } => {
            format!("must be a multiple of {multiple_of}, got {got}")
        }
        ValidationErrorKind::MinLength { limit } => format!(
            "must be at least {limit} character{} long, got {}",
            plural(*limit),
            chars(instance)
        ),
        ValidationErrorKind::MaxLength { limit } => format!(
            "must be at most {limit} character{} long, got {}",
            plural(*limit),
            chars(instance)
        ),
        ValidationErrorKind::MinItems { limit } => format!(
            "must have at least {limit} item{}, got {}",
            plural(*limit),
            instance.as_array().map_or(0, Vec::len)
        ),
        ValidationErrorKind::MaxItems { limit } => format!(
            "must have at most {limit} item{}, got {}",
            plural(*limit),
            instance.as_array().map_or(0, Vec::len)
        ),
        ValidationErrorKind::MinProperties { limit } => format!(
            "must have at least {limit} propert{}",
            if *limit == 1 { "y" } else { "ies" }
        ),
        ValidationErrorKind::MaxProperties { limit } => format!(
            "must have at most {limit} propert{}",
            if *limit == 1 { "y" } else { "ies" }
        ),
        ValidationErrorKind::UniqueItems => "items must be unique; remove the duplicates".into(),
        ValidationErrorKind::Pattern { pattern } => {
            format!("{got} does not match the pattern `{pattern}`")
        }
        ValidationErrorKind::Format { format } => {
            format!("{got} is not a valid {}", format_name(format))
        }
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            return explain_alternatives(schema, arguments, error, &path, context);
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            "matches more than one of the allowed forms; give a value that matches exactly one"
                .into()
        }
        ValidationErrorKind::FalseSchema => "no value is allowed here; remove it".into(),
        ValidationErrorKind::Not { .. } => format!("{got} is not allowed here"),
        ValidationErrorKind::PropertyNames { error: inner } => {
            let (_, m) = explain(schema, arguments, inner);
            format!("property name {got} is invalid: {m}")
        }
        ValidationErrorKind::Contains => {
            "must contain at least one item that matches the item schema".into()
        }
        _ => error.to_string(),
    };
    (path, message)
}

/// "unknown property `x`; the allowed properties are ...", pointing at the first one.
fn unknown_properties(
    schema: &Value,
    error: &ValidationError<'_>,
    path: &str,
    unexpected: &[String],
) -> (String, String) {
    let allowed = parent_schema(schema, error)
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>())
        .unwrap_or_default();
    let names = unexpected
        .iter()
        .map(|u| format!("`{u}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let noun = if unexpected.len() == 1 {
        "unknown property"
    } else {
        "unknown properties"
    };
    let hint = if allowed.is_empty() {
        "; this object takes no properties".to_owned()
    } else {
        format!("; the allowed properties are {}", allowed.join(", "))
    };
    let pointer = match unexpected.first() {
        Some(first) => format!("{path}/{}", escape(first)),
        None => path.to_owned(),
    };
    (pointer, format!("{noun} {names}{hint}"))
}

/// `anyOf` / `oneOf` with no matching branch: report the closest branch's problem when one
/// branch is clearly meant (nullable values, a variant whose tag matched), else list the
/// allowed forms.
fn explain_alternatives(
    schema: &Value,
    arguments: &Value,
    error: &ValidationError<'_>,
    path: &str,
    branches: &[Vec<ValidationError<'static>>],
) -> (String, String) {
    let depth = |e: &ValidationError<'_>| e.instance_path().segments().count();
    let here = error.instance_path().segments().count();
    // A branch that fails on the value's own type or on a tag (a `const` or `enum` one
    // level down) is not the one the caller meant.
    let score = |errors: &Vec<ValidationError<'static>>| -> usize {
        let mismatch = errors.iter().any(|e| match e.kind() {
            ValidationErrorKind::Type { .. } => depth(e) == here,
            ValidationErrorKind::Constant { .. } => depth(e) <= here + 1,
            ValidationErrorKind::Enum { options } => {
                depth(e) == here
                    || (depth(e) == here + 1 && options.as_array().is_some_and(|o| o.len() == 1))
            }
            ValidationErrorKind::Required { .. }
            | ValidationErrorKind::AdditionalProperties { .. } => {
                // A missing or unknown tag for externally tagged variants.
                depth(e) == here
                    && parent_schema(schema, e)
                        .and_then(|s| s.get("properties"))
                        .and_then(Value::as_object)
                        .is_some_and(|p| p.len() == 1)
            }
            _ => false,
        });
        usize::from(mismatch) * 1000 + errors.len()
    };
    let best = branches
        .iter()
        .enumerate()
        .min_by_key(|(_, errors)| score(errors))
        .filter(|(_, errors)| score(errors) < 1000 && !errors.is_empty());
    if let Some((_, errors)) = best
        && let Some(first) = errors.first()
    {
        return explain(schema, arguments, first);
    }
    let forms: Vec<String> = parent_schema(schema, error)
        .and_then(|s| s.get("anyOf").or_else(|| s.get("oneOf")))
        .and_then(Value::as_array)
        .map(|bs| bs.iter().map(|b| summarise(schema, b)).collect())
        .unwrap_or_default();
    let got = describe_value(error.instance());
    let message = if forms.is_empty() {
        format!("{got} matches none of the allowed forms")
    } else {
        format!("expected one of: {}; got {got}", forms.join(" | "))
    };
    (path.to_owned(), message)
}

/// A short description of what a schema accepts, for "expected one of" messages.
fn summarise(root: &Value, schema: &Value) -> String {
    let schema = resolve(root, schema).unwrap_or(schema);
    let Some(obj) = schema.as_object() else {
        return "any value".into();
    };
    if let Some(c) = obj.get("const") {
        return c.to_string();
    }
    if let Some(e) = obj.get("enum").and_then(Value::as_array) {
        return e
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(" | ");
    }
    if let Some(props) = crate::schema::properties(obj) {
        // A tag: a property with a single allowed value.
        if let Some((k, v)) = props.iter().find_map(|(k, p)| {
            p.get("const")
                .or_else(|| {
                    p.get("enum")
                        .and_then(|e| e.as_array().filter(|e| e.len() == 1)?.first())
                })
                .map(|v| (k, v))
        }) {
            return format!("{{\"{k}\": {v}, ...}}");
        }
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if props.len() == 1 && required.len() == 1 {
            return format!("{{\"{}\": ...}}", required[0]);
        }
        let keys: Vec<String> = props.keys().map(|k| format!("\"{k}\"")).collect();
        return format!("an object with {}", keys.join(", "));
    }
    match obj.get("type") {
        Some(Value::String(t)) => article(t).to_owned(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(article)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "a value".into(),
    }
}

/// The schema object that holds the failing keyword.
fn parent_schema<'a>(root: &'a Value, error: &ValidationError<'_>) -> Option<&'a Value> {
    let keyword = error.schema_path().as_str();
    let parent = &keyword[..keyword.rfind('/')?];
    root.pointer(parent)
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn chars(v: &Value) -> usize {
    v.as_str().map_or(0, |s| s.chars().count())
}

fn article(t: &str) -> &'static str {
    match t {
        "null" => "null",
        "boolean" => "a boolean",
        "integer" => "an integer",
        "number" => "a number",
        "string" => "a string",
        "array" => "an array",
        "object" => "an object",
        _ => "a value",
    }
}

/// A value, quoted and shortened for a message.
fn describe_value(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() <= 60 {
        text
    } else {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    }
}

fn format_name(format: &str) -> String {
    match format {
        "date-time" => "date-time (RFC 3339, e.g. \"2025-01-31T09:30:00Z\")".into(),
        "date" => "date (e.g. \"2025-01-31\")".into(),
        "time" => "time (e.g. \"09:30:00Z\")".into(),
        "uuid" => "UUID (e.g. \"123e4567-e89b-12d3-a456-426614174000\")".into(),
        "email" => "email address".into(),
        "uri" => "absolute URI (e.g. \"https://example.com/x\")".into(),
        "ipv4" => "IPv4 address".into(),
        "ipv6" => "IPv6 address".into(),
        "hostname" => "hostname".into(),
        "duration" => "ISO 8601 duration (e.g. \"P1DT2H\")".into(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(schema: Value, args: Value) -> ArgumentError {
        ArgumentValidator::new(&schema)
            .unwrap()
            .validate(&args)
            .unwrap_err()
    }

    #[test]
    fn messages_name_the_pointer_and_the_rule() {
        let s = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0, "maximum": 10},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "colour": {"enum": ["red", "green"]},
                "at": {"type": "string", "format": "date-time"}
            },
            "required": ["n"],
            "additionalProperties": false
        });
        let e = check(s.clone(), json!({"n": 11}));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("/n", "must be at most 10, got 11")
        );
        let e = check(s.clone(), json!({"n": "3"}));
        assert_eq!(e.message, "expected an integer, got a string");
        let e = check(s.clone(), json!({"n": 1, "tags": ["a", 2]}));
        assert_eq!(e.pointer, "/tags/1");
        let e = check(s.clone(), json!({"n": 1, "colour": "blue"}));
        assert_eq!(e.message, r#"expected one of "red", "green", got "blue""#);
        let e = check(s.clone(), json!({"n": 1, "at": "yesterday"}));
        assert!(
            e.message
                .starts_with(r#""yesterday" is not a valid date-time"#),
            "{}",
            e.message
        );
        let e = check(s.clone(), json!({}));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("", "missing required property `n`")
        );
        let e = check(s.clone(), json!({"n": 1, "extra": 1}));
        assert_eq!(e.pointer, "/extra");
        assert!(
            e.message
                .contains("allowed properties are `at`, `colour`, `n`, `tags`"),
            "{}",
            e.message
        );
        let e = check(s.clone(), json!([1]));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("", "expected an object of named arguments, got an array")
        );
        let e = check(
            json!({"type": "object", "additionalProperties": false}),
            json!({"x": 1}),
        );
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            (
                "/x",
                "unknown property `x`; this object takes no properties"
            )
        );
        // Several problems: the first one leads, the next ones follow.
        let e = check(s, json!({"n": -1, "tags": [1, 2, 3]}));
        assert_eq!(e.pointer, "/n");
        assert!(e.message.contains("; also at `/tags"), "{}", e.message);
    }

    #[test]
    fn alternatives_report_the_meant_variant_or_list_the_forms() {
        let s = json!({
            "type": "object",
            "properties": {
                "shape": {"oneOf": [
                    {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
                    {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["kind", "side"]}
                ]},
                "limit": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}
            }
        });
        let e = check(s.clone(), json!({"shape": {"kind": "circle", "r": "big"}}));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("/shape/r", "expected a number, got a string")
        );
        let e = check(s.clone(), json!({"shape": {"kind": "hexagon"}}));
        assert_eq!(e.pointer, "/shape");
        assert!(
            e.message
                .contains(r#"{"kind": "circle", ...} | {"kind": "square", ...}"#),
            "{}",
            e.message
        );
        let e = check(s, json!({"limit": 0}));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("/limit", "must be at least 1, got 0")
        );
    }

    #[test]
    fn nulls_for_optional_properties_mean_absent() {
        let s = json!({
            "type": "object",
            "properties": {
                "inner": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["b"]},
                "list": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                "either": {"oneOf": [
                    {"type": "object", "properties": {"x": {"type": "string"}}},
                    {"type": "object", "properties": {"x": {"type": ["string", "null"]}}}
                ]}
            },
            "$defs": {"Item": {"type": "object", "properties": {"c": {"type": "boolean"}}}}
        });
        let mut v = json!({"inner": {"a": null, "b": null}, "list": [{"c": null}], "either": {"x": null}, "undeclared": null});
        drop_absent_nulls(&s, &mut v);
        assert_eq!(
            v,
            json!({"inner": {"b": null}, "list": [{}], "either": {"x": null}, "undeclared": null})
        );
    }

    #[test]
    fn remote_references_are_refused() {
        assert!(
            ArgumentValidator::new(&json!({"$ref": "https://example.com/schema.json"})).is_err()
        );
    }
}
