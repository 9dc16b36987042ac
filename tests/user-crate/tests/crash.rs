//! The shop's refund, crash-tested: killed at every point that matters and resumed, the bank
//! applies each effect once; the hasty refund is caught reversing a charge twice.

use idem::prelude::*;
use idem::testing::{CrashTest, Setup};
use serde_json::json;
use shop_tools::bank;

async fn refunds(setup: Setup, tool: &str) {
    bank::open(setup.dir());
    let dispatcher = Dispatcher::new(Registry::linked().unwrap(), setup.store()).unwrap();
    let dispatcher = setup.instrument(dispatcher);
    let call = ToolCall::new(tool, json!({"order": "o-1", "amount": 40})).with_call_id("call_1");
    let _ = dispatcher.dispatch(&call, &RunContext::new("shop").with_run("run-1", 0)).await;
}

#[test]
fn a_refund_holds_at_every_crash() {
    let report = CrashTest::new(|s| refunds(s, "refund")).effects(bank::ledger).run();
    println!("{report}");
    report.assert_held();
}

#[test]
fn a_hasty_refund_is_caught_reversing_twice() {
    let report = CrashTest::new(|s| refunds(s, "refund_hasty")).effects(bank::ledger).run();
    println!("{report}");
    assert!(report.to_string().contains("TWICE: `reverse o-1 40` 2 times"), "{report}");
}

#[test]
fn a_write_that_is_not_idempotent_is_caught_run_again() {
    let report = CrashTest::new(|s| refunds(s, "send_voucher")).effects(bank::ledger).run();
    println!("{report}");
    assert!(report.to_string().contains("TWICE: `voucher of 40 for o-1` 2 times"), "{report}");
}
