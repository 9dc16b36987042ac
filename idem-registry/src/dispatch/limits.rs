//! The limits stage: a tool's [`Limit`]s across the calls of a run or a tenant, and its
//! combination rules ([`After`](crate::tool::After)).
//!
//! Before the approve stage the budgets are read ([`Dispatcher::limits_stand`]): a call a
//! limit or a combination would refuse is refused there (`not_authorized`, nothing recorded),
//! and one it would send to a person goes the approval path. Once the call holds its key and
//! before its body runs, its shares are taken ([`Dispatcher::take_shares`]), each atomically
//! against every other worker (`idem::store::budgets`), under the call's record key: a
//! replay never reaches this point, a take-over or retry of the same call holds its share
//! already. A call that fails gives its shares back ([`Dispatcher::give_shares_back`]); an
//! Unknown, or an applied call, keeps them.
//!
//! A tool that another tool's combination rule names takes a share of its run's "applied"
//! budget the same way, which the rule reads.

use std::time::Duration;

use idem_core::store::budgets::{self, Take, Taken};
use idem_core::{Store, canonical_json};
use serde_json::Value;

use super::call::{Dispatched, LimitUse};
use super::decide::GiveBack;
use super::error::DispatchError;
use super::guard::WonClaim;
use super::key::Keyed;
use super::{Dispatcher, KeyedCall, Watch};
use crate::run::RunContext;
use crate::tool::{Exceeded, Limit, ToolDef};

/// How long a run's budget is kept after its last write: a run may go on for days.
pub const RUN_BUDGET_KEEP: Duration = Duration::from_secs(30 * 86_400);

/// One share a call takes: of which budget, how much, up to what.
#[derive(Debug, Clone)]
pub(super) struct Share {
    scope: String,
    amount: u64,
    max: u64,
    window: Option<Duration>,
    exceeded: Exceeded,
    /// The limit's name, for the account (`None`: a combination rule's share, not a limit).
    name: Option<String>,
    /// The limit, in words, for a refusal: "the limit `refunds per run` (3 per run)".
    what: String,
}

impl Share {
    fn keep(&self) -> Duration {
        self.window
            .unwrap_or(RUN_BUDGET_KEEP)
            .max(Duration::from_secs(1))
    }

    fn take<'a>(&'a self, holder: &'a str, may_exceed: bool) -> Take<'a> {
        Take {
            scope: &self.scope,
            holder,
            amount: self.amount,
            max: self.max,
            window: self.window,
            keep: self.keep(),
            may_exceed,
        }
    }

    fn refusal(&self, used: u64, left: u64) -> String {
        format!(
            "{} is used up for this call: {used} used, {left} left, and the call takes {}",
            self.what, self.amount
        )
    }
}

/// What stands against a call before it runs.
#[derive(Debug)]
pub(super) enum Stands {
    /// Nothing: every share fits.
    Clear,
    /// A limit or a combination sends it to a person, for this reason.
    Ask(String),
}

impl Dispatcher {
    /// Add `limit` to the calls of `tool` (or of its group, if the limit names one), as if
    /// the tool declared it: for tools whose definitions are not yours to change, such as
    /// another crate's `#[tool]`s. Refused if the registry has no such tool, or the limit
    /// does not fit its schema.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idem::tool::Limit;
    /// use idem::{Dispatcher, Registry, ToolContext, ToolDef};
    /// use idem::{MemoryStore, ToolClass, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let send = ToolDef::builder("send_email", ToolClass::NonIdempotentWrite)
    ///     .description("Send an email.")
    ///     .input_schema(json!({"type": "object", "properties": {"to": {"type": "string"}}}))
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// let registry = Registry::builder().add(send).build().unwrap();
    /// let dispatcher = Dispatcher::new(registry, Arc::new(MemoryStore::new()))
    ///     .unwrap()
    ///     .with_limit("send_email", Limit::calls("emails per run", 10))
    ///     .unwrap();
    /// let typo = dispatcher.clone().with_limit("send_emial", Limit::calls("emails", 10));
    /// assert!(typo.unwrap_err().to_string().contains("did you mean `send_email`?"));
    /// ```
    pub fn with_limit(mut self, tool: &str, limit: Limit) -> Result<Self, super::SetupError> {
        let invalid = |reason: String| super::SetupError::InvalidLimit {
            tool: tool.to_owned(),
            reason,
        };
        let Some(def) = self.registry.get(tool) else {
            let near = self
                .registry
                .nearest(tool)
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            return Err(invalid(format!("the registry has no such tool{near}")));
        };
        limit.check(&def.input_schema).map_err(invalid)?;
        std::sync::Arc::make_mut(&mut self.limits)
            .entry(tool.to_owned())
            .or_default()
            .push(limit);
        Ok(self)
    }

