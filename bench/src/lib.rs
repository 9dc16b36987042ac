//! What every benchmark of idem shares: one realistic tool call, the same no-op tool declared
//! four ways (one per class) with idem's `#[tool]` and once with rmcp's, and the floor that
//! any deduplicating dispatcher must pay.
//!
//! The benchmarks themselves are `benches/hot_path.rs` (criterion) and the `idem-bench`
//! binary, which `scripts/bench` drives for the multi-process and server rows.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem::prelude::*;
use idem::{ApprovalKey, Approver, Registry, approval::ApprovalKeys};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The arguments of every benchmarked call, as the model emits them (JSON text, ~200 bytes).
pub const ARGUMENTS: &str = r#"{"ticket":48213,"status":"in_progress","assignee":"dana.okafor@example.com","note":"Export button does nothing on Safari 17; reproduced on staging.","tags":["bug","export","safari"],"priority":2}"#;

/// The tenant every benchmarked call acts for.
pub const TENANT: &str = "tenant-bench";

/// The four no-op tools, one per class, all taking the parameters of [`ARGUMENTS`].
pub mod tools {
    use super::*;

    /// Set a ticket's status (no-op, `read`).
    #[tool(class = "read")]
    pub fn noop_read(
        ticket: u64,
        status: String,
        assignee: String,
        note: String,
        tags: Vec<String>,
        priority: u8,
    ) -> Result<String, ToolError> {
        black_box((ticket, &status, &assignee, &note, &tags, priority));
        Ok("ok".to_owned())
    }

    /// Set a ticket's status (no-op, `idempotent_write`).
    #[tool(class = "idempotent_write")]
    pub fn noop_idempotent_write(
        ticket: u64,
        status: String,
        assignee: String,
        note: String,
        tags: Vec<String>,
        priority: u8,
    ) -> Result<String, ToolError> {
        black_box((ticket, &status, &assignee, &note, &tags, priority));
        Ok("ok".to_owned())
    }

    /// Set a ticket's status (no-op, `non_idempotent_write`).
    #[tool(class = "non_idempotent_write")]
    pub fn noop_non_idempotent_write(
        ticket: u64,
        status: String,
        assignee: String,
        note: String,
        tags: Vec<String>,
        priority: u8,
    ) -> Result<String, ToolError> {
        black_box((ticket, &status, &assignee, &note, &tags, priority));
        Ok("ok".to_owned())
    }

    /// Set a ticket's status (no-op, `irreversible`).
    #[tool(class = "irreversible")]
    pub fn noop_irreversible(
        ticket: u64,
        status: String,
        assignee: String,
        note: String,
        tags: Vec<String>,
        priority: u8,
    ) -> Result<String, ToolError> {
        black_box((ticket, &status, &assignee, &note, &tags, priority));
        Ok("ok".to_owned())
    }
}

/// The benchmarked classes, with the name of their no-op tool.
pub const CLASSES: [(&str, &str); 4] = [
    ("read", "noop_read"),
    ("idempotent_write", "noop_idempotent_write"),
    ("non_idempotent_write", "noop_non_idempotent_write"),
    ("irreversible", "noop_irreversible"),
];

/// A registry of exactly the four no-op tools (explicit, so no linker question arises).
pub fn registry() -> Registry {
    Registry::builder()
        .tool::<tools::noop_read>()
        .tool::<tools::noop_idempotent_write>()
        .tool::<tools::noop_non_idempotent_write>()
        .tool::<tools::noop_irreversible>()
        .build()
        .expect("the four no-op tools register")
}

/// A dispatcher over the four no-op tools and a store.
pub fn dispatcher(store: Arc<dyn Store>) -> Dispatcher {
    let keys = ApprovalKeys::new([approval_key()]);
    Dispatcher::approving(registry(), store, keys)
        .expect("the bench's dispatcher has an approval key")
        .with_namespace("bench")
}

/// The bench's approval key.
fn approval_key() -> ApprovalKey {
    ApprovalKey::new("bench", [7u8; 32]).expect("32 bytes")
}

