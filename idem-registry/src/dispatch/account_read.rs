//! How a run's account reads its entries back: an entry a newer idem wrote, listed with what
//! can be read; and each call a run's undo undid, marked from the undo's own entry.

use super::{AccountEntry, CallOutcome};

/// What an entry this idem cannot read whole says that it can read (its tool and when, at
/// least), its outcome [`CallOutcome::Unrecognized`]; `None` if not even that.
pub(super) fn unrecognized(text: &str) -> Option<AccountEntry> {
    fn read<T: serde::de::DeserializeOwned>(value: &serde_json::Value, name: &str) -> Option<T> {
        serde_json::from_value(value.get(name)?.clone()).ok()
    }
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    Some(AccountEntry {
        at: read(&value, "at")?,
        tool: read(&value, "tool")?,
        class: read(&value, "class"),
        call_id: read(&value, "call_id"),
        step: read(&value, "step"),
        key: read(&value, "key"),
        record: read(&value, "record"),
        attempts: read(&value, "attempts"),
        decided: read(&value, "decided"),
        undo: read(&value, "undo"),
        limits: read(&value, "limits").unwrap_or_default(),
        granted: read(&value, "granted"),
        outcome: CallOutcome::Unrecognized,
    })
}

/// Mark each call whose run undid it with what became of its undo (the undo's entry, tool
/// `<tool>.undo`, names the call it undid by its call id, or its record key's hash).
pub(super) fn mark_undone(calls: &mut [AccountEntry]) {
    let undos: Vec<(String, String, &'static str)> = calls
        .iter()
        .filter_map(|u| {
            let tool = u.tool.strip_suffix(crate::tool::UNDO_TOOL_SUFFIX)?;
            let undid = u.call_id.as_deref()?.strip_prefix("undo:")?;
            let how = match &u.outcome {
                CallOutcome::Applied | CallOutcome::Replayed => "undone",
                CallOutcome::Refused { .. } => "failed",
                other => other.name(),
            };
            Some((tool.to_owned(), undid.to_owned(), how))
        })
        .collect();
    for (tool, undid, how) in undos {
        let undone = calls.iter_mut().find(|c| {
            c.tool == tool
                && (c.call_id.as_deref() == Some(undid.as_str())
                    || c.record
                        .as_ref()
                        .is_some_and(|r| super::super::key_hash(r) == undid))
        });
        if let Some(c) = undone {
            c.undo = Some(how.to_owned());
        }
    }
}
