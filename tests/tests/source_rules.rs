//! One registry of error codes (`qtg_core::codes`): a code is written through its constant,
//! never spelled, so a new code cannot be emitted without its meaning and action in the table
//! (and docs/error-codes.md); and no entry of the table is dead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Code-like literals that are not error codes: states, environment variables, formats.
const NOT_CODES: &[&str] = &[
    "AWAITING_SIGNATURE",
    "MANUAL_INTERVENTION",
    "PENDING_APPROVAL",
    "WAITING_MANUAL_ACTION",
    // CCIP's OffRamp execution states (Internal.MessageExecutionState).
    "IN_PROGRESS",
    // Capital transfer states.
    "MOVEMENT_CREATED",
    "NEEDS_ATTENTION",
    "DATABASE_URL",
    "OUT_DIR",
    "RUST_LOG",
    "SCREAMING_SNAKE_CASE",
    // qtgctl's stand-in for an error answer without a body it can read (client side only).
    "HTTP_ERROR",
];
const NOT_CODE_PREFIXES: &[&str] = &["MG_", "QTG_", "OTEL_", "CARGO_", "EXAMPLE_"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir` with its text, but those under a directory named in `skip`
/// (and build output, dependencies and hidden directories).
fn rust_files(dir: &Path, skip: &[&str], out: &mut Vec<(PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if p.is_dir() {
            if !matches!(name, "target" | "node_modules") && !name.starts_with('.') && !skip.contains(&name) {
                rust_files(&p, skip, out);
            }
        } else if name.ends_with(".rs") {
            out.push((p.clone(), std::fs::read_to_string(&p).unwrap_or_default()));
        }
    }
}

/// The production part of every source file of `libs/` and `services/` (up to its first
/// `#[cfg(test)]`), but the registry itself and the example remote executor (a stand-in for
/// a third party's code, with codes of its own).
fn sources() -> Vec<(PathBuf, String)> {
    let skip = ["remote-executor-example", "codes"];
    let mut files = Vec::new();
    rust_files(&root().join("libs"), &skip, &mut files);
    rust_files(&root().join("services"), &skip, &mut files);
    let out: Vec<_> = files
        .into_iter()
        .filter(|(p, _)| p.components().any(|c| c.as_os_str() == "src"))
        .map(|(p, text)| {
            let production = text.split("#[cfg(test)]").next().unwrap_or_default().to_string();
            (p, production)
        })
        .collect();
    assert!(out.len() > 100, "found only {} source files under {}", out.len(), root().display());
    out
}

/// `"ABC_DEF"` literals outside comments, with where they are.
fn code_like_literals(sources: &[(PathBuf, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in sources {
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for literal in line.split('"').skip(1).step_by(2) {
                let code_like = literal.contains('_')
                    && literal.starts_with(|c: char| c.is_ascii_uppercase())
                    && literal.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                if code_like {
                    let at = format!("{}:{}", path.strip_prefix(root()).unwrap_or(path).display(), i + 1);
                    found.entry(literal.to_string()).or_default().insert(at);
                }
            }
        }
    }
    found
}

#[test]
fn codes_are_written_through_the_registry_and_every_entry_is_used() {
    let registry: BTreeSet<&str> = qtg_core::codes::CATALOGUE.iter().map(|c| c.code).collect();
    let sources = sources();
    let mut problems = Vec::new();
    for (literal, at) in code_like_literals(&sources) {
        let allowed = NOT_CODES.contains(&literal.as_str()) || NOT_CODE_PREFIXES.iter().any(|p| literal.starts_with(p));
        if registry.contains(literal.as_str()) {
            problems.push(format!("{literal} is spelled at {at:?}: use qtg_core::codes::{literal}"));
        } else if !allowed {
            problems.push(format!(
                "{literal} at {at:?} looks like an error code the registry lacks: add it to \
                 libs/core/src/codes/catalogue.rs with its meaning and action (or to NOT_CODES here)"
            ));
        }
    }
    for code in &registry {
        let used = sources.iter().any(|(_, text)| text.contains(&format!("codes::{code}")));
        if !used {
            problems.push(format!("{code} is in the registry but nothing writes it: remove it"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_rule_sees_a_spelled_code() {
    let sources = vec![(root().join("libs/x/src/lib.rs"), "fn f() -> &'static str { \"PLAN_HASH_DRIFT\" }\n".into())];
    let found = code_like_literals(&sources);
    assert!(found.contains_key("PLAN_HASH_DRIFT"), "{found:?}");
    let commented = vec![(root().join("libs/x/src/lib.rs"), "// \"PLAN_HASH_DRIFT\"\n".into())];
    assert!(code_like_literals(&commented).is_empty());
}

/// rustfmt formats a statement only if every line of it fits in `max_width` (120): a longer
/// line (a long string, most often) makes it skip the whole statement silently while
/// `cargo fmt --check` passes. So no line of the workspace's Rust is longer.
#[test]
fn every_line_fits_so_rustfmt_formats_every_statement() {
    let mut files = Vec::new();
    for dir in ["libs", "services", "tests"] {
        rust_files(&root().join(dir), &[], &mut files);
    }
    let long: Vec<String> = files
        .iter()
        .flat_map(|(p, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, line)| line.chars().count() > 120)
                .map(move |(i, _)| format!("{}:{}", p.strip_prefix(root()).unwrap_or(p).display(), i + 1))
        })
        .collect();
    assert!(
        long.is_empty(),
        "lines over 120 characters (split the string with a `\\` continuation):\n{}",
        long.join("\n")
    );
}

/// docs/error-codes.md is the registry's page (`qtg_core::codes::reference_page`);
/// `QTG_UPDATE_DOCS=1` writes it.
#[test]
fn the_error_code_page_is_current() {
    let path = root().join("docs/error-codes.md");
    let page = qtg_core::codes::reference_page();
    if std::env::var_os("QTG_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &page).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == page,
        "docs/error-codes.md is stale: run QTG_UPDATE_DOCS=1 cargo test -p qtg-tests --test source_rules"
    );
}
