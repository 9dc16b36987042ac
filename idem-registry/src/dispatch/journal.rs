//! What the dispatcher's own journal entries say: the steps it writes (`idem:compensating`,
//! `idem:undo:<step>`) and what a record's journal tells of a compensation. Pure functions
//! over a journal: the stages that write the entries and those that read them (the claim,
//! the guard, recovery) share them without depending on each other.

use idem_core::JournalEntry;

/// The journal step that says a compensation is under way, holding the failure it undoes.
pub const COMPENSATING_STEP: &str = "idem:compensating";

/// The prefix of the journal step that says one step was undone.
pub const UNDO_PREFIX: &str = "idem:undo:";

/// Whether a journal shows a compensation under way (or done).
pub(crate) fn compensating(steps: &[JournalEntry]) -> bool {
    steps.iter().any(|s| s.step == COMPENSATING_STEP)
}

/// The tool's own completed steps (not the dispatcher's `idem:` entries), in journal order.
pub(crate) fn undoable(steps: &[JournalEntry]) -> Vec<&JournalEntry> {
    steps
        .iter()
        .filter(|s| !s.step.starts_with(crate::context::RESERVED_STEP_PREFIX))
        .collect()
}

/// The steps a record's journal says were undone, in the order they were.
pub fn undone_steps(steps: &[JournalEntry]) -> Vec<String> {
    steps
        .iter()
        .filter_map(|s| s.step.strip_prefix(UNDO_PREFIX).map(str::to_owned))
        .collect()
}
