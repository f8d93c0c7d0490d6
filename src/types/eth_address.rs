//! Ethereum addresses as the service keeps them: EIP-55 checksummed text (the chain watcher's
//! addresses and token contracts).

use alloy_primitives::Address;

/// Parses `0x` and 40 hex digits. All-lower or all-upper digits are taken as they are; mixed
/// case must be a valid EIP-55 checksum (a typo is refused rather than watched).
pub fn parse_eth_address(text: &str) -> Result<Address, String> {
    let digits = text.strip_prefix("0x").ok_or("an address starts with 0x")?;
    if digits.len() != 40 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("an address is 0x and 40 hex digits".into());
    }
    let mixed =
        digits.bytes().any(|b| b.is_ascii_lowercase()) && digits.bytes().any(|b| b.is_ascii_uppercase());
    if mixed {
        return Address::parse_checksummed(text, None)
            .map_err(|_| "the address's EIP-55 checksum is wrong".into());
    }
    text.parse().map_err(|_| "an address is 0x and 40 hex digits".into())
}

/// The checksummed text of `address` (EIP-55).
pub fn checksummed_eth_address(address: &Address) -> String {
    address.to_checksum(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_kept_checksummed_and_bad_checksums_refused() {
        // EIP-55's own examples.
        let good = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
        assert_eq!(checksummed_eth_address(&parse_eth_address(&good.to_lowercase()).unwrap()), good);
        assert_eq!(checksummed_eth_address(&parse_eth_address(good).unwrap()), good);
        assert!(parse_eth_address("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD").is_err());
        assert!(parse_eth_address("5aaeb6053f3e94c9b9a09f33669435e7ef1beaed").is_err());
        assert!(parse_eth_address("0x5aaeb6053f3e94c9b9a09f33669435e7ef1beae").is_err());
        assert!(parse_eth_address("0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaeg").is_err());
    }
}
