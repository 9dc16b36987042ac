use std::time::Duration;

use idem::prelude::*;

fn ticket_key(args: &serde_json::Value) -> Option<String> {
    args.get("title")?.as_str().map(str::to_owned)
}

/// Find or create a ticket.
#[tool(
    class = "non_idempotent_write",
    name = "open-ticket",
    ttl_secs = 3600,
    lease_secs = 45,
    max_attempts = 2,
    wait_secs = 5,
    backoff_ms = 250,
    open_world,
    scopes = ["tickets:write", "tickets:read"],
    natural_key = ticket_key,
    on_key_reuse = "replay",
    verify_after_secs = 120,
    version = "2026-12.1"
)]
async fn open_ticket(title: String) -> Result<String, ToolError> {
    Ok(title)
}

fn main() {
    let registry = Registry::linked().unwrap();
    assert!(
        registry.get("open_ticket").is_none(),
        "`name` replaces the function's name"
    );
    let def = registry
        .get("open-ticket")
        .expect("open-ticket is registered");
    assert_eq!(def.name(), "open-ticket");
    assert_eq!(def.class(), ToolClass::NonIdempotentWrite);
    assert_eq!(def.description(), "Find or create a ticket.");
    assert_eq!(def.version(), "2026-12.1");
    assert!(def.has_natural_key());

    let policy = def.policy();
    assert_eq!(policy.ttl, Duration::from_secs(3600));
    assert_eq!(policy.lease, Duration::from_secs(45));
    assert_eq!(policy.max_attempts, 2);
    assert_eq!(policy.wait, Duration::from_secs(5));
    assert_eq!(policy.backoff, Duration::from_millis(250));
    assert!(policy.open_world);
    assert_eq!(policy.scopes, ["tickets:write", "tickets:read"]);
    assert!(policy.replay_on_key_reuse);
    assert_eq!(policy.verify_after, Duration::from_secs(120));
}
