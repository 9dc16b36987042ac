//! The proxy's configuration file (TOML): the upstream, where records live, and the class
//! and policy of each upstream tool. Each `[tools.<name>]` table is a [`ToolSpec`] without
//! the parts the upstream states (name, schema; the description unless overridden), plus two
//! keys of the proxy's own (`unreviewed`, `timeout_secs`), and it is checked as `#[tool]` is
//! when the file is read, so a mistake is reported before the upstream is even started.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use idem_core::ToolClass;
use idem_core::class::edit_distance;
use rmcp::model::Tool;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::upstream::UpstreamSpec;
use crate::keys::ResendScope;
use idem_registry::tool::{LONGEST_POLICY_DURATION, ToolSpec};

/// The namespace of the proxy's records unless the file names one.
pub const PROXY_NAMESPACE: &str = "mcp-proxy";
/// The tenant the proxy acts for unless the file names one.
pub const DEFAULT_TENANT: &str = "local";
/// How long the proxy waits for the upstream's answer to a call unless the file says
/// otherwise: after it, the call's outcome is unknown.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The keys of a `[tools.<name>]` table that go to the tool's [`ToolSpec`].
const SPEC_KEYS: [&str; 16] = [
    "class",
    "limits",
    "after",
    "escalate",
    "description",
    "natural_key",
    "ttl_secs",
    "lease_secs",
    "scopes",
    "secret",
    "on_key_reuse",
    "verify_after_secs",
    "max_attempts",
    "wait_secs",
    "backoff_ms",
    "open_world",
];
/// The keys of a `[tools.<name>]` table that are the proxy's own.
const PROXY_KEYS: [&str; 4] = [
    "unreviewed",
    "timeout_secs",
    "resend_window_secs",
    "model_key",
];
/// Keys of a [`ToolSpec`] whose values the upstream states.
const FROM_UPSTREAM: [&str; 4] = ["name", "input_schema", "inputSchema", "parameters"];

/// A proxy's configuration, read with [`ProxyConfig::load`] or [`ProxyConfig::parse`].
///
/// ```
/// use idem::mcp::proxy::ProxyConfig;
///
/// let config = ProxyConfig::parse(r#"
///     namespace = "memory"
///
///     [upstream]
///     command = ["npx", "-y", "@modelcontextprotocol/server-memory"]
///     timeout_secs = 30
///
///     [tools.create_entities]
///     class = "non_idempotent_write"
///
///     [tools.read_graph]
///     class = "read"
/// "#, "proxy.toml").unwrap();
/// assert_eq!(config.namespace, "memory");
/// assert_eq!(config.timeout.as_secs(), 30);
/// assert_eq!(config.tool_names().collect::<Vec<_>>(), ["create_entities", "read_graph"]);
///
/// let err = ProxyConfig::parse("[tools.send]\nclas = \"read\"\n", "proxy.toml").unwrap_err();
/// assert!(err.to_string().contains("did you mean `class`?"), "{err}");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// The upstream server, if the file names one (the command line may give it instead).
    pub upstream: Option<UpstreamSpec>,
    /// The namespace of the records: two proxies sharing a store need different ones.
    pub namespace: String,
    /// The tenant the proxy acts for.
    pub tenant: String,
    /// Where records live (a path, `redis://...` or `postgres://...`), if the file says.
    pub store: Option<String>,
    /// How long a call waits for the upstream's answer unless its tool says otherwise.
    pub timeout: Duration,
    /// What the re-send window of a call without a key is scoped by (`resend_scope =
    /// "session"`, the default, or `"tenant"`); see [`crate::keys`].
    pub resend_scope: ResendScope,
    tools: BTreeMap<String, ToolEntry>,
}

