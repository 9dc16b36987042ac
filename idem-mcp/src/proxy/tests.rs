use std::sync::Arc;
use std::time::Duration;

use idem_core::store::memory::MemoryStore;
use idem_core::{ErrorKind, ToolClass};
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::upstream::{Failure, Transport, kind_of, output_of};
use super::*;
use idem_registry::approval::{ApprovalKey, ApprovalKeys};
use idem_registry::dispatch::{DispatchError, RunContext, ToolCall};

/// An upstream tool with these properties and annotations.
fn tool(name: &str, properties: Value, annotations: Option<ToolAnnotations>) -> Tool {
    let schema = json!({"type": "object", "properties": properties});
    let mut tool = Tool::new(
        name.to_owned(),
        format!("The upstream's {name}."),
        schema.as_object().cloned().unwrap_or_default(),
    );
    tool.annotations = annotations;
    tool
}

/// Tools like server-memory's.
fn memory_tools() -> Vec<Tool> {
    let open = ToolAnnotations::new()
        .read_only(false)
        .destructive(false)
        .idempotent(false);
    vec![
        tool(
            "create_entities",
            json!({"entities": {"type": "array"}}),
            Some(open),
        ),
        tool(
            "delete_entities",
            json!({"entityNames": {"type": "array"}}),
            Some(ToolAnnotations::new().destructive(true).idempotent(true)),
        ),
        tool(
            "read_graph",
            json!({}),
            Some(ToolAnnotations::new().read_only(true)),
        ),
        tool("open_nodes", json!({"names": {"type": "array"}}), None),
    ]
}

fn parse(text: &str) -> Result<ProxyConfig, String> {
    ProxyConfig::parse(text, "proxy.toml").map_err(|e| e.to_string())
}

fn error_of(text: &str) -> String {
    parse(text).expect_err("the configuration should be refused")
}

#[test]
fn a_configuration_reads_with_its_defaults() {
    let config = parse("").unwrap();
    assert_eq!(config.namespace, PROXY_NAMESPACE);
    assert_eq!(config.tenant, DEFAULT_TENANT);
    assert_eq!(config.timeout, DEFAULT_TIMEOUT);
    assert!(config.upstream.is_none() && config.store.is_none());
    assert_eq!(config.tool_names().count(), 0);

    let config = parse(
        r#"
namespace = "memory"
tenant = "acme"
store = "redis://127.0.0.1/"

[upstream]
command = ["npx", "-y", "@modelcontextprotocol/server-memory"]
env = { MEMORY_FILE_PATH = "memory.jsonl" }
timeout_secs = 5

[tools.create_entities]
class = "non_idempotent_write"
ttl_secs = 604800
timeout_secs = 90

[tools.delete_entities]
class = "idempotent_write"
natural_key = ["/entityNames"]
unreviewed = true
"#,
    )
    .unwrap();
    assert_eq!(
        (config.namespace.as_str(), config.tenant.as_str()),
        ("memory", "acme")
    );
    assert_eq!(config.store.as_deref(), Some("redis://127.0.0.1/"));
    assert_eq!(config.timeout, Duration::from_secs(5));
    let Some(UpstreamSpec::Command { program, args, env }) = &config.upstream else {
        panic!("a command upstream: {:?}", config.upstream);
    };
    assert_eq!(program, "npx");
    assert_eq!(args, &["-y", "@modelcontextprotocol/server-memory"]);
    assert_eq!(env["MEMORY_FILE_PATH"], "memory.jsonl");
    assert_eq!(
        config.class_of("create_entities"),
        Some(ToolClass::NonIdempotentWrite)
    );
    let entry = config.entry("create_entities").unwrap();
    assert_eq!(entry.timeout, Some(Duration::from_secs(90)));
    assert!(!entry.unreviewed);
    assert!(config.entry("delete_entities").unwrap().unreviewed);
}

