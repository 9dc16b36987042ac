//! Provider exports: one canonical schema per tool, one transform per target, and a
//! portability report of what each transform changed.
//!
//! | [`Provider`] | shape of one entry of the request's `tools` array |
//! |---|---|
//! | `OpenAiChat` | `{"type": "function", "function": {name, description, parameters, strict}}` |
//! | `OpenAiResponses` | `{"type": "function", name, description, parameters, strict}` |
//! | `Anthropic` | `{name, description, input_schema}` |
//! | `AnthropicStrict` | `{name, description, input_schema, strict}` |
//! | `Gemini` | `{name, description, parametersJsonSchema}` (one `functionDeclarations` entry) |
//! | `GeminiOpenApi` | `{name, description, parameters}` in Gemini's OpenAPI subset |
//! | `Mcp` | a `tools/list` entry: `{name, title, description, inputSchema, outputSchema, annotations}` |
//!
//! The OpenAI forms always state `strict`: `true` when the schema can be made strict, `false`
//! with the reasons in the report when it cannot (free-form maps, untyped values, tuples,
//! limits). Whatever a provider cannot enforce is still enforced by idem: arguments are
//! validated against the canonical schema before anything runs.
//!
//! ```
//! use idem_registry::export::Provider;
//! use idem_registry::{Registry, ToolContext, ToolDef};
//! use idem_core::{ToolClass, ToolError};
//! use serde_json::{json, Value};
//!
//! let tool = ToolDef::builder("get_weather", ToolClass::Read)
//!     .description("Current weather for a city.")
//!     .input_schema(json!({
//!         "type": "object",
//!         "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
//!         "required": ["city"],
//!         "additionalProperties": false
//!     }))
//!     .handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!({"temp": 21})) })
//!     .build()
//!     .unwrap();
//! let registry = Registry::builder().add(tool).build().unwrap();
//!
//! let tools = registry.export(Provider::OpenAiChat).unwrap();
//! let f = &tools[0]["function"];
//! assert_eq!(f["strict"], true);
//! assert_eq!(f["parameters"]["required"], json!(["city", "unit"]));
//! assert_eq!(f["parameters"]["properties"]["unit"]["anyOf"][1], json!({"type": "null"}));
//!
//! let mcp = registry.export(Provider::Mcp).unwrap();
//! assert_eq!(mcp[0]["annotations"]["readOnlyHint"], true);
//! assert_eq!(mcp[0]["annotations"]["openWorldHint"], false);
//! ```

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

use crate::pointer;
use crate::registry::Registry;
use crate::tool::ToolDef;

mod anthropic;
mod gemini;
mod mcp;
mod openai;

/// A target of the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI Chat Completions `tools`, strict where the schema allows it.
    OpenAiChat,
    /// OpenAI Responses `tools` (the flat function form), strict where the schema allows it.
    OpenAiResponses,
    /// Anthropic Messages `tools`, plain: the canonical schema as `input_schema`.
    Anthropic,
    /// Anthropic Messages `tools` with strict tool use, within its documented limits.
    AnthropicStrict,
    /// Gemini `functionDeclarations` with `parametersJsonSchema` (JSON Schema subset).
    Gemini,
    /// Gemini `functionDeclarations` with `parameters` (OpenAPI 3.0 subset).
    GeminiOpenApi,
    /// MCP `tools/list` entries, with `annotations` from the class.
    Mcp,
}

impl Provider {
    /// Every provider, in a stable order.
    pub const ALL: [Provider; 7] = [
        Provider::OpenAiChat,
        Provider::OpenAiResponses,
        Provider::Anthropic,
        Provider::AnthropicStrict,
        Provider::Gemini,
        Provider::GeminiOpenApi,
        Provider::Mcp,
    ];