    /// Whether a call of `tool` has rules across a run's calls: the tool's limits and
    /// combinations, the dispatcher's limits for it, or another tool's combination naming
    /// it. Cheap for the tools that have none (the hot path).
    pub(super) fn has_run_rules(&self, tool: &ToolDef) -> bool {
        tool.has_run_rules()
            || self.registry.is_combined(&tool.name)
            || (!self.limits.is_empty() && self.limits.contains_key(tool.name.as_ref()))
    }

    /// The limits stage before approval: the call's shares, and whether a limit or a
    /// combination sends it to a person (`true`); an error if one refuses it.
    pub(super) async fn limits_before(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        args: &Value,
        keyed: &Keyed,
    ) -> Result<(Vec<Share>, bool), DispatchError> {
        let shares = self.shares(tool, run, keyed.sealed.as_ref().unwrap_or(args))?;
        let holder = keyed
            .keys
            .as_ref()
            .map_or("", |(record, _)| record.as_str());
        let asked = match self.limits_stand(tool, run, &shares, holder).await? {
            Stands::Clear => false,
            Stands::Ask(why) => {
                tracing::debug!(tool = %tool.name, why, "a limit sends the call to a person");
                true
            }
        };
        Ok((shares, asked))
    }

    /// The execute stage of a call that holds its key and takes shares of limits: take them
    /// (a refusal gives the key back, nothing ran), run it, and give them back if it failed.
    pub(super) async fn execute_with_shares(
        &self,
        call: &KeyedCall<'_>,
        held: WonClaim,
        typed: Option<crate::tool::TypedArguments>,
        shares: &[Share],
        watch: &Watch<'_>,
    ) -> Result<Dispatched, DispatchError> {
        let holder = call.record_key.as_str();
        let approved = call.approval.is_some();
        let uses = match self.take_shares(call.tool, shares, holder, approved).await {
            Ok(uses) => uses,
            Err(refused) => {
                let how = GiveBack::abandoned(held.takeover, !held.steps.is_empty());
                let hold = held.hold;
                if let Err(e) = hold.give_back(&how).await {
                    tracing::warn!(error = %e, "could not give the claim back; its lease will expire");
                }
                return Err(refused);
            }
        };
        let result = self.execute_held(call, held, typed, watch).await;
        match result {
            Err(DispatchError::ToolFailed { .. }) => {
                self.give_shares_back(shares, holder).await;
                result
            }
            Ok(mut done) => {
                done.limits = uses;
                Ok(done)
            }
            result => result,
        }
    }

