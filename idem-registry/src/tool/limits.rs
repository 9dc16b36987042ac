//! Limits across the calls of a run or a tenant, as data: how many calls of a tool (or of a
//! group of tools) a run may make, how much of an integer argument the calls of a run, or of a
//! tenant within a window, may add up to, counted apart per value of another argument if
//! asked; and what a call over it meets (refused, or sent to a person).
//!
//! A limit is checked when the tool is built (its pointers against the schema, a sum over an
//! integer argument) and kept with the tool ([`ToolRules::limits`](super::ToolRules)). The
//! dispatcher takes each call's share of a limit's budget in the store once the call holds its
//! key and before its body runs, atomically against every other worker
//! (`idem::store::budgets`): a replay takes nothing, a call that fails gives its share
//! back, an Unknown keeps it.
//!
//! ```
//! use idem::tool::Limit;
//! use serde_json::json;
//!
//! // At most 500 a day to any one destination account, per tenant; above it, ask a person.
//! let limit: Limit = serde_json::from_value(json!({
//!     "name": "payouts per destination",
//!     "sum": "/amount",
//!     "max": 500,
//!     "per": {"tenant_window_secs": 86400},
//!     "by": "/destination",
//!     "exceeded": "ask"
//! })).unwrap();
//! assert_eq!(limit.max, 500);
//! // At most 3 refunds in a run, refused beyond.
//! let refunds = Limit::calls("refunds per run", 3);
//! assert_eq!(refunds.sum, None);
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A limit across calls (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// Its name, in refusals and the run's account ("refunds per run").
    pub name: String,
    /// What each call takes: the value of this integer argument (a JSON Pointer; amounts in
    /// minor units, such as cents), or 1 per call when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sum: Option<String>,
    /// The most the calls it counts may take in all.
    pub max: u64,
    /// Which calls it counts: the run's (the default) or the tenant's within a window.
    #[serde(default)]
    pub per: Per,
    /// Counted apart for each value of this argument (a JSON Pointer): per destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Shared by every tool that names the same group (and the same limit name): "at most
    /// 3 refunds in a run" over `refund` and `refund_partial`. Without one, the tool's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// What a call over the limit meets.
    #[serde(default)]
    pub exceeded: Exceeded,
}

/// Which calls a limit counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    /// The calls of one run (a call without a run id cannot be counted: it is refused).
    #[default]
    Run,
    /// The calls of the tenant within a sliding window of this many seconds.
    TenantWindowSecs(u64),
}

/// What a call over a limit meets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exceeded {
    /// Refused (`not_authorized`), naming the limit, what is used and what is left.
    #[default]
    Refuse,
    /// Sent to a person: the call waits for approval like one `approve_when` selects, and
    /// once approved runs over the limit (and counts).
    Ask,
}

impl Limit {
    /// At most `max` calls per run, refused beyond (a loop breaker: calls under any call id
    /// and any arguments count).
    pub fn calls(name: impl Into<String>, max: u64) -> Limit {
        Limit {
            name: name.into(),
            sum: None,
            max,
            per: Per::Run,
            by: None,
            group: None,
            exceeded: Exceeded::Refuse,
        }
    }

    /// At most `max` in all of the integer argument at `pointer`, per run.
    pub fn sum(name: impl Into<String>, pointer: impl Into<String>, max: u64) -> Limit {
        Limit {
            sum: Some(pointer.into()),
            ..Limit::calls(name, max)
        }
    }

    /// Counted over the tenant's calls within `window` instead of the run's.
    pub fn per_tenant_within(mut self, window: Duration) -> Limit {
        self.per = Per::TenantWindowSecs(window.as_secs().max(1));
        self
    }

    /// Counted apart for each value of the argument at `pointer`.
    pub fn by(mut self, pointer: impl Into<String>) -> Limit {
        self.by = Some(pointer.into());
        self
    }

    /// Shared by the tools of `group`.
    pub fn in_group(mut self, group: impl Into<String>) -> Limit {
        self.group = Some(group.into());
        self
    }

    /// Sent to a person when exceeded, rather than refused.
    pub fn ask_when_exceeded(mut self) -> Limit {
        self.exceeded = Exceeded::Ask;
        self
    }

    /// The sliding window, for a limit per tenant.
    pub fn window(&self) -> Option<Duration> {
        match self.per {
            Per::Run => None,
            Per::TenantWindowSecs(s) => Some(Duration::from_secs(s)),
        }
    }

