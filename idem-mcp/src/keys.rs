//! Keys for MCP clients that send none: no mainstream host puts a key in `_meta`, and the
//! model cannot. After the request's `_meta` (which comes first), in this order:
//!
//! 1. **A key the model gives**, for the tools that opt in ([`McpServer::model_key`]): an
//!    optional string parameter, [`MODEL_KEY_PARAMETER`], added to the tool's published
//!    input schema and described for the model. It keys the call and is taken out of the
//!    arguments before the tool (or an upstream) sees them.
//! 2. **The tool's natural key**, if it has one.
//! 3. **The re-send window**, on by default for every tool that records
//!    ([`DEFAULT_RESEND_WINDOW`]; [`McpServer::resend_window`],
//!    [`McpServer::tool_resend_window`]): a call is keyed by the tenant, the MCP session
//!    (Streamable HTTP's `Mcp-Session-Id`; over stdio, the connection; an HTTP request of the
//!    2026-07-28 revision has no session, and the tenant is its scope), the tool and its
//!    canonical arguments, and its record is kept for the window. A client that re-issues a
//!    request after a broken stream gets the first one's result, `deduplicated: true`; the
//!    same call after the window runs again if the first completed. An unknown outcome is not
//!    bound by the window: until a verify hook or a person settles it, the same call is
//!    answered `outcome_unknown`, never run over it. [`ResendScope::Tenant`] leaves the
//!    session out, so that a re-issue after a reconnect or a server restart is caught too.
//!
//! The trade-off of the window: a deliberate identical call inside it is replayed, not run,
//! and its result says so (`io.idem/deduplicated`). A tool that needs approval keeps its
//! record as long as an approval may be used (the dispatcher's `max_approval_validity`), so
//! its window is at least that long, and its window is scoped by the tenant whatever the
//! scope: a host resumed after a crash or a reconnect (a new session) re-issues the call, and
//! under the session scope that would be a new call, asked again, which a person's second
//! yes would run twice (`tests/doors.rs` measured a second payment so). An identical call of
//! another session of the tenant inside the window is that call too. A call an approver
//! edited is asked again (its arguments, so its key, changed). A tool whose window is off and
//! that gets no other key is refused with `missing_key`, naming these settings.
//!
//! [`McpServer::model_key`]: super::McpServer::model_key
//! [`McpServer::resend_window`]: super::McpServer::resend_window
//! [`McpServer::tool_resend_window`]: super::McpServer::tool_resend_window

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::Tool;
use serde_json::{Map, Value, json};

use idem_registry::dispatch::ToolCall;

/// How long a completed call stands for its re-sends unless the server says otherwise: five
/// minutes, longer than a client's reconnect and retry, short enough that a person who means
/// to repeat an action an hour later is not surprised.
pub const DEFAULT_RESEND_WINDOW: Duration = Duration::from_secs(300);

/// The parameter a tool that takes a model's key ([`McpServer::model_key`]) adds to its input
/// schema.
///
/// [`McpServer::model_key`]: super::McpServer::model_key
pub const MODEL_KEY_PARAMETER: &str = "idempotency_key";

/// The longest key a model may give, in characters.
pub const MAX_MODEL_KEY_CHARS: usize = 200;

/// What the model reads about the parameter.
const MODEL_KEY_DESCRIPTION: &str = "A unique id you make up for this action (e.g. a random UUID). \
If you are not sure the action went through and call again to retry it, reuse the same id: \
it will not be done twice. A new action always needs a new id.";

/// What the re-send window is scoped by, besides the tenant and the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ResendScope {
    /// The MCP session (Streamable HTTP's `Mcp-Session-Id`; over stdio, the connection): a
    /// re-issue on the same session is caught, an identical call on another is not.
    #[default]
    Session,
    /// The tenant alone: a re-issue after a reconnect or a server restart (a new session) is
    /// caught too, and so is an identical call of another session of the tenant.
    Tenant,
}

