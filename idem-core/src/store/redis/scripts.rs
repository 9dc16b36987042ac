//! The Lua scripts of the Redis store, one file each under `scripts/`: every state change is
//! one script, run with `EVALSHA` after the shared prelude (the record's keys, the server's
//! clock, helpers), so each decision is atomic on the server. The swap and the removal of a
//! pending approval are scripts too, without the prelude: they touch no record, only the
//! approval's key (the index of approvals, in another slot, is written around them).
//! So are the swap of a budget, on its one key, and the read of one record in a cluster
//! (`read.lua`), which writes nothing.
//!
//! What a script writes that Rust also knows (the `last_error` of an orphan turned Unknown)
//! comes in as an argument, never as a copy of the text in Lua: the text is written once, in
//! [`ORPHANED`](crate::record::ORPHANED).

use redis::Script;

/// The keys of one record, the server clock and small helpers, before every script.
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// The compare-and-swap of a pending approval, run as it is (no record, no prelude).
const SWAP_APPROVAL: &str = include_str!("scripts/swap_approval.lua");

/// The compare-and-delete of a pending approval, run as it is (no record, no prelude).
const REMOVE_APPROVAL: &str = include_str!("scripts/remove_approval.lua");

/// The compare-and-swap of a budget, run as it is (no record, no prelude).
const SWAP_BUDGET: &str = include_str!("scripts/swap_budget.lua");

/// The atomic read of one record with the server's clock, in a cluster (no prelude).
const READ: &str = include_str!("scripts/read.lua");

/// The scripts, hashed once per store.
pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) complete: Script,
    pub(super) release: Script,
    pub(super) renew: Script,
    pub(super) journal: Script,
    pub(super) mark_unknown: Script,
    pub(super) resolve: Script,
    pub(super) force_release: Script,
    pub(super) settle_unknown: Script,
    pub(super) purge: Script,
    pub(super) swap_approval: Script,
    pub(super) remove_approval: Script,
    pub(super) swap_budget: Script,
    pub(super) read: Script,
}

/// Each script's body, by name: what [`Scripts::new`] loads.
const BODIES: [(&str, &str); 10] = [
    ("claim", include_str!("scripts/claim.lua")),
    ("complete", include_str!("scripts/complete.lua")),
    ("release", include_str!("scripts/release.lua")),
    ("renew", include_str!("scripts/renew.lua")),
    ("journal", include_str!("scripts/journal.lua")),
    ("mark_unknown", include_str!("scripts/mark_unknown.lua")),
    ("resolve", include_str!("scripts/resolve.lua")),
    ("force_release", include_str!("scripts/force_release.lua")),
    ("settle_unknown", include_str!("scripts/settle_unknown.lua")),
    ("purge", include_str!("scripts/purge.lua")),
];

impl Scripts {
    pub(super) fn new() -> Self {
        let [
            claim,
            complete,
            release,
            renew,
            journal,
            mark_unknown,
            resolve,
            force_release,
            settle_unknown,
            purge,
        ] = BODIES.map(|(_, body)| Script::new(&format!("{PRELUDE}{body}")));
        Scripts {
            claim,
            complete,
            release,
            renew,
            journal,
            mark_unknown,
            resolve,
            force_release,
            settle_unknown,
            purge,
            swap_approval: Script::new(SWAP_APPROVAL),
            remove_approval: Script::new(REMOVE_APPROVAL),
            swap_budget: Script::new(SWAP_BUDGET),
            read: Script::new(READ),
        }
    }

    pub(super) fn all(&self) -> [&Script; 14] {
        [
            &self.claim,
            &self.complete,
            &self.release,
            &self.renew,
            &self.journal,
            &self.mark_unknown,
            &self.resolve,
            &self.force_release,
            &self.settle_unknown,
            &self.purge,
            &self.swap_approval,
            &self.remove_approval,
            &self.swap_budget,
            &self.read,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ORPHANED;

    #[test]
    fn no_script_spells_the_orphan_text_it_is_given() {
        // Were the text retyped in Lua, rewording `ORPHANED` would leave Redis's orphans with
        // the old text, and their cause would read as an ambiguous error.
        let fragment = &ORPHANED[ORPHANED.len() / 2..];
        let others = [
            ("prelude", PRELUDE),
            ("swap_approval", SWAP_APPROVAL),
            ("remove_approval", REMOVE_APPROVAL),
            ("swap_budget", SWAP_BUDGET),
            ("read", READ),
        ];
        for (name, body) in others.into_iter().chain(BODIES) {
            assert!(
                !body.contains(fragment),
                "{name}.lua retypes the orphan text"
            );
        }
        let (_, claim) = BODIES[0];
        assert!(
            claim.contains("'last_error', ARGV[11]"),
            "the claim takes it as ARGV[11]"
        );
    }
}
