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

/// Pattern of every id (spec §2).
pub const ID_PATTERN: &str = "^[0-9a-f]{32}$";
/// Pattern of a coin symbol or token ticker (spec §1; see [`Coin`]).
pub const COIN_PATTERN: &str = "^[a-z0-9][a-z0-9:_-]{0,39}$";
/// Pattern of a base-unit amount (see [`BaseUnits`]).
pub const BASE_UNITS_PATTERN: &str = "^[0-9]{1,100}$";

fn string_schema(pattern: &str, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
        .into()
}

/// Declares a closed vocabulary as an enum whose variants are spelt as given (`Variant =
/// "text"`): `ALL`, `as_str`, and `FromStr` failing with `$unknown`. Serves the scope values
/// (§4.3), the audit entry types and the error names.
macro_rules! text_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident ($unknown:literal) { $($variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The value as written.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = &'static str;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)*
                    _ => Err($unknown),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        /// A string, one of the values (the OpenAPI document lists them).
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some($name::ALL.iter().map(|v| v.as_str())))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}
pub(crate) use text_enum;

/// Declares a string newtype checked by `$check`, with `FromStr`, serde and an OpenAPI schema.
/// The text is held inline (at most `$cap` bytes, the rule's own bound), so an id costs no
/// allocation: a 100-id lookup builds several hundred of them (issue 23 §4).
macro_rules! checked_string {
    ($(#[$doc:meta])* $name:ident, $cap:literal, $check:expr, $pattern:expr, $expect:literal) => {
        $(#[$doc])*
        ///
        /// Stored as text: `sqlx::Type` lets rows decode it and statements bind it on both
        /// backends (what the database holds was checked when it was written).
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(arrayvec::ArrayString<$cap>);

        impl $name {
            /// What a valid value looks like, for error messages.
            pub const EXPECTED: &'static str = $expect;

            /// The value as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The owned text.
            pub fn into_string(self) -> String {
                self.0.to_string()
            }

            /// A value read back from the database, checked when it was written and not again
            /// (as decoding a row through `sqlx::Type` does); only its length is, which the
            /// inline text needs. Errors: `EXPECTED`, for text longer than any valid value.
            pub(crate) fn from_stored(s: &str) -> Result<Self, &'static str> {
                arrayvec::ArrayString::from(s).map($name).map_err(|_| $expect)
            }
        }

        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            String: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as sqlx::Type<DB>>::type_info()
            }
            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            String: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer<'q>,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                self.0.to_string().encode(buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            String: sqlx::Decode<'r, DB>,
        {
            fn decode(value: <DB as sqlx::Database>::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <String as sqlx::Decode<'r, DB>>::decode(value)?;
                Ok($name::from_stored(&text)?)
            }
        }

        impl FromStr for $name {
            type Err = &'static str;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let check: fn(&str) -> bool = $check;
                match check(s).then(|| arrayvec::ArrayString::from(s).ok()).flatten() {
                    Some(text) => Ok($name(text)),
                    None => Err($expect),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        /// Reads as its text wherever text is wanted (formatting, hashing, comparing).
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0.as_str() == other
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // A visitor on `str`, so that path extractors report the failing key.
                struct V;
                impl de::Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expect)
                    }
                    fn visit_str<E: de::Error>(self, s: &str) -> Result<$name, E> {
                        s.parse().map_err(|e: &str| E::custom(format!("must be {e}")))
                    }
                }
                d.deserialize_str(V)
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                string_schema($pattern, $expect)
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}

checked_string!(
    /// A wallet id (spec §2.1 `id`).
    WalletId, 32, is_id, ID_PATTERN, "a 32-hex wallet id"
);
checked_string!(
    /// An enterprise id.
    EnterpriseId, 32, is_id, ID_PATTERN, "a 32-hex enterprise id"
);
checked_string!(
    /// A user id (spec §2.3 `id`).
    UserId, 32, is_id, ID_PATTERN, "a 32-hex user id"
);
checked_string!(
    /// A webhook id (spec §2.5 `id`).
    WebhookId, 32, is_id, ID_PATTERN, "a 32-hex webhook id"
);
checked_string!(
    /// A notification id (spec §2.6 `id`).
    NotificationId, 32, is_id, ID_PATTERN, "a 32-hex notification id"
);
checked_string!(
    /// The public id of an access token (spec §2.4 `id`, §2.2 `token_id`).
    TokenId, 32, is_id, ID_PATTERN, "a 32-hex access token id"
);
checked_string!(
    /// Any 32-hex id (templates, paging cursors).
    AnyId, 32, is_id, ID_PATTERN, "a 32-hex id"
);
checked_string!(
    /// A coin symbol or token ticker (spec §1: lower case), 1 to 40 characters of
    /// `a-z 0-9 : _ -` starting with a letter or digit: `btc`, `teth`, `ofcbtc`, `eth:usdc`.
    Coin, 40, is_coin, COIN_PATTERN, "a lower-case coin symbol"
);

