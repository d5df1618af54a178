//! Human output: aligned tables and short summaries of the API's JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

/// A cell: strings bare, null as `-`, anything else as compact JSON. A character that cannot
/// be seen or would reorder the line (a bidi override, a zero-width space…) is spelled out as
/// `<U+202E>`; `--json` prints the raw value.
fn cell(v: &Value) -> String {
    use qtg_core::text::visible;
    match v {
        Value::Null => "-".into(),
        Value::String(s) => visible(s).into_owned(),
        Value::Array(a) if a.iter().all(Value::is_string) => {
            a.iter().filter_map(Value::as_str).map(|s| visible(s).into_owned()).collect::<Vec<_>>().join(",")
        }
        other => visible(&other.to_string()).into_owned(),
    }
}

/// Left-aligned columns separated by two spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == widths.len() {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<w$}  ");
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.iter().map(|h| h.to_uppercase()).collect());
    for r in rows {
        out.push_str(&line(r.clone()));
    }
    out
}

fn rows(v: &Value, cols: &[&str]) -> Vec<Vec<String>> {
    v["items"].as_array().into_iter().flatten().map(|i| cols.iter().map(|c| cell(&i[*c])).collect()).collect()
}

fn with_cursor(mut s: String, v: &Value) -> String {
    if let Some(c) = v["next_cursor"].as_str() {
        let _ = writeln!(s, "(more: --all, or cursor {c})");
    }
    s
}

/// Top-level scalar fields as `key: value` lines.
pub fn object(v: &Value) -> String {
    let mut s = String::new();
    for (k, x) in v.as_object().into_iter().flatten() {
        let flat_list = x.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        if !x.is_object() && (!x.is_array() || flat_list) {
            let _ = writeln!(s, "{k}: {}", cell(x));
        }
    }
    s
}

pub fn proposal(v: &Value) -> String {
    object(v)
}

pub fn templates(v: &Value) -> String {
    let cols = ["template_key", "latest_version", "compiled_plan_hash", "updated_at"];
    let present: Vec<&str> = cols
        .into_iter()
        .filter(|c| v["items"].as_array().is_some_and(|a| a.iter().any(|i| !i[*c].is_null())))
        .collect();
    let present = if present.is_empty() { vec!["template_key"] } else { present };
    with_cursor(table(&present, &rows(v, &present)), v)
}