/// The run context of one call: irreversible calls carry the approval of exactly that call,
/// obtained the way an application obtains it (the dispatcher's `ApprovalRequired`).
pub async fn run_for(dispatcher: &Dispatcher, tool: &str, call_id: &str) -> RunContext {
    let run = RunContext::new(TENANT);
    if tool != "noop_irreversible" {
        return run;
    }
    let call = call(tool, call_id);
    match dispatcher.dispatch(&call, &run).await {
        Err(DispatchError::ApprovalRequired { request }) => {
            let approver = Approver::new("bench", approval_key());
            run.approve(approver.approve_for(&request, std::time::Duration::from_secs(86_400)))
        }
        other => panic!("expected ApprovalRequired, got {other:?}"),
    }
}

/// A call as the application builds it from the model's message: the arguments parsed from
/// their JSON text.
pub fn call(tool: &str, call_id: &str) -> ToolCall {
    let arguments: Value = serde_json::from_str(ARGUMENTS).expect("ARGUMENTS is JSON");
    ToolCall::new(tool, arguments).with_call_id(call_id)
}

/// A dispatcher on a fresh memory store with one call of `tool` recorded, and the run that
/// replays it.
pub async fn recorded(tool: &str) -> (Dispatcher, RunContext) {
    let d = dispatcher(Arc::new(idem::MemoryStore::new()));
    let run = run_for(&d, tool, "call_0000000000").await;
    let first = d
        .dispatch(&call(tool, "call_0000000000"), &run)
        .await
        .expect("first dispatch");
    assert!(!first.deduplicated);
    (d, run)
}

/// Time the floor's first executions of `ids` on a fresh map (growth paid, as in production).
pub fn time_floor_first(ids: &[String]) -> Duration {
    let mut floor = Floor::new();
    let start = Instant::now();
    for id in ids {
        floor.first(black_box(id), black_box(ARGUMENTS));
    }
    let elapsed = start.elapsed();
    black_box(floor.len());
    elapsed
}

/// Time idem's first executions of `ids` on a fresh memory store. The run contexts (an
/// irreversible call's carries the approval of exactly that call) are obtained before the
/// clock starts.
pub async fn time_idem_first(tool: &str, ids: &[String]) -> Duration {
    let store = Arc::new(idem::MemoryStore::new().with_capacity(4 * ids.len() + 4096));
    let d = dispatcher(store);
    let mut runs = Vec::with_capacity(ids.len());
    for id in ids {
        runs.push(run_for(&d, tool, id).await);
    }
    let start = Instant::now();
    for (id, run) in ids.iter().zip(&runs) {
        let out = d.dispatch(&call(tool, id), run).await.expect("dispatched");
        debug_assert!(!out.deduplicated);
        black_box(out);
    }
    start.elapsed()
}

/// The floor of any deduplicating dispatcher: parse the arguments, SHA-256 of their
/// canonical text, one `HashMap` insert (first execution) or lookup (replay).
#[derive(Default)]
pub struct Floor {
    records: HashMap<String, ([u8; 32], String)>,
}

impl Floor {
    /// An empty map.
    pub fn new() -> Self {
        Floor::default()
    }

    fn fingerprint(arguments: &str) -> [u8; 32] {
        let value: Value = serde_json::from_str(arguments).expect("arguments are JSON");
        // serde_json's map is ordered (no `preserve_order`), so this text is canonical.
        let canonical = serde_json::to_string(&value).expect("a Value serialises");
        Sha256::digest(canonical.as_bytes()).into()
    }

    /// First execution: record the output under the call id.
    pub fn first(&mut self, call_id: &str, arguments: &str) {
        let fp = Self::fingerprint(arguments);
        self.records
            .insert(call_id.to_owned(), (fp, "\"ok\"".to_owned()));
    }

