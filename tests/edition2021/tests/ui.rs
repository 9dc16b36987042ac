//! The `#[tool]` cases of `tests/ui`, compiled as edition 2021 code (the facade's own cases run
//! as 2024): every form that compiles there compiles here, and every misuse is the same one
//! error. `tests/ui` here is a link to the facade's `tests/ui`, so that the cases and their
//! expected output are one set of files (regenerate them from the facade's `tests/ui.rs`).
//!
//! A case whose expected output shows a file of the library (`note: required by a bound in
//! ...`, for the errors rustc's type checker reports) is left to the facade's run: trybuild
//! prints those paths relative to the package, which differs between the two.

#[test]
fn ui_edition_2021() {
    let t = trybuild::TestCases::new();
    let mut cases: Vec<_> = std::fs::read_dir("tests/ui/fail")
        .expect("tests/ui links to the facade's cases")
        .map(|entry| entry.expect("a readable case").path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    cases.sort();
    let mut checked = 0;
    for case in &cases {
        let expected = std::fs::read_to_string(case.with_extension("stderr"))
            .unwrap_or_else(|e| panic!("{}: {e}", case.display()));
        if !expected.contains("idem-registry/src/") {
            t.compile_fail(case);
            checked += 1;
        }
    }
    // Most misuses are the macro's own errors, which name no library file.
    assert!(
        checked * 4 >= cases.len() * 3,
        "{checked} of {} cases",
        cases.len()
    );
    t.pass("tests/ui/pass/*.rs");
}
