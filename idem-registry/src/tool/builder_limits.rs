//! [`ToolBuilder::limit`] and [`ToolBuilder::after`]: rules across the calls of a run
//! (see [`crate::tool::Limit`]); and the check, when the tool is built, that every control
//! fits the tool.

use serde_json::Value;

use super::ToolBuilder;
use crate::error::RegistryError;

impl ToolBuilder {
    /// A [`Limit`](crate::tool::Limit) across the calls of a run or a tenant: how many calls, or
    /// how much of an integer argument, per run or per tenant within a window, apart per
    /// value of another argument if asked; a call over it is refused (`not_authorized`,
    /// naming the limit, what is used and what is left) or sent to a person. Taken once the
    /// call holds its key, atomically against every other worker; a replay takes nothing, a
    /// failed call gives its share back, an Unknown keeps it.
    ///
    /// ```
    /// use idem::tool::Limit;
    /// use idem::{ToolContext, ToolDef};
    /// use idem::{ToolClass, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let refund = ToolDef::builder("refund", ToolClass::NonIdempotentWrite)
    ///     .description("Refund part of an order.")
    ///     .input_schema(json!({"type": "object", "properties": {"amount": {"type": "integer"}}}))
    ///     .limit(Limit::calls("refunds per run", 3))
    ///     .limit(Limit::sum("refunded per run", "/amount", 500))
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(refund.rules().limits.len(), 2);
    /// ```
    pub fn limit(mut self, limit: crate::tool::Limit) -> Self {
        self.rules.limits.push(limit);
        self
    }

    /// A rule on a combination: a call of this tool after an applied (or Unknown) call of
    /// another tool in the same run needs a person, or is refused ([`After`](crate::tool::After)):
    /// `delete_backups` after `drop_database`. The other tool must be in the same registry.
    pub fn after(mut self, rule: crate::tool::After) -> Self {
        self.rules.after.push(rule);
        self
    }

    /// Refuse controls that cannot work on this tool: those of a write on a `read`,
    /// `approve_when` on an `irreversible` tool, rules and limits that do not fit `schema`.
    pub(super) fn check_controls(
        &self,
        name: &str,
        input_schema: &Value,
    ) -> Result<(), RegistryError> {
        let class = self.class;
        let writes_only = [
            (
                "approve_when",
                !self.approve_when.is_empty() || !self.rules.approve_when.is_empty(),
            ),
            (
                "approvers",
                self.approvers > 1
                    || !self.approvers_when.is_empty()
                    || !self.rules.approvers_when.is_empty(),
            ),
            ("precondition", self.precondition.is_some()),
            ("compensate", self.compensate.is_some()),
            ("undo", self.undo.is_some()),
            ("escalate", self.escalate.is_some()),
        ];
        if !class.records()
            && let Some((control, _)) = writes_only.iter().find(|(_, set)| *set)
        {
            return Err(RegistryError::invalid(
                name,
                format!(
                    "`{control}` has no effect on a `read` tool, which makes no effect: remove it, or give the tool the class of a write"
                ),
            ));
        }
        if class.requires_approval() && writes_only[0].1 {
            return Err(RegistryError::invalid(
                name,
                "`approve_when` has no effect on an `irreversible` tool, every call of which needs approval: remove it, or give the tool the class `non_idempotent_write` to ask only for the calls it selects",
            ));
        }
        self.check_approvers(name)?;
        for limit in &self.rules.limits {
            limit
                .check(input_schema)
                .map_err(|reason| RegistryError::invalid(name, reason))?;
        }
        let approvers_rules = self.rules.approvers_when.iter().map(|r| &r.when);
        for (use_, rules) in [
            ("authorize", self.rules.authorize.iter().collect::<Vec<_>>()),
            ("approve_when", self.rules.approve_when.iter().collect()),
            ("approvers_when", approvers_rules.collect()),
        ] {
            for rule in rules {
                rule.check(use_, input_schema)
                    .map_err(|reason| RegistryError::invalid(name, reason))?;
            }
        }
        Ok(())
    }

    /// Refuse a number of approvers out of range, and four eyes on a tool none of whose
    /// calls would ever be asked.
    fn check_approvers(&self, name: &str) -> Result<(), RegistryError> {
        const MOST: u8 = 16;
        if !(1..=MOST).contains(&self.approvers) {
            return Err(RegistryError::invalid(
                name,
                format!(
                    "`approvers` is {}: a call needs from 1 to {MOST} distinct approvers; e.g. `approvers(2)` for four eyes",
                    self.approvers
                ),
            ));
        }
        let by_rule = self
            .approvers_when
            .iter()
            .map(|(n, _)| *n)
            .chain(self.rules.approvers_when.iter().map(|r| r.approvers));
        for n in by_rule {
            if !(2..=MOST).contains(&n) {
                return Err(RegistryError::invalid(
                    name,
                    format!(
                        "`approvers_when` asks for {n} approvers: a rule asks for 2 to {MOST} (one approver is `approve_when`'s)"
                    ),
                ));
            }
        }
        let asked = self.class.requires_approval()
            || !self.approve_when.is_empty()
            || !self.rules.approve_when.is_empty();
        if self.approvers > 1 && !asked {
            return Err(RegistryError::invalid(
                name,
                format!(
                    "`approvers({})` has no effect: no call of this tool needs approval; give it the class `irreversible`, an `approve_when` rule, or use `approvers_when` for the calls that need {} approvers",
                    self.approvers, self.approvers
                ),
            ));
        }
        Ok(())
    }
}
