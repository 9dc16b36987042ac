//! The handler: [`McpServer`], its settings, and rmcp's `ServerHandler` over a dispatcher.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, MetaObject,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use idem_registry::approval::Approver;
use idem_registry::dispatch::{DispatchError, Dispatched, Dispatcher, RunContext, ToolCall};
use idem_registry::export::{ExportError, Provider};

use crate::keys;
use crate::model::{META_RUN, META_STEP, meta_key, meta_str, result_of};

pub mod account;
pub mod approval;
pub mod inbox;

/// An MCP server over a [`Dispatcher`], acting for one tenant (a stdio server serves one
/// client).
///
/// ```no_run
/// # async fn run(dispatcher: idem::Dispatcher) -> Result<(), Box<dyn std::error::Error>> {
/// use idem::mcp::McpServer;
///
/// McpServer::new(dispatcher, "tenant-a")?.serve_stdio().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpServer {
    pub(crate) dispatcher: Arc<Dispatcher>,
    pub(crate) tenant: String,
    pub(crate) tools: Arc<Vec<Tool>>,
    pub(crate) authenticate: Option<Authenticate>,
    pub(crate) keyless_idempotent: bool,
    pub(crate) elicitation: Option<approval::Elicitation>,
    pub(crate) inbox: Option<inbox::InboxLinks>,
    pub(crate) keys: Arc<keys::KeySettings>,
    /// This connection's id: the re-send window's scope where the transport has no session.
    pub(crate) connection: Arc<str>,
    /// Whether the run account tool is served ([`McpServer::expose_run_account`]).
    pub(crate) account_tool: bool,
}

/// Who a request over HTTP acts for, from its headers: a tenant, or `None` to refuse it.
pub type Authenticate = Arc<dyn Fn(&http::HeaderMap) -> Option<String> + Send + Sync>;

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// A tool cannot be stated as MCP asks.
    #[error("a tool cannot be served over MCP: {0}")]
    Export(#[from] ExportError),
    /// The export did not read back as rmcp's tool type.
    #[error("the MCP export of `{tool}` did not read as an MCP tool: {reason}")]
    Tool {
        /// The tool.
        tool: String,
        /// What rmcp's reader said.
        reason: String,
    },
    /// The transport failed.
    #[error("the MCP transport failed: {0}")]
    Transport(String),
    /// The run account tool on a dispatcher that keeps no accounts, or whose registry has a
    /// tool of its name.
    #[error("the run account tool cannot be served: {0}")]
    RunAccount(String),
}

