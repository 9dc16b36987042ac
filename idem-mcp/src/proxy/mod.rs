//! Exactly-once in front of any MCP server (feature `mcp-proxy`): the proxy starts an
//! upstream MCP server (or reaches one over Streamable HTTP), and serves its tools over MCP,
//! each under the policy of the class a configuration file gives it. The `idem` binary runs
//! it (`idem mcp-proxy`); this module is the library behind it.
//!
//! ```text
//! cargo install --path . --features mcp-proxy   # from a checkout of idem
//! idem mcp-proxy init --output proxy.toml -- npx -y @modelcontextprotocol/server-memory
//! $EDITOR proxy.toml    # review each class, delete its `unreviewed = true`
//! idem mcp-proxy --config proxy.toml -- npx -y @modelcontextprotocol/server-memory
//! ```
//!
//! - **Classes come from the file, never from the upstream.** Tool annotations are the
//!   upstream's word and nothing checks them, so `init` only *suggests* a class from them
//!   ([`suggested_class`]) and marks each tool `unreviewed = true`. A tool still marked so is
//!   not served, nor is a tool the file does not name; the proxy says so at start-up and
//!   refuses to start when nothing is left to serve.
//! - **Keys for clients that send none.** A call without a key in `_meta` (what every
//!   mainstream host sends) is keyed by its re-send window (on by default: a re-issued
//!   request within five minutes replays; `resend_window_secs` per tool, 0 turns it off;
//!   `resend_scope = "tenant"` at the top catches a re-issue after a reconnect too), or by
//!   a key the model gives where a tool's table says `model_key = true` (see
//!   [`crate::keys`]).
//! - **Keys travel.** A client passes its key in the request's `_meta` as it would to any
//!   idem server (`io.idem/idempotency-key`, or run id and step); the call reaches the
//!   upstream with idem's downstream key in its `_meta` (`io.idem/key` and
//!   `io.idem/idempotency-key`), so an upstream that reads it can dedupe too.
//! - **What a failure means.** An `isError` result is the upstream's answer: recorded and
//!   replayed. A call that certainly never reached the upstream's tool (it could not be
//!   started, the connection was closed before the request left, a JSON-RPC parse error,
//!   invalid request or unknown method) is *not applied*: nothing recorded, the key free
//!   again. Anything else after the request left (the upstream exited or crashed, no answer
//!   within the timeout, any other JSON-RPC error, "invalid params" included, which servers
//!   also answer from inside a tool after it acted) is *ambiguous*: an `idempotent_write` is retried with the same key, a
//!   `non_idempotent_write` or `irreversible` call ends Unknown and is never run again by
//!   itself (`io.idem/error` = `outcome_unknown`), and a `read` is retried.
//! - **Timeouts.** Each call waits at most `timeout_secs` (the `[upstream]` table's, 60 s
//!   by default, or the tool's own) for the answer; then the proxy tells the upstream to
//!   cancel, and the call is ambiguous. The handshake and the tool list wait as long.
//! - **Restarts.** When a child upstream exits, the next call starts it again (logged on
//!   standard error); calls in flight when it exited are ambiguous.
//! - **Irreversible tools** wait for an operator's approval (see
//!   [`ApprovalDesk::approve`]): the proxy needs an approval key for them
//!   ([`APPROVAL_KEY_ENV`]), and so do the operators who sign.
//! - **Secret parameters** (`secret = ["/token"]`) are sealed with a key
//!   ([`SECRET_KEY_ENV`]) before anything is hashed or stored.
//!
//! The configuration (see [`ProxyConfig`]):
//!
//! ```toml
//! namespace = "memory"          # of the records: one per upstream sharing a store
//! store = "idem-proxy.db"       # or redis://... or postgres://... (the binary's `--store`)
//!
//! [upstream]
//! command = ["npx", "-y", "@modelcontextprotocol/server-memory"]   # or url = "http://..."
//! timeout_secs = 60
//!
//! [tools.create_entities]
//! class = "non_idempotent_write"
//! ttl_secs = 604800
//!
//! [tools.delete_entities]
//! class = "idempotent_write"
//! natural_key = ["/entityNames"]
//!
//! [tools.read_graph]
//! class = "read"
//! timeout_secs = 5
//! ```
//!
//! Each `[tools.<name>]` table takes the keys of a [`ToolSpec`] (`class`, `natural_key`,
//! `ttl_secs`, `lease_secs`, `scopes`, `secret`, `on_key_reuse`, `verify_after_secs`,
//! `max_attempts`, `wait_secs`, `backoff_ms`, `open_world`, and `description` to override
//! the upstream's) and the proxy's `unreviewed` and `timeout_secs`; the upstream gives the
//! name and the input schema. They are checked as `#[tool]`'s are.
//!
//! The proxy reads the upstream's tools once, at start-up: restart it after the upstream
//! changes them. Results are served as idem serves any tool: `structuredContent` (the
//! upstream's, or its single text as `{"result": "..."}`) and its JSON as text; the
//! upstream's `outputSchema` is not passed on.
//!
//! [`ApprovalDesk::approve`]: idem_registry::approval::ApprovalDesk::approve