/// A server's key settings: the default window, each tool's own, the scope, and the tools
/// that take a model's key.
#[derive(Debug, Clone)]
pub(super) struct KeySettings {
    window: Option<Duration>,
    per_tool: BTreeMap<String, Option<Duration>>,
    pub(super) scope: ResendScope,
    model_key: BTreeSet<String>,
}

impl Default for KeySettings {
    fn default() -> Self {
        KeySettings {
            window: Some(DEFAULT_RESEND_WINDOW),
            per_tool: BTreeMap::new(),
            scope: ResendScope::Session,
            model_key: BTreeSet::new(),
        }
    }
}

/// Why a key setting names something it cannot apply to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeySettingError {
    /// No tool by that name is served.
    #[error("no tool `{tool}` is served, so it has no key setting to change")]
    UnknownTool {
        /// The name given.
        tool: String,
    },
    /// A `read` records nothing: a key would do nothing.
    #[error("`{tool}` is a read, which records nothing: a model's key would do nothing")]
    Read {
        /// The tool.
        tool: String,
    },
    /// The tool already has a parameter of that name.
    #[error(
        "`{tool}` already has a parameter `{MODEL_KEY_PARAMETER}`: the model's key cannot be added beside it"
    )]
    ParameterTaken {
        /// The tool.
        tool: String,
    },
}

impl KeySettings {
    pub(super) fn set_window(&mut self, window: Option<Duration>) {
        self.window = window;
    }

    pub(super) fn set_tool_window(&mut self, tool: &str, window: Option<Duration>) {
        self.per_tool.insert(tool.to_owned(), window);
    }

    /// The window of `tool`: its own, else the server's.
    pub(super) fn window_of(&self, tool: &str) -> Option<Duration> {
        self.per_tool.get(tool).copied().unwrap_or(self.window)
    }

    /// Let `tool` (listed in `tools`) take the model's key: its published schema gains the
    /// parameter.
    pub(super) fn add_model_key(
        &mut self,
        tools: &mut Arc<Vec<Tool>>,
        tool: &str,
        records: bool,
    ) -> Result<(), KeySettingError> {
        let listed = Arc::make_mut(tools);
        let Some(entry) = listed.iter_mut().find(|t| t.name == tool) else {
            return Err(KeySettingError::UnknownTool { tool: tool.into() });
        };
        if !records {
            return Err(KeySettingError::Read { tool: tool.into() });
        }
        if self.model_key.contains(tool) {
            return Ok(());
        }
        let mut schema = (*entry.input_schema).clone();
        let properties = schema
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(properties) = properties else {
            return Err(KeySettingError::ParameterTaken { tool: tool.into() });
        };
        if properties.contains_key(MODEL_KEY_PARAMETER) {
            return Err(KeySettingError::ParameterTaken { tool: tool.into() });
        }
        properties.insert(
            MODEL_KEY_PARAMETER.into(),
            json!({
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_MODEL_KEY_CHARS,
                "description": MODEL_KEY_DESCRIPTION,
            }),
        );
        entry.input_schema = Arc::new(schema);
        self.model_key.insert(tool.to_owned());
        Ok(())
    }

    /// Whether `tool` takes the model's key.
    pub(super) fn takes_model_key(&self, tool: &str) -> bool {
        self.model_key.contains(tool)
    }

    /// Where the settings of the server are named, for a refused keyless call.
    pub(super) const HOW: &'static str = "`McpServer::tool_resend_window` (keys a call by its arguments for a window), `McpServer::model_key` (the model gives one); in `idem mcp-proxy`, `resend_window_secs` and `model_key` in the tool's table";
}

