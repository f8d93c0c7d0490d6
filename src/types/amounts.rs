//! Amounts: lossless base-unit decimals ([`BaseUnits`]) over text that may be a slice of a
//! larger shared answer ([`SharedText`]), and whole JSON numbers.

use super::*;

/// Pattern of a base-unit amount (see [`BaseUnits`]).
pub const BASE_UNITS_PATTERN: &str = "^[0-9]{1,100}$";

/// Text that may be a slice of a larger shared buffer: the rows unpacked from one stored answer
/// (the wallet lookup's packed rows) share it instead of each copying out its part, which for a
/// 100-id lookup was hundreds of allocations and a copy of every record (docs/decisions.md#performance-as-the-data-grows).
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
