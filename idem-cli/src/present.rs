//! How the operator's tools show what they read and read what a person writes: the
//! documented JSON shapes, spans of time, durations, and text made safe to decide on.

use std::time::Duration;

use idem_core::Fingerprint;
use idem_core::Outcome;
use idem_core::Record;
use idem_core::RecordState;
use idem_core::StateKind;
use idem_core::Timestamp;
use idem_core::store::approvals::{PendingApproval, Verdict};
use serde_json::{Value, json};

use crate::exit::{Exit, Failure};

pub fn state_name(kind: StateKind) -> &'static str {
    kind.as_str()
}

/// The documented JSON shape of a record.
pub fn record_json(record: &Record) -> Value {
    let arguments = record
        .arguments
        .as_deref()
        .map(|text| serde_json::from_str::<Value>(text).unwrap_or_else(|_| json!(text)));
    let (lease_until, expires_at, since, last_error, outcome) = match &record.state {
        RecordState::InProgress { lease_until } => {
            (Some(lease_until.to_rfc3339()), None, None, None, None)
        }
        RecordState::Completed {
            outcome,
            expires_at,
        } => (
            None,
            Some(expires_at.to_rfc3339()),
            None,
            None,
            Some(outcome_json(outcome)),
        ),
        RecordState::Unknown { since, last_error } => (
            None,
            None,
            Some(since.to_rfc3339()),
            Some(last_error.clone()),
            None,
        ),
    };
    json!({
        "key": record.key.as_str(),
        "tool": record.tool,
        "tenant": record.tenant,
        "state": state_name(record.state.kind()),
        "fence": record.fence,
        "created_at": record.created_at.to_rfc3339(),
        "updated_at": record.updated_at.to_rfc3339(),
        "lease_until": lease_until,
        "expires_at": expires_at,
        "unknown_since": since,
        "last_error": last_error,
        "outcome": outcome,
        "arguments": arguments,
        "class": record.contract.as_ref().map(|c| c.class.to_string()),
        "version": record.contract.as_ref().map(|c| c.version.clone()),
        "steps": record.steps.iter().map(|s| s.step.clone()).collect::<Vec<_>>(),
    })
}

fn outcome_json(outcome: &Outcome) -> Value {
    match outcome {
        Outcome::Success(text) => json!({
            "success": serde_json::from_str::<Value>(text).unwrap_or_else(|_| json!(text)),
        }),
        Outcome::Failure(e) => json!({
            "failure": {"kind": e.kind().to_string(), "message": e.message(), "details": e.details()},
        }),
    }
}

/// What became of an approval request at `now`.
pub fn approval_status(entry: &PendingApproval, now: Timestamp) -> &'static str {
    match &entry.decision {
        _ if !entry.stands(now) => "expired",
        None => "pending",
        Some(d) => match d.verdict {
            Verdict::Approved { .. } => "approved",
            Verdict::Denied { .. } => "denied",
        },
    }
}

/// Who approved a call that needs several approvers, and how many more it awaits, in words
/// (`None` for a call that needs one): `approved by dana@desk (1 of 2); awaiting 1 more
/// approver, not dana@desk`.
pub fn approvers_line(entry: &PendingApproval) -> Option<String> {
    if entry.approvers <= 1 {
        return None;
    }
    let who: Vec<&str> = entry.approved_by.iter().map(|g| g.by.as_str()).collect();
    let given = match who.is_empty() {
        true => format!("no approval yet (0 of {})", entry.approvers),
        false => format!(
            "approved by {} ({} of {})",
            who.join(", "),
            who.len(),
            entry.approvers
        ),
    };
    Some(match entry.awaiting() {
        0 => given,
        1 if who.is_empty() => format!("{given}; awaiting 1 approver"),
        n => {
            let more = if n == 1 { "approver" } else { "approvers" };
            match who.is_empty() {
                true => format!("{given}; awaiting {n} distinct {more}"),
                false => format!(
                    "{given}; awaiting {n} more {more}, not {}",
                    who.join(" or ")
                ),
            }
        }
    })
}

/// The documented JSON shape of an approval request.
pub fn approval_json(entry: &PendingApproval, now: Timestamp) -> Value {
    let decision = entry.decision.as_ref().map(|d| {
        let (verdict, reason, arguments) = match &d.verdict {
            Verdict::Approved {
                arguments,
                fingerprint,
                ..
            } => {
                let edited = (*fingerprint != entry.fingerprint).then(|| arguments.clone());
                ("approved", None, edited)
            }
            Verdict::Denied { reason } => ("denied", Some(reason.clone()), None),
        };
        json!({
            "verdict": verdict,
            "by": d.by,
            "at": d.at.to_rfc3339(),
            "reason": reason,
            "edited_arguments": arguments,
        })
    });
    json!({
        "key": entry.key.as_str(),
        "status": approval_status(entry, now),
        "namespace": entry.namespace,
        "tenant": entry.tenant,
        "tool": entry.tool,
        "downstream_key": entry.downstream_key,
        "fingerprint": entry.fingerprint.to_hex(),
        "arguments": entry.arguments,
        "requested_at": entry.requested_at.to_rfc3339(),
        "expires_at": entry.expires_at.to_rfc3339(),
        "approvers": entry.approvers,
        "approved_by": entry.approved_by.iter().map(|g| json!({
            "by": g.by,
            "at": g.at.to_rfc3339(),
        })).collect::<Vec<_>>(),
        "decision": decision,
    })
}

