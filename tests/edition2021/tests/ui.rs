//! The `#[tool]` cases of `idem-macros/tests/ui`, compiled as edition 2021 code (the macro
//! crate's own run compiles them as 2024): every form that compiles there compiles here, and
//! every misuse is the same one error. `tests/ui` here is a link to the macro crate's
//! `tests/ui`, so that the cases and their expected output are one set of files (regenerate
//! them from `idem-macros/tests/ui.rs`). Both packages sit below the workspace root, so
//! trybuild prints a library file in an expected error (`note: required by a bound in ...`)
//! the same way from either.

#[test]
fn ui_edition_2021() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
