//! `idem runs show`: a run's account, every call of it with its class, how many times its
//! body ran and what became of it, from the store (as the dispatcher that kept it would tell
//! it).

use clap::{Args, Subcommand};
use idem_registry::dispatch::{CallOutcome, run_account};

use super::{StoreArgs, clip, print_json, say, table};
use crate::exit::{Exit, Failure};

#[derive(Args)]
pub struct RunsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(subcommand)]
    pub command: RunsCommand,
}

#[derive(Subcommand)]
pub enum RunsCommand {
    /// Every call of one run, its class, how many times its body ran (blank: not known),
    /// and its outcome: answered (a read), applied, replayed, refused (why), unknown,
    /// pending approval, compensated. Needs dispatchers that keep run accounts.
    Show {
        /// The run id (an MCP client's session is `session:<id>`).
        run_id: String,
        /// The tenant the run acted for.
        #[arg(long)]
        tenant: String,
    },
}

pub async fn runs(args: RunsArgs) -> Result<(), Failure> {
    let RunsCommand::Show { run_id, tenant } = args.command;
    let op = args.store.open().await?;
    let account = run_account(&*op.store, &tenant, &run_id)
        .await
        .map_err(|e| Failure::store(&op.name, e))?;
    if args.store.json {
        print_json(&serde_json::to_value(&account).unwrap_or_default());
        return Ok(());
    }
    if account.calls.is_empty() {
        op.found_nothing();
        return Err(Failure::new(
            Exit::NotFound,
            format!(
                "no calls of run `{run_id}` for tenant `{tenant}`: check both, and that the dispatchers keep run accounts (`Dispatcher::with_run_accounts`)"
            ),
        ));
    }
    say(&op.name);
    let rows: Vec<Vec<String>> = account
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            vec![
                (i + 1).to_string(),
                c.at.to_rfc3339(),
                c.tool.clone(),
                c.call_id.clone().unwrap_or_default(),
                c.class.map(|k| k.as_str().to_owned()).unwrap_or_default(),
                c.attempts.map(|n| n.to_string()).unwrap_or_default(),
                c.outcome.name().to_owned(),
                clip(&detail(&c.outcome), 100),
            ]
        })
        .collect();
    table(
        &[
            "#", "AT", "TOOL", "CALL", "CLASS", "ATTEMPTS", "OUTCOME", "DETAIL",
        ],
        &rows,
    );
    let counts: Vec<String> = account
        .counts()
        .into_iter()
        .map(|(n, c)| format!("{c} {n}"))
        .collect();
    println!("in all: {}", counts.join(", "));
    Ok(())
}

/// What a person reads beside an outcome.
fn detail(outcome: &CallOutcome) -> String {
    match outcome {
        CallOutcome::Refused { why } => why.clone(),
        CallOutcome::Unknown {
            retry_after: Some(at),
            why,
            ..
        } => format!(
            "{why} (a verify hook may settle it from {})",
            at.to_rfc3339()
        ),
        CallOutcome::Unknown { why, .. } => {
            format!("{why} (a person must settle it: idem records)")
        }
        CallOutcome::PendingApproval => "waiting for a person: idem approvals".into(),
        CallOutcome::Compensated { undone, .. } => format!("undone: {}", undone.join(", ")),
        CallOutcome::Unrecognized => "written by a newer idem: update idem to read it".into(),
        _ => String::new(),
    }
}
