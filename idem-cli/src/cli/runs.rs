//! `idem runs show`: a run's account, every call of it with its class, how many times its
//! body ran and what became of it, from the store (as the dispatcher that kept it would tell
//! it).

use clap::{Args, Subcommand};
use idem_core::store::decisions::{self, Action, Decision};
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
    /// pending approval, compensated, sent to a person (and who decided what); which calls
    /// the run's undo undid; where each limit stands. Needs dispatchers that keep run
    /// accounts.
    Show {
        /// The run id (an MCP client's session is `session:<id>`).
        run_id: String,
        /// The tenant the run acted for.
        #[arg(long)]
        tenant: String,
    },
    /// Have a run undone: its applied calls of tools that declare an undo, newest first,
    /// each once. The agent's dispatcher carries it out on its next recovery pass
    /// (`Dispatcher::recover_every`, or `Dispatcher::undo_requested`); `idem runs show`
    /// then marks each undone call.
    Undo {
        /// The run id.
        run_id: String,
        /// The tenant the run acted for.
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        identity: super::Identity,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },
}

pub async fn runs(args: RunsArgs) -> Result<(), Failure> {
    let (run_id, tenant) = match args.command {
        RunsCommand::Show { run_id, tenant } => (run_id, tenant),
        RunsCommand::Undo {
            run_id,
            tenant,
            identity,
            yes,
        } => return undo(&args.store, &run_id, &tenant, &identity, yes).await,
    };
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
                clip(&row_detail(c), 100),
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
    for l in account.limits() {
        println!("limit `{}`: {} used, {} left", l.limit, l.used, l.left);
    }
    println!("in all: {}", counts.join(", "));
    Ok(())
}

/// Ask for a run to be undone, as `identity`.
async fn undo(
    store: &StoreArgs,
    run_id: &str,
    tenant: &str,
    identity: &super::Identity,
    yes: bool,
) -> Result<(), Failure> {
    let who = identity.required()?;
    let op = store.open().await?;
    super::confirm(
        yes,
        &format!(
            "Have run `{run_id}` of tenant {tenant} undone: its applied calls of tools that declare an undo, newest first. Recorded as asked by {who}."
        ),
    )?;
    idem_registry::dispatch::request_undo(&*op.store, tenant, run_id, &who)
        .await
        .map_err(|e| Failure::store(&op.name, e))?;
    let decision = Decision::new(&who, Action::UndoRun, op.door, tenant)
        .about_run(run_id)
        .detail("asked for the run to be undone");
    decisions::append(&*op.store, &decision).await.map_err(|e| {
        Failure::new(
            Exit::Store,
            format!(
                "{}: the undo of run `{run_id}` was asked for, and the decision log could not take it: {e}",
                op.name
            ),
        )
    })?;
    say(&format!(
        "asked for run `{run_id}` of {tenant} to be undone, by {who}: the agent's dispatcher undoes it on its next recovery pass; `idem runs show {run_id} --tenant {tenant}` marks each undone call"
    ));
    Ok(())
}

/// What a person reads beside a call: its outcome's detail, a person's decision, its undo.
fn row_detail(c: &idem_registry::dispatch::AccountEntry) -> String {
    // A person's decision and the undo first: the outcome's detail may be long.
    let mut parts = Vec::new();
    if let Some(d) = &c.decided {
        parts.push(format!("decided by {}: {}", d.by, d.said));
    }
    if let Some(undone) = &c.undo {
        parts.push(format!("its undo: {undone}"));
    }
    parts.push(detail(&c.outcome));
    parts.retain(|p| !p.is_empty());
    parts.join("; ")
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
        CallOutcome::Escalated { why, .. } => format!("{why} (sent to a person: idem cases)"),
        CallOutcome::Compensated { undone, .. } => format!("undone: {}", undone.join(", ")),
        CallOutcome::Unrecognized => "written by a newer idem: update idem to read it".into(),
        _ => String::new(),
    }
}