    /// Replay: find the recorded output and check the arguments are the same.
    pub fn replay(&self, call_id: &str, arguments: &str) -> bool {
        let fp = Self::fingerprint(arguments);
        matches!(self.records.get(call_id), Some((f, out)) if *f == fp && !out.is_empty())
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// The same no-op tool declared with rmcp's `#[tool_router]` / `#[tool]`.
pub mod mcp {
    use std::borrow::Cow;

    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::tool::ToolCallContext;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::model::{CallToolRequestParams, CallToolResponse, JsonObject, NumberOrString};
    use rmcp::service::{RequestContext, RoleServer, RunningService, serve_directly};
    use rmcp::{Json, tool, tool_handler, tool_router};

    use super::*;

    /// The parameters of [`ARGUMENTS`].
    #[derive(Debug, Deserialize, Serialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct TicketArgs {
        ticket: u64,
        status: String,
        assignee: String,
        note: String,
        tags: Vec<String>,
        priority: u8,
    }

    /// An rmcp server with the one no-op tool.
    #[derive(Clone)]
    pub struct Server {
        tool_router: ToolRouter<Self>,
    }

    #[tool_router(server_handler)]
    impl Server {
        /// Set a ticket's status (no-op).
        #[tool(description = "Set a ticket's status (no-op).")]
        async fn noop(&self, Parameters(args): Parameters<TicketArgs>) -> String {
            black_box(&args);
            "ok".to_owned()
        }
    }

    /// rmcp's dispatch without a transport: the router is called directly with a request
    /// context, as rmcp's server loop calls it for every request it reads.
    pub struct Direct {
        server: Server,
        running: RunningService<RoleServer, Server>,
        next_id: i64,
    }

    impl Direct {
        /// Start the server over an in-memory pipe only to obtain a peer handle; calls then
        /// go straight to the router.
        pub fn new() -> Self {
            let server = Server {
                tool_router: Server::tool_router(),
            };
            let (a, _b) = tokio::io::duplex(1 << 16);
            let (read, write) = tokio::io::split(a);
            let running = serve_directly(server.clone(), (read, write), None);
            Direct {
                server,
                running,
                next_id: 0,
            }
        }

        /// Parse the arguments and dispatch the no-op through rmcp's router.
        pub async fn call(&mut self) -> CallToolResponse {
            self.next_id += 1;
            let arguments: JsonObject =
                serde_json::from_str(ARGUMENTS).expect("ARGUMENTS is a JSON object");
            let params =
                CallToolRequestParams::new(Cow::Borrowed("noop")).with_arguments(arguments);
            let context = RequestContext::new(
                NumberOrString::Number(self.next_id),
                self.running.peer().clone(),
            );
            self.server
                .tool_router
                .call(ToolCallContext::new(&self.server, params, context))
                .await
                .expect("the no-op succeeds")
        }
    }

    impl Default for Direct {
        fn default() -> Self {
            Self::new()
        }
    }

    /// What the no-op tools answer, as idem's MCP server states a non-object output:
    /// `{"result": "ok"}`.
    #[derive(Debug, Serialize, JsonSchema)]
    pub struct Answered {
        result: &'static str,
    }

    /// A plain rmcp server serving the no-op tools idem's MCP server serves, under the same
    /// names, with the same arguments and the same structured output: the baseline of the
    /// `mcp` row and the upstream of the `proxy` row. It ignores `_meta`.
    ///
    /// The router is built once and kept in a field (`#[tool_handler(router = ...)]`):
    /// `#[tool_router(server_handler)]` would build it again for every call, a cost no
    /// careful rmcp server pays and a slower baseline than the fairest one.
    #[derive(Clone)]
    pub struct Plain {
        tool_router: ToolRouter<Self>,
    }

    #[tool_handler(router = self.tool_router)]
    impl rmcp::ServerHandler for Plain {}

    #[tool_router]
    impl Plain {
        /// Set a ticket's status (no-op, read-only).
        #[tool(description = "Set a ticket's status (no-op, `read`).")]
        async fn noop_read(&self, Parameters(args): Parameters<TicketArgs>) -> Json<Answered> {
            black_box(&args);
            Json(Answered { result: "ok" })
        }

        /// Set a ticket's status (no-op, idempotent).
        #[tool(description = "Set a ticket's status (no-op, `idempotent_write`).")]
        async fn noop_idempotent_write(
            &self,
            Parameters(args): Parameters<TicketArgs>,
        ) -> Json<Answered> {
            black_box(&args);
            Json(Answered { result: "ok" })
        }
    }

    impl Plain {
        /// The server with its two tools.
        pub fn new() -> Self {
            Plain {
                tool_router: Self::tool_router(),
            }
        }
    }

    impl Default for Plain {
        fn default() -> Self {
            Self::new()
        }
    }
}
