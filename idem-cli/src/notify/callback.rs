//! The callbacks: a person pressed Approve or Deny in Slack or Teams, or the webhook's
//! receiver answered. Each request is taken in this order, and stops at the first refusal:
//!
//! 1. its platform's signature over the raw body, and the timestamp's window ([`super::verify`]):
//!    401, saying nothing more;
//! 2. single use: the signature (its bytes, as hex) is remembered in the store for twice the
//!    window (scope `idem:notify:seen:<platform>:<signature>`, written only where empty): a request seen
//!    before is 409, whatever became of the first;
//! 3. the body read ([`slack_answer`], [`teams_answer`], [`webhook_answer`]): 400 if it is not
//!    an answer;
//! 4. the platform user mapped to an approver by the configuration: 403 if unmapped;
//! 5. the decision, through [`ApprovalDesk`](idem_registry::approval::ApprovalDesk) (via the
//!    operator's [`Operator`]) on the arguments the message showed: 200 decided, 409 already
//!    decided, expired or pending now with other arguments, 404 no such request.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idem_core::Fingerprint;
use idem_core::Store;
use idem_registry::{ApprovalKey, Approver};
use serde::Deserialize;
use serde_json::{Value, json};

use super::config::{Channel, NotifyConfig};
use super::verify::{
    Seal, Unsigned, WINDOW_SECS, teams_time, verify_slack, verify_teams, verify_webhook,
    within_window,
};
use super::{Binding, Platform, SLACK_APPROVE, SLACK_DENY, WEBHOOK_SIGNATURE, unix_now};
use crate::exit::{Exit, Failure};
use crate::operate::Operator;

/// What the callbacks decide with.
pub struct Desk {
    pub op: Operator,
    pub config: NotifyConfig,
    pub signing: ApprovalKey,
}

/// What a person answered, as a platform's callback says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The platform's user.
    pub user: String,
    pub decision: Decision,
    /// The call and the arguments the message showed.
    pub binding: Binding,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny { reason: Option<String> },
}

/// A Slack interaction (`payload=<JSON>`, form-encoded): `None` if it is not one of the
/// notifier's Approve / Deny buttons (the inbox link's button is reported too).
pub fn slack_answer(body: &[u8]) -> Result<Option<Answer>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8")?;
    let payload = form_value(text, "payload").ok_or("no `payload` field")?;
    let payload: Value =
        serde_json::from_str(&payload).map_err(|e| format!("the payload is not JSON: {e}"))?;
    let action = &payload["actions"][0];
    let decision = match action["action_id"].as_str() {
        Some(SLACK_APPROVE) => Decision::Approve,
        Some(SLACK_DENY) => Decision::Deny { reason: None },
        _ => return Ok(None),
    };
    let user = payload["user"]["id"]
        .as_str()
        .ok_or("the payload names no user.id")?;
    let binding = action["value"]
        .as_str()
        .and_then(Binding::parse)
        .ok_or("the button's value is not `<record key> <fingerprint>`")?;
    Ok(Some(Answer {
        user: user.to_owned(),
        decision,
        binding,
    }))
}

/// A Teams activity: the user (`from.aadObjectId`, else `from.id`) and the submitted card's
/// data (`value`).
pub fn teams_answer(body: &[u8]) -> Result<Answer, String> {
    let activity: Value =
        serde_json::from_slice(body).map_err(|e| format!("the activity is not JSON: {e}"))?;
    let from = &activity["from"];
    let user = from["aadObjectId"]
        .as_str()
        .or_else(|| from["id"].as_str())
        .ok_or("the activity names no from.aadObjectId or from.id")?;
    let value = &activity["value"];
    let decision = match value["idem"].as_str() {
        Some("approve") => Decision::Approve,
        Some("deny") => Decision::Deny { reason: None },
        _ => return Err("the activity's value is not an idem Approve / Deny".into()),
    };
    let binding = Binding::from_parts(value["record_key"].as_str(), value["fingerprint"].as_str())
        .ok_or("the activity's value has no record_key and fingerprint")?;
    Ok(Answer {
        user: user.to_owned(),
        decision,
        binding,
    })
}

