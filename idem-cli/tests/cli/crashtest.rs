//! `idem crashtest` over a scenario program (examples/crashtest.rs): every point held, exit 0;
//! with the planted defect, the report names the points and the command fails.

use super::*;

/// The crash test example built next to this test binary.
fn scenario() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let program = profile
        .join("examples")
        .join(format!("crashtest{}", std::env::consts::EXE_SUFFIX));
    assert!(
        program.is_file(),
        "the crashtest example is not built at {}: run `cargo build --example crashtest --features testing` first",
        program.display()
    );
    program
}

#[test]
fn a_scenario_that_holds_at_every_point_passes() {
    let program = scenario();
    let out = idem(&["crashtest", program.to_str().unwrap()])
        .output()
        .expect("idem crashtest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("every point held"), "{stdout}");
    assert!(
        stdout.contains("step `hold` done, before it is journaled: held"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("crash test held"));
}

#[test]
fn a_planted_defect_is_named_and_fails_the_command() {
    let program = scenario();
    let out = idem(&[
        "crashtest",
        program.to_str().unwrap(),
        "--",
        "--plant-defect",
    ])
    .output()
    .expect("idem crashtest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "exit code 1, failed: {stdout}");
    assert!(
        stdout.contains("after step `hold` was journaled: TWICE: `hold o-1` 2 times"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("did not hold"));
}

/// A program that runs no crash test (a test binary given a name it lacks runs nothing and
/// exits 0) is not taken as one that held.
#[test]
fn a_program_that_reports_nothing_fails_the_command() {
    let out = idem(&["crashtest", "true"])
        .output()
        .expect("idem crashtest");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("printed no crash test report"));
}