mod config;
mod effect;
mod init;
mod upstream;

use std::sync::Arc;
use std::time::Duration;

use idem_core::{Store, ToolClass};
use rmcp::model::Tool;
use serde_json::Value;

pub use config::{ConfigError, DEFAULT_TENANT, DEFAULT_TIMEOUT, PROXY_NAMESPACE, ProxyConfig};
pub use init::{starting_config, suggested_class};
pub use upstream::{Upstream, UpstreamError, UpstreamSpec};

use crate::{McpServeError, McpServer};
use idem_registry::approval::ApprovalKeys;
use idem_registry::context::ToolContext;
use idem_registry::dispatch::{Dispatcher, SetupError};
use idem_registry::redact::SecretKey;
use idem_registry::registry::Registry;
use idem_registry::tool::{ToolDef, ToolSpec};

/// The environment variable the `idem` binary reads the secret key from (hex, at least 32
/// bytes), for tools with secret parameters.
pub const SECRET_KEY_ENV: &str = "IDEM_PROXY_SECRET_KEY";
/// The environment variable the `idem` binary reads approval keys from
/// (`id:hex-secret`, several separated by commas), for irreversible tools.
pub const APPROVAL_KEY_ENV: &str = "IDEM_PROXY_APPROVAL_KEYS";

/// The upstream's tools, each under its configured class, ready to be served.
///
/// ```no_run
/// # async fn run(store: std::sync::Arc<dyn idem::Store>) -> Result<(), Box<dyn std::error::Error>> {
/// use idem::mcp::proxy::{McpProxy, ProxyConfig, ProxyKeys};
///
/// let config = ProxyConfig::load("proxy.toml")?;
/// let proxy = McpProxy::start(&config, None).await?;
/// for skipped in proxy.not_served() {
///     eprintln!("{skipped}");
/// }
/// proxy.server(store, ProxyKeys::default())?.serve_stdio().await?;
/// proxy.upstream().shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct McpProxy {
    upstream: Upstream,
    registry: Registry,
    not_served: Vec<NotServed>,
    namespace: String,
    tenant: String,
    /// Each served tool's re-send window and model-key settings, and the window's scope.
    keys: KeyConfig,
}

/// What the configuration says of keys for clients that send none.
#[derive(Debug, Clone, Default)]
struct KeyConfig {
    scope: crate::keys::ResendScope,
    windows: Vec<(String, Option<Duration>)>,
    model_key: Vec<String>,
}

/// An upstream tool the proxy does not serve, and why. Its `Display` says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotServed {
    /// The tool.
    pub tool: String,
    /// Why.
    pub reason: NotServedReason,
}

/// Why an upstream tool is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotServedReason {
    /// The configuration has no table for it.
    Unclassified,
    /// Its table is marked `unreviewed = true`; the class written there.
    Unreviewed(ToolClass),
}

impl std::fmt::Display for NotServed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tool = &self.tool;
        match self.reason {
            NotServedReason::Unclassified => write!(
                f,
                "upstream tool `{tool}` is not served: the configuration does not classify it (add a `[tools.{tool}]` table with its `class`, or run `idem mcp-proxy init`)"
            ),
            NotServedReason::Unreviewed(class) => write!(
                f,
                "upstream tool `{tool}` is not served: its class (`{class}`, suggested from the upstream's untrusted annotations) is not reviewed: check it, then delete `unreviewed = true` from `[tools.{tool}]`"
            ),
        }
    }
}

/// The keys a proxy may need: one to seal secret arguments, and those that verify
/// approvals of irreversible calls.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ProxyKeys {
    /// Seals secret arguments ([`SECRET_KEY_ENV`]).
    pub secret: Option<SecretKey>,
    /// Verifies approvals ([`APPROVAL_KEY_ENV`]).
    pub approvals: ApprovalKeys,
}

impl ProxyKeys {
    /// Keys from a secret key, if any, and approval keys.
    pub fn new(secret: Option<SecretKey>, approvals: ApprovalKeys) -> Self {
        ProxyKeys { secret, approvals }
    }
}