pub fn template(v: &Value) -> String {
    let mut s = format!("template {}  (latest version {})\n", cell(&v["template_key"]), cell(&v["latest_version"]));
    for ver in v["versions"].as_array().into_iter().flatten() {
        let _ = writeln!(s, "\nversion {}  hash {}", cell(&ver["version"]), cell(&ver["compiled_plan_hash"]));
        let nodes: Vec<Vec<String>> = ver["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| ["node_key", "node_kind", "action_type", "executor_key"].iter().map(|c| cell(&n[*c])).collect())
            .collect();
        s.push_str(&table(&["node_key", "node_kind", "action_type", "executor_key"], &nodes));
        let edges: Vec<String> = ver["edges"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| format!("{} -> {}", cell(&e["from"]), cell(&e["to"])))
            .collect();
        if !edges.is_empty() {
            let _ = writeln!(s, "edges: {}", edges.join(", "));
        }
        if ver["risk_controls"].as_object().is_some_and(|o| !o.is_empty()) {
            let _ = writeln!(s, "risk_controls: {}", ver["risk_controls"]);
        }
    }
    s
}

/// Depth of each node in the DAG (longest path from a root).
fn depths(edges: &Value) -> BTreeMap<String, usize> {
    let pairs: Vec<(String, String)> =
        edges.as_array().into_iter().flatten().map(|e| (cell(&e["from"]), cell(&e["to"]))).collect();
    let mut depth: BTreeMap<String, usize> = BTreeMap::new();
    // Relax until stable; plans are small and acyclic.
    for _ in 0..=pairs.len() {
        let mut changed = false;
        for (from, to) in &pairs {
            let d = depth.get(from).copied().unwrap_or(0) + 1;
            if depth.get(to).copied().unwrap_or(0) < d {
                depth.insert(to.clone(), d);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    depth
}

/// A movement: summary lines, then its nodes (in DAG order, indented by depth, when `edges`
/// are known).
pub fn movement(v: &Value, edges: Option<&Value>) -> String {
    let intent = &v["intent"];
    let mut s = format!(
        "movement {}  {}  ({} v{})\n{} {}  {} -> {}\n",
        cell(&v["id"]),
        cell(&v["request_state"]),
        cell(&v["template_key"]),
        cell(&v["template_version"]),
        cell(&intent["amount"]),
        cell(&intent["asset"]),
        cell(&intent["source"]),
        cell(&intent["destination"]),
    );
    let approvals = v["approvals"].as_array().map(Vec::len).unwrap_or(0);
    let _ = writeln!(
        s,
        "approval {}  ({approvals}/{} approvers)  created by {}",
        cell(&v["approval_status"]),
        cell(&v["approvals_required"]),
        cell(&v["created_by"])
    );
    let depth = edges.map(depths).unwrap_or_default();
    let mut nodes: Vec<&Value> = v["nodes"].as_array().into_iter().flatten().collect();
    nodes.sort_by_key(|n| (depth.get(&cell(&n["node_key"])).copied().unwrap_or(0), cell(&n["node_key"])));
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let key = cell(&n["node_key"]);
            let indent = "  ".repeat(depth.get(&key).copied().unwrap_or(0));
            let note = if !n["dispatch_hold"].is_null() {
                format!(
                    "held: {} {} ({})",
                    cell(&n["dispatch_hold"]["scope"]),
                    cell(&n["dispatch_hold"]["target"]),
                    cell(&n["dispatch_hold"]["reason"])
                )
            } else {
                match (n["error_code"].as_str(), n["error_detail"].as_str()) {
                    (Some(c), Some(d)) => format!("{c}: {}", qtg_core::text::visible(d)),
                    (Some(c), None) => c.to_string(),
                    _ => String::new(),
                }
            };
            vec![
                format!("{indent}{key}"),
                cell(&n["node_state"]),
                cell(&n["attempt_no"]),
                cell(&n["executor_key"]),
                cell(&n["provider_ref_id"]),
                note,
            ]
        })
        .collect();
    if !rows.is_empty() {
        s.push_str(&table(&["node", "state", "attempt", "executor", "provider_ref", "note"], &rows));
    }
    s
}

pub fn movements(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            vec![
                cell(&m["id"]),
                cell(&m["request_state"]),
                cell(&m["template_key"]),
                cell(&m["intent"]["amount"]),
                cell(&m["intent"]["asset"]),
                cell(&m["created_by"]),
                cell(&m["created_at"]),
            ]
        })
        .collect();
    with_cursor(table(&["id", "state", "template", "amount", "asset", "created_by", "created_at"], &rows), v)
}

pub fn diagnosis(v: &Value) -> String {
    let mut s = format!(
        "{} {}: {}\nrequired action: {}\n",
        cell(&v["node_key"]),
        cell(&v["case"]),
        cell(&v["title"]),
        cell(&v["required_action"])
    );
    for a in v["also_consider"].as_array().into_iter().flatten() {
        let _ = writeln!(s, "also consider: {}", cell(a));
    }
    let e = &v["evidence"];
    let _ = writeln!(
        s,
        "evidence: request {}, node {}, attempt {}, lane {}, {}s since start (grace {}s), markers {}",
        cell(&e["request_state"]),
        cell(&e["node"]["node_state"]),
        cell(&e["node"]["attempt_no"]),
        cell(&e["lane"]),
        cell(&e["seconds_since_started"]),
        cell(&e["grace_seconds"]),
        e["markers"]
    );
    s.push_str("automatic resolution: none (a person decides)\n");
    s
}