/// New ids of the id types, from `crate::ids` (always 32 lowercase hex).
macro_rules! generated_id {
    ($($name:ident),*) => {$(
        impl $name {
            /// A new random id (`ids::new_id`).
            pub fn new_random() -> Self {
                $name(crate::ids::new_inline_id())
            }

            /// The same id as a paging cursor.
            pub fn to_cursor(&self) -> AnyId {
                AnyId(self.0)
            }
        }
    )*};
}

generated_id!(WalletId, EnterpriseId, UserId, WebhookId, NotificationId, TokenId, AnyId);

impl NotificationId {
    /// A new id that sorts by creation time (`ids::new_sequential_id`).
    pub fn new_sequential() -> Self {
        NotificationId(crate::ids::new_sequential_id())
    }
}

/// True when `s` matches `^[0-9a-f]{32}$` (spec §2).
pub fn is_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// True for a coin symbol (see [`Coin`]).
pub fn is_coin(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 40
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() || matches!(c, b':' | b'_' | b'-'))
}

/// Text that may be a slice of a larger shared buffer: the rows unpacked from one stored answer
/// (the wallet lookup's packed rows) share it instead of each copying out its part, which for a
/// 100-id lookup was hundreds of allocations and a copy of every record (issue 23 §4).
#[derive(Clone)]
pub struct SharedText {
    buf: Arc<String>,
    range: Range<usize>,
}

impl SharedText {
    /// `range` of `buf`; `None` when it is out of bounds or splits a character.
    pub fn slice(buf: &Arc<String>, range: Range<usize>) -> Option<Self> {
        buf.get(range.clone())?;
        Some(SharedText { buf: Arc::clone(buf), range })
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Checked when the slice was made, and the buffer is immutable.
        self.buf.get(self.range.clone()).unwrap_or_default()
    }
}

impl From<String> for SharedText {
    fn from(s: String) -> Self {
        let range = 0..s.len();
        SharedText { buf: Arc::new(s), range }
    }
}

impl From<&str> for SharedText {
    fn from(s: &str) -> Self {
        SharedText::from(s.to_string())
    }
}

impl std::ops::Deref for SharedText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for SharedText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SharedText {}

impl std::hash::Hash for SharedText {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

/// A non-negative integer amount in base units (satoshi, wei, ...; USD cents for the withdraw
/// hold), exact at any size: kept as canonical decimal digits without leading zeros. Parsed
/// from a digit string or a JSON integer of at most 100 digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BaseUnits(SharedText);

/// Numeric order: canonical digits have no leading zeros, so the longer is the larger.
impl Ord for BaseUnits {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.as_str().cmp(other.0.as_str()))
    }
}

impl PartialOrd for BaseUnits {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl BaseUnits {
    /// What a valid value looks like, for error messages.
    pub const EXPECTED: &'static str = "a non-negative integer in base units (digits, or a JSON integer)";

    /// An amount read back from the database, stored in this canonical form: a slice of the
    /// stored answer, not a copy.
    pub(crate) fn from_stored(text: SharedText) -> Self {
        BaseUnits(text)
    }

    /// Parses digits (1 to 100 of them); leading zeros are dropped.
    pub fn parse(text: &str) -> Option<Self> {
        if text.is_empty() || text.len() > 100 || !text.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let trimmed = text.trim_start_matches('0');
        Some(BaseUnits(SharedText::from(if trimmed.is_empty() { "0" } else { trimmed })))
    }

    /// Parses a JSON string of digits or a JSON integer (losslessly: the crate keeps numbers'
    /// text with serde_json's arbitrary_precision).
    pub fn from_json(v: &serde_json::Value) -> Option<Self> {
        match v {
            serde_json::Value::String(s) => Self::parse(s),
            serde_json::Value::Number(n) => Self::parse(&n.to_string()),
            _ => None,
        }
    }

