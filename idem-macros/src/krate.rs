//! Where the facade crate is in the user's crate: `::idem`, or the name a renamed dependency
//! gives it (`my_idem = { package = "idem-tools", .. }`), found by `proc-macro-crate` in the
//! user's manifest so that a rename needs no `crate = "..."`.

use proc_macro_crate::{FoundCrate, crate_name};

/// The facade's package; its library is `idem`.
const FACADE: &str = "idem-tools";

/// The facade's name in the crate being compiled, `None` when it is reached as `::idem` (not
/// renamed, or the manifest cannot be read, in which case `::idem` is what the expansion
/// tries).
pub(crate) fn renamed() -> Option<String> {
    extern_name(crate_name(FACADE).ok())
}

/// The rename `found` says, if it is one. A dependency written `idem-tools = ".."` is found
/// under its key, `idem_tools`, but its library's own name, `idem`, is the one it has; the
/// facade's own tests and examples (`Itself`) reach it as `idem` too.
fn extern_name(found: Option<FoundCrate>) -> Option<String> {
    match found? {
        FoundCrate::Itself => None,
        FoundCrate::Name(name) if name == "idem" || name == "idem_tools" => None,
        FoundCrate::Name(name) => Some(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_rename_is_a_rename() {
        let name = |n: &str| Some(FoundCrate::Name(n.to_owned()));
        assert_eq!(extern_name(name("my_idem")).as_deref(), Some("my_idem"));
        assert_eq!(extern_name(name("idem")), None);
        assert_eq!(
            extern_name(name("idem_tools")),
            None,
            "the library is `idem`"
        );
        assert_eq!(extern_name(Some(FoundCrate::Itself)), None);
        assert_eq!(extern_name(None), None);
    }
}