#[test]
fn mistakes_in_a_tool_table_name_the_file_line_tool_and_fix() {
    let typo = error_of("namespace = \"x\"\n\n[tools.send]\nclas = \"read\"\n");
    assert!(typo.starts_with("proxy.toml:3: tool `send`"), "{typo}");
    assert!(
        typo.contains("unknown key `clas` (did you mean `class`?)"),
        "{typo}"
    );
    assert!(
        typo.contains("`natural_key`") && typo.contains("`timeout_secs`"),
        "{typo}"
    );

    let unclassed = error_of("[tools.send]\nttl_secs = 60\n");
    assert!(
        unclassed.contains("tool `send` has no class"),
        "{unclassed}"
    );
    assert!(unclassed.contains("`non_idempotent_write`"), "{unclassed}");
    assert!(
        unclassed.contains("annotations are not trusted"),
        "{unclassed}"
    );

    let misspelled = error_of("[tools.send]\nclass = \"idempotent\"\n");
    assert!(
        misspelled.contains("did you mean `idempotent_write`?"),
        "{misspelled}"
    );
    let not_text = error_of("[tools.send]\nclass = 3\n");
    assert!(not_text.contains("`class` must be a string"), "{not_text}");

    for key in ["name = \"x\"", "input_schema = {}", "inputSchema = {}"] {
        let upstream = error_of(&format!("[tools.send]\nclass = \"read\"\n{key}\n"));
        assert!(
            upstream.contains("comes from the upstream's tools/list"),
            "{upstream}"
        );
    }

    // The policy is checked as #[tool]'s: a read records nothing.
    let read_ttl = error_of("[tools.look]\nclass = \"read\"\nttl_secs = 60\n");
    assert!(
        read_ttl.contains("tool `look`") && read_ttl.contains("ttl_secs"),
        "{read_ttl}"
    );
    let pointer = error_of("[tools.send]\nclass = \"idempotent_write\"\nnatural_key = [\"to\"]\n");
    assert!(
        pointer.contains("not a JSON Pointer") && pointer.contains("`/to`"),
        "{pointer}"
    );
    let reuse = error_of("[tools.send]\nclass = \"idempotent_write\"\non_key_reuse = \"maybe\"\n");
    assert!(reuse.contains("on_key_reuse"), "{reuse}");
    let negative = error_of("[tools.send]\nclass = \"idempotent_write\"\nttl_secs = -1\n");
    assert!(negative.contains("tool `send`"), "{negative}");

    for bad in ["timeout_secs = 0", "timeout_secs = \"60\""] {
        let timeout = error_of(&format!("[tools.send]\nclass = \"read\"\n{bad}\n"));
        assert!(
            timeout.contains("`timeout_secs` must be a number of seconds"),
            "{timeout}"
        );
    }
    let flag = error_of("[tools.send]\nclass = \"read\"\nunreviewed = \"yes\"\n");
    assert!(
        flag.contains("`unreviewed` must be `true` or `false`"),
        "{flag}"
    );
    let name = error_of("[tools.\"send.mail\"]\nclass = \"read\"\n");
    assert!(
        name.contains("`send.mail`") && name.contains("not allowed"),
        "{name}"
    );
}