/// One `[tools.<name>]` table, checked and kept until the upstream's definition joins it.
#[derive(Debug, Clone)]
pub(super) struct ToolEntry {
    /// The file and line, for messages.
    place: String,
    /// The keys that go to the [`ToolSpec`].
    spec: Map<String, Value>,
    /// The class given.
    pub(super) class: ToolClass,
    /// Whether the class is only `init`'s suggestion.
    pub(super) unreviewed: bool,
    /// This tool's own upstream timeout.
    pub(super) timeout: Option<Duration>,
    /// This tool's re-send window, if the table sets one (`Some(None)`: off).
    pub(super) resend_window: Option<Option<Duration>>,
    /// Whether the model may give this tool's calls a key.
    pub(super) model_key: bool,
}

/// Why a configuration cannot be used. Each message names the file, the line and what to
/// write instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read the proxy configuration `{path}`: {error}")]
    Read {
        /// The file.
        path: String,
        /// What the system said.
        error: std::io::Error,
    },
    /// The file is not TOML, or a key outside `[tools]` is unknown or of the wrong type.
    #[error("{origin}: {message}")]
    Syntax {
        /// The file.
        origin: String,
        /// The TOML reader's message, with the line and column.
        message: String,
    },
    /// The `[upstream]` table is unusable.
    #[error("{origin}: [upstream]: {message}")]
    Upstream {
        /// The file.
        origin: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A `[tools.<name>]` table is unusable, or does not fit the upstream's tool.
    #[error("{place}: {message}")]
    Tool {
        /// The file and line of the table.
        place: String,
        /// The tool.
        tool: String,
        /// What is wrong and how to fix it (naming the tool).
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    upstream: Option<RawUpstream>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    store: Option<String>,
    #[serde(default)]
    resend_scope: Option<String>,
    #[serde(default)]
    tools: BTreeMap<String, toml::Spanned<toml::Table>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

impl ProxyConfig {
    /// Read and check the configuration file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.display().to_string(),
            error,
        })?;
        ProxyConfig::parse(&text, &path.display().to_string())
    }

    /// Check a configuration given as text; `origin` names it in messages (a file name).
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            origin: origin.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let (upstream, timeout) = match raw.upstream {
            None => (None, DEFAULT_TIMEOUT),
            Some(raw) => upstream_of(raw, origin)?,
        };
        let resend_scope = match raw.resend_scope.as_deref() {
            None | Some("session") => ResendScope::Session,
            Some("tenant") => ResendScope::Tenant,
            Some(other) => {
                return Err(ConfigError::Syntax {
                    origin: origin.to_owned(),
                    message: format!(
                        "`resend_scope = {other:?}` is not a scope: write \"session\" (a re-sent call is caught on the same MCP session, the default) or \"tenant\" (on any session of the tenant, so after a reconnect too)"
                    ),
                });
            }
        };
        let mut tools = BTreeMap::new();
        for (name, table) in raw.tools {
            let line = 1 + text[..table.span().start].matches('\n').count();
            let place = format!("{origin}:{line}");
            let entry = ToolEntry::parse(&name, table.into_inner(), place)?;
            tools.insert(name, entry);
        }
        Ok(ProxyConfig {
            upstream,
            namespace: raw.namespace.unwrap_or_else(|| PROXY_NAMESPACE.to_owned()),
            tenant: raw.tenant.unwrap_or_else(|| DEFAULT_TENANT.to_owned()),
            store: raw.store,
            timeout,
            resend_scope,
            tools,
        })
    }

    /// The tools the file classifies, by name.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The class the file gives `tool`, if it has a table for it.
    pub fn class_of(&self, tool: &str) -> Option<ToolClass> {
        self.tools.get(tool).map(|t| t.class)
    }

    pub(super) fn entry(&self, tool: &str) -> Option<&ToolEntry> {
        self.tools.get(tool)
    }

    pub(super) fn entries(&self) -> impl Iterator<Item = (&str, &ToolEntry)> {
        self.tools
            .iter()
            .map(|(name, entry)| (name.as_str(), entry))
    }
}

