//! What each channel is sent about a pending call: pure functions of the call (as stored,
//! secrets sealed), its signed inbox link and where callbacks come back. Each shows the tool,
//! the tenant, the arguments and the expiry; Slack's and Teams' buttons carry the record key
//! and the fingerprint of the arguments shown, which binds the decision to them.

use idem_core::store::approvals::PendingApproval;
use serde_json::{Value, json};

use super::Binding;

/// The longest arguments text a message shows whole (Slack's section holds 3000 characters).
const MAX_ARGUMENTS_CHARS: usize = 2500;

/// A pending call, as every channel is told of it.
#[derive(Debug, Clone)]
pub struct Pending<'a> {
    pub entry: &'a PendingApproval,
    /// The signed link to its inbox page, if the notifier knows the inbox.
    pub inbox_link: Option<String>,
    /// Where the generic webhook's receiver answers (`.../callback/webhook`).
    pub callback_url: String,
}

impl Pending<'_> {
    fn binding(&self) -> Binding {
        Binding::of(self.entry)
    }

    /// The arguments as a message shows them, pretty.
    fn arguments_whole(&self) -> String {
        serde_json::to_string_pretty(&self.entry.arguments).unwrap_or_default()
    }

    /// Whether a message shows the arguments whole: only then may it carry Approve and Deny
    /// (a button approves the whole arguments, and a person decides only on what they saw).
    fn shown_whole(&self) -> bool {
        self.arguments_whole().chars().count() <= MAX_ARGUMENTS_CHARS
    }

    /// The arguments, pretty, cut to what a message holds (and said so).
    fn arguments_text(&self) -> String {
        let text = self.arguments_whole();
        if text.chars().count() <= MAX_ARGUMENTS_CHARS {
            return text;
        }
        let cut: String = text.chars().take(MAX_ARGUMENTS_CHARS).collect();
        format!("{cut}\n… (cut: the inbox shows them whole)")
    }

    fn expires(&self) -> String {
        self.entry.expires_at.to_rfc3339()
    }
}

/// The generic webhook's JSON (signed by the sender, `Idem-Signature`).
pub fn webhook(pending: &Pending<'_>) -> Value {
    let entry = pending.entry;
    json!({
        "event": "approval.requested",
        "tenant": entry.tenant,
        "tool": entry.tool,
        "record_key": entry.key.as_str(),
        "downstream_key": entry.downstream_key,
        "fingerprint": entry.fingerprint.to_hex(),
        "arguments": entry.arguments,
        "expires_at": pending.expires(),
        "inbox_url": pending.inbox_link,
        "callback_url": pending.callback_url,
    })
}

/// Slack's mrkdwn escaping: `&`, `<` and `>` only, as Slack documents.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Block Kit message for Slack's incoming webhook: the call, then Approve / Deny buttons
/// (and a link to the inbox), each button's value the binding.
pub fn slack(pending: &Pending<'_>) -> Value {
    let entry = pending.entry;
    let value = pending.binding().value();
    let headline = format!(
        "Approval requested: `{}` for tenant `{}`",
        slack_escape(&entry.tool),
        slack_escape(&entry.tenant)
    );
    let mut buttons = Vec::new();
    if pending.shown_whole() {
        buttons.push(json!({
            "type": "button",
            "action_id": super::SLACK_APPROVE,
            "style": "primary",
            "text": {"type": "plain_text", "text": "Approve"},
            "value": value,
        }));
        buttons.push(json!({
            "type": "button",
            "action_id": super::SLACK_DENY,
            "style": "danger",
            "text": {"type": "plain_text", "text": "Deny"},
            "value": value,
        }));
    }
    if let Some(link) = &pending.inbox_link {
        buttons.push(json!({
            "type": "button",
            "action_id": "idem_open",
            "text": {"type": "plain_text", "text": "Open in the inbox"},
            "url": link,
        }));
    }
    let mut blocks = vec![
        json!({"type": "section", "text": {"type": "mrkdwn", "text": headline}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("```{}```", slack_escape(&pending.arguments_text()))}}),
        json!({"type": "context", "elements": [{"type": "mrkdwn", "text": format!(
            "Expires {} · key `{}` · arguments `{}`",
            pending.expires(), entry.key.as_str(), short(&entry.fingerprint.to_hex())
        )}]}),
    ];
    // Slack refuses an actions block without elements.
    if !buttons.is_empty() {
        blocks.push(json!({"type": "actions", "block_id": "idem_decision", "elements": buttons}));
    }
    json!({
        "text": format!("Approval requested: {} for tenant {}", entry.tool, entry.tenant),
        "blocks": blocks,
    })
}