#[test]
fn mistakes_outside_the_tools_are_refused_with_the_fix() {
    let top = error_of("namespcae = \"x\"\n");
    assert!(
        top.starts_with("proxy.toml: ") && top.contains("namespcae"),
        "{top}"
    );
    assert!(top.contains("line 1"), "{top}");
    let both = error_of("[upstream]\ncommand = [\"a\"]\nurl = \"http://h/mcp\"\n");
    assert!(
        both.contains("[upstream]") && both.contains("not both"),
        "{both}"
    );
    let empty = error_of("[upstream]\ncommand = []\n");
    assert!(empty.contains("`command` is empty"), "{empty}");
    let tls = error_of("[upstream]\nurl = \"https://example.com/mcp\"\n");
    assert!(tls.contains("plain HTTP only"), "{tls}");
    let scheme = error_of("[upstream]\nurl = \"example.com/mcp\"\n");
    assert!(scheme.contains("is not an upstream URL"), "{scheme}");
    let env = error_of("[upstream]\nurl = \"http://h/mcp\"\nenv = { A = \"b\" }\n");
    assert!(env.contains("`env`"), "{env}");
    let zero = error_of("[upstream]\ncommand = [\"a\"]\ntimeout_secs = 0\n");
    assert!(zero.contains("more than zero"), "{zero}");
    let syntax = error_of("[tools.send\n");
    assert!(syntax.starts_with("proxy.toml: "), "{syntax}");
    let read = ProxyConfig::load("no/such/proxy.toml")
        .unwrap_err()
        .to_string();
    assert!(
        read.contains("cannot read the proxy configuration `no/such/proxy.toml`"),
        "{read}"
    );
}

#[test]
fn the_plan_serves_reviewed_tools_and_says_why_it_skips_the_others() {
    let config = parse(
        r#"
[upstream]
command = ["mcp-server-memory"]
timeout_secs = 7

[tools.create_entities]
class = "non_idempotent_write"
timeout_secs = 3

[tools.delete_entities]
class = "idempotent_write"
unreviewed = true

[tools.read_graph]
class = "read"
description = "Read the whole graph (through idem)."
"#,
    )
    .unwrap();
    let plan = plan(&config, &memory_tools()).unwrap();
    let served: Vec<(&str, u64)> = plan
        .served
        .iter()
        .map(|(spec, timeout)| (spec.name.as_str(), timeout.as_secs()))
        .collect();
    assert_eq!(served, [("create_entities", 3), ("read_graph", 7)]);
    let (create, _) = &plan.served[0];
    assert_eq!(create.class, Some(ToolClass::NonIdempotentWrite));
    assert_eq!(create.description, "The upstream's create_entities.");
    assert_eq!(
        create.input_schema["properties"]["entities"],
        json!({"type": "array"})
    );
    assert_eq!(
        plan.served[1].0.description,
        "Read the whole graph (through idem)."
    );
    assert_eq!(
        plan.not_served,
        [
            NotServed {
                tool: "delete_entities".into(),
                reason: NotServedReason::Unreviewed(ToolClass::IdempotentWrite),
            },
            NotServed {
                tool: "open_nodes".into(),
                reason: NotServedReason::Unclassified,
            },
        ]
    );
    let told = plan.not_served[1].to_string();
    assert!(told.contains("`open_nodes` is not served") && told.contains("[tools.open_nodes]"));
    let told = plan.not_served[0].to_string();
    assert!(told.contains("delete `unreviewed = true`"), "{told}");
}

#[test]
fn the_plan_refuses_what_does_not_fit_the_upstream() {
    let missing = parse("[tools.create_entity]\nclass = \"non_idempotent_write\"\n").unwrap();
    let err = plan(&missing, &memory_tools()).err().unwrap().to_string();
    assert!(err.starts_with("proxy.toml:1: tool `create_entity` is configured, but the upstream does not offer it (did you mean `create_entities`?)"), "{err}");
    assert!(err.contains("`read_graph`"), "{err}");

    let pointer = parse(
        "[tools.delete_entities]\nclass = \"idempotent_write\"\nnatural_key = [\"/names\"]\n",
    )
    .unwrap();
    let err = plan(&pointer, &memory_tools()).err().unwrap().to_string();
    assert!(
        err.contains("tool `delete_entities`") && err.contains("/names"),
        "{err}"
    );

    let mut silent = tool("ping", json!({}), None);
    silent.description = None;
    let config = parse("[tools.ping]\nclass = \"read\"\n").unwrap();
    let err = plan(&config, &[silent.clone()]).err().unwrap().to_string();
    assert!(err.contains("add `description = \"...\"`"), "{err}");
    let described = parse("[tools.ping]\nclass = \"read\"\ndescription = \"Ping.\"\n").unwrap();
    assert!(plan(&described, &[silent]).is_ok());
}

