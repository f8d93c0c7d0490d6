//! Text from outside (a node's error, a receiver's answer) cut to a size before it is kept,
//! shown or logged, so a hostile peer cannot make the service hold or print megabytes.

/// Cuts `text` to at most `max` bytes, at a character boundary, and marks the cut with `…`
/// (within `max`) so a reader knows there was more.
pub fn clip(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    const MARK: &str = "…";
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    if max >= MARK.len() {
        text.push_str(MARK);
    }
    text
}

/// Cuts `text` to at most `max` bytes at a character boundary, unmarked (a stored body).
pub fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clips_at_a_character_boundary_within_the_limit() {
        assert_eq!(clip("short".into(), 256), "short");
        let long = "é".repeat(1000);
        let cut = clip(long, 256);
        assert!(cut.len() <= 256, "{}", cut.len());
        assert!(cut.ends_with('…'));
        let mut body = "aé".repeat(10);
        truncate(&mut body, 4);
        assert_eq!(body, "aéa");
    }
}
