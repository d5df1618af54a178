//! The crate graph keeps the promises of docs/architecture.md §1.2: the executor SDK and the
//! conformance suite a third party builds with need no database driver, and `qtg-core`
//! does no IO. Read from Cargo.lock (the resolved graph, transitive dependencies included).

use std::collections::{BTreeMap, BTreeSet};

/// package → its direct dependencies (names), from Cargo.lock.
fn lock_graph() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).expect("Cargo.lock");
    let mut graph = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let name = block
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"').to_string())
            .expect("package name");
        let mut deps = Vec::new();
        if let Some(start) = block.find("dependencies = [") {
            for line in block[start..].lines().skip(1) {
                if line.starts_with(']') {
                    break;
                }
                // ` "name",` or ` "name version",` or ` "name version (source)",`
                let dep = line.trim().trim_matches(|c| c == '"' || c == ',');
                deps.push(dep.split(' ').next().unwrap_or(dep).to_string());
            }
        }
        graph.insert(name, deps);
    }
    graph
}

fn closure(graph: &BTreeMap<String, Vec<String>>, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![root.to_string()];
    while let Some(p) = stack.pop() {
        if seen.insert(p.clone()) {
            stack.extend(graph.get(&p).into_iter().flatten().cloned());
        }
    }
    seen
}

#[test]
fn the_sdk_and_the_conformance_suite_need_no_database() {
    let graph = lock_graph();
    assert!(graph.contains_key("sqlx"), "the workspace does use sqlx (the check would be empty otherwise)");
    assert!(closure(&graph, "qtg-service").contains("sqlx"), "the parser follows dependencies");
    for root in ["qtg-executor-sdk", "qtg-remote-executor-example"] {
        let deps = closure(&graph, root);
        for banned in ["sqlx", "qtg-store", "qtg-engine", "qtg-executor", "qtg-runtime"] {
            assert!(!deps.contains(banned), "{root} depends on {banned}");
        }
    }
    let core = closure(&graph, "qtg-core");
    for banned in ["sqlx", "tokio", "reqwest", "tonic", "hyper"] {
        assert!(!core.contains(banned), "qtg-core (no IO) depends on {banned}");
    }
}
