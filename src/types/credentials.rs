//! What a person types to prove who they are: a one-time password and an email address.

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

/// What stands for a one-time password wherever one is required: a TOTP code, or a passkey
/// assertion (the JSON of `navigator.credentials.get()`'s credential, answering a challenge of
/// `GET /api/v2/user/otp/webauthn/auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecondFactor {
    Totp(OtpCode),
    Passkey(String),
}

impl SecondFactor {
    /// The longest passkey assertion taken, bytes (a real one is under 2 KB).
    pub const MAX_ASSERTION_BYTES: usize = 16 * 1024;

    /// Six digits, or a JSON object of at most [`Self::MAX_ASSERTION_BYTES`]; `None` otherwise.
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        if t.starts_with('{') && t.len() <= Self::MAX_ASSERTION_BYTES {
            return Some(SecondFactor::Passkey(t.to_string()));
        }
        OtpCode::parse(t).map(SecondFactor::Totp)
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