/// One node in full, then its recent executor calls and transitions (newest first).
pub fn node(v: &Value) -> String {
    let n = &v["node"];
    let mut s = format!(
        "movement {} ({})\nnode {}  {}  attempt {}  executor {}\n",
        cell(&v["movement_id"]),
        cell(&v["request_state"]),
        cell(&n["node_key"]),
        cell(&n["node_state"]),
        cell(&n["attempt_no"]),
        cell(&n["executor_key"])
    );
    for k in [
        "provider_state",
        "provider_ref_id",
        "error_code",
        "error_detail",
        "started_at",
        "last_observed_at",
        "observe_count",
        "next_observe_at",
        "dispatch_hold",
    ] {
        if !n[k].is_null() {
            let _ = writeln!(s, "{k}: {}", cell(&n[k]));
        }
    }
    let _ = writeln!(s, "provider_refs: {}", n["provider_refs"]);
    if !v["case"].is_null() {
        let _ = writeln!(s, "runbook case: {} (qtgctl diagnose for the required action)", cell(&v["case"]));
    }
    let events: Vec<Vec<String>> = v["recent_events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            ["at", "kind", "method", "outcome", "from", "to", "error_code", "attempt_no"]
                .iter()
                .map(|c| cell(&e[*c]))
                .collect()
        })
        .collect();
    if !events.is_empty() {
        s.push_str(&table(&["at", "kind", "method", "outcome", "from", "to", "error", "attempt"], &events));
    }
    s
}

pub fn key_created(v: &Value) -> String {
    format!(
        "id: {}\nprincipal: {}\nroles: {}\nsecret: {}\n(the secret is shown once; store it now)\n",
        cell(&v["id"]),
        cell(&v["principal"]),
        cell(&v["roles"]),
        cell(&v["secret"])
    )
}

pub fn keys(v: &Value) -> String {
    let cols = ["id", "principal", "roles", "created_by", "created_at", "revoked_at"];
    with_cursor(table(&cols, &rows(v, &cols)), v)
}

pub fn pause(v: &Value) -> String {
    let target = v["target"].as_str().filter(|t| !t.is_empty()).unwrap_or("(everything)");
    format!(
        "{} {target}: {} (by {} at {})\n",
        cell(&v["scope"]),
        cell(&v["reason"]),
        cell(&v["paused_by"]),
        cell(&v["paused_at"])
    )
}

pub fn pauses(v: &Value) -> String {
    let cols = ["scope", "target", "reason", "paused_by", "paused_at"];
    let r = rows(v, &cols);
    if r.is_empty() {
        return "no pauses: submits flow normally\n".into();
    }
    table(&cols, &r)
}

pub fn balances(v: &Value) -> String {
    let cols = ["venue_key", "account", "asset", "free", "locked", "as_of", "stale"];
    let r = rows(v, &cols);
    let mut out =
        if r.is_empty() { "no balance snapshots (is qtg-balance enabled?)\n".to_string() } else { table(&cols, &r) };
    for f in v["failed"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "not read now: {}: {}\n",
            f["venue_key"].as_str().unwrap_or(""),
            f["error"].as_str().unwrap_or("")
        ));
    }
    out
}

pub fn capital_transfers(v: &Value) -> String {
    let cols = ["id", "state", "asset", "amount", "source", "destination", "movement_state", "created_at"];
    let r = rows(v, &cols);
    if r.is_empty() {
        return "no capital transfers\n".into();
    }
    table(&cols, &r)
}

pub fn drift(v: &Value) -> String {
    let items = v["items"].as_array().cloned().unwrap_or_default();
    if items.is_empty() {
        return "no drift check yet (is qtg-drift enabled? MG_VERIFY_DRIFT_ENABLED)\n".into();
    }
    let mut out = String::new();
    for c in &items {
        out.push_str(&format!(
            "{}  {}  checked {}  baseline facts {}\n",
            c["scope"].as_str().unwrap_or(""),
            c["status"].as_str().unwrap_or(""),
            c["checked_at"].as_str().unwrap_or(""),
            c["baseline_facts"]
        ));
        for d in c["differences"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "    {}: baseline {} observed {}\n",
                d["fact"].as_str().unwrap_or(""),
                d["baseline"],
                d["observed"]
            ));
        }
        if let Some(e) = c["error"].as_str() {
            out.push_str(&format!("    error: {e}\n"));
        }
    }
    out
}

