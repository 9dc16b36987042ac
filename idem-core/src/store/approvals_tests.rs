//! The pure decisions of pending approvals, as tables.
use super::*;

fn entry(expires: u64) -> PendingApproval {
    PendingApproval {
        key: RecordKey::from_stored("k"),
        namespace: "n".into(),
        tenant: "t".into(),
        tool: "wire".into(),
        downstream_key: "idem-k".into(),
        fingerprint: Fingerprint::from_bytes([1; 32]),
        arguments: serde_json::json!({"cents": 1}),
        secret_parameters: false,
        policy: None,
        approvers: 1,
        approved_by: Vec::new(),
        requested_at: Timestamp(0),
        expires_at: Timestamp(expires),
        decision: None,
    }
}

fn no() -> Verdict {
    Verdict::Denied {
        reason: "no".into(),
    }
}

fn denial(by: &str) -> ApprovalDecision {
    ApprovalDecision {
        by: by.into(),
        at: Timestamp(5),
        verdict: no(),
    }
}

#[test]
fn a_request_keeps_what_stands_and_replaces_what_expired() {
    let old = entry(10);
    let new = PendingApproval {
        requested_at: Timestamp(20),
        ..entry(30)
    };
    assert_eq!(requested(Some(&old), &new, Timestamp(9)), None, "kept");
    assert_eq!(
        requested(Some(&old), &new, Timestamp(10)),
        Some(new.clone())
    );
    assert_eq!(requested(None, &new, Timestamp(0)), Some(new.clone()));
}

#[test]
fn a_decision_is_made_once_and_only_before_expiry() {
    let key = RecordKey::from_stored("k");
    let once = decided(Some(entry(10)), &key, "a", &no(), Timestamp(5)).unwrap();
    assert!(!once.is_pending(Timestamp(5)));
    assert_eq!(
        once.decision,
        Some(denial("a")),
        "by, at the time given, what"
    );
    assert!(matches!(
        decided(Some(once), &key, "b", &no(), Timestamp(6)),
        Err(DecisionRefused::AlreadyDecided { by, .. }) if by == "a"
    ));
    assert!(matches!(
        decided(Some(entry(10)), &key, "a", &no(), Timestamp(10)),
        Err(DecisionRefused::Expired { .. })
    ));
    assert_eq!(
        decided(None, &key, "a", &no(), Timestamp(1)),
        Err(DecisionRefused::NotRequested(key))
    );
}

fn yes(by: &str) -> Verdict {
    Verdict::Approved {
        approval: format!("signed by {by}"),
        arguments: serde_json::json!({"cents": 1}),
        fingerprint: Fingerprint::from_bytes([1; 32]),
    }
}

#[test]
fn four_eyes_decide_with_the_second_distinct_person_and_one_denial_decides() {
    let key = RecordKey::from_stored("k");
    let two = PendingApproval {
        approvers: 2,
        ..entry(10)
    };
    let first = decided(Some(two.clone()), &key, "dana", &yes("dana"), Timestamp(1)).unwrap();
    assert!(first.is_pending(Timestamp(1)), "one of two approvals");
    assert_eq!((first.approved_by.len(), first.awaiting()), (1, 1));
    assert!(matches!(
        decided(Some(first.clone()), &key, " DANA", &yes("DANA"), Timestamp(2)),
        Err(DecisionRefused::ApprovedAlready { by, approvers: 2, .. }) if by == " DANA"
    ));
    let edited = Verdict::Approved {
        approval: "x".into(),
        arguments: serde_json::json!({"cents": 2}),
        fingerprint: Fingerprint::from_bytes([2; 32]),
    };
    assert!(matches!(
        decided(Some(first.clone()), &key, "lee", &edited, Timestamp(2)),
        Err(DecisionRefused::EditNeedsOneApprover { .. })
    ));
    let second = decided(Some(first.clone()), &key, "lee", &yes("lee"), Timestamp(3)).unwrap();
    assert_eq!(second.awaiting(), 0);
    assert_eq!(second.decision.as_ref().map(|d| d.by.as_str()), Some("lee"));
    let who: Vec<_> = second.approved_by.iter().map(|g| g.by.as_str()).collect();
    assert_eq!(who, ["dana", "lee"]);
    let denied = decided(Some(first), &key, "lee", &no(), Timestamp(3)).unwrap();
    assert!(matches!(
        denied.decision.map(|d| d.verdict),
        Some(Verdict::Denied { .. })
    ));
    let old = r#"{"key":"k","namespace":"n","tenant":"t","tool":"w","downstream_key":"d","fingerprint":"0101010101010101010101010101010101010101010101010101010101010101","arguments":{},"requested_at":0,"expires_at":1,"decision":null}"#;
    assert_eq!(
        decode(&key, old).unwrap().approvers,
        1,
        "an entry from before"
    );
}

#[test]
fn the_filter_admits_by_tenant_tool_and_pending() {
    let pending = entry(10);
    let f = ApprovalFilter::default();
    assert!(f.admits(&pending, Timestamp(1)));
    assert!(!f.admits(&pending, Timestamp(10)), "expired");
    let other = ApprovalFilter {
        tenant: Some("u".into()),
        ..ApprovalFilter::default()
    };
    assert!(!other.admits(&pending, Timestamp(1)));
    let all = ApprovalFilter {
        pending_only: false,
        tool: Some("wire".into()),
        ..ApprovalFilter::default()
    };
    assert!(all.admits(&pending, Timestamp(99)));
}

#[test]
fn an_entry_round_trips_as_text() {
    let mut e = entry(10);
    e.decision = Some(denial("a"));
    assert_eq!(decode(&e.key, &encode(&e)).unwrap(), e);
    assert!(matches!(
        decode(&e.key, "{"),
        Err(StoreError::Corrupt { .. })
    ));
}
