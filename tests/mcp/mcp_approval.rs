//! Approval over MCP's `input_required` rounds (`McpServer::approve_by_elicitation`), driven
//! round by round by rmcp's client in process: the question, an accepting and a declining
//! answer, and every `requestState` that must be refused (forged, altered, another call's,
//! another tenant's, expired, answered before).
#![cfg(feature = "mcp")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::mcp::approval::APPROVAL_INPUT;
use idem::mcp::{META_DEDUPLICATED, META_ERROR, META_KEY, McpServer};
use idem::prelude::*;
use idem::store::approvals::ApprovalFilter;
use idem::{Approver, Store, ToolDef};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientConfig, ElicitationCapability,
    ErrorCode, FormElicitationCapability, InitializeResult, InputRequest, InputRequiredResult,
    InputResponses, JsonObject, MetaObject, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{RunningService, ServiceError, serve_directly};
use rmcp::{ClientHandler, RoleClient, RoleServer};
use serde_json::{Value, json};

/// Two irreversible tools, counting their runs.
fn registry(runs: &Arc<AtomicUsize>) -> Registry {
    let mut registry = Registry::builder();
    for name in ["delete_account", "close_account"] {
        let runs = runs.clone();
        let tool = ToolDef::builder(name, ToolClass::Irreversible)
            .description("Delete (or close) a customer's account.")
            .input_schema(json!({
                "type": "object",
                "properties": {"customer": {"type": "string"}},
                "required": ["customer"]
            }))
            .handler(move |_: ToolContext, args: Value| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, ToolError>(json!({"deleted": args["customer"]}))
                }
            })
            .build()
            .unwrap();
        registry = registry.add(tool);
    }
    registry.build().unwrap()
}

/// rmcp's client, stating its capabilities in every request.
type Client = RunningService<RoleClient, ClientConfig>;

struct Setup {
    runs: Arc<AtomicUsize>,
    store: Arc<dyn Store>,
    tenant: &'static str,
    validity: Duration,
    elicits: bool,
}

impl Setup {
    fn new() -> Self {
        Setup {
            runs: Arc::new(AtomicUsize::new(0)),
            store: Arc::new(MemoryStore::new()),
            tenant: "tenant-mcp",
            validity: Duration::from_secs(600),
            elicits: true,
        }
    }

    fn dispatcher(&self) -> Dispatcher {
        support::dispatcher::dispatcher(registry(&self.runs), self.store.clone())
    }

    /// A client of a server that approves by elicitation, signing as "mcp-user" with the
    /// tests' approval key.
    fn connect(&self) -> Client {
        let approver = Approver::new("mcp-user", support::dispatcher::approval_key());
        let server = McpServer::new(self.dispatcher(), self.tenant)
            .unwrap()
            .approve_by_elicitation_for(approver, self.validity);
        // What the server knows of its client: the 2026-07-28 revision, and whether it
        // can answer a form elicitation.
        let mut client = ().get_info();
        client.protocol_version = ProtocolVersion::V_2026_07_28;
        if self.elicits {
            client.capabilities.elicitation =
                Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        }
        connect_server(server, client)
    }
}

fn connect_server(server: McpServer, client: ClientConfig) -> Client {
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    let running =
        serve_directly::<RoleServer, _, _, _, _>(server, server_side, Some(client.clone()));
    std::mem::forget(running); // lives as long as the test's runtime
    let mut peer = InitializeResult::default();
    peer.protocol_version = ProtocolVersion::V_2026_07_28;
    serve_directly::<RoleClient, _, _, _, _>(client, client_side, Some(peer.into()))
}

fn params(tool: &str, customer: &str, key: &str) -> CallToolRequestParams {
    let Value::Object(arguments) = json!({ "customer": customer }) else {
        unreachable!()
    };
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let mut meta = MetaObject::new();
    meta.insert(META_KEY.into(), Value::from(key));
    params.meta = Some(RequestMetaObject::from(meta));
    params
}