    /// The shares a call of `tool` takes: one per limit, and one of its run's "applied"
    /// budget if another tool's combination rule names it. `keyed_args` are the arguments
    /// with their secrets sealed, so no budget's scope holds a secret in clear.
    pub(super) fn shares(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        keyed_args: &Value,
    ) -> Result<Vec<Share>, DispatchError> {
        let refuse = |rule: String| DispatchError::NotAuthorized {
            tool: tool.name.to_string(),
            rule,
        };
        let mut shares = Vec::new();
        let added = self.limits.get(tool.name.as_ref()).into_iter().flatten();
        for limit in tool.rules.limits.iter().chain(added) {
            let scope = self
                .limit_scope(tool, limit, run, keyed_args)
                .map_err(refuse)?;
            shares.push(Share {
                scope,
                amount: limit.amount(keyed_args).map_err(refuse)?,
                max: limit.max,
                window: limit.window(),
                exceeded: limit.exceeded,
                name: Some(limit.name.clone()),
                what: describe(limit),
            });
        }
        if tool.class.records() && self.registry.is_combined(&tool.name) {
            let scope = self.applied_scope(&tool.name, run).map_err(refuse)?;
            shares.push(Share {
                scope,
                amount: 1,
                max: u64::MAX,
                window: None,
                exceeded: Exceeded::Refuse,
                name: None,
                what: format!("the run's applied calls of `{}`", tool.name),
            });
        }
        Ok(shares)
    }

    /// Before the approve stage: whether a limit or a combination rule refuses the call (an
    /// error), sends it to a person, or lets it on. Reads only: nothing is taken yet.
    pub(super) async fn limits_stand(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        shares: &[Share],
        holder: &str,
    ) -> Result<Stands, DispatchError> {
        let mut ask = None;
        let store: &dyn Store = self.store.as_ref();
        let refused = |rule: String| DispatchError::NotAuthorized {
            tool: tool.name.to_string(),
            rule,
        };
        // One reading of the store's clock judges every share of the call.
        let now = match shares.is_empty() {
            true => idem_core::Timestamp(0),
            false => store
                .now()
                .await
                .map_err(|e| super::error::store_error(tool, e))?,
        };
        for share in shares {
            let budget = budgets::read(store, &share.scope)
                .await
                .map_err(|e| super::error::store_error(tool, e))?;
            if let (Taken::Exceeded { used, left }, _) =
                budgets::decide_take(&budget, &share.take(holder, false), now)
            {
                match share.exceeded {
                    Exceeded::Refuse => return Err(refused(share.refusal(used, left))),
                    Exceeded::Ask => ask = ask.or(Some(share.refusal(used, left))),
                }
            }
        }
        for rule in &tool.rules.after {
            let scope = self.applied_scope(&rule.tool, run).map_err(refused)?;
            let applied = budgets::read(store, &scope)
                .await
                .map_err(|e| super::error::store_error(tool, e))?;
            if applied.used(None) > 0 {
                let why = format!(
                    "`{}` after an applied call of `{}` in the same run",
                    tool.name, rule.tool
                );
                match rule.then {
                    Exceeded::Refuse => {
                        return Err(refused(format!("{why} is not allowed")));
                    }
                    Exceeded::Ask => ask = ask.or(Some(format!("{why} needs a person"))),
                }
            }
        }
        Ok(ask.map_or(Stands::Clear, Stands::Ask))
    }

    /// Take every share of a call holding its key (`holder`: its record key). `approved`: a
    /// person approved the call, so a limit that asks is passed. On a refusal the shares
    /// taken so far are given back. Returns where each limit stood once taken.
    pub(super) async fn take_shares(
        &self,
        tool: &ToolDef,
        shares: &[Share],
        holder: &str,
        approved: bool,
    ) -> Result<Vec<LimitUse>, DispatchError> {
        let store: &dyn Store = self.store.as_ref();
        let mut uses = Vec::new();
        for (i, share) in shares.iter().enumerate() {
            let may_exceed = approved && share.exceeded == Exceeded::Ask;
            let taken = budgets::take(store, &share.take(holder, may_exceed)).await;
            let refusal = match taken {
                Ok(Taken::Granted { used, left } | Taken::Held { used, left }) => {
                    if let Some(limit) = &share.name {
                        uses.push(LimitUse {
                            limit: limit.clone(),
                            used,
                            left,
                        });
                    }
                    continue;
                }
                Ok(Taken::Exceeded { used, left }) => {
                    let mut why = share.refusal(used, left);
                    if share.exceeded == Exceeded::Ask {
                        why.push_str(
                            " (another call used it up meanwhile: call again to ask a person)",
                        );
                    }
                    DispatchError::NotAuthorized {
                        tool: tool.name.to_string(),
                        rule: why,
                    }
                }
                Err(e) => super::error::store_error(tool, e),
            };
            self.give_shares_back(&shares[..i], holder).await;
            return Err(refusal);
        }
        Ok(uses)
    }

