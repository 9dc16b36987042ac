//! The run account tool: a read-only tool a server can expose
//! ([`McpServer::expose_run_account`]) that tells the model, from the store, what became of
//! the calls of its run: answered (a read), applied, replayed, refused and why, unknown,
//! waiting for a person, undone; each with its tool's class and how many times its body ran.
//! A client that sends a run id in `_meta` (`io.idem/run-id`) is accounted under it;
//! one that sends none (most hosts) under its session, as `session:<id>`.

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Value, json};

use idem_registry::dispatch::RunContext;

use super::{McpServeError, McpServer};

/// The tool's name.
pub const RUN_ACCOUNT_TOOL: &str = "idem_run_account";

/// The run id a session's calls are accounted under.
pub fn session_run(session: &str) -> String {
    format!("session:{session}")
}

/// The tool as `tools/list` shows it.
pub(crate) fn tool() -> Tool {
    let entry = json!({
        "name": RUN_ACCOUNT_TOOL,
        "description": "What became of this conversation's tool calls, as recorded: which reads were answered (no effect), which writes were applied, replayed (not done again), refused and why, are of unknown outcome, wait for a person's approval, or were undone; each with its tool's class and how many times it ran. Read it before telling the user what was done. Read-only.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "run_id": {
                    "type": "string",
                    "description": "The run to account for; leave it out for this conversation's."
                }
            },
            "additionalProperties": false
        },
        "annotations": {
            "title": "Account of this run's tool calls",
            "readOnlyHint": true,
            "destructiveHint": false,
            "idempotentHint": true,
            "openWorldHint": false
        }
    });
    serde_json::from_value(entry).expect("the run account tool reads as an MCP tool")
}

impl McpServer {
    /// Serve the run account tool ([`RUN_ACCOUNT_TOOL`]) beside the registry's tools. The
    /// dispatcher must keep run accounts (`Dispatcher::with_run_accounts`), and no tool of
    /// the registry may have its name.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use idem::{Dispatcher, MemoryStore, Registry};
    /// use idem::mcp::McpServer;
    ///
    /// let dispatcher = Dispatcher::new(Registry::builder().build().unwrap(), Arc::new(MemoryStore::new()))
    ///     .unwrap()
    ///     .with_run_accounts(std::time::Duration::from_secs(24 * 3600));
    /// let server = McpServer::new(dispatcher, "tenant-a").unwrap().expose_run_account().unwrap();
    /// # let _ = server;
    /// ```
    pub fn expose_run_account(mut self) -> Result<Self, McpServeError> {
        if !self.dispatcher.keeps_run_accounts() {
            return Err(McpServeError::RunAccount(
                "the dispatcher keeps no run accounts: build it with `Dispatcher::with_run_accounts(retention)`".into(),
            ));
        }
        if self.dispatcher.registry().get(RUN_ACCOUNT_TOOL).is_some() {
            return Err(McpServeError::RunAccount(format!(
                "the registry has a tool named `{RUN_ACCOUNT_TOOL}`: rename it"
            )));
        }
        self.account_tool = true;
        Ok(self)
    }

    /// Answer the run account tool for `run` (from the request's `_meta`), in `session`.
    pub(crate) async fn run_account(
        &self,
        run: &RunContext,
        session: Option<&str>,
        arguments: Option<&JsonObject>,
    ) -> Result<CallToolResult, ErrorData> {
        let asked = match arguments.and_then(|a| a.get("run_id")) {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
            Some(other) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "`run_id` must be a non-empty string, got {other}"
                ))]));
            }
        };
        let Some(run_id) = asked
            .or_else(|| run.run_id.clone())
            .or_else(|| session.map(session_run))
        else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "this request names no run and has no session: give `run_id`",
            )]));
        };
        let account = self
            .dispatcher
            .run_account(&run.tenant, &run_id)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let structured = serde_json::to_value(&account)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let mut result = CallToolResult::structured(structured);
        result.content = vec![ContentBlock::text(account.to_string())];
        Ok(result)
    }
}