/// How long from `now` until `at`, or since, for people: `3m 20s`, `2h 5m`, `4d 1h`.
pub fn span(from: Timestamp, to: Timestamp) -> String {
    let secs = to.as_millis().saturating_sub(from.as_millis()) / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// Whether `at` is at least `age` before `now`.
pub fn at_least(at: Timestamp, age: Duration, now: Timestamp) -> bool {
    let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
    now.as_millis().saturating_sub(at.as_millis()) >= age
}

/// A duration as written on the command line: a number and `s`, `m`, `h` or `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| {
        format!(
            "`{text}` is not a duration: write a number and a unit, e.g. `90s`, `15m`, `2h`, `7d`"
        )
    })?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => {
            return Err(format!(
                "`{other}` in `{text}` is not a unit: use s, m, h or d (e.g. `7d`)"
            ));
        }
    };
    Ok(Duration::from_secs(n.saturating_mul(unit)))
}

/// Edited arguments as a person wrote them: a JSON object, as a call's are.
pub fn edited_arguments(text: &str, source: &str) -> Result<Value, Failure> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Failure::new(Exit::Usage, format!("{source}: not JSON: {e}")))?;
    if !value.is_object() {
        return Err(Failure::new(
            Exit::Usage,
            format!("{source}: edited arguments are a JSON object, as the call's are"),
        ));
    }
    Ok(value)
}

/// Whether a character is invisible or changes how the text around it reads: control
/// characters, bidirectional overrides and isolates, zero-width and other format characters.
fn deceptive(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(
            c,
            // Format characters, invisible fillers and joiners, variation selectors, line
            // and paragraph separators, bidirectional controls, tags.
            '\u{ad}'
                | '\u{34f}'
                | '\u{600}'..='\u{605}'
                | '\u{61c}'
                | '\u{6dd}'
                | '\u{70f}'
                | '\u{890}'..='\u{891}'
                | '\u{8e2}'
                | '\u{115f}'..='\u{1160}'
                | '\u{17b4}'..='\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{110bd}'
                | '\u{110cd}'
                | '\u{13430}'..='\u{1343f}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e0fff}'
        )
}

/// `text` as a person deciding should see it: every [`deceptive`] character written as its
/// JSON escape (`\u202e`), which inside a JSON string still means the same character, so
/// that what is shown is what is decided.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(deceptive) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 12);
    for c in text.chars() {
        if deceptive(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// [`visible`], on one line: a line break too is written as its escape, so that a value
/// cannot add lines to a prompt, a table or a message.
pub fn visible_line(text: &str) -> String {
    visible(text).replace('\n', "\\n")
}

/// The outcome a person settles a record with: the call's result as JSON (`value`, named
/// `source` in a refusal, with a string written as `quoted`), or a failure's message; one
/// of the two.
pub fn outcome_of(
    value: Option<&str>,
    failure: Option<&str>,
    source: &str,
    quoted: &str,
) -> Result<Outcome, Failure> {
    match (value, failure) {
        (Some(value), None) => {
            let value: Value = serde_json::from_str(value).map_err(|e| {
                Failure::new(
                    Exit::Usage,
                    format!("{source} is not JSON ({e}): quote a string as {quoted}"),
                )
            })?;
            Ok(Outcome::success(&value))
        }
        (None, Some(message)) => Ok(Outcome::Failure(idem_core::ToolError::terminal(message))),
        _ => Err(Failure::new(
            Exit::Usage,
            "give either the call's result as JSON or a failure message, not both or neither",
        )),
    }
}

/// A fingerprint given back by a form, as shown.
pub fn fingerprint_of_form(text: &str) -> Option<Fingerprint> {
    Fingerprint::from_hex(text.trim())
}

/// Whether a record holds arguments an operator may read (they are sealed where secret).
pub fn arguments_text(record: &Record) -> String {
    match &record.arguments {
        Some(text) => serde_json::from_str::<Value>(text)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| text.clone()),
        None => "(not kept)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_a_number_and_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration(" 7d "), Ok(Duration::from_secs(7 * 86_400)));
        assert!(parse_duration("7").unwrap_err().contains("not a unit"));
        assert!(parse_duration("7w").unwrap_err().contains("`w`"));
        assert!(parse_duration("d").unwrap_err().contains("not a duration"));
        assert!(
            parse_duration("-1h")
                .unwrap_err()
                .contains("not a duration")
        );
    }

    #[test]
    fn what_could_read_as_other_text_is_shown_by_its_code() {
        assert_eq!(visible("cus_99"), "cus_99");
        assert_eq!(
            visible("pay \u{202e}001$ \u{202c}"),
            "pay \\u202e001$ \\u202c"
        );
        assert_eq!(visible("a\u{200b}b\u{1b}[31m"), "a\\u200bb\\u001b[31m");
        assert_eq!(visible("tag\u{e0041}"), "tag\\udb40\\udc41");
        assert_eq!(visible("two\nlines"), "two\nlines");
        assert_eq!(visible_line("two\nlines\u{200b}"), "two\\nlines\\u200b");
        assert_eq!(visible("\u{3164}\u{fe0f}"), "\\u3164\\ufe0f");
        // Inside JSON text the escape is the same character again.
        let shown = visible("{\"to\":\"\u{202e}moc.live@x\"}");
        let back: Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["to"], "\u{202e}moc.live@x");
    }

    #[test]
    fn spans_read_as_people_say_them() {
        let at = |s: u64| Timestamp(s * 1000);
        assert_eq!(span(at(0), at(42)), "42s");
        assert_eq!(span(at(0), at(200)), "3m 20s");
        assert_eq!(span(at(0), at(7500)), "2h 5m");
        assert_eq!(span(at(0), at(4 * 86_400 + 3600)), "4d 1h");
        assert_eq!(span(at(10), at(0)), "0s");
    }
}
