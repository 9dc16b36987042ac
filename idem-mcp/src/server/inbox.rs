//! Approval one click away, for a server made with [`McpServer::approve_in_inbox`]: an
//! irreversible call held for approval is answered, when the client supports URL-mode
//! elicitation (the 2026-07-28 revision), with the link to the approval inbox's page of that
//! exact call (`idem ui`; see [`ApprovalLink`]). A person signs in there and approves or
//! denies it, under their own name, on the arguments shown. The client then retries the call
//! with the `requestState`; the retry runs the call once if it was approved, is refused with
//! the reason if it was denied, and, while nobody has decided, is told so with the link
//! again. The link approves nothing by itself; a client without URL mode gets the form
//! question of [`McpServer::approve_by_elicitation`] if the server asks that way too, else
//! the pending refusal, as before.
//!
//! [`McpServer::approve_in_inbox`]: super::McpServer::approve_in_inbox
//! [`McpServer::approve_by_elicitation`]: super::McpServer::approve_by_elicitation

use std::sync::Arc;
use std::time::Duration;

use idem_core::{RecordKey, Timestamp};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, InputRequest, InputRequests, InputRequiredResult,
    RequestStateCodec, SealOptions,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde::{Deserialize, Serialize};

use idem_registry::approval::{ApprovalKey, ApprovalLink, ApprovalRequest};

/// How long a link is shown by the inbox unless the server says otherwise: one hour.
pub const DEFAULT_LINK_VALIDITY: Duration = Duration::from_secs(3600);

/// Links to the inbox: where it is, the key they are signed with (the inbox's approval key),
/// and how the `requestState` of a URL question is sealed.
#[derive(Clone)]
pub(crate) struct InboxLinks {
    base: String,
    key: ApprovalKey,
    codec: Arc<RequestStateCodec>,
    validity: Duration,
}

/// What a URL question's `requestState` names.
#[derive(Serialize, Deserialize)]
struct Asked {
    mode: String,
    tool: String,
    key: String,
}

/// The `mode` of a URL question's state.
const URL_MODE: &str = "inbox-url";

impl InboxLinks {
    pub(crate) fn new(base: String, key: ApprovalKey, validity: Duration) -> Self {
        let secret = key.derived_secret(b"mcp/inbox-request-state/v1");
        InboxLinks {
            base,
            key,
            codec: Arc::new(
                RequestStateCodec::try_new(secret.to_vec())
                    .unwrap_or_else(|_| unreachable!("a 32-byte key is long enough")),
            ),
            validity,
        }
    }

    /// The inbox page of the call pending under `record_key`, until `now` + the validity.
    pub(crate) fn link(
        &self,
        request: &ApprovalRequest,
        record_key: &RecordKey,
        now: Timestamp,
    ) -> String {
        ApprovalLink {
            tenant: request.tenant.clone(),
            record_key: record_key.as_str().to_owned(),
            fingerprint: request.fingerprint,
            expires_at: now.plus(self.validity),
        }
        .url(&self.base, &self.key)
    }

    /// The URL question for `request`.
    pub(crate) fn ask(
        &self,
        request: &ApprovalRequest,
        url: String,
    ) -> Result<InputRequiredResult, ErrorData> {
        let asked = Asked {
            mode: URL_MODE.into(),
            tool: request.tool.clone(),
            key: request.key.as_str().to_owned(),
        };
        let bound = bound_to(request);
        let state = self
            .codec
            .seal_json_with(
                &asked,
                &SealOptions::new()
                    .associated_data(&bound)
                    .ttl(self.validity),
            )
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let message = format!(
            "`{}` needs a person's approval. Open the link to see the exact call and approve or deny it, then let the call be sent again.",
            request.tool
        );
        let params = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message,
            url,
            elicitation_id: String::new(),
        };
        let mut requests = InputRequests::new();
        requests.insert(
            crate::model::APPROVAL_INPUT.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        );
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// Whether `state` is this server's URL question about `request` (unexpired).
    pub(crate) fn asked(&self, state: &str, request: &ApprovalRequest) -> bool {
        self.codec
            .open_json_with::<Asked>(state, &bound_to(request))
            .is_ok_and(|asked| {
                asked.mode == URL_MODE
                    && asked.tool == request.tool
                    && asked.key == request.key.as_str()
            })
    }
}

/// The context a state is bound to without carrying it.
fn bound_to(request: &ApprovalRequest) -> Vec<u8> {
    format!("idem/mcp-inbox\0{}\0{}", request.namespace, request.tenant).into_bytes()
}

/// Whether the client of this request can open a URL elicitation in an `input_required`
/// result.
pub(crate) fn can_open_urls(context: &RequestContext<RoleServer>) -> bool {
    let recent = context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= "2026-07-28");
    let url = context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.url.is_some());
    recent && url
}