/// A rule's conditions in words.
fn when_text(w: &Value) -> String {
    let list = |k: &str| w[k].as_array().filter(|a| !a.is_empty()).map(|a| cell(&Value::Array(a.clone())));
    let mut parts = Vec::new();
    for (k, label) in
        [("templates", "template"), ("assets", "asset"), ("requesters", "requested by"), ("requester_roles", "role")]
    {
        if let Some(v) = list(k) {
            parts.push(format!("{label} {v}"));
        }
    }
    if let Some(v) = w["amount_at_least"].as_str() {
        parts.push(format!("amount >= {v}"));
    }
    if let Some(v) = w["amount_below"].as_str() {
        parts.push(format!("amount < {v}"));
    }
    for side in ["sources", "destinations"] {
        let e = &w[side];
        for k in ["addresses", "book_entries", "book_tags"] {
            if let Some(v) = e[k].as_array().filter(|a| !a.is_empty()) {
                parts.push(format!("{side} {k} {}", cell(&Value::Array(v.clone()))));
            }
        }
        if let Some(b) = e["in_book"].as_bool() {
            parts.push(format!("{side} {}in the book", if b { "" } else { "NOT " }));
        }
    }
    if let Some(v) = list("weekdays") {
        parts.push(format!("on {v}"));
    }
    if w["hours"].is_object() {
        parts.push(format!("{}-{} UTC", cell(&w["hours"]["from"]), cell(&w["hours"]["to"])));
    }
    if parts.is_empty() {
        "every movement".into()
    } else {
        parts.join("; ")
    }
}

fn action_text(a: &Value) -> String {
    match a["type"].as_str() {
        Some("block") => format!("BLOCK: {}", cell(&a["reason"])),
        Some("approve") => {
            let groups: Vec<String> = a["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|g| {
                    let who = g["group"]
                        .as_str()
                        .map(String::from)
                        .or_else(|| {
                            g["principals"].as_array().filter(|p| !p.is_empty()).map(|p| cell(&Value::Array(p.clone())))
                        })
                        .unwrap_or_else(|| format!("role {}", cell(&g["role"])));
                    format!("{} of {who}", cell(&g["min"]))
                })
                .collect();
            format!("approve by {}", groups.join(" + "))
        }
        _ => cell(a),
    }
}

/// What `after` changes from `before` (none: from no policy): rules added, removed, changed or
/// moved by name; groups; the default.
pub fn policy_changes(before: Option<&Value>, after: &Value) -> Value {
    let rules = |d: Option<&Value>| -> Vec<(String, Value)> {
        d.and_then(|d| d["rules"].as_array())
            .into_iter()
            .flatten()
            .map(|r| (r["name"].as_str().unwrap_or_default().to_string(), r.clone()))
            .collect()
    };
    let (b, a) = (rules(before), rules(Some(after)));
    let mut out = Vec::new();
    let describe = |r: &Value| format!("{} -> {}", when_text(&r["when"]), action_text(&r["action"]));
    for (i, (n, r)) in a.iter().enumerate() {
        match b.iter().position(|(m, _)| m == n) {
            None => out.push(serde_json::json!({"change": "rule added", "rule": n, "after": describe(r)})),
            Some(j) if b[j].1 != *r => out
                .push(serde_json::json!({"change": "rule changed", "rule": n, "before": describe(&b[j].1),
                    "after": describe(r)})),
            Some(j) if j != i => out.push(serde_json::json!({"change": "rule moved", "rule": n,
                "before": format!("position {}", j + 1), "after": format!("position {}", i + 1)})),
            Some(_) => {}
        }
    }
    for (n, r) in &b {
        if !a.iter().any(|(m, _)| m == n) {
            out.push(serde_json::json!({"change": "rule removed", "rule": n, "before": describe(r)}));
        }
    }
    let field = |d: Option<&Value>, k: &str| d.map(|d| d[k].clone()).unwrap_or(Value::Null);
    if field(before, "groups") != after["groups"] {
        out.push(serde_json::json!({"change": "groups changed", "rule": "groups",
            "before": field(before, "groups"), "after": after["groups"]}));
    }
    if field(before, "default") != after["default"] {
        out.push(serde_json::json!({"change": "default changed", "rule": "default",
            "before": action_text(&field(before, "default")), "after": action_text(&after["default"])}));
    }
    Value::Array(out)
}

