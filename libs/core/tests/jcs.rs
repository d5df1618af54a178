//! RFC 8785 against vectors computed outside the project with an independent library
//! (`docs/vectors/jcs_rfc8785.json`). An integration test, so that `libs/core/src` reads no file.

use qtg_core::hash::canonical_json;
use serde_json::Value;

#[test]
fn matches_the_rfc8785_vectors() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/vectors/jcs_rfc8785.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 5);
    for case in cases {
        assert_eq!(canonical_json(&case["input"]), case["canonical"].as_str().unwrap(), "{}", case["input"]);
    }
}