    /// Take the shares of a read, which has no record to dedupe it: each call counts.
    pub(super) async fn take_read_shares(
        &self,
        tool: &ToolDef,
        shares: &[Share],
    ) -> Result<Vec<LimitUse>, DispatchError> {
        if shares.is_empty() {
            return Ok(Vec::new());
        }
        let holder = super::key::unkeyed();
        self.take_shares(tool, shares, holder.as_str(), false).await
    }

    /// Give a failed call's shares back; a store that cannot take it is logged (the share
    /// then stays counted: never fewer than were taken).
    pub(super) async fn give_shares_back(&self, shares: &[Share], holder: &str) {
        let store: &dyn Store = self.store.as_ref();
        for share in shares {
            if let Err(e) = budgets::give_back(store, &share.scope, holder, share.keep()).await {
                tracing::warn!(error = %e, scope = %share.scope, "could not give a limit's share back; it stays counted");
            }
        }
    }

    fn limit_scope(
        &self,
        tool: &ToolDef,
        limit: &Limit,
        run: &RunContext,
        args: &Value,
    ) -> Result<String, String> {
        let owner = limit.group.as_deref().unwrap_or(&tool.name);
        let over = match limit.window() {
            Some(_) => String::new(),
            None => run.run_id.clone().ok_or_else(|| {
                format!(
                    "the limit `{}` counts the calls of a run, and this call names no run: give its run id (`RunContext::with_run`)",
                    limit.name
                )
            })?,
        };
        let by = match &limit.by {
            None => String::new(),
            Some(pointer) => match args.pointer(pointer).filter(|v| !v.is_null()) {
                Some(v) => canonical_json(v),
                None => {
                    return Err(format!(
                        "the limit `{}` counts apart per `{pointer}`, and the call has none",
                        limit.name
                    ));
                }
            },
        };
        Ok(scope(&[
            &self.namespace,
            &run.tenant,
            &over,
            "limit",
            owner,
            &limit.name,
            &by,
        ]))
    }

    fn applied_scope(&self, tool: &str, run: &RunContext) -> Result<String, String> {
        let run_id = run.run_id.as_deref().ok_or_else(|| {
            format!(
                "a combination rule looks for `{tool}`'s applied calls in the run, and this call names no run: give its run id (`RunContext::with_run`)"
            )
        })?;
        Ok(scope(&[
            &self.namespace,
            &run.tenant,
            run_id,
            "applied",
            tool,
        ]))
    }
}

/// A budget's scope: its parts as a JSON array, so that no part's text can run into
/// another's.
fn scope(parts: &[&str]) -> String {
    serde_json::to_string(parts).unwrap_or_default()
}

fn describe(limit: &Limit) -> String {
    let per = match (limit.window(), &limit.by) {
        (None, None) => "per run".to_owned(),
        (None, Some(by)) => format!("per run and `{by}`"),
        (Some(w), None) => format!("per tenant within {}s", w.as_secs()),
        (Some(w), Some(by)) => format!("per tenant and `{by}` within {}s", w.as_secs()),
    };
    let what = match &limit.sum {
        None => format!("{} call(s)", limit.max),
        Some(p) => format!("{} of `{p}`", limit.max),
    };
    format!("the limit `{}` ({what} {per})", limit.name)
}