/// A policy version: its status, approvals, rules and (from `policies show`) its changes.
pub fn policy(v: &Value) -> String {
    let mut s = format!(
        "policy version {}: {} (proposed by {}, effective {})\n",
        cell(&v["version"]),
        cell(&v["status"]),
        cell(&v["proposed_by"]),
        cell(&v["effective_at"])
    );
    if let Some(a) = v["approvals"].as_array() {
        let who: Vec<String> = a.iter().map(|x| cell(&x["approver"])).collect();
        let _ = writeln!(s, "approvals: {} of {}: {}", a.len(), cell(&v["approvals_required"]), who.join(", "));
    }
    let doc = &v["document"];
    if let Some(g) = doc["groups"].as_object().filter(|g| !g.is_empty()) {
        for (name, members) in g {
            let _ = writeln!(s, "group {}: {}", qtg_core::text::visible(name), cell(members));
        }
    }
    let mut rows: Vec<Vec<String>> = doc["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| vec![(i + 1).to_string(), cell(&r["name"]), when_text(&r["when"]), action_text(&r["action"])])
        .collect();
    let default =
        if doc["default"].is_null() { "BLOCK: no rule covers it".to_string() } else { action_text(&doc["default"]) };
    rows.push(vec!["-".into(), "default".into(), "no rule above holds".into(), default]);
    s.push_str(&table(&["#", "rule", "when", "then"], &rows));
    if let Some(changes) = v["changes"].as_array() {
        let from = match v["changes_from"].as_i64() {
            Some(n) => format!("version {n} (in force)"),
            None => "no policy".into(),
        };
        let _ = writeln!(s, "\nchanges from {from}:");
        let rows: Vec<Vec<String>> = changes
            .iter()
            .map(|c| vec![cell(&c["change"]), cell(&c["rule"]), cell(&c["before"]), cell(&c["after"])])
            .collect();
        s.push_str(&table(&["change", "rule", "before", "after"], &rows));
    }
    s
}

pub fn policies(v: &Value) -> String {
    with_cursor(
        table(
            &["version", "status", "proposed_by", "effective_at", "decided_by"],
            &rows(v, &["version", "status", "proposed_by", "effective_at", "decided_by"]),
        ),
        v,
    )
}

pub fn simulation(v: &Value) -> String {
    let changed = v["changed"].as_array().cloned().unwrap_or_default();
    let mut s = format!("{} of {} movement(s) would change\n", changed.len(), cell(&v["evaluated"]));
    let side = |o: &Value| {
        let approvers = o["approvers"].as_array().map(|a| cell(&Value::Array(a.clone()))).unwrap_or_default();
        format!("{}: {} {}", cell(&o["rule"]), cell(&o["outcome"]), approvers).trim_end().to_string()
    };
    let rows: Vec<Vec<String>> = changed
        .iter()
        .map(|c| {
            vec![
                cell(&c["movement_id"]),
                cell(&c["intent"]["amount"]),
                cell(&c["intent"]["asset"]),
                side(&c["before"]),
                side(&c["after"]),
            ]
        })
        .collect();
    s.push_str(&table(&["movement", "amount", "asset", "before", "after"], &rows));
    s
}

pub fn book(v: &Value) -> String {
    table(
        &["id", "name", "lane", "network", "address", "memo", "tags", "status", "usable_at"],
        &rows(v, &["id", "name", "lane", "network", "address", "memo", "tags", "status", "usable_at"]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_and_dags_indent() {
        let t = table(&["a", "bb"], &[vec!["xxx".into(), "1".into()]]);
        assert_eq!(t, "A    BB\nxxx  1\n");
        let m = json!({"id": "m1", "request_state": "EXECUTING", "template_key": "t", "template_version": 1,
            "intent": {"asset": "USDC", "amount": "5"}, "approvals": [], "approvals_required": 1,
            "nodes": [{"node_key": "b", "node_state": "READY", "attempt_no": 0,
                       "dispatch_hold": {"scope": "global", "target": "", "reason": "incident"}},
                      {"node_key": "a", "node_state": "COMPLETED", "attempt_no": 1}]});
        let out = movement(&m, Some(&json!([{"from": "a", "to": "b"}])));
        let a = out.find("\na ").expect("a first");
        let b = out.find("\n  b ").expect("b indented under a");
        assert!(a < b, "{out}");
        assert!(out.contains("held: global"), "{out}");
    }
}
