//! A shop's tools, as a user of idem writes them: a refund in two journaled steps at a fake
//! bank that applies each request key once, as real idempotency keys do. `tests/crash.rs`
//! proves them with idem's crash harness.

use idem::prelude::*;

/// The fake bank: one ledger line per effect it applied, each request key applied once.
pub mod bank {
    use std::io::Write as _;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

    /// Where the bank keeps its files (a crash test gives each run its own folder).
    pub fn open(dir: &Path) {
        *DIR.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir.to_owned());
    }

    /// Apply `what` under `key`: nothing if the key was seen (`None`: a request without a
    /// key, applied every time).
    pub fn apply(what: &str, key: Option<&str>) {
        let dir = DIR.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let dir = dir.expect("the bank is open");
        if let Some(key) = key {
            let seen = std::fs::read_to_string(dir.join("keys")).unwrap_or_default();
            if seen.lines().any(|k| k == key) {
                return;
            }
            append(&dir.join("keys"), key);
        }
        append(&dir.join("ledger"), what);
    }

    fn append(path: &Path, line: &str) {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("the bank's file");
        writeln!(file, "{line}").expect("written");
        file.sync_all().expect("synced");
    }

    /// Every effect the bank applied in `dir`, in order.
    pub fn ledger(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("ledger"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Refund an order: reverse its charge, then credit the customer's wallet, each step once.
#[tool(class = "idempotent_write")]
pub async fn refund(ctx: &ToolContext, order: String, amount: u64) -> Result<String, ToolError> {
    let key = ctx.downstream_key().as_str().to_owned();
    let reverse = format!("{key}-reverse");
    ctx.step("reverse", || async {
        bank::apply(&format!("reverse {order} {amount}"), Some(&reverse));
        Ok::<_, ToolError>(())
    })
    .await?;
    let credit = format!("{key}-credit");
    ctx.step("credit", || async {
        bank::apply(&format!("credit {order} {amount}"), Some(&credit));
        Ok::<_, ToolError>(())
    })
    .await?;
    Ok(format!("refunded {amount} on {order}"))
}

/// The same refund written wrong (a planted defect): the charge is reversed before the step
/// that journals it, with no key, so a crash after it reverses it again.
#[tool(class = "idempotent_write")]
pub async fn refund_hasty(ctx: &ToolContext, order: String, amount: u64) -> Result<String, ToolError> {
    bank::apply(&format!("reverse {order} {amount}"), None);
    let key = ctx.downstream_key().as_str().to_owned();
    ctx.step("reversed", || async { Ok::<_, ToolError>(()) }).await?;
    let credit = format!("{key}-credit");
    ctx.step("credit", || async {
        bank::apply(&format!("credit {order} {amount}"), Some(&credit));
        Ok::<_, ToolError>(())
    })
    .await?;
    Ok(format!("refunded {amount} on {order}"))
}

/// A voucher mailed through an API that takes no key, declared `idempotent_write` (a planted
/// defect: it is not, so running it again after a crash mails a second voucher).
#[tool(class = "idempotent_write")]
pub async fn send_voucher(order: String, amount: u64) -> Result<String, ToolError> {
    bank::apply(&format!("voucher of {amount} for {order}"), None);
    Ok(format!("voucher sent for {order}"))
}
