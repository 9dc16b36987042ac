//! Approval over MCP's multi-round-trip requests (the 2026-07-28 revision's
//! `input_required` results), for a server made with [`McpServer::approve_by_elicitation`].
//!
//! 1. An irreversible call the dispatcher holds for approval (it is recorded as pending in
//!    the store, as for every other client) is answered, when the client can elicit, with
//!    one form elicitation under [`APPROVAL_INPUT`]: the tool, its exact arguments (secrets
//!    sealed) and its key, and a boolean `approve`. The result's `requestState` is sealed
//!    (HMAC, rmcp's codec, with a key derived from the approver's) to the tenant and
//!    namespace, and names the tool, key and fingerprint of the call; it expires.
//! 2. The client retries the call with the user's answer and the `requestState`. A state
//!    this server did not seal, or sealed for another tenant, or that was altered, or that
//!    names another call, is a protocol error; an expired one is a refusal (ask again). An
//!    accepting answer approves the pending call in the store, signed by the approver, and
//!    dispatches it; a declining one denies it. Either is recorded once: a second answer
//!    with the same state finds the decision made and is refused, so the state is single
//!    use. The first round claims nothing, so the two rounds are one call.
//!
//! A client that cannot elicit gets the pending refusal, and an operator decides in the
//! store, as without this.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationSchema, InputRequest, InputRequests,
    InputRequiredResult, InputResponses, MetaObject, RequestStateCodec, RequestStateError,
    SealOptions,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::McpServer;
use idem_core::store::approvals::DecisionRefused;
use idem_registry::approval::{ApprovalRequest, Approver, DecisionError};
use idem_registry::dispatch::ToolCall;
use idem_registry::{DispatchError, RunContext};

/// The name of the input request that asks for approval, and of its answer in the retry's
/// `inputResponses`.
pub use crate::model::APPROVAL_INPUT;

/// How long an approval question may be answered: 10 minutes by default
/// ([`McpServer::approve_by_elicitation`]).
pub const DEFAULT_ELICITATION_VALIDITY: Duration = Duration::from_secs(600);

/// The property of the elicited form: `true` approves.
const APPROVE: &str = "approve";

/// Answering by elicitation: who signs the approvals, and how the question's state is sealed.
#[derive(Clone)]
pub(crate) struct Elicitation {
    approver: Approver,
    codec: Arc<RequestStateCodec>,
    validity: Duration,
}

/// What a `requestState` names (signed, not secret: the client can read it).
#[derive(Serialize, Deserialize)]
struct Question {
    tool: String,
    key: String,
    fingerprint: String,
}

/// Why a `requestState` is not believed.
enum StateRefused {
    /// Not sealed by this server for this tenant, or altered.
    Forged,
    /// Its time to be answered is over.
    Expired,
    /// It names another call: which part differs.
    OtherCall(&'static str),
}

/// The user's answer.
enum Answer {
    Approve,
    Decline,
    Dismissed,
}

impl Elicitation {
    pub(crate) fn new(approver: Approver, validity: Duration) -> Self {
        let secret = approver.derived_secret(b"mcp/request-state/v1");
        Elicitation {
            approver,
            codec: Arc::new(
                RequestStateCodec::try_new(secret.to_vec())
                    .unwrap_or_else(|_| unreachable!("a 32-byte key is long enough")),
            ),
            validity,
        }
    }

    /// The context a state is bound to without carrying it.
    fn bound_to(request: &ApprovalRequest) -> Vec<u8> {
        format!(
            "idem/mcp-approval\0{}\0{}",
            request.namespace, request.tenant
        )
        .into_bytes()
    }

