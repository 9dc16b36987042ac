//! The signing and verification of approvals, field by field.

use super::*;

const DAY: Duration = Duration::from_secs(86_400);

fn key(id: &str, byte: u8) -> ApprovalKey {
    ApprovalKey::new(id, vec![byte; 32]).unwrap()
}

fn request() -> ApprovalRequest {
    ApprovalRequest {
        namespace: "shop".into(),
        tenant: "acme".into(),
        tool: "refund".into(),
        key: IdempotencyKey::new("k-1"),
        fingerprint: Fingerprint::from_bytes([7; 32]),
        arguments: serde_json::json!({"amount": 5}),
    }
}

fn binding(r: &ApprovalRequest) -> Binding<'_> {
    Binding {
        namespace: &r.namespace,
        tenant: &r.tenant,
        tool: &r.tool,
        key: r.key.as_str(),
        fingerprint: r.fingerprint,
    }
}

#[test]
fn an_approval_verifies_until_it_expires() {
    let r = request();
    let a = Approver::new("alice", key("k1", 1)).approve_until(&r, Timestamp(1_000));
    let keys = ApprovalKeys::new([key("k1", 1)]);
    assert_eq!(a.check(&keys, &binding(&r), DAY, Timestamp(999)), Ok(()));
    assert!(matches!(
        a.check(&keys, &binding(&r), DAY, Timestamp(1_000)),
        Err(ApprovalRefusal::Expired { .. })
    ));
    assert_eq!(a.approver(), "alice");
    assert_eq!(a.nonce().len(), 32);
}

#[test]
fn every_field_is_signed() {
    let r = request();
    let a = Approver::new("alice", key("k1", 1)).approve_until(&r, Timestamp(1_000));
    let keys = ApprovalKeys::new([key("k1", 1)]);
    let json = serde_json::to_value(&a).unwrap();
    let fields: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
    assert_eq!(fields.len(), 10);
    for field in fields {
        if field == "key_id" {
            continue; // another id is another key: UnknownKey, below
        }
        let mut tampered = json.clone();
        tampered[&field] = match &json[&field] {
            Value::Number(n) => Value::from(n.as_u64().unwrap() + 1),
            Value::String(_) if field == "fingerprint" => {
                Value::from(Fingerprint::from_bytes([8; 32]).to_hex())
            }
            Value::String(s) if field == "signature" || field == "nonce" => Value::from(format!(
                "{}{}",
                &s[..s.len() - 1],
                if s.ends_with('0') { '1' } else { '0' }
            )),
            Value::String(s) => Value::from(format!("{s}x")),
            other => panic!("{field}: {other}"),
        };
        let tampered: Approval = serde_json::from_value(tampered).unwrap();
        assert_eq!(
            tampered.check(&keys, &binding(&r), DAY, Timestamp(1)),
            Err(ApprovalRefusal::BadSignature),
            "{field}"
        );
    }
}

#[test]
fn another_secret_or_a_dropped_key_is_refused() {
    let r = request();
    let forged = Approver::new("mallory", key("k1", 2)).approve_until(&r, Timestamp(1_000));
    let keys = ApprovalKeys::new([key("k1", 1)]);
    assert_eq!(
        forged.check(&keys, &binding(&r), DAY, Timestamp(1)),
        Err(ApprovalRefusal::BadSignature)
    );
    let old = Approver::new("alice", key("old", 3)).approve_until(&r, Timestamp(1_000));
    let rotated = ApprovalKeys::new([key("k1", 1), key("new", 4)]);
    assert_eq!(
        old.check(&rotated, &binding(&r), DAY, Timestamp(1)),
        Err(ApprovalRefusal::UnknownKey {
            key_id: "old".into()
        })
    );
    let both = ApprovalKeys::new([key("old", 3), key("new", 4)]);
    assert_eq!(old.check(&both, &binding(&r), DAY, Timestamp(1)), Ok(()));
}

#[test]
fn an_approval_binds_its_call() {
    let r = request();
    let a = Approver::new("alice", key("k1", 1)).approve_until(&r, Timestamp(1_000));
    let keys = ApprovalKeys::new([key("k1", 1)]);
    let mut other = request();
    other.tenant = "globex".into();
    let refusal = a
        .check(&keys, &binding(&other), DAY, Timestamp(1))
        .unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "it approves tenant `acme`, and this call's is `globex`"
    );
    let mut other = request();
    other.fingerprint = Fingerprint::from_bytes([9; 32]);
    assert_eq!(
        a.check(&keys, &binding(&other), DAY, Timestamp(1)),
        Err(ApprovalRefusal::OtherArguments)
    );
}

#[test]
fn bad_keys_are_refused_with_the_fix() {
    let e = ApprovalKey::new("", vec![0; 32]).unwrap_err();
    assert!(e.to_string().contains("letters, digits"), "{e}");
    let e = ApprovalKey::new("a b", vec![0; 32]).unwrap_err();
    assert!(matches!(e, ApprovalKeyError::BadId(_)));
    let e = ApprovalKey::new("k", vec![0; 31]).unwrap_err();
    assert!(e.to_string().contains("at least 32 bytes, got 31"), "{e}");
}

#[test]
fn a_malformed_signature_is_refused_not_a_panic() {
    let r = request();
    let a = Approver::new("alice", key("k1", 1)).approve_until(&r, Timestamp(1_000));
    let keys = ApprovalKeys::new([key("k1", 1)]);
    let upper = a.signature.to_uppercase();
    let plus = format!("+{}", &a.signature[1..]);
    for signature in ["", "zz", "abc", "é", &"0".repeat(64), &upper, &plus] {
        let mut json = serde_json::to_value(&a).unwrap();
        json["signature"] = Value::from(signature);
        let bad: Approval = serde_json::from_value(json).unwrap();
        assert_eq!(
            bad.check(&keys, &binding(&r), DAY, Timestamp(1)),
            Err(ApprovalRefusal::BadSignature),
            "{signature:?}"
        );
    }
}