/// The retry of `params` with `state` and an answer.
fn retry(mut params: CallToolRequestParams, state: &str, answer: Value) -> CallToolRequestParams {
    let mut responses = InputResponses::new();
    responses.insert(APPROVAL_INPUT.to_owned(), answer);
    params.input_responses = Some(responses);
    params.request_state = Some(state.to_owned());
    params
}

fn accept() -> Value {
    json!({"action": "accept", "content": {"approve": true}})
}

async fn ask(client: &Client, p: CallToolRequestParams) -> InputRequiredResult {
    match client.call_tool_once(p).await.unwrap() {
        CallToolResponse::InputRequired(asked) => asked,
        other => panic!("expected a question, got {other:?}"),
    }
}

async fn complete(client: &Client, p: CallToolRequestParams) -> CallToolResult {
    match client.call_tool_once(p).await.unwrap() {
        CallToolResponse::Complete(result) => result,
        other => panic!("expected a result, got {other:?}"),
    }
}

async fn protocol_error(client: &Client, p: CallToolRequestParams) -> String {
    match client.call_tool_once(p).await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
            e.message.to_string()
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

fn meta_of(result: &CallToolResult) -> JsonObject {
    result.meta.clone().map(|m| m.0).unwrap_or_default()
}

fn error_code(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    meta_of(result)[META_ERROR].clone()
}

/// The question's message and `requestState`.
fn question(asked: &InputRequiredResult) -> (String, String) {
    let requests = asked.input_requests.as_ref().expect("input requests");
    let Some(InputRequest::Elicitation(elicit)) = requests.get(APPROVAL_INPUT) else {
        panic!("expected an elicitation under {APPROVAL_INPUT}: {requests:?}");
    };
    let shown = serde_json::to_value(&elicit.params).unwrap();
    assert_eq!(shown["mode"], "form");
    assert_eq!(shown["requestedSchema"]["required"], json!(["approve"]));
    let message = shown["message"].as_str().unwrap().to_owned();
    (
        message,
        asked.request_state.clone().expect("a request state"),
    )
}

#[tokio::test]
async fn an_accepted_question_runs_the_call_once_and_its_state_only_once() {
    let setup = Setup::new();
    let client = setup.connect();
    let call = || params("delete_account", "cus_42", "k-delete");
    let (message, state) = question(&ask(&client, call()).await);
    assert!(message.contains("`delete_account`"), "{message}");
    assert!(
        message.contains("\"customer\": \"cus_42\""),
        "the exact arguments: {message}"
    );
    assert!(message.contains("k-delete"), "the key: {message}");
    assert_eq!(
        setup.runs.load(Ordering::SeqCst),
        0,
        "nothing runs on a question"
    );
    // The question stands in the store as every pending approval does.
    let pending = setup
        .dispatcher()
        .approvals()
        .pending(&ApprovalFilter::default())
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);

    let done = complete(&client, retry(call(), &state, accept())).await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(done.structured_content, Some(json!({"deleted": "cus_42"})));
    assert_eq!(setup.runs.load(Ordering::SeqCst), 1);

    // The same answer again: the decision is made, the state refused, nothing runs.
    let again = complete(&client, retry(call(), &state, accept())).await;
    assert_eq!(error_code(&again), json!("approval_answered"));
    assert!(format!("{:?}", again.content).contains("without `requestState`"));
    // The call re-sent as the text says: the recorded outcome, no question, no run.
    let replayed = complete(&client, call()).await;
    assert_eq!(meta_of(&replayed)[META_DEDUPLICATED], json!(true));
    assert_eq!(replayed.structured_content, done.structured_content);
    assert_eq!(setup.runs.load(Ordering::SeqCst), 1);
    // Who approved, in the store.
    let all = ApprovalFilter {
        pending_only: false,
        ..ApprovalFilter::default()
    };
    let decided = setup.dispatcher().approvals().pending(&all).await.unwrap();
    assert_eq!(
        decided[0].decision.as_ref().map(|d| d.by.as_str()),
        Some("mcp-user")
    );
}