/// The upstream and the default timeout from an `[upstream]` table.
fn upstream_of(
    raw: RawUpstream,
    origin: &str,
) -> Result<(Option<UpstreamSpec>, Duration), ConfigError> {
    let invalid = |message: &str| ConfigError::Upstream {
        origin: origin.to_owned(),
        message: message.to_owned(),
    };
    let timeout = match raw.timeout_secs {
        None => DEFAULT_TIMEOUT,
        Some(0) => return Err(invalid("`timeout_secs` must be more than zero")),
        Some(s) if s > LONGEST_POLICY_DURATION.as_secs() => {
            return Err(invalid("`timeout_secs` is longer than ten years"));
        }
        Some(s) => Duration::from_secs(s),
    };
    let spec = match (raw.command, raw.url) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "give either `command` (a server to start) or `url` (one to connect to), not both",
            ));
        }
        (Some(command), None) => {
            let spec = UpstreamSpec::command(command, raw.env);
            Some(spec.ok_or_else(|| {
                invalid("`command` is empty: write the program and its arguments, e.g. `command = [\"npx\", \"-y\", \"some-mcp-server\"]`")
            })?)
        }
        (None, _) if !raw.env.is_empty() => {
            return Err(invalid(
                "`env` is the environment of a `command` the proxy starts: remove it, or give the `command`",
            ));
        }
        (None, Some(url)) => Some(UpstreamSpec::url(url).map_err(|e| invalid(&e))?),
        (None, None) => None,
    };
    Ok((spec, timeout))
}

impl ToolEntry {
    /// Check one table: known keys, types, and the policy as `#[tool]` checks it (against a
    /// schema that admits every argument: the upstream's joins it later).
    fn parse(name: &str, table: toml::Table, place: String) -> Result<Self, ConfigError> {
        let error = |message: String| ConfigError::Tool {
            place: place.clone(),
            tool: name.to_owned(),
            message,
        };
        let mut spec = Map::new();
        let mut unreviewed = false;
        let mut timeout = None;
        let mut resend_window = None;
        let mut model_key = false;
        for (key, value) in table {
            match key.as_str() {
                "unreviewed" => {
                    unreviewed = value.as_bool().ok_or_else(|| {
                        error(format!(
                            "tool `{name}`: `unreviewed` must be `true` or `false`, got {value}"
                        ))
                    })?;
                }
                "timeout_secs" => {
                    let secs = value
                        .as_integer()
                        .filter(|s| (1..=LONGEST_POLICY_DURATION.as_secs() as i64).contains(s))
                        .ok_or_else(|| {
                            error(format!(
                                "tool `{name}`: `timeout_secs` must be a number of seconds, more than zero and at most ten years, got {value}"
                            ))
                        })?;
                    timeout = Some(Duration::from_secs(secs as u64));
                }
                "resend_window_secs" => {
                    let secs = value
                        .as_integer()
                        .filter(|s| (0..=LONGEST_POLICY_DURATION.as_secs() as i64).contains(s))
                        .ok_or_else(|| {
                            error(format!(
                                "tool `{name}`: `resend_window_secs` must be a number of seconds, at most ten years (0 turns the window off), got {value}"
                            ))
                        })?;
                    resend_window = Some((secs > 0).then(|| Duration::from_secs(secs as u64)));
                }
                "model_key" => {
                    model_key = value.as_bool().ok_or_else(|| {
                        error(format!(
                            "tool `{name}`: `model_key` must be `true` or `false`, got {value}"
                        ))
                    })?;
                }
                k if FROM_UPSTREAM.contains(&k) => {
                    return Err(error(format!(
                        "tool `{name}`: `{k}` comes from the upstream's tools/list: remove it"
                    )));
                }
                k if SPEC_KEYS.contains(&k) => {
                    let value = serde_json::to_value(&value)
                        .map_err(|e| error(format!("tool `{name}`: `{k}` cannot be read: {e}")))?;
                    spec.insert(key, value);
                }
                unknown => return Err(error(unknown_key(name, unknown))),
            }
        }
        let class = match spec.get("class") {
            None => {
                return Err(error(format!(
                    "tool `{name}` has no class: add `class = \"...\"`, one of `read`, `idempotent_write`, `non_idempotent_write`, `irreversible` (the upstream's annotations are not trusted to decide it)"
                )));
            }
            Some(Value::String(class)) => class
                .parse::<ToolClass>()
                .map_err(|e| error(format!("tool `{name}`: {e}")))?,
            Some(other) => {
                return Err(error(format!(
                    "tool `{name}`: `class` must be a string such as \"read\", got {other}"
                )));
            }
        };
        if !class.records() {
            for (key, given) in [
                ("resend_window_secs", resend_window.is_some()),
                ("model_key", model_key),
            ] {
                if given {
                    return Err(error(format!(
                        "tool `{name}`: `{key}` has no effect on a `read` tool, which records nothing: remove it, or give the tool the class of a write"
                    )));
                }
            }
        }
        let entry = ToolEntry {
            place,
            spec,
            class,
            unreviewed,
            timeout,
            resend_window,
            model_key,
        };
        // Every check that does not need the upstream's schema, now.
        let open = Map::from_iter([("type".into(), json!("object"))]);
        entry.spec_for(name, &Tool::new(name.to_owned(), "(the upstream's)", open))?;
        Ok(entry)
    }