#[test]
fn an_upstream_schema_is_read_as_json_schema_2020_12() {
    let mut drafted = tool("read_graph", json!({}), None);
    let mut schema = (*drafted.input_schema).clone();
    schema.insert(
        "$schema".into(),
        json!("http://json-schema.org/draft-07/schema#"),
    );
    drafted.input_schema = Arc::new(schema);
    let config = parse("[tools.read_graph]\nclass = \"read\"\n").unwrap();
    let plan = plan(&config, &[drafted]).unwrap();
    assert!(plan.served[0].0.input_schema.get("$schema").is_none());
}

#[test]
fn init_suggests_a_class_from_the_annotations() {
    let class = |read_only, destructive, idempotent| {
        let mut a = ToolAnnotations::new();
        a.read_only_hint = read_only;
        a.destructive_hint = destructive;
        a.idempotent_hint = idempotent;
        suggested_class(Some(&a))
    };
    use ToolClass::*;
    // (readOnlyHint, destructiveHint, idempotentHint) -> suggestion.
    let table = [
        ((Some(true), None, None), Read),
        ((Some(true), Some(true), Some(false)), Read),
        ((Some(false), Some(true), Some(true)), IdempotentWrite),
        ((None, None, Some(true)), IdempotentWrite),
        ((Some(false), Some(false), Some(false)), NonIdempotentWrite),
        ((None, Some(false), None), NonIdempotentWrite),
        ((Some(false), Some(true), Some(false)), Irreversible),
        ((None, None, None), Irreversible),
    ];
    for ((r, d, i), expected) in table {
        assert_eq!(class(r, d, i), expected, "{r:?} {d:?} {i:?}");
    }
    assert_eq!(suggested_class(None), Irreversible);
}

#[test]
fn init_writes_a_configuration_that_serves_nothing_until_reviewed() {
    let mut tools = memory_tools();
    tools.push(tool("send.mail", json!({}), None));
    let spec = UpstreamSpec::command(
        vec![
            "node".into(),
            "dist/index.js".into(),
            "a \"quoted\" \\ arg".into(),
        ],
        [("MEMORY_FILE_PATH".to_owned(), "m.jsonl".to_owned())].into(),
    )
    .unwrap();
    let text = starting_config(Some(&spec), &tools);
    let config = parse(&text).unwrap();
    assert_eq!(config.upstream.as_ref(), Some(&spec));
    let expected = [
        ("create_entities", ToolClass::NonIdempotentWrite),
        ("delete_entities", ToolClass::IdempotentWrite),
        ("open_nodes", ToolClass::Irreversible),
        ("read_graph", ToolClass::Read),
    ];
    let classes: Vec<_> = config
        .tool_names()
        .map(|n| (n, config.class_of(n).unwrap()))
        .collect();
    assert_eq!(classes, expected);
    assert!(config.entries().all(|(_, entry)| entry.unreviewed));
    assert_eq!(
        text.matches("# REVIEW: suggested from the upstream's annotations, which are untrusted")
            .count(),
        4
    );
    assert!(
        text.contains("# (readOnlyHint: false, destructiveHint: false, idempotentHint: false).")
    );
    assert!(text.contains("# arguments: /entityNames"));
    assert!(text.contains("# Not servable by idem: tool name `send.mail` is invalid"));
    let plan = plan(&config, &tools[..4]).unwrap();
    assert!(plan.served.is_empty() && plan.not_served.len() == 4);

    let url = UpstreamSpec::url("http://127.0.0.1:8000/mcp".into()).unwrap();
    let config = parse(&starting_config(Some(&url), &tools)).unwrap();
    assert_eq!(config.upstream, Some(url));
    assert!(
        parse(&starting_config(None, &[]))
            .unwrap()
            .upstream
            .is_none()
    );
}