/// Why a proxy cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// Neither the command line nor the configuration names an upstream.
    #[error(
        "no upstream: give its command after `--` (`idem mcp-proxy --config proxy.toml -- npx -y some-mcp-server`), or `--upstream-url`, or an `[upstream]` table in the configuration"
    )]
    NoUpstream,
    /// The configuration is unusable, or does not fit the upstream's tools.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The upstream could not be started or listed.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// No upstream tool is left to serve.
    #[error("no upstream tool can be served:\n  {}", not_served.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    NothingServed {
        /// Every upstream tool, and why it is not served.
        not_served: Vec<NotServed>,
    },
    /// Tools take secret arguments and no key seals them.
    #[error(
        "{} take(s) secret arguments, which are sealed with a key before anything is stored: set {SECRET_KEY_ENV} to at least 32 random bytes in hex (e.g. `openssl rand -hex 32`)",
        list(tools)
    )]
    SecretKeyMissing {
        /// The tools.
        tools: Vec<String>,
    },
    /// Irreversible tools and no key to verify their approvals with.
    #[error(
        "{} is (are) irreversible and run only with an operator's signed approval: set {APPROVAL_KEY_ENV} to `id:hex-secret` (the key operators sign with; e.g. `ops-1:$(openssl rand -hex 32)`), or classify them otherwise",
        list(tools)
    )]
    ApprovalKeysMissing {
        /// The tools.
        tools: Vec<String>,
    },
    /// The upstream's tools cannot be registered (it lists one name twice, say).
    #[error("the upstream's tools cannot be served: {0}")]
    Registry(#[from] idem_registry::RegistryError),
    /// The dispatcher cannot be made.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The MCP server cannot be made.
    #[error(transparent)]
    Serve(#[from] McpServeError),
    /// A tool's key settings cannot apply to it (its schema already has the model key's
    /// parameter, say).
    #[error(transparent)]
    Keys(#[from] crate::keys::KeySettingError),
}

fn list(tools: &[String]) -> String {
    tools
        .iter()
        .map(|t| format!("`{t}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the proxy serves of the upstream's tools: a spec and a timeout for each tool it
/// serves, and the others with why. A pure function of the configuration and the list.
pub(super) struct Plan {
    pub(super) served: Vec<(ToolSpec, Duration)>,
    pub(super) not_served: Vec<NotServed>,
}

pub(super) fn plan(config: &ProxyConfig, tools: &[Tool]) -> Result<Plan, ConfigError> {
    // A configured tool the upstream does not offer is a mistake in the file (a typo, or
    // the wrong upstream): refused, with the nearest name the upstream offers.
    for (name, entry) in config.entries() {
        if !tools.iter().any(|t| t.name == name) {
            let nearest = tools
                .iter()
                .map(|t| (idem_core::class::edit_distance(name, &t.name), &t.name))
                .filter(|(d, t)| *d <= t.len() / 3 + 1)
                .min_by_key(|(d, _)| *d)
                .map(|(_, t)| format!(" (did you mean `{t}`?)"))
                .unwrap_or_default();
            let offered = tools
                .iter()
                .map(|t| format!("`{}`", t.name))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(entry.error(
                name,
                format!(
                    "tool `{name}` is configured, but the upstream does not offer it{nearest}; it offers {offered}"
                ),
            ));
        }
    }
    let mut served = Vec::new();
    let mut not_served = Vec::new();
    for tool in tools {
        let name = tool.name.to_string();
        let Some(entry) = config.entry(&name) else {
            not_served.push(NotServed {
                tool: name,
                reason: NotServedReason::Unclassified,
            });
            continue;
        };
        if entry.unreviewed {
            not_served.push(NotServed {
                tool: name,
                reason: NotServedReason::Unreviewed(entry.class),
            });
            continue;
        }
        let spec = entry.spec_for(&name, tool)?;
        served.push((spec, entry.timeout.unwrap_or(config.timeout)));
    }
    Ok(Plan { served, not_served })
}

impl McpProxy {
    /// Start the upstream (`upstream`, else the configuration's), list its tools and make
    /// the served ones. Logs (with `tracing`) each upstream tool it does not serve.
    pub async fn start(
        config: &ProxyConfig,
        upstream: Option<UpstreamSpec>,
    ) -> Result<Self, ProxyError> {
        let spec = upstream
            .or_else(|| config.upstream.clone())
            .ok_or(ProxyError::NoUpstream)?;
        let upstream = Upstream::connect(spec, config.timeout).await?;
        let tools = match upstream.tools().await {
            Ok(tools) => tools,
            Err(e) => {
                upstream.shutdown().await;
                return Err(e.into());
            }
        };
        match McpProxy::over(config, upstream.clone(), &tools) {
            Ok(proxy) => Ok(proxy),
            Err(e) => {
                upstream.shutdown().await;
                Err(e)
            }
        }
    }

    /// The proxy over an upstream already connected, whose tools are `tools`.
    pub fn over(
        config: &ProxyConfig,
        upstream: Upstream,
        tools: &[Tool],
    ) -> Result<Self, ProxyError> {
        let Plan { served, not_served } = plan(config, tools)?;
        for skipped in &not_served {
            tracing::warn!("{skipped}");
        }
        if served.is_empty() {
            return Err(ProxyError::NothingServed { not_served });
        }
        let mut registry = Registry::builder();
        let mut keys = KeyConfig {
            scope: config.resend_scope,
            ..KeyConfig::default()
        };
        for (spec, timeout) in served {
            if let Some(entry) = config.entry(&spec.name) {
                if let Some(window) = entry.resend_window {
                    keys.windows.push((spec.name.clone(), window));
                }
                if entry.model_key {
                    keys.model_key.push(spec.name.clone());
                }
            }
            registry = registry.try_add(forwarding(spec, upstream.clone(), timeout));
        }
        let registry = registry.build()?;
        Ok(McpProxy {
            upstream,
            registry,
            not_served,
            namespace: config.namespace.clone(),
            tenant: config.tenant.clone(),
            keys,
        })
    }

    /// The tools served.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The upstream tools not served, and why.
    pub fn not_served(&self) -> &[NotServed] {
        &self.not_served
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// A dispatcher over the served tools and `store`, in the configured namespace.
    pub fn dispatcher(
        &self,
        store: Arc<dyn Store>,
        keys: ProxyKeys,
    ) -> Result<Dispatcher, ProxyError> {
        let tools = |keep: &dyn Fn(&ToolDef) -> bool| -> Vec<String> {
            self.registry
                .iter()
                .filter(|t| keep(t))
                .map(|t| t.name().to_owned())
                .collect()
        };
        let secret = tools(&|t| !t.secrets().is_empty());
        if keys.secret.is_none() && !secret.is_empty() {
            return Err(ProxyError::SecretKeyMissing { tools: secret });
        }
        let irreversible = tools(&|t| t.class().requires_approval());
        if keys.approvals.is_empty() && !irreversible.is_empty() {
            return Err(ProxyError::ApprovalKeysMissing {
                tools: irreversible,
            });
        }
        let mut dispatcher = Dispatcher::approving(self.registry.clone(), store, keys.approvals)?
            .with_namespace(self.namespace.clone());
        if let Some(secret) = keys.secret {
            dispatcher = dispatcher.with_secret_key(secret);
        }
        Ok(dispatcher)
    }

    /// An MCP server over [`McpProxy::dispatcher`], acting for the configured tenant.
    /// Each tool's re-send window and model key are as its table says (see
    /// [`crate::keys`]).
    pub fn server(&self, store: Arc<dyn Store>, keys: ProxyKeys) -> Result<McpServer, ProxyError> {
        self.server_over(self.dispatcher(store, keys)?)
    }

    /// An MCP server over `dispatcher`, acting for the configured tenant, each tool's
    /// re-send window and model key as its table says: [`McpProxy::server`] for a
    /// dispatcher you built from [`McpProxy::dispatcher`] and changed first (an observer
    /// added, or the crash harness's instruments, `idem::testing`).
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use idem::mcp::proxy::{McpProxy, ProxyKeys};
    /// # fn run(proxy: McpProxy, store: Arc<dyn idem::Store>, observer: Arc<dyn idem::dispatch::Observer>)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// let dispatcher = proxy.dispatcher(store, ProxyKeys::default())?.with_observer(observer);
    /// let server = proxy.server_over(dispatcher)?;
    /// # let _ = server; Ok(()) }
    /// ```
    pub fn server_over(&self, dispatcher: Dispatcher) -> Result<McpServer, ProxyError> {
        let mut server =
            McpServer::new(dispatcher, self.tenant.clone())?.resend_scope(self.keys.scope);
        for (tool, window) in &self.keys.windows {
            server = server.tool_resend_window(tool, *window)?;
        }
        for tool in &self.keys.model_key {
            server = server.model_key(tool)?;
        }
        Ok(server)
    }
}

/// A definition of `spec` whose body calls the upstream's tool of the same name.
fn forwarding(
    spec: ToolSpec,
    upstream: Upstream,
    timeout: Duration,
) -> Result<ToolDef, idem_registry::RegistryError> {
    let name: Arc<str> = spec.name.as_str().into();
    spec.into_def(move |ctx: ToolContext, arguments: Value| {
        let upstream = upstream.clone();
        let name = name.clone();
        async move {
            upstream
                .call(&name, arguments, ctx.idempotency_key(), timeout)
                .await
        }
    })
}

#[cfg(test)]
mod tests;
