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
//! use idem::export::Provider;
//! use idem::{Registry, ToolContext, ToolDef};
//! use idem::{ToolClass, ToolError};
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

use serde_json::Value;

use crate::registry::Registry;
use crate::tool::ToolDef;

mod anthropic;
mod gemini;
mod mcp;
mod openai;
mod report;
mod rewrite;

pub(crate) use report::Notes;
pub use report::{Change, ChangeKind, PortabilityReport, Strictness};
pub(crate) use rewrite::{
    describe, drop_numeric_format, is_numeric_format, is_object, is_typed, move_to_description,
    sentence, title_of, walk_post,
};

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
    /// use idem::export::Provider;
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
    /// use idem::export::Provider;
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
/// use idem::export::Provider;
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

/// A tool the provider cannot take in any form.
///
/// ```
/// use idem::export::{self, Provider};
/// use idem::{ToolContext, ToolDef};
/// use idem::{ToolClass, ToolError};
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
/// use idem::export::{self, Provider};
/// use idem::{ToolContext, ToolDef};
/// use idem::{ToolClass, ToolError};
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
    let value = with_controls(value, tool, provider);
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

/// What a model should know of a tool's controls beyond its class, in words appended to its
/// description for every provider (no provider has a field for them), and for MCP also as
/// `_meta["io.idem/controls"]`: some calls wait for a person, a precondition may refuse a
/// call saying what changed, completed steps are undone when a later one fails. A tool with
/// none of them is exported as before.
fn with_controls(mut value: Value, tool: &ToolDef, provider: Provider) -> Value {
    let by_rule = !tool.approve_when.is_empty();
    let mut sentences = Vec::new();
    if by_rule {
        sentences.push(
            "Some calls of it wait for a person's approval before they run; the answer says so.",
        );
    }
    if tool.has_precondition() {
        sentences.push("Before it runs it checks that what it changes is still as you last read it; if not, nothing is applied and the answer says what changed.");
    }
    if tool.has_compensation() {
        sentences.push("If one of its steps fails for good, the steps it completed are undone, and the answer says so.");
    }
    if sentences.is_empty() {
        return value;
    }
    let description = match provider {
        Provider::OpenAiChat => value.pointer_mut("/function/description"),
        _ => value.get_mut("description"),
    };
    if let Some(Value::String(text)) = description {
        let joined = sentences.join(" ");
        *text = match text.trim_end() {
            "" => joined,
            t if t.ends_with(['.', '!', '?']) => format!("{t} {joined}"),
            t => format!("{t}. {joined}"),
        };
    }
    if provider == Provider::Mcp {
        let mut controls = serde_json::Map::new();
        if by_rule {
            controls.insert("approval".into(), Value::from("by_rule"));
        }
        if tool.has_precondition() {
            controls.insert("precondition".into(), Value::Bool(true));
        }
        if tool.has_compensation() {
            controls.insert("compensates".into(), Value::Bool(true));
        }
        value["_meta"] = serde_json::json!({ "io.idem/controls": controls });
    }
    value
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
    /// use idem::export::Provider;
    /// use idem::Registry;
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
    /// use idem::export::Provider;
    /// use idem::Registry;
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
