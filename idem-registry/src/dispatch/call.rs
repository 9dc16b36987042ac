//! The call vocabulary: a call as the model emitted it, and what a dispatch gives back (the
//! run it belongs to is `crate::run`'s).

use idem_core::{IdempotencyKey, ToolClass};
use serde_json::Value;

/// A tool call as the model emitted it.
///
/// ```
/// use idem::ToolCall;
/// use serde_json::json;
///
/// let call = ToolCall::new("send_email", json!({"to": "a@example.com"})).with_call_id("call_abc");
/// assert_eq!(call.name, "send_email");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// The arguments, as JSON.
    pub arguments: Value,
    /// The provider's tool call id, if any.
    pub call_id: Option<String>,
    /// A key the caller supplies explicitly; it wins over everything else.
    pub key: Option<String>,
    /// The call's position among the calls the model made in one step (parallel tool
    /// calls). Part of the run/step key, so two calls of one step never share a record.
    pub index: u32,
    /// For a call that may bring no key at all (an MCP host sends none): the re-send window
    /// that keys it then (see [`ToolCall::with_resend_window`]).
    pub resend: Option<ResendWindow>,
    /// Key the call, if it has no explicit key, by its sealed arguments (see
    /// [`ToolCall::with_key_by_arguments`]).
    pub key_by_arguments: bool,
}

/// How a call without key material is keyed for re-sends: by `scope` (where it came from: an
/// MCP session, or `""` for the whole tenant) and its arguments, its record kept for
/// `window` once completed (at most the tool's TTL; a tool that needs approval keeps it at
/// least as long as an approval can run it). A re-issue of the same request within the
/// window replays the first (`deduplicated: true`); the same call after it runs again if the
/// first completed. An Unknown outcome is not bound by the window: it stays, reported to the
/// same call, until a verify hook or a person settles it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResendWindow {
    /// Where the call came from.
    pub scope: String,
    /// How long a completed call stands for its re-sends.
    pub window: std::time::Duration,
}

impl ToolCall {
    /// A call without a call id or explicit key.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            name: name.into(),
            arguments,
            call_id: None,
            index: 0,
            key: None,
            resend: None,
            key_by_arguments: false,
        }
    }

    /// Attach the provider's call id.
    pub fn with_call_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = Some(id.into());
        self
    }

    /// Set the call's position among the parallel calls of its step.
    pub fn with_index(mut self, index: u32) -> Self {
        self.index = index;
        self
    }

    /// Attach an explicit key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Key this call, if it has no explicit key, by its arguments: the dispatcher makes the
    /// key from the fingerprint of their canonical JSON with every secret sealed, as it does
    /// for a natural key and a re-send window, and the record is kept for the tool's TTL.
    /// What a front end does to accept calls without key material to a tool whose effect is
    /// the same however often it runs (MCP's `keyless_idempotent_writes`): two calls with the
    /// same arguments within the TTL are one. A caller never hashes the arguments into a key
    /// itself: a plain hash gives a short secret among them (a PIN) away to whoever hashes
    /// guesses against the stored key.
    ///
    /// ```
    /// use idem::ToolCall;
    ///
    /// let call = ToolCall::new("set_status", serde_json::json!({"status": "open"}))
    ///     .with_key_by_arguments();
    /// assert!(call.key_by_arguments);
    /// ```
    pub fn with_key_by_arguments(mut self) -> Self {
        self.key_by_arguments = true;
        self
    }

    /// Key this call, if it has no other key material (an explicit key, its arguments, a
    /// natural key, a call id, a run and step), by `scope` and its arguments for `window`:
    /// what a front end does for clients that send no key, so that a re-issued request is
    /// caught. The trade-off: a deliberate identical call within the window is replayed too
    /// (its result says `deduplicated: true`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::ToolCall;
    ///
    /// let call = ToolCall::new("add_note", serde_json::json!({"text": "hi"}))
    ///     .with_resend_window("session-7f3a", Duration::from_secs(300));
    /// assert_eq!(call.resend.unwrap().window.as_secs(), 300);
    /// ```
    pub fn with_resend_window(
        mut self,
        scope: impl Into<String>,
        window: std::time::Duration,
    ) -> Self {
        self.resend = Some(ResendWindow {
            scope: scope.into(),
            window,
        });
        self
    }
}

/// A dispatched call's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatched {
    /// The tool's output.
    pub output: Value,
    /// The output as the JSON text recorded (identical on every replay).
    pub output_json: String,
    /// Whether this is a replay of a recorded outcome rather than a new execution.
    pub deduplicated: bool,
    /// For a replay under the tool's natural key (find-or-create): the JSON Pointers of this
    /// call's arguments that differ from those of the call that made the record, sorted
    /// (secrets compared by their seals, never shown). Empty when they are the same, and for
    /// anything but such a replay. The effect was not made again: the record's outcome is
    /// the one returned.
    pub differing_arguments: Vec<String>,
    /// The key handed downstream (`None` for a read without key material).
    pub key: Option<IdempotencyKey>,
    /// Executions of the body in this dispatch (0 for a replay).
    pub attempts: u32,
    /// The tool's class.
    pub class: ToolClass,
    /// Where the call's limits stood once it took its shares (empty for a tool without
    /// limits, and for a replay, which takes none).
    pub limits: Vec<LimitUse>,
    /// The standing grant that let the call run without asking a person, in a few words
    /// (`grant g-.. by dana@desk (run `r-1`; ...)`); `None` otherwise and for a replay.
    pub granted: Option<String>,
}

/// Where one limit of a call stood once the call took its share: a host may tell the model
/// what is left.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct LimitUse {
    /// The limit's name.
    pub limit: String,
    /// What its budget's shares sum to, this call's included.
    pub used: u64,
    /// What is left of it.
    pub left: u64,
}

impl Dispatched {
    /// What a front end tells the model of a find-or-create replay whose arguments differ
    /// from the recorded call's ([`Dispatched::differing_arguments`]); `None` otherwise.
    ///
    /// ```
    /// use idem::{Dispatched, ToolClass};
    ///
    /// let replayed = Dispatched {
    ///     output: serde_json::json!("ticket 7"),
    ///     output_json: "\"ticket 7\"".into(),
    ///     deduplicated: true,
    ///     differing_arguments: vec!["/subject".into()],
    ///     key: None,
    ///     attempts: 0,
    ///     class: ToolClass::IdempotentWrite,
    ///     limits: Vec::new(),
    ///     granted: None,
    /// };
    /// assert!(replayed.replay_note().unwrap().contains("/subject"));
    /// ```
    pub fn replay_note(&self) -> Option<String> {
        if self.differing_arguments.is_empty() {
            return None;
        }
        Some(format!(
            "an earlier call already made this (the tool's natural key matched): nothing was made again, and this is the earlier call's result; the arguments at {} differ from that call's and were not applied",
            self.differing_arguments.join(", ")
        ))
    }
}