    /// The canonical digits.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The owned digits.
    pub fn into_string(self) -> String {
        self.0.as_str().to_string()
    }
}

impl FromStr for BaseUnits {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BaseUnits::parse(s).ok_or(BaseUnits::EXPECTED)
    }
}

impl fmt::Display for BaseUnits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A one-time password of RFC 6238 as this service issues them: exactly six ASCII digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtpCode(String);

impl OtpCode {
    /// Digits in a code.
    pub const DIGITS: usize = 6;

    /// Parses a code, surrounding white space ignored; `None` unless exactly six digits.
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        (t.len() == Self::DIGITS && t.bytes().all(|b| b.is_ascii_digit())).then(|| OtpCode(t.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An email address as users are keyed by: trimmed and lower-cased, 1 to 254 characters
/// (RFC 5321's path limit), no white space or control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Email(String);

impl Email {
    /// The longest address, characters.
    pub const MAX_LEN: usize = 254;

    /// Normalises `text`; the error says why it is not an address this service can hold.
    pub fn parse(text: &str) -> Result<Self, String> {
        let e = text.trim().to_ascii_lowercase();
        if e.is_empty() || e.chars().count() > Self::MAX_LEN {
            return Err(format!("1 to {} characters", Self::MAX_LEN));
        }
        if e.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("no white space or control characters".into());
        }
        Ok(Email(e))
    }

    /// Whether it has the shape of an address: one `@`, a local part, a dotted domain.
    pub fn is_well_formed(&self) -> bool {
        let Some((local, domain)) = self.0.split_once('@') else { return false };
        !local.is_empty()
            && !domain.contains('@')
            && domain.contains('.')
            && !domain.starts_with('.')
            && !domain.ends_with('.')
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An IP address or CIDR block of `ipRestrict` (spec §4.3), parsed once: host bits cleared,
/// IPv4-mapped IPv6 blocks (`::ffff:a.b.c.d/n`, n >= 96) as IPv4 so that they compare with the
/// IPv4 addresses clients connect from. Written as the address alone for a single host, else
/// `network/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr(ipnet::IpNet);

impl Cidr {
    /// Parses an address or a block; the error says why.
    pub fn parse(text: &str) -> Result<Self, String> {
        let net = parse_cidr(text.trim())?;
        if let ipnet::IpNet::V6(v6) = net {
            if let (Some(v4), true) = (v6.addr().to_ipv4_mapped(), v6.prefix_len() >= 96) {
                let v4 = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_err(|e| e.to_string())?;
                return Ok(Cidr(ipnet::IpNet::V4(v4)));
            }
        }
        Ok(Cidr(net))
    }

    /// Whether `ip` lies in the block.
    pub fn contains_ip(&self, ip: &std::net::IpAddr) -> bool {
        self.0.contains(ip)
    }

    /// Whether `other` lies wholly inside this block.
    pub fn contains(&self, other: &Cidr) -> bool {
        self.0.contains(&other.0)
    }

    /// The prefix length and whether the block is IPv4.
    pub fn prefix(&self) -> (u8, bool) {
        (self.0.prefix_len(), matches!(self.0, ipnet::IpNet::V4(_)))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.prefix_len() == self.0.max_prefix_len() {
            write!(f, "{}", self.0.addr())
        } else {
            write!(f, "{}", self.0)
        }
    }
}

impl serde::Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A JSON number that is a whole, non-negative value: `3` and `3.0` alike (JSON Schema counts
/// both as integers), up to 2^53 for floats, which hold integers exactly only that far.
pub fn whole_number(v: &serde_json::Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(f))
            .map(|f| f as u64)
    })
}

/// Deserializes an optional [`whole_number`]; `null` is absent.
pub fn de_whole_number_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v: Option<serde_json::Value> = serde::Deserialize::deserialize(d)?;
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => {
            whole_number(&v).map(Some).ok_or_else(|| serde::de::Error::custom("expected a whole number >= 0"))
        }
    }
}

/// Parses an IP address (as a single-host block) or a CIDR block, normalised to its network address.
pub fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    if let Ok(net) = s.parse::<ipnet::IpNet>() {
        return Ok(net.trunc());
    }
    s.parse::<std::net::IpAddr>()
        .map(ipnet::IpNet::from)
        .map_err(|_| format!("{s:?} is neither an IP address nor a CIDR block"))
}

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
