//! Every relative link in the README and docs/ (and the other READMEs of the repository)
//! resolves: the file exists, and a `#anchor` names a heading of it by GitHub's rule. Links in
//! code blocks and code spans are text, not links; http(s) and mailto links are not followed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The markdown files checked: README.md, docs/**.md and the READMEs beside the code.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let r = root();
    let mut out = vec![r.join("README.md")];
    walk(&r.join("docs"), &mut out);
    for extra in ["k8s/README.md", "helm/qtg/README.md", "proto-released/README.md"] {
        if r.join(extra).exists() {
            out.push(r.join(extra));
        }
    }
    out.sort();
    out
}

/// The text outside fenced code blocks, with code spans blanked (same line numbers).
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return String::new();
            }
            if fenced {
                return String::new();
            }
            let mut out = String::new();
            let mut in_code = false;
            for c in line.chars() {
                if c == '`' {
                    in_code = !in_code;
                    out.push(' ');
                } else {
                    out.push(if in_code { ' ' } else { c });
                }
            }
            out
        })
        .collect()
}

/// GitHub's heading anchors: lower case, every character but letters, digits, spaces, `-` and
/// `_` dropped, spaces to `-`; a repeated one gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

/// `(line, target)` of every inline link `[text](target)` and image `![alt](target)`.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in prose(text).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("").to_string();
            out.push((i + 1, target));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_link_in_the_readme_and_docs_resolves() {
    let root = root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let shown = doc.strip_prefix(&root).unwrap_or(&doc).display().to_string();
        for (line, target) in links(&text) {
            if target.is_empty() || target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            if target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() { doc.clone() } else { doc.parent().unwrap().join(path) };
            if !file.exists() {
                broken.push(format!("{shown}:{line}: {target}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let body =
                    if file.is_file() { std::fs::read_to_string(&file).unwrap_or_default() } else { String::new() };
                let is_md = file.extension().is_some_and(|e| e == "md");
                if is_md && !anchors(&body).contains(anchor) {
                    broken.push(format!("{shown}:{line}: {target}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} links found: is the parser reading the docs?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 220, "README.md has {lines} lines: reference material belongs in docs/ (docs/README.md)");
    assert!(readme.contains("(docs/workers.svg)"), "the README shows the workers diagram");
    assert!(readme.contains("(docs/README.md)"), "the README points at the docs index");
}

#[test]
fn the_anchor_rule_is_githubs() {
    let a = anchors("# The stuck-node runbook\n## 13. The stuck-node runbook\n## A\n## A\n```\n# not a heading\n```\n");
    assert!(a.contains("the-stuck-node-runbook") && a.contains("13-the-stuck-node-runbook"), "{a:?}");
    assert!(a.contains("a") && a.contains("a-1") && !a.contains("not-a-heading"), "{a:?}");
    let l = links("see [x](a.md#b) and `[y](not.md)`\n```\n[z](nor.md)\n```\n![p](docs/p.svg)\n");
    assert_eq!(l, vec![(1, "a.md#b".to_string()), (5, "docs/p.svg".to_string())]);
}
