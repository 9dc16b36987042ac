//! Every control a tool can declare, over typed arguments.

use idem::prelude::*;
use idem::tool::Undo;
use serde::Deserialize;

#[derive(Deserialize)]
struct Refund {
    customer_id: String,
    amount: u64,
}

fn own_customer(args: &Refund, run: &RunContext) -> Result<(), String> {
    match run.acting_for.as_deref() == Some(args.customer_id.as_str()) {
        true => Ok(()),
        false => Err("only the customer the run acts for".into()),
    }
}

fn large(args: &Refund, _run: &RunContext) -> bool {
    args.amount > 50
}

async fn not_refunded_yet(_ctx: ToolContext, _args: Refund) -> Result<(), ToolError> {
    Ok(())
}

async fn take_back(_ctx: ToolContext, _undo: Undo) -> Result<(), ToolError> {
    Ok(())
}

fn refund_limits() -> Vec<idem::tool::Limit> {
    vec![
        idem::tool::Limit::calls("refunds per run", 3),
        idem::tool::Limit::sum("refunded per run", "/amount", 500),
    ]
}

/// Refund part of an order.
#[tool(
    class = "non_idempotent_write",
    authorize = own_customer,
    approve_when = large,
    approvers = 2,
    precondition = not_refunded_yet,
    compensate = take_back,
    limits = refund_limits,
    escalate = "failures_and_unknown"
)]
async fn refund(customer_id: String, amount: u64) -> Result<String, ToolError> {
    Ok(format!("{amount} to {customer_id}"))
}

fn main() {
    let def = Registry::linked().unwrap().get("refund").unwrap().clone();
    assert!(def.may_need_approval() && def.has_precondition() && def.has_compensation());
    assert_eq!(def.rules().limits, refund_limits());
    assert_eq!(def.escalates(), Some(idem::tool::Escalate::FailuresAndUnknown));
    let run = RunContext::new("shop");
    assert_eq!(def.approvers_for(&serde_json::json!({"amount": 9000}), &run), 2);
}