    /// A short stable name: `openai`, `openai-responses`, `anthropic`, `anthropic-strict`,
    /// `gemini`, `gemini-openapi`, `mcp`.
    ///
    /// ```
    /// use idem_registry::export::Provider;
    /// for p in Provider::ALL {
    ///     assert_eq!(p.as_str().parse::<Provider>().unwrap(), p);
    /// }
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAiChat => "openai",
            Provider::OpenAiResponses => "openai-responses",
            Provider::Anthropic => "anthropic",
            Provider::AnthropicStrict => "anthropic-strict",
            Provider::Gemini => "gemini",
            Provider::GeminiOpenApi => "gemini-openapi",
            Provider::Mcp => "mcp",
        }
    }

    /// Whether this form's schema is a JSON Schema document (every form but
    /// [`Provider::GeminiOpenApi`], whose `parameters` are an OpenAPI 3.0 schema object).
    ///
    /// ```
    /// use idem_registry::export::Provider;
    /// assert!(Provider::Mcp.is_json_schema() && !Provider::GeminiOpenApi.is_json_schema());
    /// ```
    pub const fn is_json_schema(self) -> bool {
        !matches!(self, Provider::GeminiOpenApi)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider name that is not one of [`Provider::ALL`].
///
/// ```
/// use idem_registry::export::Provider;
/// let err = "bard".parse::<Provider>().unwrap_err();
/// assert!(err.to_string().contains("expected one of `openai`"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown provider `{0}`: expected one of `openai`, `openai-responses`, `anthropic`, `anthropic-strict`, `gemini`, `gemini-openapi`, `mcp`"
)]
pub struct UnknownProvider(pub String);

impl FromStr for Provider {
    type Err = UnknownProvider;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .or(match s.as_str() {
                "openai-chat" => Some(Provider::OpenAiChat),
                "claude" => Some(Provider::Anthropic),
                "gemini-json" | "gemini-jsonschema" => Some(Provider::Gemini),
                _ => None,
            })
            .ok_or(UnknownProvider(s))
    }
}

/// Whether a provider was told to enforce the schema strictly.
///
/// ```
/// use idem_registry::export::{self, Provider, Strictness};
/// use idem_registry::{ToolContext, ToolDef};
/// use idem_core::{ToolClass, ToolError};
/// use serde_json::{json, Value};
///
/// let tool = ToolDef::builder("store", ToolClass::IdempotentWrite)
///     .description("Store any JSON.")
///     .input_schema(json!({"type": "object", "properties": {"doc": true}, "required": ["doc"]}))
///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
///     .build()
///     .unwrap();
/// let report = export::export(&tool, Provider::OpenAiChat).unwrap().report;
/// assert!(matches!(report.strictness, Strictness::NotStrict { .. }));
/// let report = export::export(&tool, Provider::Mcp).unwrap().report;
/// assert_eq!(report.strictness, Strictness::NotApplicable);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strictness {
    /// The form has no strict flag (Anthropic plain, Gemini, MCP).
    NotApplicable,
    /// Exported with `strict: true`.
    Strict,
    /// Exported with `strict: false`; why strict mode was not possible.
    NotStrict {
        /// One reason per obstacle, each naming where it is.
        reasons: Vec<String>,
    },
}

/// How much of a schema feature survived an export.
///
/// ```
/// use idem_registry::export::ChangeKind;
/// // Reports list changes in document order; kinds sort from harmless to lossy.
/// assert!(ChangeKind::Adapted < ChangeKind::Described && ChangeKind::Described < ChangeKind::Dropped);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChangeKind {
    /// Rewritten into the provider's form with the same meaning for the model (`oneOf` to
    /// `anyOf`, an optional property made required and nullable, `additionalProperties:
    /// false` added).
    Adapted,
    /// A constraint the provider does not take, moved into the description: the model reads
    /// it, the provider does not enforce it, idem's validation does.
    Described,
    /// Removed: the model does not see it. idem's validation still applies the canonical
    /// schema, so a call that needed it is refused with a clear error rather than run.
    Dropped,
}

impl ChangeKind {
    fn label(self) -> &'static str {
        match self {
            ChangeKind::Adapted => "adapted",
            ChangeKind::Described => "described",
            ChangeKind::Dropped => "dropped",
        }
    }
}

/// One change an export made; see [`PortabilityReport`] for an example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// JSON pointer into the canonical schema (into the exported one where recursion was
    /// unrolled).
    pub pointer: String,
    /// How much survived.
    pub kind: ChangeKind,
    /// What changed, in words.
    pub detail: String,
}

