//! `$ref:node_key.field` resolution in a node's `config`. Top-level string values of the form
//! `$ref:<node_key>.<field>` are replaced by `<field>` of that completed node's
//! `provider_refs`; `__*` markers are never reachable.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::markers::is_marker;

pub const REF_PREFIX: &str = "$ref:";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefTarget {
    pub node_key: String,
    pub field: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CONFIG_REF_UNRESOLVED: config key {config_key:?} refers to {reference:?}, which {why}")]
pub struct RefError {
    pub config_key: String,
    pub reference: String,
    pub why: &'static str,
}

/// Parses `$ref:node.field`; `None` when the value is not a reference.
pub fn parse_ref(value: &str) -> Option<RefTarget> {
    let rest = value.strip_prefix(REF_PREFIX)?;
    let (node_key, field) = rest.split_once('.')?;
    if node_key.is_empty() || field.is_empty() {
        return None;
    }
    Some(RefTarget { node_key: node_key.to_string(), field: field.to_string() })
}

/// Every reference among `config`'s top-level values (malformed `$ref:` strings included as
/// targets that can never resolve).
pub fn collect_refs(config: &Value) -> Vec<RefTarget> {
    let Some(map) = config.as_object() else { return Vec::new() };
    map.values()
        .filter_map(Value::as_str)
        .filter(|s| s.starts_with(REF_PREFIX))
        .map(|s| parse_ref(s).unwrap_or(RefTarget { node_key: String::new(), field: String::new() }))
        .collect()
}

/// Resolves the top-level references of `config` against the `provider_refs` of completed
/// nodes (keyed by node_key).
pub fn resolve_config(config: &Value, completed_refs: &HashMap<String, Value>) -> Result<Value, RefError> {
    let Some(map) = config.as_object() else { return Ok(config.clone()) };
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        let resolved = match value.as_str().filter(|s| s.starts_with(REF_PREFIX)) {
            None => value.clone(),
            Some(reference) => {
                let err = |why| RefError { config_key: key.clone(), reference: reference.to_string(), why };
                let target = parse_ref(reference).ok_or(err("is not of the form $ref:node_key.field"))?;
                if is_marker(&target.field) {
                    return Err(err("names an internal marker"));
                }
                let refs = completed_refs.get(&target.node_key).ok_or(err("is not a COMPLETED node"))?;
                refs.get(&target.field).cloned().ok_or(err("has no such field in its provider_refs"))?
            }
        };
        out.insert(key.clone(), resolved);
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_top_level_refs() {
        let refs: HashMap<String, Value> =
            [("withdraw".to_string(), json!({"txid": "0xabc", "__submit_attempt_pending": true}))].into();
        let config = json!({"txid": "$ref:withdraw.txid", "plain": 1, "nested": {"x": "$ref:withdraw.txid"}});
        let out = resolve_config(&config, &refs).unwrap();
        assert_eq!(out, json!({"txid": "0xabc", "plain": 1, "nested": {"x": "$ref:withdraw.txid"}}));
    }

    #[test]
    fn unresolved_refs_are_errors() {
        let refs: HashMap<String, Value> = [("a".to_string(), json!({"x": 1, "__m": 2}))].into();
        for config in
            [json!({"k": "$ref:b.x"}), json!({"k": "$ref:a.y"}), json!({"k": "$ref:a"}), json!({"k": "$ref:a.__m"})]
        {
            let e = resolve_config(&config, &refs).unwrap_err();
            assert!(e.to_string().starts_with("CONFIG_REF_UNRESOLVED"), "{e}");
        }
    }
}
