//! [`ToolBuilder::approve_when`] and its rules, and [`ToolBuilder::approvers`] (four eyes):
//! which calls of a tool need a person's approval, and how many distinct people.

use std::sync::Arc;

use serde_json::Value;

use super::ToolBuilder;
use crate::run::RunContext;
use crate::tool::Rule;

impl ToolBuilder {
    /// Select the calls that need a person's approval, for a write of any class: a call `f`
    /// selects goes the whole approval path (signed, single use, pending in the store, the
    /// CLI, the inbox, MCP elicitation); the others run without. An `irreversible` tool
    /// needs it for every call already, so there it is refused.
    ///
    /// ```
    /// use idem::{RunContext, ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let refund = ToolDef::builder("refund", ToolClass::NonIdempotentWrite)
    ///     .description("Refund part of an order.")
    ///     .input_schema(json!({"type": "object", "properties": {"amount": {"type": "integer"}}}))
    ///     // Refunds over 50 wait for a person.
    ///     .approve_when(|args: &Value, _run: &RunContext| args["amount"].as_u64() > Some(50))
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// assert!(refund.needs_approval(&json!({"amount": 5000}), &RunContext::new("shop")));
    /// assert!(!refund.needs_approval(&json!({"amount": 5}), &RunContext::new("shop")));
    /// ```
    pub fn approve_when(
        mut self,
        f: impl Fn(&Value, &RunContext) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.approve_when.push(Arc::new(f));
        self
    }

    /// An approval [`Rule`]: a call for which it holds (or which it cannot judge) needs a
    /// person's approval, as with [`approve_when`](Self::approve_when).
    pub fn approve_rule(mut self, rule: Rule) -> Self {
        self.rules.approve_when.push(rule);
        self
    }

    /// Four eyes: each call of the tool that needs approval (every call of an `irreversible`
    /// tool, those an approval rule selects) runs only once `n` distinct people approved it
    /// (1 to 16; default 1). One person counts once, whatever door they decide through; one
    /// denial decides the call; the approvers approve the arguments as called (no edits).
    /// A change of `n` is a change of the tool's approval policy: pending requests are asked
    /// again.
    ///
    /// ```
    /// use idem::{RunContext, ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let wire = ToolDef::builder("wire", ToolClass::Irreversible)
    ///     .description("Wire money.")
    ///     .input_schema(json!({"type": "object", "properties": {"cents": {"type": "integer"}}}))
    ///     .approvers(2)
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(wire.approvers_for(&json!({"cents": 5}), &RunContext::new("bank")), 2);
    /// ```
    pub fn approvers(mut self, n: u8) -> Self {
        self.approvers = n;
        self
    }

    /// Four eyes for the calls `f` selects: they need approval by `n` distinct people (2 to
    /// 16), as with [`approvers`](Self::approvers); a call `f` selects needs approval even on
    /// a tool whose other calls run without.
    ///
    /// ```
    /// use idem::{RunContext, ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let refund = ToolDef::builder("refund", ToolClass::NonIdempotentWrite)
    ///     .description("Refund part of an order.")
    ///     .input_schema(json!({"type": "object", "properties": {"amount": {"type": "integer"}}}))
    ///     .approve_when(|args: &Value, _: &RunContext| args["amount"].as_u64() > Some(50))
    ///     .approvers_when(2, |args: &Value, _: &RunContext| args["amount"].as_u64() > Some(5000))
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// let run = RunContext::new("shop");
    /// assert!(!refund.needs_approval(&json!({"amount": 20}), &run));
    /// assert_eq!(refund.approvers_for(&json!({"amount": 90}), &run), 1);
    /// assert_eq!(refund.approvers_for(&json!({"amount": 9000}), &run), 2);
    /// ```
    pub fn approvers_when(
        mut self,
        n: u8,
        f: impl Fn(&Value, &RunContext) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.approvers_when.push((n, Arc::new(f)));
        self
    }

    /// Four eyes by [`Rule`]: the calls for which `rule` holds (or which it cannot judge)
    /// need approval by `n` distinct people, as with [`approvers_when`](Self::approvers_when).
    pub fn approvers_rule(mut self, n: u8, rule: Rule) -> Self {
        self.rules.approvers_when.push(crate::tool::ApproversWhen {
            approvers: n,
            when: rule,
        });
        self
    }
}