/// What an export changed and what it lost, for one tool and one provider. Print it, or
/// assert on it in your own tests.
///
/// ```
/// use idem_registry::export::{self, ChangeKind, Provider};
/// use idem_registry::{ToolContext, ToolDef};
/// use idem_core::{ToolClass, ToolError};
/// use serde_json::{json, Value};
///
/// let tool = ToolDef::builder("tag", ToolClass::IdempotentWrite)
///     .description("Tag a ticket.")
///     .input_schema(json!({
///         "type": "object",
///         "properties": {
///             "ticket": {"type": "integer"},
///             "labels": {"type": "object", "additionalProperties": {"type": "string"}}
///         },
///         "required": ["ticket"]
///     }))
///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
///     .build()
///     .unwrap();
///
/// let out = export::export(&tool, Provider::OpenAiChat).unwrap();
/// assert!(!out.report.is_strict());
/// assert!(out.report.not_strict_reasons()[0].contains("/properties/labels"));
/// assert_eq!(out.tool["function"]["strict"], false);
/// println!("{}", out.report);
///
/// let out = export::export(&tool, Provider::Anthropic).unwrap();
/// assert!(out.report.is_lossless());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortabilityReport {
    /// The tool.
    pub tool: String,
    /// The target.
    pub provider: Provider,
    /// Whether the provider enforces the schema strictly.
    pub strictness: Strictness,
    /// Every change, in document order.
    pub changes: Vec<Change>,
}

impl PortabilityReport {
    /// Nothing was described, dropped or refused strictness: the provider sees and enforces
    /// the whole canonical schema.
    pub fn is_lossless(&self) -> bool {
        !matches!(self.strictness, Strictness::NotStrict { .. })
            && self.changes.iter().all(|c| c.kind == ChangeKind::Adapted)
    }

    /// Exported with `strict: true`.
    pub fn is_strict(&self) -> bool {
        self.strictness == Strictness::Strict
    }

    /// Why strict mode was not possible (empty when it was, or when it does not apply).
    pub fn not_strict_reasons(&self) -> &[String] {
        match &self.strictness {
            Strictness::NotStrict { reasons } => reasons,
            _ => &[],
        }
    }

    /// What the provider will not enforce: the changes that are not merely adapted.
    pub fn lost(&self) -> impl Iterator<Item = &Change> {
        self.changes
            .iter()
            .filter(|c| c.kind != ChangeKind::Adapted)
    }

    /// The changes of one kind.
    pub fn of_kind(&self, kind: ChangeKind) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(move |c| c.kind == kind)
    }
}

impl fmt::Display for PortabilityReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} for {}:", self.tool, self.provider)?;
        match &self.strictness {
            Strictness::NotApplicable => {}
            Strictness::Strict => f.write_str(" strict")?,
            Strictness::NotStrict { .. } => f.write_str(" not strict")?,
        }
        if self.changes.is_empty() && self.not_strict_reasons().is_empty() {
            f.write_str(if self.strictness == Strictness::NotApplicable {
                " unchanged"
            } else {
                ", unchanged"
            })?;
        }
        for reason in self.not_strict_reasons() {
            write!(f, "\n  not strict: {reason}")?;
        }
        for c in &self.changes {
            let at = pointer::display(&c.pointer, "(root)");
            write!(f, "\n  {:<9} {at}: {}", c.kind.label(), c.detail)?;
        }
        Ok(())
    }
}

/// A tool the provider cannot take in any form.
///
/// ```
/// use idem_registry::export::{self, Provider};
/// use idem_registry::{ToolContext, ToolDef};
/// use idem_core::{ToolClass, ToolError};
/// use serde_json::{json, Value};
///
/// let tool = ToolDef::builder("tag", ToolClass::Read)
///     .description("Tag things.")
///     .input_schema(json!({"type": "object", "properties": {"content-type": {"type": "string"}}}))
///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
///     .build()
///     .unwrap();
/// let err = export::export(&tool, Provider::Gemini).unwrap_err();
/// assert_eq!(err.tool, "tag");
/// assert!(err.reason.contains("`content-type`"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool `{tool}` cannot be exported for {provider}: {reason}")]
pub struct ExportError {
    /// The tool.
    pub tool: String,
    /// The target.
    pub provider: Provider,
    /// Why, and what to do instead.
    pub reason: String,
}