    /// Round one: the question for `request`, made with the client's key `sent` (if it sent
    /// one: the key the client knows the call by).
    fn ask(
        &self,
        request: &ApprovalRequest,
        sent: Option<&str>,
    ) -> Result<InputRequiredResult, ErrorData> {
        let question = Question {
            tool: request.tool.clone(),
            key: request.key.as_str().to_owned(),
            fingerprint: request.fingerprint.to_hex(),
        };
        let bound = Self::bound_to(request);
        let options = SealOptions::new()
            .associated_data(&bound)
            .ttl(self.validity);
        let state = self
            .codec
            .seal_json_with(&question, &options)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let arguments = serde_json::to_string_pretty(&request.arguments).unwrap_or_default();
        let minutes = self.validity.as_secs().div_ceil(60);
        let message = format!(
            "Approve `{}`? It runs once, with exactly these arguments:\n\n{arguments}\n\nIdempotency key: {}. This question expires in {minutes} min.",
            request.tool,
            sent.unwrap_or(request.key.as_str()),
        );
        let schema = ElicitationSchema::builder()
            .required_bool_property(APPROVE, |b| {
                b.title("Approve this call")
                    .description("true runs the call once; false denies it")
            })
            .build()
            .map_err(|e| ErrorData::internal_error(e, None))?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        };
        let mut requests = InputRequests::new();
        requests.insert(
            APPROVAL_INPUT.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        );
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// Round two: whether `state` was sealed here for exactly this call.
    fn open(&self, state: &str, request: &ApprovalRequest) -> Result<(), StateRefused> {
        let question: Question = self
            .codec
            .open_json_with(state, &Self::bound_to(request))
            .map_err(|e| match e {
                RequestStateError::Expired => StateRefused::Expired,
                _ => StateRefused::Forged,
            })?;
        if question.tool != request.tool {
            Err(StateRefused::OtherCall("another tool"))
        } else if question.key != request.key.as_str() {
            Err(StateRefused::OtherCall("another idempotency key"))
        } else if question.fingerprint != request.fingerprint.to_hex() {
            Err(StateRefused::OtherCall("other arguments"))
        } else {
            Ok(())
        }
    }
}

/// The answer under [`APPROVAL_INPUT`] in a retry's `inputResponses`.
fn answer_in(responses: Option<&InputResponses>) -> Result<Answer, ErrorData> {
    let missing = || {
        ErrorData::invalid_params(
            format!(
                "the retry carries a `requestState` but `inputResponses` has no answer to \"{APPROVAL_INPUT}\""
            ),
            None,
        )
    };
    let answer = responses
        .and_then(|r| r.get(APPROVAL_INPUT))
        .ok_or_else(missing)?;
    let answer: ElicitResult = serde_json::from_value(answer.clone()).map_err(|e| {
        ErrorData::invalid_params(
            format!("the answer to \"{APPROVAL_INPUT}\" is not an elicitation result: {e}"),
            None,
        )
    })?;
    Ok(match answer.action {
        ElicitationAction::Accept => match answer.content.as_ref().and_then(|c| c.get(APPROVE)) {
            Some(Value::Bool(true)) => Answer::Approve,
            Some(Value::Bool(false)) => Answer::Decline,
            _ => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "the accepted answer to \"{APPROVAL_INPUT}\" must say \"{APPROVE}\": true or false"
                    ),
                    None,
                ));
            }
        },
        ElicitationAction::Decline => Answer::Decline,
        // Cancelled, or an action of a later revision: nothing decided.
        _ => Answer::Dismissed,
    })
}

/// Whether the client of this request can answer a form elicitation in an `input_required`
/// result (which rmcp sends only to a peer of the 2026-07-28 revision or later).
fn can_elicit(context: &RequestContext<RoleServer>) -> bool {
    let recent = context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= "2026-07-28");
    let form = context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    recent && form
}

/// A refusal the model can act on, in the shape of every other ([`super::result_of`]).
fn refusal(text: String, code: &str) -> CallToolResult {
    let mut meta = MetaObject::new();
    meta.insert(crate::META_ERROR.into(), Value::from(code));
    CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(meta))
}

impl McpServer {
    /// Answer with a question instead of `dispatched`'s pending refusal, when this server
    /// approves by elicitation and the client can answer.
    pub(crate) async fn ask_instead(
        &self,
        call: &ToolCall,
        run: &RunContext,
        dispatched: &Result<idem_registry::Dispatched, DispatchError>,
        context: &RequestContext<RoleServer>,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        let Err(DispatchError::ApprovalRequired { request }) = dispatched else {
            return None;
        };
        if let Some(inbox) = &self.inbox
            && super::inbox::can_open_urls(context)
        {
            return Some(match self.inbox_link(call, run, request).await {
                Ok(url) => inbox.ask(request, url).map(Into::into),
                Err(e) => Err(e),
            });
        }
        let elicitation = self.elicitation.as_ref()?;
        can_elicit(context).then(|| {
            elicitation
                .ask(request, call.key.as_deref())
                .map(Into::into)
        })
    }

    /// The inbox page of `call`, pending for `request`.
    async fn inbox_link(
        &self,
        call: &ToolCall,
        run: &RunContext,
        request: &ApprovalRequest,
    ) -> Result<String, ErrorData> {
        let Some(inbox) = &self.inbox else {
            return Err(ErrorData::internal_error("no inbox is configured", None));
        };
        let record_key = self
            .dispatcher
            .record_key(call, run)
            .ok()
            .flatten()
            .ok_or_else(|| ErrorData::internal_error("the pending call has no record key", None))?;
        let now = self
            .dispatcher
            .store()
            .now()
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(inbox.link(request, &record_key, now))
    }

