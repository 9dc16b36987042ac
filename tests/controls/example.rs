//! The controls example, run as a user runs it: it checks its own account against its
//! providers' counts and fails if they disagree.

use std::path::Path;

#[test]
fn the_controls_example_runs_and_its_account_matches_its_providers() {
    run_example(
        "controls",
        &[
            "refund to another customer: refused (not_authorized)",
            "refund of 400: refused (approval_required)",
            "refund of 400, again: \"refunded 400 EUR on o-1\"",
            "precondition failed, nothing was applied: ticket T-7 changed since you read it",
            "5. book_trip [call_5]: compensated: undone hotel, flight",
            "in all: 2 refused, 2 applied, 1 compensated",
            "providers: 2 refund(s), 0 status change(s), 2 booking(s), 2 cancellation(s)",
        ],
    );
}

/// Run the example `name` built next to this test binary, as a user runs it: it must succeed,
/// and its standard output must say every one of `lines`.
pub(crate) fn run_example(name: &str, lines: &[&str]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let example = profile
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        example.is_file(),
        "the {name} example is not built at {}: run `cargo build --example {name}` first",
        example.display()
    );
    let out = std::process::Command::new(&example)
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the example failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for line in lines {
        assert!(
            stdout.contains(line),
            "the example does not say {line:?}:\n{stdout}"
        );
    }
}