/// One tool in one provider's form, with its report; see [`export()`] for an example.
#[derive(Debug, Clone, PartialEq)]
pub struct Exported {
    /// One entry of the provider's `tools` array.
    pub tool: Value,
    /// What the export changed.
    pub report: PortabilityReport,
}

/// Export one tool for one provider.
///
/// ```
/// use idem_registry::export::{self, Provider};
/// use idem_registry::{ToolContext, ToolDef};
/// use idem_core::{ToolClass, ToolError};
/// use serde_json::{json, Value};
///
/// let tool = ToolDef::builder("ping", ToolClass::Read)
///     .description("Answer pong.")
///     .input_schema(json!({"type": "object", "additionalProperties": false}))
///     .handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!("pong")) })
///     .build()
///     .unwrap();
/// let out = export::export(&tool, Provider::OpenAiResponses).unwrap();
/// assert_eq!(out.tool, json!({
///     "type": "function",
///     "name": "ping",
///     "description": "Answer pong.",
///     "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": false},
///     "strict": true
/// }));
/// ```
pub fn export(tool: &ToolDef, provider: Provider) -> Result<Exported, ExportError> {
    let (value, strictness, notes) = match provider {
        Provider::OpenAiChat | Provider::OpenAiResponses => openai::export(tool, provider),
        Provider::Anthropic => anthropic::plain(tool),
        Provider::AnthropicStrict => anthropic::strict(tool, &mut anthropic::Budget::new()),
        Provider::Gemini => gemini::json_schema(tool)?,
        Provider::GeminiOpenApi => gemini::open_api(tool)?,
        Provider::Mcp => mcp::export(tool),
    };
    Ok(Exported {
        tool: value,
        report: PortabilityReport {
            tool: tool.name().to_owned(),
            provider,
            strictness,
            changes: notes.changes,
        },
    })
}

/// Every tool of a registry in one provider's form; see [`Registry::export_all`].
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsExport {
    /// The `tools` array (an array of the exported tools, by name).
    pub tools: Value,
    /// One report per exported tool, in the same order.
    pub reports: Vec<PortabilityReport>,
    /// The tools the provider cannot take, left out of `tools`.
    pub refused: Vec<ExportError>,
}

impl Registry {
    /// Every tool in one provider's form: the `tools` array of a request body, as a
    /// `Value::Array`. Fails, naming the tool, if the provider cannot take one of them (see
    /// [`Registry::export_all`] to leave such tools out instead).
    ///
    /// For [`Provider::AnthropicStrict`], the request-wide limits of strict tool use are
    /// shared across the tools in name order: a tool that would pass them is exported with
    /// `strict: false`, and its report says so.
    ///
    /// ```
    /// use idem_registry::export::Provider;
    /// use idem_registry::Registry;
    ///
    /// let registry = Registry::builder().build().unwrap();
    /// assert_eq!(registry.export(Provider::OpenAiChat).unwrap(), serde_json::json!([]));
    /// ```
    pub fn export(&self, provider: Provider) -> Result<Value, ExportError> {
        let all = self.export_all(provider);
        match all.refused.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(all.tools),
        }
    }

    /// Every tool the provider can take, with a report for each, and the refusals.
    ///
    /// ```
    /// use idem_registry::export::Provider;
    /// use idem_registry::Registry;
    ///
    /// let registry = Registry::builder().build().unwrap();
    /// let all = registry.export_all(Provider::Mcp);
    /// assert!(all.reports.is_empty() && all.refused.is_empty());
    /// ```
    pub fn export_all(&self, provider: Provider) -> ToolsExport {
        let mut tools = Vec::new();
        let mut reports = Vec::new();
        let mut refused = Vec::new();
        let mut budget = anthropic::Budget::new();
        for def in self.iter() {
            let result = if provider == Provider::AnthropicStrict {
                let (tool, strictness, notes) = anthropic::strict(def, &mut budget);
                Ok(Exported {
                    tool,
                    report: PortabilityReport {
                        tool: def.name().to_owned(),
                        provider,
                        strictness,
                        changes: notes.changes,
                    },
                })
            } else {
                export(def, provider)
            };
            match result {
                Ok(e) => {
                    tools.push(e.tool);
                    reports.push(e.report);
                }
                Err(e) => refused.push(e),
            }
        }
        ToolsExport {
            tools: Value::Array(tools),
            reports,
            refused,
        }
    }
}

