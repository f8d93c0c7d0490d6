//! New identifiers (32 lowercase hex characters, spec §2, from a CSPRNG). Time is `crate::clock`.

use rand::RngCore;

/// A new random id of 32 lowercase hex characters (128 bits), from the thread's CSPRNG
/// (ChaCha, seeded and reseeded from the OS): no system call per id, which request ids and
/// notification ids would otherwise pay (docs/decisions.md#performance). Secrets use the OS CSPRNG directly.
pub fn new_id() -> String {
    new_inline_id().to_string()
}

/// [`new_id`], held inline (the id types keep their text so, without an allocation).
pub fn new_inline_id() -> arrayvec::ArrayString<32> {
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    hex_inline(b)
}

/// 16 bytes as 32 lowercase hex characters, inline.
fn hex_inline(b: [u8; 16]) -> arrayvec::ArrayString<32> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = arrayvec::ArrayString::new();
    for byte in b {
        // 16 bytes make exactly the 32 characters the string holds.
        s.push(char::from(HEX[usize::from(byte >> 4)]));
        s.push(char::from(HEX[usize::from(byte & 15)]));
    }
    s
}

/// A new id of 32 lowercase hex characters that sorts by creation time: 12 of Unix
/// milliseconds, then 20 random (80 bits, the thread's CSPRNG), as UUIDv7 does (RFC 9562 §5.7).
/// For the outbox's notifications (docs/decisions.md#performance): their inserts land at the right edge of the id
/// indexes instead of on random pages, which cuts the pages each commit writes.
pub fn new_sequential_id() -> arrayvec::ArrayString<32> {
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&crate::clock::wall_now_ms().to_be_bytes()[2..]);
    rand::thread_rng().fill_bytes(&mut b[6..]);
    hex_inline(b)
}

/// The smallest [`new_sequential_id`] made at or after Unix millisecond `ms`: a bound that
/// turns a time range into an id range (the console's searches, docs/decisions.md#the-operator-console).
pub fn sequential_id_floor(ms: i64) -> String {
    let ms = ms.clamp(0, 0xffff_ffff_ffff);
    format!("{ms:012x}{}", "0".repeat(20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_are_ids_and_sort_by_creation() {
        let first = new_sequential_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = new_sequential_id();
        let hex32 =
            |s: &str| s.len() == 32 && s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
        assert!(hex32(&first) && hex32(&second), "{first} {second}");
        assert!(first < second, "{first} !< {second}");
        // The first 12 characters are the creation time in Unix milliseconds.
        let ms = i64::from_str_radix(&second[..12], 16).unwrap();
        assert!((crate::clock::wall_now_ms() - ms).abs() < 1_000, "{ms}");
        // The rest is random: two ids of the same millisecond differ.
        assert_ne!(new_sequential_id()[12..], new_sequential_id()[12..]);
    }
}