    /// Round two of a URL question: whatever the person decided in the inbox, the call as
    /// the dispatcher now answers it; while nobody has decided, the link again.
    async fn after_inbox(
        &self,
        call: &ToolCall,
        run: &RunContext,
        request: &ApprovalRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let dispatched = self.dispatch_cancellable(call, run, context).await?;
        if let Err(DispatchError::ApprovalRequired { .. }) = &dispatched {
            let url = self.inbox_link(call, run, request).await?;
            let text = format!(
                "nobody has decided on `{}` yet; nothing ran. Open {url} to approve or deny it, then send the call again",
                request.tool
            );
            return Ok(refusal(text, "approval_required").into());
        }
        crate::model::result_of(dispatched).map(Into::into)
    }

    /// Round two of an approval: `state` and the user's answer in `responses`.
    pub(crate) async fn answered(
        &self,
        call: &ToolCall,
        run: &RunContext,
        state: &str,
        responses: Option<&InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if self.elicitation.is_none() && self.inbox.is_none() {
            return Err(ErrorData::invalid_params(
                "this server asked no question: a `requestState` is not expected here",
                None,
            ));
        }
        let (record_key, request) = match self.dispatcher.approval_request(call, run) {
            Ok(asked) => asked,
            // The call cannot be dispatched as sent (its arguments, scopes or key): say why.
            Err(e) => return crate::model::result_of(Err(e)).map(Into::into),
        };
        if let Some(inbox) = &self.inbox
            && inbox.asked(state, &request)
        {
            return self.after_inbox(call, run, &request, context).await;
        }
        let Some(elicitation) = &self.elicitation else {
            return Err(ErrorData::invalid_params(
                "the `requestState` was not issued by this server for this client, or was altered, or has expired: send the call again without it",
                None,
            ));
        };
        match elicitation.open(state, &request) {
            Ok(()) => {}
            Err(StateRefused::Forged) => {
                return Err(ErrorData::invalid_params(
                    "the `requestState` was not issued by this server for this client, or was altered",
                    None,
                ));
            }
            Err(StateRefused::OtherCall(what)) => {
                return Err(ErrorData::invalid_params(
                    format!("the `requestState` belongs to another call: it was issued for {what}"),
                    None,
                ));
            }
            Err(StateRefused::Expired) => {
                let text = format!(
                    "the approval question for `{}` expired before it was answered; nothing ran. Call again (without `requestState`) to be asked again",
                    request.tool
                );
                return Ok(refusal(text, "approval_expired").into());
            }
        }
        let decided = match answer_in(responses)? {
            Answer::Approve => {
                let approver = &elicitation.approver;
                let shown = Some(request.fingerprint);
                self.dispatcher
                    .approvals()
                    .through("mcp")
                    .approve(&record_key, approver, None, shown)
                    .await
            }
            Answer::Decline => {
                let by = elicitation.approver.identity();
                let reason = "declined in the MCP client";
                let shown = request.fingerprint;
                self.dispatcher
                    .approvals()
                    .through("mcp")
                    .deny(&record_key, by, reason, Some(shown))
                    .await
            }
            Answer::Dismissed => {
                let text = format!(
                    "the approval question for `{}` was dismissed; nothing ran and nothing was decided. Call again to be asked again",
                    request.tool
                );
                return Ok(refusal(text, "approval_required").into());
            }
        };
        let code = match &decided {
            Ok(_) => None,
            Err(DecisionError::Store(e)) => {
                return Err(ErrorData::internal_error(e.to_string(), None));
            }
            // Decided, and the store's decision log refused the entry: the host's to see.
            Err(e @ DecisionError::NotLogged { .. }) => {
                return Err(ErrorData::internal_error(e.to_string(), None));
            }
            // This state's answer was given before, or an operator decided first.
            Err(DecisionError::Refused(DecisionRefused::AlreadyDecided { .. })) => {
                Some("approval_answered")
            }
            // The key is pending with other arguments than the ones shown.
            Err(DecisionError::Refused(DecisionRefused::NotShown(_))) => Some("key_reused"),
            // Four eyes: this person approved already, or tried an edit several must approve.
            Err(DecisionError::Refused(
                DecisionRefused::ApprovedAlready { .. }
                | DecisionRefused::EditNeedsOneApprover { .. },
            )) => Some("approval_refused"),
            // The pending request expired in the store (or was purged) meanwhile.
            Err(DecisionError::Refused(_)) => Some("approval_expired"),
            // The key is pending with other arguments than this call's.
            Err(DecisionError::NotShown(_)) => Some("key_reused"),
            Err(_) => Some("approval_refused"),
        };
        if let (Some(code), Err(e)) = (code, decided) {
            let text = format!(
                "{e}. This answer was not recorded. To get the call's outcome, or be asked again, send the call again without `requestState`"
            );
            return Ok(refusal(text, code).into());
        }
        self.dispatch(call, run, context).await
    }
}