#[tokio::test]
async fn a_declined_question_denies_the_call() {
    let setup = Setup::new();
    let client = setup.connect();
    let call = || params("delete_account", "cus_7", "k-decline");
    let (_, state) = question(&ask(&client, call()).await);
    let answer = json!({"action": "decline"});
    let denied = complete(&client, retry(call(), &state, answer)).await;
    assert_eq!(error_code(&denied), json!("approval_denied"));
    assert!(format!("{:?}", denied.content).contains("declined in the MCP client"));
    // "approve": false is a denial too, and the denial stands: no new question.
    let again = complete(&client, call()).await;
    assert_eq!(error_code(&again), json!("approval_denied"));
    assert_eq!(setup.runs.load(Ordering::SeqCst), 0);

    let (_, state) = question(&ask(&client, params("close_account", "cus_7", "k-no")).await);
    let no = json!({"action": "accept", "content": {"approve": false}});
    let denied = complete(
        &client,
        retry(params("close_account", "cus_7", "k-no"), &state, no),
    )
    .await;
    assert_eq!(error_code(&denied), json!("approval_denied"));
    // A dismissed question decides nothing: asking again asks.
    let call = || params("close_account", "cus_8", "k-dismiss");
    let (_, state) = question(&ask(&client, call()).await);
    let dismissed = complete(&client, retry(call(), &state, json!({"action": "cancel"}))).await;
    assert_eq!(error_code(&dismissed), json!("approval_required"));
    question(&ask(&client, call()).await);
    assert_eq!(setup.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_forged_or_altered_state_is_a_protocol_error() {
    let setup = Setup::new();
    let client = setup.connect();
    let call = || params("delete_account", "cus_1", "k-forged");
    let (_, state) = question(&ask(&client, call()).await);
    let mut altered = state.clone().into_bytes();
    let middle = altered.len() / 2;
    altered[middle] = if altered[middle] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for forged in ["not-a-state", "rs2.AAAA.BBBB", altered.as_str()] {
        let message = protocol_error(&client, retry(call(), forged, accept())).await;
        assert!(
            message.contains("not issued by this server"),
            "{forged}: {message}"
        );
    }
    // An answer that is not one, or none at all.
    let message = protocol_error(&client, retry(call(), &state, json!({"approve": true}))).await;
    assert!(message.contains("not an elicitation result"), "{message}");
    let mut bare = call();
    bare.request_state = Some(state.clone());
    let message = protocol_error(&client, bare).await;
    assert!(message.contains(APPROVAL_INPUT), "{message}");
    assert_eq!(setup.runs.load(Ordering::SeqCst), 0);
    // The genuine state still works after all that.
    let done = complete(&client, retry(call(), &state, accept())).await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(setup.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_state_names_one_call_of_one_tenant() {
    let setup = Setup::new();
    let client = setup.connect();
    let (_, state) = question(&ask(&client, params("delete_account", "cus_a", "k-a")).await);
    for (other, differs) in [
        (params("delete_account", "cus_b", "k-a"), "arguments"),
        (params("delete_account", "cus_a", "k-b"), "idempotency key"),
        (params("close_account", "cus_a", "k-a"), "tool"),
    ] {
        let message = protocol_error(&client, retry(other, &state, accept())).await;
        assert!(
            message.contains("another call") && message.contains(differs),
            "{message}"
        );
    }
    // Another tenant's server on the same store, with the same approver.
    let mut other_tenant = Setup::new();
    other_tenant.store = setup.store.clone();
    other_tenant.tenant = "tenant-other";
    let theirs = other_tenant.connect();
    let message = protocol_error(
        &theirs,
        retry(params("delete_account", "cus_a", "k-a"), &state, accept()),
    )
    .await;
    assert!(message.contains("not issued by this server"), "{message}");
    assert_eq!(setup.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_yes_to_other_arguments_pending_under_the_key_approves_nothing() {
    let setup = Setup::new();
    let client = setup.connect();
    // Pending under the key: the call with cus_a. Then the same key with cus_b.
    question(&ask(&client, params("delete_account", "cus_a", "k-same")).await);
    let b = || params("delete_account", "cus_b", "k-same");
    let (message, state) = question(&ask(&client, b()).await);
    assert!(message.contains("cus_b"), "{message}");
    let refused = complete(&client, retry(b(), &state, accept())).await;
    assert_eq!(error_code(&refused), json!("key_reused"));
    // Nothing was approved: the call with cus_a is still pending, and nothing ran.
    let pending = setup
        .dispatcher()
        .approvals()
        .pending(&ApprovalFilter::default())
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert!(pending[0].decision.is_none());
    assert_eq!(pending[0].arguments, json!({"customer": "cus_a"}));
    assert_eq!(setup.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_no_to_other_arguments_pending_under_the_key_denies_nothing() {
    let setup = Setup::new();
    let client = setup.connect();
    // Pending under the key: the call with cus_a. The question shown is for cus_b.
    question(&ask(&client, params("delete_account", "cus_a", "k-same")).await);
    let b = || params("delete_account", "cus_b", "k-same");
    let (message, state) = question(&ask(&client, b()).await);
    assert!(message.contains("cus_b"), "{message}");
    let decline = json!({"action": "accept", "content": {"approve": false}});
    let refused = complete(&client, retry(b(), &state, decline)).await;
    assert_eq!(error_code(&refused), json!("key_reused"));
    // Nothing was denied: the call with cus_a, never shown, is still pending.
    let pending = setup
        .dispatcher()
        .approvals()
        .pending(&ApprovalFilter::default())
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert!(pending[0].decision.is_none(), "{:?}", pending[0].decision);
    assert_eq!(pending[0].arguments, json!({"customer": "cus_a"}));
    assert_eq!(setup.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_expired_state_is_refused_and_asking_again_asks() {
    let mut setup = Setup::new();
    setup.validity = Duration::from_millis(1);
    let client = setup.connect();
    let call = || params("delete_account", "cus_1", "k-expired");
    let (_, state) = question(&ask(&client, call()).await);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let late = complete(&client, retry(call(), &state, accept())).await;
    assert_eq!(error_code(&late), json!("approval_expired"));
    assert_eq!(setup.runs.load(Ordering::SeqCst), 0);
    question(&ask(&client, call()).await);
}

#[tokio::test]
async fn two_answers_racing_with_one_state_run_the_call_once() {
    let setup = Setup::new();
    let client = Arc::new(setup.connect());
    let call = || params("delete_account", "cus_9", "k-race");
    let (_, state) = question(&ask(&client, call()).await);
    let answers = (0..6).map(|_| {
        let (client, p) = (client.clone(), retry(call(), &state, accept()));
        tokio::spawn(async move { complete(&client, p).await })
    });
    let mut ran = 0;
    for answer in answers {
        let result = answer.await.unwrap();
        if result.is_error != Some(true) {
            ran += 1;
        } else {
            assert_eq!(
                meta_of(&result)[META_ERROR],
                json!("approval_answered"),
                "{result:?}"
            );
        }
    }
    assert_eq!(ran, 1, "one answer is recorded and runs the call");
    assert_eq!(setup.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_that_cannot_elicit_gets_the_pending_refusal_for_an_operator() {
    let mut setup = Setup::new();
    setup.elicits = false;
    let client = setup.connect();
    let call = || params("delete_account", "cus_3", "k-operator");
    let pending = complete(&client, call()).await;
    assert_eq!(error_code(&pending), json!("approval_required"));
    // An operator approves from the store; the re-sent call runs.
    let dispatcher = setup.dispatcher();
    let listed = dispatcher
        .approvals()
        .pending(&ApprovalFilter::default())
        .await
        .unwrap();
    let approver = support::dispatcher::approver();
    dispatcher
        .approvals()
        .approve(&listed[0].key, &approver, None, None)
        .await
        .unwrap();
    let done = complete(&client, call()).await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(setup.runs.load(Ordering::SeqCst), 1);
}