/// The model's key taken out of `arguments`, if the tool takes one: `Ok(None)` when the
/// model gave none; `Err` naming what is wrong with the one it gave (nothing is recorded).
pub(super) fn take_model_key(arguments: &mut Value) -> Result<Option<String>, String> {
    let Some(given) = arguments
        .as_object_mut()
        .and_then(|a| a.remove(MODEL_KEY_PARAMETER))
    else {
        return Ok(None);
    };
    match given {
        Value::Null => Ok(None),
        Value::String(key) if key.trim().is_empty() => Err(format!(
            "`{MODEL_KEY_PARAMETER}` is empty: give a unique id for this action (e.g. a UUID), or leave the parameter out"
        )),
        Value::String(key) if key.chars().count() > MAX_MODEL_KEY_CHARS => Err(format!(
            "`{MODEL_KEY_PARAMETER}` is {} characters long, over the limit of {MAX_MODEL_KEY_CHARS}: give a shorter unique id (e.g. a UUID)",
            key.chars().count()
        )),
        Value::String(key) => Ok(Some(key)),
        other => Err(format!(
            "`{MODEL_KEY_PARAMETER}` must be a string (a unique id for this action), got {}",
            kind(&other)
        )),
    }
}

/// A JSON value's kind, as a refusal names it (never its content).
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// How the server keys a call, the first that applies:
///
/// 1. **`Meta`**: a key in the request's `_meta` (under the names of [`META_KEY_NAMES`],
///    in their order).
/// 2. **`Model`**: the key the model gave in the tool's `idempotency_key` argument, for a
///    tool the server lets the model key ([`McpServer::model_key`]).
/// 3. **`Arguments`**: an `idempotent_write` of a server keying such calls by their
///    arguments ([`McpServer::keyless_idempotent_writes`]), in a request without a run id: the
///    sealed arguments themselves.
/// 4. **`Window`**: the tool's re-send window, if it has one on: an identical call within it
///    is the same call. Scoped by the session unless the scope is the tenant's, or the call
///    may need a person's approval (a host resumed after a crash re-issues it in a new
///    session, and its approval must find the first call).
/// 5. **`Unkeyed`**: none of these: every call is a new one.
///
/// [`keyed_by`] applies it: a pure function of what the request and the tool say.
///
/// [`META_KEY_NAMES`]: crate::META_KEY_NAMES
/// [`McpServer::model_key`]: crate::McpServer::model_key
/// [`McpServer::keyless_idempotent_writes`]: crate::McpServer::keyless_idempotent_writes
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedBy {
    /// The request's `_meta` key.
    Meta,
    /// The model's key argument.
    Model,
    /// The call's sealed arguments.
    Arguments,
    /// The re-send window, of the session or (`by_tenant`) of the tenant.
    Window {
        /// Whether the window spans the tenant's sessions.
        by_tenant: bool,
    },
    /// No key: each call is a new one.
    Unkeyed,
}

/// What [`keyed_by`] reads of a request and its tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyFacts {
    /// The request's `_meta` holds a key.
    pub meta_key: bool,
    /// The model gave a key the tool takes.
    pub model_key: bool,
    /// The server keys keyless `idempotent_write` calls by their arguments, the tool is one,
    /// and the request names no run.
    pub by_arguments: bool,
    /// The tool's re-send window is on.
    pub window: bool,
    /// The window's scope is the tenant's.
    pub tenant_scope: bool,
    /// The call may need a person's approval.
    pub may_need_approval: bool,
}

/// How a call with these facts is keyed, by the rule on [`KeyedBy`].
pub fn keyed_by(facts: KeyFacts) -> KeyedBy {
    match facts {
        KeyFacts { meta_key: true, .. } => KeyedBy::Meta,
        KeyFacts {
            model_key: true, ..
        } => KeyedBy::Model,
        KeyFacts {
            by_arguments: true, ..
        } => KeyedBy::Arguments,
        KeyFacts { window: true, .. } => KeyedBy::Window {
            by_tenant: facts.tenant_scope || facts.may_need_approval,
        },
        _ => KeyedBy::Unkeyed,
    }
}

/// `call` within a re-send window of `window`, of `session` (`None`: of the tenant, as
/// [`keyed_by`] decides): the dispatcher uses it only when the call has no other key.
pub(super) fn with_window(call: ToolCall, window: Duration, session: Option<&str>) -> ToolCall {
    let scope = session.map_or_else(String::new, |session| format!("session:{session}"));
    call.with_resend_window(scope, window)
}

