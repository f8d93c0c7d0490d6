//! Notification signatures (docs/decisions.md#webhooks).
//!
//! - `X-Signature-SHA256`: hex HMAC-SHA256 of the body, keyed with the secret's text (BitGo's
//!   scheme); also what POST /api/v2/webhook/{id}/verify checks.
//! - Standard Webhooks: `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`,
//!   keyed with the base64-decoded part of the `whsec_` secret, as that specification says.

use base64::{engine::general_purpose::STANDARD, Engine};
use rand::RngCore;
use subtle::ConstantTimeEq;

use crate::digest::{hmac_sha256, hmac_sha256_hex};

/// Prefix of every webhook secret (Standard Webhooks).
pub const SECRET_PREFIX: &str = "whsec_";

/// A new secret: `whsec_` + base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(b))
}

/// Hex HMAC-SHA256 of `body` keyed with the secret text.
pub fn bitgo_signature(secret: &str, body: &[u8]) -> String {
    hmac_sha256_hex(secret.as_bytes(), &[body])
}

/// Constant-time check of a hex [`bitgo_signature`].
pub fn verify_bitgo(secret: &str, body: &[u8], signature: &str) -> bool {
    let expected = bitgo_signature(secret, body);
    let given = signature.trim().to_ascii_lowercase();
    expected.len() == given.len() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// One `v1,<base64>` Standard Webhooks signature of `id.timestamp.body`.
pub fn standard_signature(secret: &str, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let key = secret
        .strip_prefix(SECRET_PREFIX)
        .and_then(|b| STANDARD.decode(b).ok())
        .unwrap_or_else(|| secret.as_bytes().to_vec());
    let ts = timestamp.to_string();
    let sig = hmac_sha256(&key, &[msg_id.as_bytes(), b".", ts.as_bytes(), b".", body]);
    format!("v1,{}", STANDARD.encode(sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_webhooks_reference_vector() {
        // From the Standard Webhooks specification's examples.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let sig = standard_signature(
            secret,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn bitgo_signature_verifies_only_itself() {
        let s = new_secret();
        let sig = bitgo_signature(&s, b"{}");
        assert!(verify_bitgo(&s, b"{}", &sig));
        assert!(!verify_bitgo(&s, b"{ }", &sig));
        assert!(!verify_bitgo(&new_secret(), b"{}", &sig));
        assert!(!verify_bitgo(&s, b"{}", "abc"));
    }
}