/// What a transform changed, and why it could not be strict.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    pub(crate) changes: Vec<Change>,
    pub(crate) not_strict: Vec<String>,
}

impl Notes {
    pub(crate) fn push(&mut self, pointer: &str, kind: ChangeKind, detail: impl Into<String>) {
        self.changes.push(Change {
            pointer: pointer.to_owned(),
            kind,
            detail: detail.into(),
        });
    }

    pub(crate) fn adapted(&mut self, pointer: &str, detail: impl Into<String>) {
        self.push(pointer, ChangeKind::Adapted, detail);
    }

    pub(crate) fn described(&mut self, pointer: &str, detail: impl Into<String>) {
        self.push(pointer, ChangeKind::Described, detail);
    }

    pub(crate) fn dropped(&mut self, pointer: &str, detail: impl Into<String>) {
        self.push(pointer, ChangeKind::Dropped, detail);
    }

    pub(crate) fn refuse_strict(&mut self, pointer: &str, reason: impl fmt::Display) {
        let at = pointer::display(pointer, "(root)");
        self.not_strict.push(format!("{at}: {reason}"));
    }

    /// Sort changes into document order, so reports read top to bottom.
    pub(crate) fn finish(mut self) -> Self {
        self.changes
            .sort_by(|a, b| a.pointer.cmp(&b.pointer).then(a.kind.cmp(&b.kind)));
        self
    }
}

/// Visit every subschema bottom-up (children before their parent), each with its pointer in
/// the document as it was before the visit: a parent may rename its own keywords or wrap its
/// children without disturbing the pointers already reported below it.
pub(crate) fn walk_post(schema: &mut Value, pointer: &str, f: &mut dyn FnMut(&mut Value, &str)) {
    if let Some(obj) = schema.as_object_mut() {
        for (key, value) in obj.iter_mut() {
            let k = key.as_str();
            let here = pointer::join(pointer, k);
            if crate::schema::SCHEMA_KEYWORDS.contains(&k) {
                walk_post(value, &here, f);
            } else if crate::schema::SCHEMA_ARRAY_KEYWORDS.contains(&k) {
                if let Some(items) = value.as_array_mut() {
                    for (i, item) in items.iter_mut().enumerate() {
                        walk_post(item, &format!("{here}/{i}"), f);
                    }
                }
            } else if crate::schema::SCHEMA_MAP_KEYWORDS.contains(&k)
                && let Some(map) = value.as_object_mut()
            {
                for (name, sub) in map.iter_mut() {
                    walk_post(sub, &pointer::join(&here, name), f);
                }
            }
        }
    }
    f(schema, pointer);
}

/// Whether the schema says what kind of value it takes (a type, a set of values, a
/// reference, alternatives, or object / array structure).
pub(crate) fn is_typed(obj: &Map<String, Value>) -> bool {
    [
        "type",
        "enum",
        "const",
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
        "properties",
        "items",
        "prefixItems",
    ]
    .iter()
    .any(|k| obj.contains_key(*k))
}

/// Whether the schema is for objects.
pub(crate) fn is_object(obj: &Map<String, Value>) -> bool {
    match obj.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => obj.contains_key("properties"),
    }
}

/// Whether a `format` names a machine integer or float (schemars writes `uint32`, `int64`,
/// `double`...): the range is in `minimum` / `maximum` where it matters.
pub(crate) fn is_numeric_format(format: &str) -> bool {
    matches!(format, "float" | "double" | "int" | "uint")
        || format
            .strip_prefix("uint")
            .or_else(|| format.strip_prefix("int"))
            .is_some_and(|bits| !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit()))
}

