//! Values parsed once at the edge and carried inward typed: the 32-hex ids of spec §2
//! (`^[0-9a-f]{32}$`), coin symbols (§1) and lossless base-unit amounts. Each type checks its
//! rule in `FromStr` and `Deserialize`, so a path, query or body value that breaks it never
//! reaches a handler, and carries its OpenAPI schema (pattern included), so the published
//! document states the same rule.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::{fmt, ops::Range, str::FromStr, sync::Arc};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use utoipa::openapi::{schema::Type, ObjectBuilder, RefOr, Schema};

mod amounts;
mod credentials;
mod eth_address;
mod ids;
mod macros;
mod network;

pub use amounts::*;
pub use credentials::*;
pub use eth_address::*;
pub use ids::*;
pub(crate) use macros::{checked_string, string_schema, text_enum};
pub use network::*;

/// A well-formed id of any id type for unit tests, derived from a short label ("n1", "w1"):
/// the label's bytes in hex, left-padded with zeros to 32 characters.
#[cfg(test)]
pub(crate) fn test_id<T: FromStr>(label: &str) -> T {
    match format!("{:0>32}", hex::encode(label)).parse() {
        Ok(id) => id,
        Err(_) => panic!("label {label:?} too long for a test id"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_spec_pattern() {
        assert!("0123456789abcdef0123456789abcdef".parse::<WalletId>().is_ok());
        for bad in ["", "0", "0123456789ABCDEF0123456789abcdef", "0123456789abcdef0123456789abcde"] {
            assert!(bad.parse::<WalletId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn coins_are_lower_case_symbols() {
        for ok in ["btc", "tbtc4", "eth:usdc", "ofc_btc", "hteth"] {
            assert!(ok.parse::<Coin>().is_ok(), "{ok}");
        }
        for bad in ["", "BTC", ":btc", "b tc", &"a".repeat(41)] {
            assert!(bad.parse::<Coin>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn base_units_are_exact_and_canonical() {
        assert_eq!(BaseUnits::parse("007").map(BaseUnits::into_string).as_deref(), Some("7"));
        assert_eq!(BaseUnits::parse("000").map(BaseUnits::into_string).as_deref(), Some("0"));
        let big = "1".repeat(78);
        assert_eq!(BaseUnits::parse(&big).map(BaseUnits::into_string), Some(big));
        for bad in ["", "-1", "1.5", "1e3", &"1".repeat(101)] {
            assert!(BaseUnits::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn whole_numbers_may_be_written_as_floats() {
        use serde_json::json;
        assert_eq!(super::whole_number(&json!(3)), Some(3));
        assert_eq!(super::whole_number(&json!(3.0)), Some(3));
        assert_eq!(super::whole_number(&json!(3.5)), None);
        assert_eq!(super::whole_number(&json!(-1)), None);
        assert_eq!(super::whole_number(&json!(1e300)), None);
        assert_eq!(super::whole_number(&json!("3")), None);
    }

    #[test]
    fn cidrs_are_parsed_once_and_written_canonically() {
        use super::Cidr;
        let show = |s: &str| Cidr::parse(s).map(|c| c.to_string());
        assert_eq!(show("127.0.0.1").as_deref(), Ok("127.0.0.1"));
        assert_eq!(show("10.1.2.3/16").as_deref(), Ok("10.1.0.0/16"));
        assert_eq!(show("::ffff:10.2.0.0/112").as_deref(), Ok("10.2.0.0/16"));
        assert_eq!(show("::ffff:127.0.0.1").as_deref(), Ok("127.0.0.1"));
        assert!(show("300.1.1.1").is_err());
        let parent = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(parent.contains(&Cidr::parse("10.9.0.0/16").unwrap()));
        assert!(!parent.contains(&Cidr::parse("0.0.0.0/0").unwrap()));
        assert!(parent.contains_ip(&"10.1.1.1".parse().unwrap()));
    }
}
