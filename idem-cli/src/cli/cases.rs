//! `idem cases`: the calls sent to a person (a tool's `escalate`): list, show, and decide
//! one as shown: run it again under its key, say what happened, or have its run undone.

use clap::{Args, Subcommand};
use idem_core::{IdempotencyKey, Outcome};
use idem_registry::dispatch::{Case, CaseDecision, CaseDesk, CaseError};
use serde_json::{Value, json};

use super::{Identity, StoreArgs, clip, confirm, print_json, say, table};
use crate::exit::{Exit, Failure};
use crate::operate::Operator;
use crate::present;

#[derive(Args)]
pub struct CasesArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(subcommand)]
    pub command: CasesCommand,
}

/// What every `KEY` of `idem cases` takes.
const KEY_HELP: &str = "The call's key: the record key `idem cases list` prints (64 hex digits), or the downstream key (`idem-` and 40 hex digits) the agent's `escalated` answer names";

#[derive(Subcommand)]
pub enum CasesCommand {
    /// List the calls waiting for a person's decision, oldest first.
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Show one case: the call, its error, its run and what the run applied before it.
    Show {
        #[arg(help = KEY_HELP)]
        key: String,
    },
    /// Run the call again: the agent's next call under its key runs the tool once more,
    /// with the same downstream key.
    Retry(Decide),
    /// Say what happened: with --output the call applied and that output is replayed; with
    /// --failed it did not, and that failure is replayed.
    Resolve {
        #[command(flatten)]
        decide: Decide,
        /// The call applied: its output, as JSON.
        #[arg(
            long,
            value_name = "JSON",
            conflicts_with = "failed",
            required_unless_present = "failed"
        )]
        output: Option<String>,
        /// The call did not apply: why, as the agent's model is told.
        #[arg(long, value_name = "WHY")]
        failed: Option<String>,
    },
    /// Have the call's run undone (newest applied call first, each once): the agent's
    /// dispatcher carries it out on its next recovery pass; the call is answered as failed,
    /// saying so.
    UndoRun(Decide),
}

#[derive(Args)]
pub struct Decide {
    #[arg(help = KEY_HELP)]
    pub key: String,
    #[command(flatten)]
    pub identity: Identity,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
}

pub async fn cases(args: CasesArgs) -> Result<(), Failure> {
    let op = args.store.open().await?;
    let json = args.store.json;
    let desk = CaseDesk::over(&*op.store).through(op.door);
    let (decide, decision) = match args.command {
        CasesCommand::List { tenant } => return list(&op, desk, tenant.as_deref(), json).await,
        CasesCommand::Show { key } => {
            let case = find(&op, desk, &key).await?;
            match json {
                true => print_json(&case_json(&case)),
                false => show(&case),
            }
            return Ok(());
        }
        CasesCommand::Retry(decide) => (decide, CaseDecision::Retry),
        CasesCommand::Resolve {
            decide,
            output,
            failed,
        } => {
            let outcome = present::outcome_of(
                output.as_deref(),
                failed.as_deref(),
                "--output",
                "'\"text\"'",
            )?;
            (decide, CaseDecision::Resolve(outcome))
        }
        CasesCommand::UndoRun(decide) => (decide, CaseDecision::UndoRun),
    };
    let who = decide.identity.required()?;
    let case = find(&op, desk, &decide.key).await?;
    let what = match &decision {
        CaseDecision::Retry => "run it again under its key".to_owned(),
        CaseDecision::Resolve(Outcome::Success(output)) => {
            format!("resolve it as applied, with output {output}")
        }
        CaseDecision::Resolve(Outcome::Failure(e)) => {
            format!("resolve it as failed: {}", e.message())
        }
        _ => format!(
            "have run `{}` undone",
            case.escalation.run_id.as_deref().unwrap_or("?")
        ),
    };
    confirm(
        decide.yes,
        &format!(
            "{} for tenant {} (key {}), {}: {what}. Recorded as decided by {who}.",
            case.tool,
            case.tenant,
            case.record,
            case.escalation.summary()
        ),
    )?;
    let decided = desk
        .decide(&case, &who, decision)
        .await
        .map_err(|e| decision_failure(&op, e))?;
    tracing::info!(key = %case.record, by = %who, decision = %decided.decision, "a case was decided in {}", op.name);
    match json {
        true => print_json(&serde_json::to_value(&decided).unwrap_or_default()),
        false => say(&format!(
            "decided {} ({} for {}) by {who}: {}",
            case.record, case.tool, case.tenant, decided.said
        )),
    }
    Ok(())
}