/// A new connection's id: random, so that two connections never share a window.
pub(super) fn connection_id() -> Arc<str> {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No system randomness: the clock and a counter still tell connections apart.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let count = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&nanos.to_be_bytes());
        bytes[8..].copy_from_slice(&count.to_be_bytes());
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Arc::from(hex)
}

#[cfg(test)]
mod rule_tests {
    use super::{KeyFacts, KeyedBy, keyed_by};

    #[test]
    fn the_rule_as_a_table() {
        let f = KeyFacts::default();
        let window = KeyFacts { window: true, ..f };
        let table = [
            (
                KeyFacts {
                    meta_key: true,
                    model_key: true,
                    by_arguments: true,
                    window: true,
                    ..f
                },
                KeyedBy::Meta,
            ),
            (
                KeyFacts {
                    model_key: true,
                    by_arguments: true,
                    window: true,
                    ..f
                },
                KeyedBy::Model,
            ),
            (
                KeyFacts {
                    by_arguments: true,
                    window: true,
                    ..f
                },
                KeyedBy::Arguments,
            ),
            (window, KeyedBy::Window { by_tenant: false }),
            (
                KeyFacts {
                    tenant_scope: true,
                    ..window
                },
                KeyedBy::Window { by_tenant: true },
            ),
            (
                KeyFacts {
                    may_need_approval: true,
                    ..window
                },
                KeyedBy::Window { by_tenant: true },
            ),
            (
                KeyFacts {
                    may_need_approval: true,
                    tenant_scope: true,
                    ..f
                },
                KeyedBy::Unkeyed,
            ),
            (f, KeyedBy::Unkeyed),
        ];
        for (facts, keyed) in table {
            assert_eq!(keyed_by(facts), keyed, "{facts:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_models_key_is_taken_out_or_refused_by_what_is_wrong() {
        let long = "k".repeat(MAX_MODEL_KEY_CHARS + 1);
        // (arguments, key taken, refusal mentions, arguments left)
        let table: [(Value, Result<Option<&str>, &str>); 7] = [
            (json!({"text": "a"}), Ok(None)),
            (json!({"text": "a", "idempotency_key": null}), Ok(None)),
            (
                json!({"text": "a", "idempotency_key": "u-1"}),
                Ok(Some("u-1")),
            ),
            (json!({"text": "a", "idempotency_key": ""}), Err("is empty")),
            (
                json!({"text": "a", "idempotency_key": "  "}),
                Err("is empty"),
            ),
            (
                json!({"text": "a", "idempotency_key": long}),
                Err("over the limit"),
            ),
            (
                json!({"text": "a", "idempotency_key": 7}),
                Err("must be a string"),
            ),
        ];
        for (mut arguments, expected) in table {
            let got = take_model_key(&mut arguments);
            match (got, expected) {
                (Ok(key), Ok(want)) => assert_eq!(key.as_deref(), want),
                (Err(why), Err(want)) => assert!(why.contains(want), "{why}"),
                (got, want) => panic!("{got:?} for {want:?}"),
            }
            assert_eq!(
                arguments,
                json!({"text": "a"}),
                "the parameter never reaches the tool"
            );
        }
    }

    #[test]
    fn the_window_is_the_tools_own_else_the_servers() {
        let mut settings = KeySettings::default();
        assert_eq!(settings.window_of("a"), Some(DEFAULT_RESEND_WINDOW));
        settings.set_tool_window("a", None);
        settings.set_tool_window("b", Some(Duration::from_secs(9)));
        assert_eq!(settings.window_of("a"), None);
        assert_eq!(settings.window_of("b"), Some(Duration::from_secs(9)));
        settings.set_window(None);
        assert_eq!(settings.window_of("c"), None);
        assert_eq!(settings.window_of("b"), Some(Duration::from_secs(9)));
    }
}