    /// Refuse a limit that cannot work on `schema`: a nameless one, a pointer the schema
    /// lacks, a sum over an argument the schema does not say is an integer.
    pub(crate) fn check(&self, schema: &Value) -> Result<(), String> {
        let refuse = |why: String| format!("limit `{}`: {why}", self.name);
        if self.name.trim().is_empty() {
            return Err("a limit needs a name, which refusals and the account show".into());
        }
        if let Some(pointer) = &self.sum {
            crate::schema::check_argument_pointer("sum", pointer, schema).map_err(&refuse)?;
            if pointer.is_empty() || pointer[1..].contains('/') {
                return Err(refuse(format!(
                    "`sum` names `{pointer}`: name one top-level integer argument, e.g. \"/amount\""
                )));
            }
            // A schema that lists no arguments says nothing to check against (a proxy's file
            // is checked again with the upstream's schema).
            let listed = schema.get("properties").is_some_and(Value::is_object);
            let ty = schema
                .pointer(&format!("/properties{pointer}/type"))
                .cloned()
                .unwrap_or(Value::Null);
            if listed && ty != Value::String("integer".into()) {
                return Err(refuse(format!(
                    "`sum` adds up `{pointer}`, which the schema {}: a limit sums an integer argument (amounts in minor units, such as cents)",
                    match (ty, schema.pointer(&format!("/properties{pointer}"))) {
                        (_, None) => "does not declare".to_owned(),
                        (Value::Null, Some(_)) => "gives no type".to_owned(),
                        (other, Some(_)) => format!("says is {other}"),
                    }
                )));
            }
        }
        if let Some(pointer) = &self.by {
            crate::schema::check_argument_pointer("by", pointer, schema).map_err(&refuse)?;
        }
        if let Per::TenantWindowSecs(0) = self.per {
            return Err(refuse("its window must be at least one second".into()));
        }
        Ok(())
    }

    /// What a call with `args` takes of it, or why it cannot be counted.
    pub(crate) fn amount(&self, args: &Value) -> Result<u64, String> {
        let Some(pointer) = &self.sum else {
            return Ok(1);
        };
        match args.pointer(pointer) {
            Some(v) => v.as_u64().ok_or_else(|| {
                format!(
                    "the limit `{}` adds up `{pointer}`, which must be a whole number of at least 0",
                    self.name
                )
            }),
            None => Err(format!(
                "the limit `{}` adds up `{pointer}`, and the call has none",
                self.name
            )),
        }
    }
}

/// A rule on a combination of calls: a call of the tool after an applied call of `tool` in the
/// same run needs a person (or is refused). "`delete_backups` after `drop_database`".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct After {
    /// The tool whose applied call (or Unknown one) in the run the rule looks for.
    pub tool: String,
    /// What the call meets then.
    #[serde(default = "ask")]
    pub then: Exceeded,
}

fn ask() -> Exceeded {
    Exceeded::Ask
}

impl After {
    /// A call after an applied call of `tool` in the run needs a person.
    pub fn ask(tool: impl Into<String>) -> After {
        After {
            tool: tool.into(),
            then: Exceeded::Ask,
        }
    }

    /// A call after an applied call of `tool` in the run is refused.
    pub fn refuse(tool: impl Into<String>) -> After {
        After {
            tool: tool.into(),
            then: Exceeded::Refuse,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "amount": {"type": "integer"}, "price": {"type": "number"},
            "destination": {"type": "string"}}})
    }

    #[test]
    fn bad_limits_are_refused_naming_the_limit_and_the_fix() {
        let cases = [
            (Limit::sum("pay", "/amount", 5), None),
            (Limit::calls("loop", 3).by("/destination"), None),
            (
                Limit::sum("pay", "/price", 5),
                Some(
                    "limit `pay`: `sum` adds up `/price`, which the schema says is \"number\": a limit sums an integer argument (amounts in minor units, such as cents)",
                ),
            ),
            (
                Limit::sum("pay", "/amout", 5),
                Some("limit `pay`: `sum` entry `/amout`"),
            ),
            (
                Limit::calls("by", 3).by("/dest"),
                Some("limit `by`: `by` entry `/dest`"),
            ),
            (Limit::calls(" ", 3), Some("a limit needs a name")),
        ];
        for (limit, refused) in cases {
            match (limit.check(&schema()), refused) {
                (Ok(()), None) => {}
                (Err(why), Some(start)) => assert!(why.starts_with(start), "{why}"),
                (got, want) => panic!("{limit:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_call_takes_one_or_its_amount() {
        assert_eq!(Limit::calls("n", 3).amount(&json!({})), Ok(1));
        let sum = Limit::sum("pay", "/amount", 500);
        assert_eq!(sum.amount(&json!({"amount": 20})), Ok(20));
        assert!(sum.amount(&json!({"amount": -1})).is_err());
        assert!(sum.amount(&json!({})).unwrap_err().contains("has none"));
    }
}