#[test]
fn what_a_failed_call_means_for_its_effect() {
    use ErrorKind::{Ambiguous, NotApplied};
    use Failure::*;
    // Failure -> (over stdio, over HTTP). Only a failure that shows the request never reached
    // the upstream's tool leaves the key free (not applied); after that, ambiguous.
    let table = [
        (NotStarted, (NotApplied, NotApplied)),
        (NotSent, (NotApplied, NotApplied)),
        (WriteFailed { refused: false }, (NotApplied, Ambiguous)),
        (WriteFailed { refused: true }, (NotApplied, NotApplied)),
        (Lost, (Ambiguous, Ambiguous)),
        (TimedOut, (Ambiguous, Ambiguous)),
        // The envelope or the method refused: no tool was reached.
        (Refused(-32700), (NotApplied, NotApplied)),
        (Refused(-32600), (NotApplied, NotApplied)),
        (Refused(-32601), (NotApplied, NotApplied)),
        // Invalid params: servers answer it from inside a tool too, after acting.
        (Refused(-32602), (Ambiguous, Ambiguous)),
        (Refused(-32603), (Ambiguous, Ambiguous)),
        (Refused(-32001), (Ambiguous, Ambiguous)),
        (Refused(0), (Ambiguous, Ambiguous)),
        (Unexpected, (Ambiguous, Ambiguous)),
    ];
    let mut reasons = std::collections::HashSet::new();
    for (failure, (stdio, http)) in table {
        for (transport, expected) in [(Transport::Stdio, stdio), (Transport::Http, http)] {
            let effect = kind_of(failure, transport);
            assert_eq!(effect.kind, expected, "{failure:?} over {transport:?}");
            assert!(!effect.why.is_empty(), "{failure:?} says why");
            reasons.insert(effect.why);
        }
    }
    assert!(
        reasons.len() >= 6,
        "each kind of case has its own reason: {reasons:?}"
    );
}

#[test]
fn upstream_results_become_outputs_and_answers() {
    let structured = CallToolResult::structured(json!({"entities": []}));
    assert_eq!(output_of("t", structured).unwrap(), json!({"entities": []}));
    let text = CallToolResult::success(vec![ContentBlock::text("hello")]);
    assert_eq!(output_of("t", text).unwrap(), json!("hello"));
    let two = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
    let blocks = output_of("t", two).unwrap();
    assert_eq!(blocks[1]["text"], "b");

    let refused = CallToolResult::error(vec![ContentBlock::text("no such entity")]);
    let answer = output_of("t", refused).unwrap_err();
    assert_eq!(answer.kind(), ErrorKind::Terminal);
    assert_eq!(answer.message(), "no such entity");
    let mut bare = CallToolResult::error(vec![]);
    bare.structured_content = Some(json!({"code": 7}));
    let answer = output_of("t", bare).unwrap_err();
    assert!(answer.message().contains("without a message"));
    assert_eq!(answer.details(), Some(&json!({"code": 7})));
}

/// A proxy over `config` whose upstream, a program that does not exist, is never reached.
fn unreachable_proxy(config: &str, tools: &[Tool]) -> Result<McpProxy, ProxyError> {
    let config = parse(config).unwrap();
    let spec = UpstreamSpec::command(vec!["./no-such-mcp-server".into()], Default::default());
    let upstream = Upstream::lazy(spec.unwrap(), Duration::from_secs(5));
    McpProxy::over(&config, upstream, tools)
}

