//! Where the facade crate is in the user's crate: `::idem`, or the name a renamed dependency
//! gives it (`my_idem = { package = "idem", .. }`), read off the user's manifest so that a
//! rename needs no `crate = "..."`.

/// The facade's name in the crate being compiled, `None` when it is not renamed (or the
/// manifest cannot be read, in which case `::idem` is what the expansion tries). Read each
/// time, not cached: one process (rust-analyzer's proc-macro server) expands many crates.
pub(crate) fn renamed() -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let text = std::fs::read_to_string(std::path::Path::new(&dir).join("Cargo.toml")).ok()?;
    renamed_in(&text)
}

/// The key of the dependency whose `package` is `idem`, as a crate name (`-` read as `_`);
/// `None` when the crate also depends on `idem` under its own name, which then works in every
/// target (a rename in `[dev-dependencies]` alone does not exist in the library's build).
/// A line-based reading of the forms Cargo documents for a renamed dependency: an inline
/// table `key = { package = "idem", ... }` in a dependency table, or a table
/// `[dependencies.key]` (also `dev-`, `build-` and `target.'...'.`) holding
/// `package = "idem"`.
fn renamed_in(manifest: &str) -> Option<String> {
    let mut table_dep: Option<&str> = None;
    let mut in_deps = false;
    let mut found_rename = None;
    let mut plain = false;
    for line in manifest.lines() {
        let line = without_comment(line).trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            let (table, key) = match header.rsplit_once('.') {
                Some((table, key)) if is_deps(table) => (table, Some(key)),
                _ => (header, None),
            };
            in_deps = key.is_none() && is_deps(table);
            table_dep = key.map(|k| k.trim().trim_matches('"'));
            plain |= table_dep == Some("idem");
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim().trim_matches('"'), value.trim());
        if in_deps && key == "idem" {
            plain = true;
        }
        let found = match table_dep {
            Some(dep) if key == "package" && is_idem(value) => Some(dep),
            None if in_deps && value.starts_with('{') && names_idem(value) => Some(key),
            _ => None,
        };
        if let Some(dep) = found {
            let name = dep.replace('-', "_");
            if name != "idem" {
                found_rename.get_or_insert(name);
            }
        }
    }
    if plain { None } else { found_rename }
}

/// The line up to a `#` that is not inside a string.
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') => return &line[..i],
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    line
}

fn is_deps(table: &str) -> bool {
    // `[workspace.dependencies]` declares versions for members; it is no crate's dependency.
    if table.trim().starts_with("workspace") {
        return false;
    }
    let last = table.rsplit('.').next().unwrap_or(table);
    matches!(
        last.trim(),
        "dependencies" | "dev-dependencies" | "build-dependencies"
    )
}

fn is_idem(value: &str) -> bool {
    value.trim_matches(|c| c == '"' || c == '\'') == "idem"
}

/// `{ ..., package = "idem", ... }`.
fn names_idem(inline: &str) -> bool {
    inline
        .trim_matches(|c| c == '{' || c == '}')
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .any(|(k, v)| k.trim() == "package" && is_idem(v.trim()))
}

#[cfg(test)]
mod tests {
    use super::renamed_in;

    #[test]
    fn a_renamed_dependency_is_found_in_each_form_cargo_documents() {
        let inline = "[package]\nname = \"agent\"\n\n[dependencies]\nserde = \"1\"\nmy-idem = { version = \"0.1\", package = \"idem\" }\n";
        assert_eq!(renamed_in(inline).as_deref(), Some("my_idem"));
        let table = "[dependencies.tools]\npackage = \"idem\"\nversion = \"0.1\"\n";
        assert_eq!(renamed_in(table).as_deref(), Some("tools"));
        let target = "[target.'cfg(unix)'.dev-dependencies]\nfx = { path = \"../idem\", package = \"idem\" } # renamed\n";
        assert_eq!(renamed_in(target).as_deref(), Some("fx"));
    }

    #[test]
    fn a_plain_or_absent_dependency_is_not_a_rename() {
        assert_eq!(renamed_in("[dependencies]\nidem = \"0.1\"\n"), None);
        assert_eq!(
            renamed_in("[dependencies]\nidem = { package = \"idem\" }\n"),
            None
        );
        // `package` outside a dependency table, and another crate's rename.
        assert_eq!(renamed_in("[package]\nname = \"idem\"\n"), None);
        assert_eq!(
            renamed_in("[dependencies]\nj = { package = \"serde_json\" }\n"),
            None
        );
        assert_eq!(renamed_in(""), None);
        // The crate also depends on `idem` by its name: that works in every target.
        let both =
            "[dependencies]\nidem = \"0.1\"\n[dev-dependencies]\nidem_t = { package = \"idem\" }\n";
        assert_eq!(renamed_in(both), None);
        let workspace =
            "[workspace.dependencies]\nmy_idem = { package = \"idem\", path = \"x\" }\n";
        assert_eq!(renamed_in(workspace), None);
        // A `#` inside a string is not a comment.
        let hash = "[dependencies]\ntools = { path = \"a#b\", package = \"idem\" }\n";
        assert_eq!(renamed_in(hash).as_deref(), Some("tools"));
    }
}