impl McpServer {
    /// A server for `tenant` over `dispatcher`'s registry.
    pub fn new(dispatcher: Dispatcher, tenant: impl Into<String>) -> Result<Self, McpServeError> {
        let exported = dispatcher.registry().export(Provider::Mcp)?;
        let entries = exported.as_array().cloned().unwrap_or_default();
        let tools = entries
            .into_iter()
            .map(|entry| {
                let tool = entry["name"].as_str().unwrap_or_default().to_owned();
                serde_json::from_value::<Tool>(entry).map_err(|e| McpServeError::Tool {
                    tool,
                    reason: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(McpServer {
            dispatcher: Arc::new(dispatcher),
            tenant: tenant.into(),
            tools: Arc::new(tools),
            authenticate: None,
            keyless_idempotent: false,
            elicitation: None,
            inbox: None,
            keys: Arc::default(),
            connection: keys::connection_id(),
            account_tool: false,
        })
    }

    /// The re-send window of every tool that records and sets none of its own (see
    /// [`keys`]): a call that brings no key is keyed by its session (or tenant), tool and
    /// arguments, and a re-issue within `window` replays it. `None` turns it off. On by
    /// default, for [`keys::DEFAULT_RESEND_WINDOW`]. A tool that needs approval keeps its
    /// record as long as an approval may be used, so its window is at least that long.
    ///
    /// ```no_run
    /// # fn f(server: idem::mcp::McpServer) {
    /// use std::time::Duration;
    ///
    /// let server = server.resend_window(Some(Duration::from_secs(120)));
    /// # let _ = server; }
    /// ```
    pub fn resend_window(mut self, window: Option<Duration>) -> Self {
        Arc::make_mut(&mut self.keys).set_window(window);
        self
    }

    /// `tool`'s own re-send window (`None`: off, so that a call of it without a key is
    /// refused with `missing_key`); a tool not served is refused.
    ///
    /// ```no_run
    /// # fn f(server: idem::mcp::McpServer) -> Result<(), idem::mcp::keys::KeySettingError> {
    /// // A tool a user may mean to call twice in a row: no window, the model gives keys.
    /// let server = server.tool_resend_window("add_note", None)?.model_key("add_note")?;
    /// # let _ = server; Ok(()) }
    /// ```
    pub fn tool_resend_window(
        mut self,
        tool: &str,
        window: Option<Duration>,
    ) -> Result<Self, keys::KeySettingError> {
        if self.dispatcher.registry().get(tool).is_none() {
            return Err(keys::KeySettingError::UnknownTool { tool: tool.into() });
        }
        Arc::make_mut(&mut self.keys).set_tool_window(tool, window);
        Ok(self)
    }

    /// Scope the re-send window by the tenant alone rather than by the session
    /// ([`keys::ResendScope::Tenant`]), so that a re-issue after a reconnect or a restart is
    /// caught too.
    pub fn resend_scope(mut self, scope: keys::ResendScope) -> Self {
        Arc::make_mut(&mut self.keys).scope = scope;
        self
    }

    /// Let the model key `tool`'s calls: its published input schema gains an optional
    /// string parameter, [`keys::MODEL_KEY_PARAMETER`], described for the model (a unique id
    /// for this action, reused only to retry it), which keys the call and is taken out of
    /// the arguments before the tool sees them. A key in `_meta` still comes first.
    pub fn model_key(mut self, tool: &str) -> Result<Self, keys::KeySettingError> {
        let records = self
            .dispatcher
            .registry()
            .get(tool)
            .map(|t| t.class().records());
        let Some(records) = records else {
            return Err(keys::KeySettingError::UnknownTool { tool: tool.into() });
        };
        Arc::make_mut(&mut self.keys).add_model_key(&mut self.tools, tool, records)?;
        Ok(self)
    }

    /// This server for a new connection: its own re-send scope where the transport has no
    /// session of its own.
    pub(crate) fn for_connection(mut self) -> Self {
        self.connection = keys::connection_id();
        self
    }

    /// The session a request came in: Streamable HTTP's `Mcp-Session-Id`; over stdio, this
    /// connection's id. `None` for an HTTP request without a session (the 2026-07-28
    /// revision has none, and rmcp makes a server per such request): the tenant is its scope.
    fn session_of(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        let Some(parts) = context.extensions.get::<http::request::Parts>() else {
            return Some(self.connection.to_string());
        };
        parts
            .headers
            .get("mcp-session-id")
            .and_then(|id| id.to_str().ok())
            .map(str::to_owned)
    }

    /// Accept an `idempotent_write` call without key material, keyed by its arguments
    /// ([`ToolCall::with_key_by_arguments`]: the dispatcher keys it by their fingerprint with
    /// every secret sealed, so no secret argument can be recovered from the key). It comes
    /// before the tool's natural key and the re-send window. The trade-off: two calls with
    /// the same arguments within the tool's TTL are one call (the second replays the first),
    /// which is what re-sending after a broken stream needs, and wrong for a client that
    /// means to do the same thing twice. Other writes still need a key.
    pub fn keyless_idempotent_writes(mut self, accept: bool) -> Self {
        self.keyless_idempotent = accept;
        self
    }

    /// Let the client's user approve irreversible calls: a call held for approval is
    /// answered with an elicitation that shows the tool and its exact arguments, and the
    /// user's "yes" is an approval signed by `approver` (whose key must be one of the
    /// dispatcher's approval keys, or the call is refused as unsigned). Use this where the
    /// person at the client is who may approve: whoever drives the client can then approve.
    /// The question can be answered for [`approval::DEFAULT_ELICITATION_VALIDITY`]; see
    /// [`approval`] for the rounds and what is refused.
    ///
    /// ```no_run
    /// # fn f(server: idem::mcp::McpServer, key: idem::ApprovalKey) {
    /// use idem::Approver;
    ///
    /// let server = server.approve_by_elicitation(Approver::new("the MCP client's user", key));
    /// # let _ = server; }
    /// ```
    pub fn approve_by_elicitation(self, approver: Approver) -> Self {
        self.approve_by_elicitation_for(approver, approval::DEFAULT_ELICITATION_VALIDITY)
    }

    /// Send a client that can open URLs (URL-mode elicitation) to the approval inbox's page
    /// of an irreversible call held for approval (`idem ui` at `inbox`, e.g.
    /// `https://ops.example.com`), with a link signed by `key`, the inbox's approval key
    /// (`IDEM_APPROVAL_KEY`), which must also be one of the dispatcher's. A person decides
    /// there, under their own name; the client's retry runs the call once if approved. See
    /// [`inbox`].
    ///
    /// ```no_run
    /// # fn f(server: idem::mcp::McpServer, key: idem::ApprovalKey) {
    /// let server = server.approve_in_inbox("http://127.0.0.1:8090", key);
    /// # let _ = server; }
    /// ```
    pub fn approve_in_inbox(
        self,
        inbox: impl Into<String>,
        key: idem_registry::ApprovalKey,
    ) -> Self {
        self.approve_in_inbox_for(inbox, key, inbox::DEFAULT_LINK_VALIDITY)
    }

    /// [`approve_in_inbox`](Self::approve_in_inbox), with links the inbox shows for
    /// `validity` (on the store's clock).
    pub fn approve_in_inbox_for(
        mut self,
        inbox: impl Into<String>,
        key: idem_registry::ApprovalKey,
        validity: Duration,
    ) -> Self {
        self.inbox = Some(inbox::InboxLinks::new(inbox.into(), key, validity));
        self
    }

    /// [`approve_by_elicitation`](Self::approve_by_elicitation), with questions that can be
    /// answered for `validity` (on this process's clock).
    pub fn approve_by_elicitation_for(mut self, approver: Approver, validity: Duration) -> Self {
        self.elicitation = Some(approval::Elicitation::new(approver, validity));
        self
    }

    /// Authenticate every request by its HTTP headers: `who` gives the tenant it acts for
    /// (e.g. the tenant of a bearer token), or `None`, and the request is refused. A server
    /// that authenticates serves only over HTTP: a stdio request has no headers.
    ///
    /// ```no_run
    /// # fn f(server: idem::mcp::McpServer) {
    /// let server = server.authenticate(|headers| {
    ///     match headers.get("authorization")?.to_str().ok()? {
    ///         "Bearer token-of-acme" => Some("acme".to_owned()),
    ///         _ => None,
    ///     }
    /// });
    /// # let _ = server; }
    /// ```
    pub fn authenticate(
        mut self,
        who: impl Fn(&http::HeaderMap) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.authenticate = Some(Arc::new(who));
        self
    }

    /// The tenant a request acts for: the configured one, or, when the server
    /// authenticates, the one its headers give (else the request is refused).
    fn tenant(&self, context: &RequestContext<RoleServer>) -> Result<String, ErrorData> {
        let Some(who) = &self.authenticate else {
            return Ok(self.tenant.clone());
        };
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| who(&parts.headers))
            .ok_or_else(|| {
                ErrorData::invalid_request(
                    "unauthenticated: this server needs credentials it accepts (e.g. `Authorization: Bearer <token>`)",
                    None,
                )
            })
    }

    /// The run a call acts in, from its tenant and the request's `_meta`.
    fn run(tenant: String, meta: &MetaObject) -> Result<RunContext, ErrorData> {
        let run = RunContext::new(tenant);
        let run_id = meta_str(meta, META_RUN)?;
        let step = match meta.get(META_STEP) {
            None => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("`_meta` \"{META_STEP}\" must be a non-negative integer, got {v}"),
                    None,
                )
            })?),
        };
        Ok(match (run_id, step) {
            (Some(run_id), Some(step)) => run.with_run(run_id, step),
            _ => run,
        })
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("idem", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.tenant(&context)?;
        let mut tools = self.tools.to_vec();
        if self.account_tool {
            tools.push(account::tool());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tenant = self.tenant(&context)?;
        let name = request.name.to_string();
        if self.account_tool && name == account::RUN_ACCOUNT_TOOL {
            let run = Self::run(tenant, &context.meta)?;
            let session = self.session_of(&context);
            return self
                .run_account(&run, session.as_deref(), request.arguments.as_ref())
                .await
                .map(Into::into);
        }
        let registry = self.dispatcher.registry();
        let Some(tool) = registry.get(&name) else {
            // The client named a tool the server never listed: its mistake, in the
            // dispatcher's words (with the nearest name).
            let unknown = DispatchError::UnknownTool {
                suggestion: registry.nearest(&name).map(str::to_owned),
                name,
            };
            return Err(ErrorData::invalid_params(unknown.to_string(), None));
        };
        let (class, may_need_approval) = (tool.class(), tool.may_need_approval());
        let mut arguments = request.arguments.map_or_else(|| json!({}), Value::Object);
        let model_key = match self.keys.takes_model_key(&name) {
            true => match keys::take_model_key(&mut arguments) {
                Ok(key) => key,
                // Refused before anything is recorded, as the dispatcher refuses arguments.
                Err(message) => {
                    return result_of(Err(DispatchError::InvalidArguments {
                        tool: name,
                        pointer: format!("/{}", keys::MODEL_KEY_PARAMETER),
                        message,
                    }))
                    .map(Into::into);
                }
            },
            false => None,
        };
        let mut call = ToolCall::new(name, arguments);
        let mut run = Self::run(tenant, &context.meta)?;
        // A client that sends no run id has its session accounted as one.
        if run.run_id.is_none()
            && self.dispatcher.keeps_run_accounts()
            && let Some(session) = self.session_of(&context)
        {
            run = run.accounted_as(account::session_run(&session));
        }
        let meta = meta_key(&context.meta)?;
        let window = self.keys.window_of(&call.name);
        let facts = keys::KeyFacts {
            meta_key: meta.is_some(),
            model_key: model_key.is_some(),
            by_arguments: self.keyless_idempotent
                && class == idem_core::ToolClass::IdempotentWrite
                && run.run_id.is_none(),
            window: window.is_some(),
            tenant_scope: self.keys.scope == keys::ResendScope::Tenant,
            may_need_approval,
        };
        match keys::keyed_by(facts) {
            keys::KeyedBy::Meta => call = call.with_key(meta.unwrap_or_default()),
            keys::KeyedBy::Model => {
                call = call.with_key(format!("model:{}", model_key.unwrap_or_default()));
            }
            // The dispatcher makes the key of the sealed arguments: a hash of them as sent
            // would give a secret among them away.
            keys::KeyedBy::Arguments => call = call.with_key_by_arguments(),
            keys::KeyedBy::Window { by_tenant } => {
                let session = match by_tenant {
                    true => None,
                    false => self.session_of(&context),
                };
                if let Some(window) = window {
                    call = keys::with_window(call, window, session.as_deref());
                }
            }
            _ => {}
        }
        if let Some(state) = &request.request_state {
            let responses = request.input_responses.as_ref();
            return self.answered(&call, &run, state, responses, &context).await;
        }
        self.dispatch(&call, &run, &context).await
    }
}

impl McpServer {
    /// Dispatch `call`; a cancelled request drops the dispatch (the dispatcher settles its
    /// claim). A call held for approval may be answered with a question instead.
    pub(crate) async fn dispatch(
        &self,
        call: &ToolCall,
        run: &RunContext,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let dispatched = self.dispatch_cancellable(call, run, context).await?;
        if let Some(asked) = self.ask_instead(call, run, &dispatched, context).await {
            return asked;
        }
        result_of(dispatched).map(Into::into)
    }

    /// The dispatcher's answer to `call`, or a protocol error if the client cancels the
    /// request first (dropping the dispatch; the dispatcher settles its claim).
    pub(crate) async fn dispatch_cancellable(
        &self,
        call: &ToolCall,
        run: &RunContext,
        context: &RequestContext<RoleServer>,
    ) -> Result<Result<Dispatched, DispatchError>, ErrorData> {
        tokio::select! {
            result = self.dispatcher.dispatch(call, run) => Ok(result),
            () = context.ct.cancelled() => {
                Err(ErrorData::internal_error("the call was cancelled", None))
            }
        }
    }
}
