//! `idem mcp-proxy init`: a starting configuration from the upstream's tool list, each
//! tool's class suggested from its annotations and marked for review.

use std::fmt::Write as _;

use idem_core::ToolClass;
use rmcp::model::{Tool, ToolAnnotations};

use super::config::{DEFAULT_TIMEOUT, PROXY_NAMESPACE};
use super::upstream::UpstreamSpec;
use idem_registry::tool::check_name;

/// The class `init` suggests for a tool with these annotations: `readOnlyHint` → `read`;
/// else `idempotentHint` → `idempotent_write`; else `destructiveHint: false` →
/// `non_idempotent_write`; else (destructive, or not said: MCP's defaults are the
/// pessimistic ones) `irreversible`. Only a suggestion: annotations are the upstream's
/// word, which nothing checks, and the proxy serves no tool whose class is not reviewed.
///
/// ```
/// use idem::ToolClass;
/// use idem::mcp::proxy::suggested_class;
/// use rmcp::model::ToolAnnotations;
///
/// let read_only = ToolAnnotations::new().read_only(true);
/// assert_eq!(suggested_class(Some(&read_only)), ToolClass::Read);
/// assert_eq!(suggested_class(None), ToolClass::Irreversible);
/// ```
pub fn suggested_class(annotations: Option<&ToolAnnotations>) -> ToolClass {
    let hint = |h: fn(&ToolAnnotations) -> Option<bool>| annotations.and_then(h);
    if hint(|a| a.read_only_hint) == Some(true) {
        ToolClass::Read
    } else if hint(|a| a.idempotent_hint) == Some(true) {
        ToolClass::IdempotentWrite
    } else if hint(|a| a.destructive_hint) == Some(false) {
        ToolClass::NonIdempotentWrite
    } else {
        ToolClass::Irreversible
    }
}

/// A starting configuration for `tools` behind `upstream`: every tool with its suggested
/// class ([`suggested_class`]), a `# REVIEW:` comment and `unreviewed = true`, so that the
/// proxy serves none of them until someone has read it.
///
/// ```
/// use idem::mcp::proxy::{ProxyConfig, UpstreamSpec, starting_config};
/// use rmcp::model::{Tool, ToolAnnotations};
///
/// let schema = serde_json::json!({"type": "object"}).as_object().unwrap().clone();
/// let tools = [Tool::new("read_graph", "Read the graph.", schema)
///     .annotate(ToolAnnotations::new().read_only(true))];
/// let upstream = UpstreamSpec::command(vec!["mcp-server-memory".into()], Default::default());
/// let text = starting_config(upstream.as_ref(), &tools);
/// assert!(text.contains("[tools.read_graph]\n# REVIEW: suggested from the upstream's annotations, which are untrusted"));
/// let config = ProxyConfig::parse(&text, "proxy.toml").unwrap();
/// assert_eq!(config.class_of("read_graph"), Some(idem::ToolClass::Read));
/// ```
pub fn starting_config(upstream: Option<&UpstreamSpec>, tools: &[Tool]) -> String {
    let mut out = String::new();
    out.push_str(HEADER);
    let _ = writeln!(out, "namespace = {}", quoted(PROXY_NAMESPACE));
    out.push_str("# store = \"idem-proxy.db\"    # or \"redis://...\" or \"postgres://...\"\n\n");
    out.push_str("[upstream]\n");
    match upstream {
        Some(UpstreamSpec::Command { program, args, env }) => {
            let argv = std::iter::once(program).chain(args);
            let argv = argv.map(|a| quoted(a)).collect::<Vec<_>>().join(", ");
            let _ = writeln!(out, "command = [{argv}]");
            if !env.is_empty() {
                let env = env
                    .iter()
                    .map(|(k, v)| format!("{} = {}", key(k), quoted(v)))
                    .collect::<Vec<_>>()
                    .join(", ");
                let _ = writeln!(out, "env = {{ {env} }}");
            }
        }
        Some(UpstreamSpec::Url(url)) => {
            let _ = writeln!(out, "url = {}", quoted(url));
        }
        None => out.push_str("# command = [\"...\"]    # or url = \"http://...\"\n"),
    }
    let _ = writeln!(out, "timeout_secs = {}", DEFAULT_TIMEOUT.as_secs());
    for tool in tools {
        out.push('\n');
        tool_table(&mut out, tool);
    }
    out
}