#[test]
fn a_proxy_needs_the_keys_its_tools_need() {
    let tools = [tool(
        "send",
        json!({"to": {"type": "string"}, "token": {"type": "string"}}),
        None,
    )];
    let secret = "[tools.send]\nclass = \"non_idempotent_write\"\nsecret = [\"/token\"]\n";
    let proxy = unreachable_proxy(secret, &tools).unwrap();
    let store = Arc::new(MemoryStore::new());
    let err = proxy
        .dispatcher(store.clone(), ProxyKeys::default())
        .unwrap_err();
    assert!(matches!(&err, ProxyError::SecretKeyMissing { tools } if tools == &["send"]));
    assert!(err.to_string().contains(SECRET_KEY_ENV), "{err}");
    let key = idem_registry::SecretKey::new(vec![7; 32]).unwrap();
    assert!(
        proxy
            .dispatcher(
                store.clone(),
                ProxyKeys::new(Some(key), ApprovalKeys::default())
            )
            .is_ok()
    );

    let irreversible =
        unreachable_proxy("[tools.send]\nclass = \"irreversible\"\n", &tools).unwrap();
    let err = irreversible
        .dispatcher(store.clone(), ProxyKeys::default())
        .unwrap_err();
    assert!(matches!(&err, ProxyError::ApprovalKeysMissing { tools } if tools == &["send"]));
    assert!(err.to_string().contains(APPROVAL_KEY_ENV), "{err}");
    let keys = ApprovalKeys::new([ApprovalKey::new("ops-1", vec![9; 32]).unwrap()]);
    assert!(
        irreversible
            .server(store, ProxyKeys::new(None, keys))
            .is_ok()
    );

    let nothing = unreachable_proxy(
        "[tools.send]\nclass = \"read\"\nunreviewed = true\n",
        &tools,
    );
    let err = nothing.unwrap_err().to_string();
    assert!(
        err.starts_with("no upstream tool can be served:\n  upstream tool `send`"),
        "{err}"
    );
}

#[tokio::test]
async fn a_call_the_upstream_never_got_is_not_applied_and_its_key_stays_free() {
    let tools = [tool("send", json!({"to": {"type": "string"}}), None)];
    let proxy =
        unreachable_proxy("[tools.send]\nclass = \"non_idempotent_write\"\n", &tools).unwrap();
    assert_eq!(proxy.registry().len(), 1);
    assert!(proxy.not_served().is_empty());
    let dispatcher = proxy
        .dispatcher(Arc::new(MemoryStore::new()), ProxyKeys::default())
        .unwrap();
    let call = ToolCall::new("send", json!({"to": "ada"})).with_key("k1");
    let run = RunContext::new("local");
    for _ in 0..2 {
        let err = dispatcher.dispatch(&call, &run).await.unwrap_err();
        let DispatchError::ToolFailed {
            error,
            deduplicated,
            ..
        } = &err
        else {
            panic!("the tool's error: {err}");
        };
        assert_eq!(error.kind(), ErrorKind::NotApplied, "{err}");
        assert!(!deduplicated, "nothing was recorded: {err}");
        assert!(
            error
                .message()
                .contains("could not be started, so nothing was sent"),
            "{err}"
        );
        assert!(error.message().contains("no-such-mcp-server"), "{err}");
    }
}

#[test]
fn an_upstream_tool_nobody_can_annotate_takes_limits_from_the_file() {
    let config = parse(
        r#"
[tools.create_entities]
class = "non_idempotent_write"
limits = [{ name = "entities per run", max = 20 }]
"#,
    )
    .unwrap();
    let planned = plan(&config, &memory_tools()).unwrap();
    let (spec, _) = &planned.served[0];
    assert_eq!(
        spec.limits,
        [idem_registry::tool::Limit::calls("entities per run", 20)]
    );
    let def = spec
        .clone()
        .into_def(|_ctx, args| async move { Ok(args) })
        .unwrap();
    assert_eq!(def.rules().limits.len(), 1);
    // A limit over an argument the upstream's schema lacks is refused, naming it.
    let wrong = parse(
        r#"
[tools.create_entities]
class = "non_idempotent_write"
limits = [{ name = "entities", sum = "/count", max = 20 }]
"#,
    )
    .unwrap();
    let err = plan(&wrong, &memory_tools()).err().unwrap().to_string();
    assert!(
        err.contains("tool `create_entities`")
            && err.contains("limit `entities`: `sum` entry `/count` names the argument `count`, which the input schema does not list"),
        "{err}"
    );
}