    /// This table with the upstream's definition of the tool: a [`ToolSpec`] ready for
    /// [`ToolSpec::into_def`], which checks it again against the real schema.
    pub(super) fn spec_for(&self, name: &str, upstream: &Tool) -> Result<ToolSpec, ConfigError> {
        let mut fields = self.spec.clone();
        fields.insert("name".into(), Value::from(name));
        fields.insert("input_schema".into(), Value::Object(schema_of(upstream)));
        if !fields.contains_key("description") {
            let description = [upstream.description.as_deref(), upstream.title.as_deref()]
                .into_iter()
                .flatten()
                .find(|d| !d.trim().is_empty())
                .ok_or_else(|| {
                    self.error(name, format!(
                        "tool `{name}`: the upstream gives it no description, and the model chooses tools by it: add `description = \"...\"` to its table"
                    ))
                })?;
            fields.insert("description".into(), Value::from(description));
        }
        if !fields.contains_key("open_world") {
            // Only a hint to clients, stated as the upstream states it (MCP's default: true).
            let open_world = upstream
                .annotations
                .as_ref()
                .and_then(|a| a.open_world_hint)
                .unwrap_or(true);
            fields.insert("open_world".into(), Value::Bool(open_world));
        }
        let spec: ToolSpec =
            serde_json::from_value(Value::Object(fields)).map_err(|e| self.error(name, e))?;
        spec.clone()
            .into_def(|_, args| async move { Ok(args) })
            .map_err(|e| self.error(name, e))?;
        Ok(spec)
    }

    /// An error about this table.
    pub(super) fn error(&self, name: &str, message: impl std::fmt::Display) -> ConfigError {
        ConfigError::Tool {
            place: self.place.clone(),
            tool: name.to_owned(),
            message: message.to_string(),
        }
    }
}

/// The message for an unknown key in a tool's table: the nearest known one, and the list.
fn unknown_key(tool: &str, key: &str) -> String {
    let known = SPEC_KEYS.iter().chain(&PROXY_KEYS);
    let nearest = known
        .clone()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= k.len() / 3 + 1)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default();
    let list = known
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("tool `{tool}`: unknown key `{key}`{nearest}; the keys are {list}")
}

/// The upstream's input schema as idem reads it: JSON Schema 2020-12, MCP's default. A
/// `$schema` naming another draft (SDKs often write draft-07's) is dropped: for the object
/// schemas tools take the drafts agree, and where they do not (draft-07's array `items`),
/// idem's schema checks refuse the schema with its pointer at start-up.
fn schema_of(upstream: &Tool) -> Map<String, Value> {
    let mut schema = (*upstream.input_schema).clone();
    if let Some(draft) = schema.remove("$schema") {
        tracing::debug!(tool = %upstream.name, %draft, "the upstream's input schema is read as JSON Schema 2020-12");
    }
    schema
}