async fn list(
    op: &Operator,
    desk: CaseDesk<'_>,
    tenant: Option<&str>,
    json: bool,
) -> Result<(), Failure> {
    let cases = desk
        .pending(tenant, usize::MAX)
        .await
        .map_err(|e| Failure::store(&op.name, e))?;
    if cases.is_empty() {
        op.found_nothing();
    }
    if json {
        print_json(&Value::Array(cases.iter().map(case_json).collect()));
        return Ok(());
    }
    let now = op.now().await?;
    let rows: Vec<Vec<String>> = cases
        .iter()
        .map(|c| {
            vec![
                c.record.to_string(),
                c.tool.clone(),
                c.tenant.clone(),
                c.escalation.run_id.clone().unwrap_or_default(),
                format!("{} ago", present::span(c.since, now)),
                clip(&c.escalation.summary(), 80),
            ]
        })
        .collect();
    table(&["KEY", "TOOL", "TENANT", "RUN", "SINCE", "WHAT"], &rows);
    eprintln!("{} case(s) in {}", cases.len(), op.name);
    Ok(())
}

/// The case under a record or downstream key.
async fn find(op: &Operator, desk: CaseDesk<'_>, key: &str) -> Result<Case, Failure> {
    let by_record = desk
        .get(&idem_core::RecordKey::from_stored(key))
        .await
        .map_err(|e| Failure::store(&op.name, e))?;
    if let Some(case) = by_record {
        return Ok(case);
    }
    let all = desk
        .pending(None, usize::MAX)
        .await
        .map_err(|e| Failure::store(&op.name, e))?;
    if let Some(case) = all
        .into_iter()
        .find(|c| IdempotencyKey::of_record(&c.record).is_some_and(|k| k.as_str() == key))
    {
        return Ok(case);
    }
    // A record that is there but no case was decided (or never sent to a person): refused.
    // None at all: not found (a case run again leaves none until the call runs).
    let record = op
        .store
        .get(&idem_core::RecordKey::from_stored(key))
        .await
        .map_err(|e| Failure::store(&op.name, e))?;
    Err(match record {
        Some(r) => Failure::new(
            Exit::Refused,
            format!(
                "{}: no case waits under key {key}: its record is {} (decided already, or never sent to a person); nothing changed",
                op.name,
                present::state_name(r.state.kind())
            ),
        ),
        None => Failure::new(
            Exit::NotFound,
            format!(
                "{}: no case waits under key {key} (decided already? `idem cases list` lists them)",
                op.name
            ),
        ),
    })
}

fn decision_failure(op: &Operator, e: CaseError) -> Failure {
    match e {
        CaseError::Store(e) => Failure::store(&op.name, e),
        CaseError::NotPending(_) => Failure::new(Exit::Refused, format!("{}: {e}", op.name)),
        CaseError::NotLogged { .. } => Failure::new(Exit::Store, format!("{}: {e}", op.name)),
        other => Failure::new(Exit::Refused, format!("{}: {other}", op.name)),
    }
}

fn case_json(case: &Case) -> Value {
    json!({
        "key": case.record.as_str(),
        "downstream_key": IdempotencyKey::of_record(&case.record).map(|k| k.as_str().to_owned()),
        "tool": case.tool,
        "tenant": case.tenant,
        "arguments": case.arguments,
        "since": case.since.to_rfc3339(),
        "case": case.escalation,
    })
}

fn show(case: &Case) {
    let e = &case.escalation;
    let applied: Vec<String> = e
        .applied_before
        .iter()
        .map(|a| match &a.call_id {
            Some(id) => format!("{} [{id}]", a.tool),
            None => a.tool.clone(),
        })
        .collect();
    let rows = [
        ("key", case.record.to_string()),
        ("tool", case.tool.clone()),
        ("tenant", case.tenant.clone()),
        ("run", e.run_id.clone().unwrap_or_default()),
        ("call", e.call_id.clone().unwrap_or_default()),
        ("what", e.summary()),
        (
            "details",
            e.error.details().map(Value::to_string).unwrap_or_default(),
        ),
        (
            "arguments",
            case.arguments
                .as_ref()
                .map(|a| serde_json::to_string_pretty(a).unwrap_or_default())
                .unwrap_or_default(),
        ),
        ("since", case.since.to_rfc3339()),
        ("applied before", applied.join(", ")),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        let v = v.replace('\n', &format!("\n{:width$}  ", ""));
        println!("{k:<width$}  {}", present::visible(&v));
    }
}
