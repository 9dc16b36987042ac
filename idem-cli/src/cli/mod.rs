//! `idem records`, `idem approvals`, `idem runs` and `idem stats`: the operator's commands, an aligned
//! table for people and `--json` for scripts.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use clap::Args;
use idem_core::StateKind;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::exit::{Exit, Failure};
use crate::operate::{self, Operator};
use crate::present;

mod approvals;
mod audit;
mod cases;
mod crashtest;
mod grants;
mod records;
mod runs;

pub use approvals::{ApprovalsArgs, approvals};
pub use audit::{AuditArgs, audit};
pub use cases::{CasesArgs, cases};
pub use crashtest::{CrashtestArgs, crashtest};
pub use grants::{GrantsArgs, grants};
pub use records::{RecordsArgs, records};
pub use runs::{RunsArgs, runs};

/// Where the records are, for every operator command.
#[derive(Args, Clone)]
pub struct StoreArgs {
    /// The store: `sqlite:PATH`, `redis://HOST:PORT`, `redis-cluster://HOST:PORT,HOST:PORT` or
    /// `postgres://USER@HOST/DB`.
    #[arg(
        long,
        env = crate::env::STORE,
        hide_env_values = true,
        value_name = "STORE",
        global = true
    )]
    pub store: Option<String>,
    /// The Redis key prefix or PostgreSQL schema the dispatchers were given.
    #[arg(
        long,
        env = crate::env::STORE_PREFIX,
        hide_env_values = true,
        value_name = "PREFIX",
        default_value = crate::store::DEFAULT_PREFIX,
        global = true
    )]
    pub prefix: String,
    /// Print JSON for scripts instead of a table (the shapes are in the README).
    #[arg(long, global = true)]
    pub json: bool,
}

impl StoreArgs {
    pub async fn open(&self) -> Result<Operator, Failure> {
        let spec = self.store.as_deref().ok_or_else(|| {
            Failure::new(
                Exit::Usage,
                "no store: give --store sqlite:PATH | redis://HOST:PORT | redis-cluster://HOST:PORT,HOST:PORT | postgres://USER@HOST/DB, or set IDEM_STORE",
            )
        })?;
        Operator::open(spec, &self.prefix).await
    }
}

/// Who decides: recorded with every approval and denial, and logged with every change.
#[derive(Args, Clone)]
pub struct Identity {
    /// Your identity, recorded with the decision (e.g. an email address).
    #[arg(
        long = "as",
        env = crate::env::APPROVER,
        hide_env_values = true,
        value_name = "WHO"
    )]
    pub who: Option<String>,
}

impl Identity {
    pub fn required(&self) -> Result<String, Failure> {
        match self.who.as_deref().map(str::trim) {
            Some(who) if !who.is_empty() => Ok(who.to_owned()),
            _ => Err(Failure::new(
                Exit::Usage,
                "who decides? give --as NAME or set IDEM_APPROVER: the decision is recorded with it",
            )),
        }
    }
}

#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this tenant's records and approvals.
    #[arg(long)]
    pub tenant: Option<String>,
}

/// A spinner on standard error while a long operation runs (drawn only on a terminal).
pub(crate) fn progress(what: &'static str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar.set_message(format!("{what}: 0"));
    bar
}

/// Ask before a change, showing it, unless `yes`.
pub(crate) fn confirm(yes: bool, change: &str) -> Result<(), Failure> {
    eprintln!("{}", present::visible_line(change));
    if yes {
        return Ok(());
    }
    eprint!("Proceed? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let read = std::io::stdin().lock().read_line(&mut answer);
    let interactive = std::io::stdin().is_terminal();
    match read {
        Ok(_) if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") => Ok(()),
        Ok(0) if !interactive => Err(Failure::new(
            Exit::NotConfirmed,
            "not confirmed (nothing answered the question): nothing changed; pass --yes to skip it",
        )),
        _ => Err(Failure::new(
            Exit::NotConfirmed,
            "not confirmed: nothing changed",
        )),
    }
}

/// A line for a person, on standard output, with nothing in it that reads as other text.
pub(crate) fn say(line: &str) {
    println!("{}", present::visible_line(line));
}

pub(crate) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// An aligned table: a header row and rows of cells.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) {
    // What a person decides on is shown as it is: no escape sequence, no reordering.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|c| present::visible(c).into_owned())
                .collect()
        })
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{}...", text.chars().take(max - 3).collect::<String>())
    } else {
        text.to_owned()
    }
}

pub async fn stats(args: StatsArgs) -> Result<(), Failure> {
    let op = args.store.open().await?;
    let bar = progress("records read");
    let stats = op
        .stats(args.tenant.as_deref(), &|n| {
            bar.set_message(format!("records read: {n}"))
        })
        .await;
    bar.finish_and_clear();
    let stats = stats?;
    if stats.by_state.is_empty() && stats.pending_approvals == 0 {
        op.found_nothing();
    }
    if args.store.json {
        print_json(&stats.to_json());
        return Ok(());
    }
    say(&op.name);
    let count = |m: &std::collections::BTreeMap<&'static str, usize>, s: &str| {
        m.get(s).copied().unwrap_or(0).to_string()
    };
    let total: usize = stats.by_state.values().sum();
    println!(
        "records: {total} ({} in progress, {} unknown, {} completed); pending approvals: {}",
        count(&stats.by_state, StateKind::InProgress.as_str()),
        count(&stats.by_state, StateKind::Unknown.as_str()),
        count(&stats.by_state, StateKind::Completed.as_str()),
        stats.pending_approvals
    );
    match &stats.oldest_unknown {
        Some((r, since)) => say(&format!(
            "oldest unknown: {} ({} for {}) since {}",
            r.key,
            r.tool,
            r.tenant,
            since.to_rfc3339()
        )),
        None => println!("oldest unknown: none"),
    }
    for (title, map) in [("TOOL", &stats.by_tool), ("TENANT", &stats.by_tenant)] {
        println!();
        let rows: Vec<Vec<String>> = map
            .iter()
            .map(|(name, m)| {
                let mut row = vec![name.clone()];
                row.extend(operate::STATES.iter().map(|s| count(m, s)));
                row
            })
            .collect();
        table(&[title, "IN_PROGRESS", "UNKNOWN", "COMPLETED"], &rows);
    }
    Ok(())
}