const HEADER: &str = "\
# The upstream's tools and the class of each, for `idem mcp-proxy --config <this file>`.
# Written by `idem mcp-proxy init`. Each class below is only suggested from the tool's
# annotations, which the upstream states and nothing checks. Review every tool: set
# `class` to what it really does, add the policy it needs, then delete `unreviewed = true`.
# Until then the proxy does not serve it, nor any tool missing from this file.
#
# class: read | idempotent_write | non_idempotent_write | irreversible
# also: natural_key = [\"/pointer\", ...], ttl_secs, lease_secs, scopes = [\"...\"],
#   secret = [\"/pointer\"], on_key_reuse = \"reject\" (with a natural key), verify_after_secs, max_attempts,
#   wait_secs, backoff_ms, timeout_secs (this tool's wait for the upstream),
#   description (instead of the upstream's)
#
# Keys for clients that send none in `_meta` (most hosts): a write's call is keyed by its
# arguments for a re-send window, so a request the client re-issues (a broken stream, a
# retry) runs once; the same call after the window runs again (one whose outcome is unknown
# is reported, not run, until it is settled), and a deliberate identical call inside it is
# replayed (its result says deduplicated).
#   resend_window_secs = 300   # per tool; 0 turns it off (a call without a key is refused)
#   model_key = true           # the model may give a key: an optional `idempotency_key`
#                              # argument, taken out before the upstream sees the call
#   resend_scope = \"tenant\"    # at the top of the file: the window spans the tenant's
#                              # sessions, so a re-issue after a reconnect is caught too

";

/// One `[tools.<name>]` table, or a comment saying why the tool cannot be served.
fn tool_table(out: &mut String, tool: &Tool) {
    if let Err(e) = check_name(&tool.name) {
        let _ = writeln!(out, "# Not servable by idem: {e}.");
        return;
    }
    let annotations = tool.annotations.as_ref();
    let class = suggested_class(annotations);
    let hint = |h: Option<bool>| h.map_or("not stated".to_owned(), |b| b.to_string());
    let (read_only, destructive, idempotent) = annotations.map_or((None, None, None), |a| {
        (a.read_only_hint, a.destructive_hint, a.idempotent_hint)
    });
    let _ = writeln!(out, "[tools.{}]", key(&tool.name));
    out.push_str("# REVIEW: suggested from the upstream's annotations, which are untrusted\n");
    let _ = writeln!(
        out,
        "# (readOnlyHint: {}, destructiveHint: {}, idempotentHint: {}).",
        hint(read_only),
        hint(destructive),
        hint(idempotent)
    );
    if let Some(line) = tool.description.as_deref().and_then(|d| d.lines().next()) {
        let line = line.trim();
        if !line.is_empty() {
            let short: String = line.chars().take(100).collect();
            let more = if short.len() < line.len() { "..." } else { "" };
            let _ = writeln!(out, "# {short}{more}");
        }
    }
    if let Some(properties) = tool
        .input_schema
        .get("properties")
        .and_then(|p| p.as_object())
    {
        let arguments = properties
            .keys()
            .map(|k| format!("/{}", k.replace('~', "~0").replace('/', "~1")))
            .collect::<Vec<_>>();
        if !arguments.is_empty() {
            let _ = writeln!(out, "# arguments: {}", arguments.join(", "));
        }
    }
    let _ = writeln!(out, "class = {}", quoted(class.as_str()));
    if class.records() {
        let _ = writeln!(
            out,
            "# resend_window_secs = {}    # 0: no window; model_key = true: the model gives keys",
            crate::keys::DEFAULT_RESEND_WINDOW.as_secs()
        );
    }
    out.push_str("unreviewed = true\n");
}

/// A TOML string.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A TOML key: bare when it can be.
fn key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare { k.to_owned() } else { quoted(k) }
}