/// A message with an Adaptive Card for a Teams webhook: the call as facts, the arguments, a
/// link to the inbox, and Approve / Deny submits whose data is the binding.
pub fn teams(pending: &Pending<'_>) -> Value {
    let entry = pending.entry;
    let binding = pending.binding();
    let submit = |title: &str, decision: &str| {
        json!({
            "type": "Action.Submit",
            "title": title,
            "data": {
                "idem": decision,
                "record_key": binding.record_key,
                "fingerprint": binding.fingerprint.to_hex(),
            },
        })
    };
    let mut actions = Vec::new();
    if let Some(link) = &pending.inbox_link {
        actions.push(json!({"type": "Action.OpenUrl", "title": "Open in the inbox", "url": link}));
    }
    if pending.shown_whole() {
        actions.push(submit("Approve", "approve"));
        actions.push(submit("Deny", "deny"));
    }
    let card = json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [
            {"type": "TextBlock", "text": format!("Approval requested: {}", entry.tool), "weight": "Bolder", "size": "Medium", "wrap": true},
            {"type": "FactSet", "facts": [
                {"title": "Tool", "value": entry.tool},
                {"title": "Tenant", "value": entry.tenant},
                {"title": "Expires", "value": pending.expires()},
                {"title": "Key", "value": entry.key.as_str()},
                {"title": "Arguments", "value": short(&entry.fingerprint.to_hex())},
            ]},
            {"type": "TextBlock", "text": pending.arguments_text(), "fontType": "Monospace", "wrap": true},
        ],
        "actions": actions,
    });
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": card,
        }],
    })
}

/// The first 12 hex digits of a fingerprint, as a person compares them.
fn short(hex: &str) -> &str {
    hex.get(..12).unwrap_or(hex)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::{Fingerprint, RecordKey, Timestamp};

    fn entry() -> PendingApproval {
        let arguments = json!({"customer": "cus_<1>", "note": "a & b"});
        PendingApproval {
            key: RecordKey::from_stored("rk1"),
            namespace: "ns".into(),
            tenant: "acme".into(),
            tool: "close_account".into(),
            downstream_key: "idem-abc".into(),
            fingerprint: Fingerprint::of(&arguments),
            arguments,
            secret_parameters: false,
            policy: None,
            approvers: 1,
            approved_by: Vec::new(),
            requested_at: Timestamp(1_000),
            expires_at: Timestamp(1_796_119_899_123),
            decision: None,
        }
    }

    #[test]
    fn every_message_names_the_call_and_binds_its_buttons_to_the_arguments_shown() {
        let entry = entry();
        let pending = Pending {
            entry: &entry,
            inbox_link: Some("https://inbox/approval?sig=1".into()),
            callback_url: "https://notify/callback/webhook".into(),
        };
        let fp = entry.fingerprint.to_hex();
        let hook = webhook(&pending);
        assert_eq!(hook["event"], "approval.requested");
        assert_eq!(hook["fingerprint"], fp.as_str());
        assert_eq!(hook["expires_at"], "2026-12-01T10:11:39.123Z");
        assert_eq!(hook["arguments"], entry.arguments);
        assert_eq!(hook["inbox_url"], "https://inbox/approval?sig=1");

        let slack = slack(&pending);
        let text = slack.to_string();
        assert!(
            text.contains("cus_&lt;1&gt;") && text.contains("a &amp; b"),
            "{text}"
        );
        let buttons = &slack["blocks"][3]["elements"];
        assert_eq!(buttons[0]["action_id"], "idem_approve");
        assert_eq!(buttons[1]["action_id"], "idem_deny");
        assert_eq!(buttons[0]["value"], format!("rk1 {fp}"));
        assert_eq!(buttons[2]["url"], "https://inbox/approval?sig=1");

        let teams = teams(&pending);
        let card = &teams["attachments"][0];
        assert_eq!(
            card["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        let actions = &card["content"]["actions"];
        assert_eq!(actions[0]["type"], "Action.OpenUrl");
        assert_eq!(
            actions[1]["data"],
            json!({"idem": "approve", "record_key": "rk1", "fingerprint": fp})
        );
        assert_eq!(actions[2]["data"]["idem"], "deny");
    }

    #[test]
    fn long_arguments_are_cut_said_to_be_and_only_decided_where_shown_whole() {
        let mut entry = entry();
        // What follows the cut (`to`, after a long memo) is what a button would approve.
        entry.arguments = json!({"a_memo": "x".repeat(5000), "to": "someone else"});
        entry.fingerprint = idem_core::Fingerprint::of(&entry.arguments);
        let pending = Pending {
            entry: &entry,
            inbox_link: Some("https://inbox/approval?sig=1".into()),
            callback_url: String::new(),
        };
        let text = pending.arguments_text();
        assert!(text.ends_with("(cut: the inbox shows them whole)"));
        assert!(!text.contains("someone else"));
        let slack = slack(&pending).to_string();
        assert!(
            !slack.contains("idem_approve") && !slack.contains("idem_deny"),
            "{slack}"
        );
        let actions = teams(&pending)["attachments"][0]["content"]["actions"].clone();
        assert_eq!(
            actions,
            json!([{"type": "Action.OpenUrl", "title": "Open in the inbox", "url": "https://inbox/approval?sig=1"}]),
            "only the inbox, which shows them whole"
        );
    }
}