/// The generic webhook's answer.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookAnswer {
    record_key: String,
    fingerprint: String,
    decision: String,
    user: String,
    #[serde(default)]
    reason: Option<String>,
}

/// The generic webhook's answer: `{record_key, fingerprint, decision, user, reason?}`.
pub fn webhook_answer(body: &[u8]) -> Result<Answer, String> {
    let given: WebhookAnswer =
        serde_json::from_slice(body).map_err(|e| format!("not an answer: {e}"))?;
    let decision = match given.decision.as_str() {
        "approve" => Decision::Approve,
        "deny" => Decision::Deny {
            reason: given.reason.filter(|r| !r.trim().is_empty()),
        },
        other => return Err(format!("decision `{other}`: expected `approve` or `deny`")),
    };
    let binding = Binding::from_parts(Some(&given.record_key), Some(&given.fingerprint))
        .ok_or("the fingerprint is not 64 hex digits")?;
    Ok(Answer {
        user: given.user,
        decision,
        binding,
    })
}

/// The status a refused decision is answered with.
pub fn status_of(code: Exit) -> StatusCode {
    match code {
        Exit::Refused => StatusCode::CONFLICT,
        Exit::NotFound => StatusCode::NOT_FOUND,
        Exit::Usage => StatusCode::BAD_REQUEST,
        Exit::Store => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub async fn slack(State(desk): State<Arc<Desk>>, headers: HeaderMap, body: Bytes) -> Response {
    let platform = Platform::Slack;
    let Some(channel) = desk.config.channel(platform) else {
        return not_configured(platform);
    };
    let signature = text(&headers, "x-slack-signature");
    let timestamp = text(&headers, "x-slack-request-timestamp");
    let seal = match verify_slack(&channel.secret, timestamp, &body, signature, unix_now()) {
        Ok(seal) => seal,
        Err(why) => return unsigned(platform, why),
    };
    let answer = match slack_answer(&body) {
        Ok(None) => return reply(platform, StatusCode::OK, "nothing to decide".into()),
        Ok(Some(answer)) => Ok(answer),
        Err(why) => Err(why),
    };
    desk.carry_out(channel, &seal, answer).await
}

pub async fn teams(State(desk): State<Arc<Desk>>, headers: HeaderMap, body: Bytes) -> Response {
    let platform = Platform::Teams;
    let Some(channel) = desk.config.channel(platform) else {
        return not_configured(platform);
    };
    let signature = text(&headers, header::AUTHORIZATION.as_str());
    let seal = match verify_teams(&channel.secret, signature, &body) {
        Ok(seal) => seal,
        Err(why) => return unsigned(platform, why),
    };
    // Signed: its own time can be believed, and must be recent.
    let at = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|a| a["timestamp"].as_str().and_then(teams_time));
    let Some(at) = at else {
        return unsigned(platform, Unsigned::Missing("activity timestamp"));
    };
    if let Err(why) = within_window(at, unix_now()) {
        return unsigned(platform, why);
    }
    desk.carry_out(channel, &seal, teams_answer(&body)).await
}

pub async fn webhook(State(desk): State<Arc<Desk>>, headers: HeaderMap, body: Bytes) -> Response {
    let platform = Platform::Webhook;
    let Some(channel) = desk.config.channel(platform) else {
        return not_configured(platform);
    };
    let signature = text(&headers, WEBHOOK_SIGNATURE);
    let seal = match verify_webhook(&channel.secret, signature, &body, unix_now()) {
        Ok(seal) => seal,
        Err(why) => return unsigned(platform, why),
    };
    desk.carry_out(channel, &seal, webhook_answer(&body)).await
}

impl Desk {
    /// Steps 2 to 5 for a request whose signature held.
    async fn carry_out(
        &self,
        channel: &Channel,
        seal: &Seal,
        answer: Result<Answer, String>,
    ) -> Response {
        let platform = channel.platform;
        match first_use(&*self.op.store, platform, seal).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(
                    channel = platform.name(),
                    "a callback was replayed: refused"
                );
                return reply(
                    platform,
                    StatusCode::CONFLICT,
                    "this request was received before: each is taken once".into(),
                );
            }
            Err(e) => {
                let f = Failure::store(&self.op.name, e);
                return reply(platform, status_of(f.code), f.message);
            }
        }
        let answer = match answer {
            Ok(answer) => answer,
            Err(why) => return reply(platform, StatusCode::BAD_REQUEST, why),
        };
        let Some(who) = channel.approvers.get(&answer.user) else {
            tracing::warn!(
                channel = platform.name(),
                user = %answer.user,
                "a decision from a user no approver is mapped to: refused"
            );
            return reply(
                platform,
                StatusCode::FORBIDDEN,
                format!(
                    "{} user `{}` is not an approver here ([{}.approvers]): nothing was decided",
                    platform.title(),
                    answer.user,
                    platform.name()
                ),
            );
        };
        match self.decide(platform, &answer, who).await {
            Ok(said) => reply(platform, StatusCode::OK, said),
            Err(f) => {
                tracing::warn!(channel = platform.name(), key = %answer.binding.record_key, "not decided: {}", f.message);
                reply(platform, status_of(f.code), f.message)
            }
        }
    }

    /// The decision, on the arguments the message showed, recorded as `who`'s through the
    /// platform's door.
    async fn decide(
        &self,
        platform: Platform,
        answer: &Answer,
        who: &str,
    ) -> Result<String, Failure> {
        let mut op = self.op.clone();
        op.door = platform.name();
        let binding = &answer.binding;
        let entry = op.approval(&binding.record_key).await?;
        let shown = binding.fingerprint;
        match &answer.decision {
            Decision::Approve => {
                let approver = Approver::new(who, self.signing.clone());
                let decided = op.approve(&entry, shown, &approver, None).await?;
                tracing::info!(key = %decided.key, by = %who, channel = platform.name(), "approved");
                Ok(match decided.decision {
                    // Four eyes: this approval counts, others are awaited.
                    None => format!(
                        "Approval of {} for {} recorded for {who}: more approvers are awaited.",
                        decided.tool, decided.tenant
                    ),
                    Some(_) => format!(
                        "Approved {} for {} by {who}: the agent's next call runs it once.",
                        decided.tool, decided.tenant
                    ),
                })
            }
            Decision::Deny { reason } => {
                let reason = reason
                    .clone()
                    .unwrap_or_else(|| format!("denied in {} by {who}", platform.title()));
                let decided = op.deny(&entry, shown, who, &reason).await?;
                tracing::info!(key = %decided.key, by = %who, channel = platform.name(), "denied");
                Ok(format!(
                    "Denied {} for {} by {who}: {reason}",
                    decided.tool, decided.tenant
                ))
            }
        }
    }
}

