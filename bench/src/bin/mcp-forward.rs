//! The proxy row's second baseline: a plain rmcp proxy over stdio that forwards every
//! `tools/call` (with its `_meta`) to an upstream it starts, and its answer back, deciding
//! nothing and recording nothing. Behind it and behind `idem mcp-proxy` the upstream is the
//! same, so the gap between the two is idem's, and the gap between it and the bare upstream
//! is the second hop's (one more process, two more pipes, every message parsed and written
//! twice more).
//!
//! `mcp-forward -- <upstream command> [args...]`

use std::process::ExitCode;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData, Peer, RoleClient, RoleServer, ServerHandler, ServiceExt};
use tokio::process::Command;

/// The proxy: a client of the upstream, and the upstream's tools as it listed them.
#[derive(Clone)]
struct Forward {
    upstream: Peer<RoleClient>,
    tools: Vec<Tool>,
}

impl ServerHandler for Forward {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !context.meta.is_empty() {
            request.meta = Some(context.meta);
        }
        self.upstream
            .call_tool(request)
            .await
            .map(Into::into)
            .map_err(|e| ErrorData::internal_error(format!("upstream: {e}"), None))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(("--", [program, rest @ ..])) = args.split_first().map(|(a, r)| (a.as_str(), r))
    else {
        eprintln!("usage: mcp-forward -- <upstream command> [args...]");
        return ExitCode::from(2);
    };
    let served = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let mut command = Command::new(program);
                command.args(rest);
                let transport =
                    TokioChildProcess::new(command).map_err(|e| format!("{program}: {e}"))?;
                let upstream = ().serve(transport).await.map_err(|e| e.to_string())?;
                let tools = upstream.list_all_tools().await.map_err(|e| e.to_string())?;
                let forward = Forward {
                    upstream: upstream.peer().clone(),
                    tools,
                };
                let running = forward
                    .serve(rmcp::transport::stdio())
                    .await
                    .map_err(|e| e.to_string())?;
                running.waiting().await.map_err(|e| e.to_string())?;
                upstream.cancel().await.map_err(|e| e.to_string())?;
                Ok::<_, String>(())
            })
        });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-forward: {e}");
            ExitCode::FAILURE
        }
    }
}