/// Leave out a machine-number `format` (`uint32`, `double`...) that the target does not
/// take: adapted when `minimum` and `maximum` carry the range (or the type is a float),
/// dropped when a bound goes unstated (64-bit integers).
pub(crate) fn drop_numeric_format(
    obj: &mut Map<String, Value>,
    format: &str,
    pointer: &str,
    notes: &mut Notes,
) {
    obj.remove("format");
    let bounded = obj.contains_key("minimum") && obj.contains_key("maximum");
    if bounded || matches!(format, "float" | "double") {
        notes.adapted(
            pointer,
            format!("`format: {format}` left out (not a format the target takes; the range is in `minimum`/`maximum`)"),
        );
    } else {
        notes.dropped(
            pointer,
            format!("`format: {format}` left out (not a format the target takes); its bound is not stated, idem checks it"),
        );
    }
}

/// Append a sentence to a schema's description.
pub(crate) fn describe(obj: &mut Map<String, Value>, sentence: &str) {
    let text = match obj.get("description").and_then(Value::as_str) {
        Some(existing) if !existing.trim().is_empty() => {
            let existing = existing.trim_end();
            if existing.ends_with(['.', '!', '?', ':']) {
                format!("{existing} {sentence}")
            } else {
                format!("{existing}. {sentence}")
            }
        }
        _ => sentence.to_owned(),
    };
    obj.insert("description".into(), Value::String(text));
}

/// A keyword and its value as a sentence a model reads.
pub(crate) fn sentence(keyword: &str, value: &Value) -> String {
    let n = value.to_string();
    match keyword {
        "minLength" => format!("At least {n} characters."),
        "maxLength" => format!("At most {n} characters."),
        "pattern" => format!("Must match the regular expression {n}."),
        "minimum" => format!("At least {n}."),
        "maximum" => format!("At most {n}."),
        "exclusiveMinimum" => format!("Greater than {n}."),
        "exclusiveMaximum" => format!("Less than {n}."),
        "multipleOf" => format!("A multiple of {n}."),
        "minItems" => format!("At least {n} items."),
        "maxItems" => format!("At most {n} items."),
        "uniqueItems" => "Items must be unique.".into(),
        "minProperties" => format!("At least {n} properties."),
        "maxProperties" => format!("At most {n} properties."),
        "format" => format!("Format: {}.", value.as_str().unwrap_or(&n)),
        "default" => format!("Default: {n}."),
        "const" => format!("Must be {n}."),
        "enum" => format!(
            "One of: {}.",
            value
                .as_array()
                .map(|v| v
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or(n)
        ),
        other => format!("{other}: {n}."),
    }
}

/// Move a keyword into the description, reporting it.
pub(crate) fn move_to_description(
    obj: &mut Map<String, Value>,
    keyword: &str,
    pointer: &str,
    notes: &mut Notes,
) {
    if let Some(value) = obj.remove(keyword) {
        let s = sentence(keyword, &value);
        describe(obj, &s);
        notes.described(
            pointer,
            format!("`{keyword}` moved into the description: \"{s}\""),
        );
    }
}

/// `send_email` -> `Send email`, for MCP titles.
pub(crate) fn title_of(name: &str) -> String {
    let words = name.replace(['_', '-'], " ");
    let mut chars = words.trim().chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_helpers() {
        assert_eq!("OpenAI".parse::<Provider>(), Ok(Provider::OpenAiChat));
        assert_eq!(
            "gemini_openapi".parse::<Provider>(),
            Ok(Provider::GeminiOpenApi)
        );
        assert!("bard".parse::<Provider>().is_err());
        assert_eq!(title_of("send_email"), "Send email");
        assert!(is_numeric_format("uint32") && is_numeric_format("double"));
        assert!(
            is_numeric_format("uint")
                && !is_numeric_format("uuid")
                && !is_numeric_format("integer")
        );
        let mut o = json!({"description": "Recipient"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        describe(&mut o, "Format: email.");
        assert_eq!(o["description"], "Recipient. Format: email.");
    }

    #[test]
    fn walk_visits_children_first_with_original_pointers() {
        let mut s = json!({"properties": {"a/b": {"oneOf": [{"type": "string"}]}}});
        let mut seen = Vec::new();
        walk_post(&mut s, "", &mut |_, p| seen.push(p.to_owned()));
        assert_eq!(seen, ["/properties/a~1b/oneOf/0", "/properties/a~1b", ""]);
    }
}