/// Whether `seal` is seen for the first time (within twice the window, which a stale
/// request is refused outside of anyway): written only where empty, so across notifiers
/// and restarts too.
async fn first_use(
    store: &dyn Store,
    platform: Platform,
    seal: &Seal,
) -> Result<bool, idem_core::StoreError> {
    let scope = format!("idem:notify:seen:{}:{}", platform.name(), seal.0);
    let keep = std::time::Duration::from_secs(2 * WINDOW_SECS);
    store
        .swap_budget(&scope, None, &json!({"at": unix_now()}).to_string(), keep)
        .await
}

/// The answer, in the form the platform shows it.
fn reply(platform: Platform, status: StatusCode, text: String) -> Response {
    let body = match platform {
        Platform::Slack => {
            json!({"response_type": "ephemeral", "replace_original": false, "text": text})
        }
        Platform::Teams => json!({"type": "message", "text": text}),
        Platform::Webhook => json!({"ok": status.is_success(), "message": text}),
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A request not signed as its platform signs: 401, and no detail for the sender.
fn unsigned(platform: Platform, why: Unsigned) -> Response {
    tracing::warn!(
        channel = platform.name(),
        "a callback was refused: {}",
        why.describe()
    );
    reply(
        platform,
        StatusCode::UNAUTHORIZED,
        "the request is not signed as expected".into(),
    )
}

fn not_configured(platform: Platform) -> Response {
    reply(
        platform,
        StatusCode::NOT_FOUND,
        format!("no [{}] channel is configured", platform.name()),
    )
}

fn text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl Binding {
    fn from_parts(record_key: Option<&str>, fingerprint: Option<&str>) -> Option<Binding> {
        let record_key = record_key.filter(|k| !k.trim().is_empty())?;
        Some(Binding {
            record_key: record_key.to_owned(),
            fingerprint: Fingerprint::from_hex(fingerprint?)?,
        })
    }
}

/// The value of `name` in a form-encoded body (`+` as a space, `%XX` escapes).
fn form_value(body: &str, name: &str) -> Option<String> {
    let raw = body
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)?
        .1;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                out.push(u8::from_str_radix(raw.get(i + 1..i + 3)?, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "8a0b3c1d2e3f405162738495a6b7c8d9eafb0c1d2e3f405162738495a6b7c8d9";

    fn encoded(json: &Value) -> String {
        let text = json.to_string();
        let mut out = String::from("payload=");
        for b in text.bytes() {
            if b.is_ascii_alphanumeric() {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }

    #[test]
    fn slack_interactions_read_as_answers() {
        let press = |action: &str, value: &str| {
            encoded(&json!({
                "type": "block_actions",
                "user": {"id": "U024BE7LH", "username": "dana"},
                "actions": [{"action_id": action, "value": value, "type": "button"}],
            }))
        };
        let binding = Binding {
            record_key: "rk1".into(),
            fingerprint: Fingerprint::from_hex(FP).unwrap(),
        };
        assert_eq!(
            slack_answer(press(SLACK_APPROVE, &format!("rk1 {FP}")).as_bytes()),
            Ok(Some(Answer {
                user: "U024BE7LH".into(),
                decision: Decision::Approve,
                binding: binding.clone(),
            }))
        );
        assert_eq!(
            slack_answer(press(SLACK_DENY, &format!("rk1 {FP}")).as_bytes())
                .unwrap()
                .unwrap()
                .decision,
            Decision::Deny { reason: None }
        );
        assert_eq!(slack_answer(press("idem_open", "").as_bytes()), Ok(None));
        for bad in [
            press(SLACK_APPROVE, "rk1"),
            press(SLACK_APPROVE, "rk1 nothex"),
            "token=x".to_owned(),
            "payload=%7Bnot".to_owned(),
        ] {
            assert!(slack_answer(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn teams_and_webhook_answers() {
        let activity = json!({
            "type": "message",
            "timestamp": "2024-05-01T12:00:00.000Z",
            "from": {"id": "29:1abc", "aadObjectId": "aad-lee"},
            "value": {"idem": "deny", "record_key": "rk1", "fingerprint": FP},
        });
        let answer = teams_answer(activity.to_string().as_bytes()).unwrap();
        assert_eq!(answer.user, "aad-lee");
        assert_eq!(answer.decision, Decision::Deny { reason: None });
        let mut no_aad = activity.clone();
        no_aad["from"] = json!({"id": "29:1abc"});
        assert_eq!(
            teams_answer(no_aad.to_string().as_bytes()).unwrap().user,
            "29:1abc"
        );
        let mut other = activity.clone();
        other["value"]["idem"] = json!("maybe");
        assert!(teams_answer(other.to_string().as_bytes()).is_err());

        let hook = json!({"record_key": "rk1", "fingerprint": FP, "decision": "deny", "user": "ops", "reason": "not now"});
        assert_eq!(
            webhook_answer(hook.to_string().as_bytes())
                .unwrap()
                .decision,
            Decision::Deny {
                reason: Some("not now".into())
            }
        );
        for bad in [
            json!({"record_key": "rk1", "fingerprint": FP, "decision": "ok", "user": "ops"}),
            json!({"record_key": "rk1", "fingerprint": "12", "decision": "approve", "user": "ops"}),
            json!({"record_key": "rk1", "fingerprint": FP, "decision": "approve", "user": "ops", "extra": 1}),
        ] {
            assert!(webhook_answer(bad.to_string().as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn refusals_are_answered_with_statuses_a_caller_can_act_on() {
        let cases = [
            (Exit::Refused, StatusCode::CONFLICT),
            (Exit::NotFound, StatusCode::NOT_FOUND),
            (Exit::Usage, StatusCode::BAD_REQUEST),
            (Exit::Store, StatusCode::SERVICE_UNAVAILABLE),
            (Exit::Failed, StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (code, status) in cases {
            assert_eq!(status_of(code), status, "{code:?}");
        }
    }
}
