//! docs/configuration.md checked against the code, so the settings table cannot drift: every
//! key of [`Config`] is listed once with its environment variable, no other key is listed, a
//! default written as one literal value is the code's default, and the example file loads.

use serde_json::Value;

use super::{Config, Overrides};

const DOC: &str = include_str!("../../docs/configuration.md");

/// `section.key` -> the default as the table would spell it, for every leaf of `v`.
fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                leaves(&key, v, out);
            }
        }
        Value::Array(items) => {
            let items: Vec<String> =
                items.iter().map(|i| i.to_string().trim_matches('"').to_string()).collect();
            out.push((prefix.to_string(), items.join(",")));
        }
        Value::String(s) => out.push((prefix.to_string(), s.clone())),
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

/// The table's rows: (key, environment cell, default cell).
fn rows() -> Vec<(String, String, String)> {
    DOC.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (cells[0].trim_matches('`').to_string(), cells[1].to_string(), cells[3].to_string())
        })
        .collect()
}

#[test]
fn every_setting_is_documented() {
    let mut code = Vec::new();
    leaves("", &serde_json::to_value(Config::default()).expect("the defaults serialize"), &mut code);
    // A chain's keys, under any coin: the table writes the coin as `<coin>`.
    let chain = serde_json::to_value(super::ChainConfig::default()).expect("the defaults serialize");
    leaves("chains.<coin>", &chain, &mut code);
    let price = serde_json::to_value(super::PriceConfig::default()).expect("the defaults serialize");
    leaves("prices.<coin>", &price, &mut code);
    let doc = rows();
    for (key, default) in &code {
        let Some((_, env, written)) = doc.iter().find(|(k, _, _)| k == key) else {
            panic!("docs/configuration.md does not list `{key}`");
        };
        let var = format!("`CUSTODIAN_{}`", key.replace('.', "_").to_ascii_uppercase());
        assert!(env.starts_with(&var), "`{key}`: the variable is {var}, the table says {env}");
        // A default written as one literal (`30`, `text`) must be the code's; prose ("number
        // of cores", "none") describes a computed or absent one.
        if let Some(lit) = written.strip_prefix('`').and_then(|w| w.strip_suffix('`')) {
            if !lit.contains('`') {
                let same_number =
                    matches!((lit.parse::<f64>(), default.parse::<f64>()), (Ok(a), Ok(b)) if a == b);
                assert!(lit == default || same_number, "`{key}`: the table says `{lit}`, the code {default}");
            }
        }
    }
    for (key, _, _) in &doc {
        assert!(
            code.iter().any(|(k, _)| k == key),
            "docs/configuration.md lists `{key}`, which is no setting"
        );
    }
    let mut keys: Vec<&String> = doc.iter().map(|(k, _, _)| k).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), doc.len(), "a key is listed twice");
}

#[test]
fn the_documented_example_file_loads() {
    let toml = DOC.split("```toml\n").nth(1).and_then(|s| s.split("```").next()).expect("a toml example");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("custodian.toml");
    std::fs::write(&path, toml).expect("written");
    let config = Config::load(Some(&path), &Overrides::default()).expect("the example loads");
    assert_eq!(config.delivery.retry_schedule, vec![60, 300, 600, 1800, 3600, 7200, 14400]);
    assert_eq!(config.trusted_proxies.len(), 1);
}
