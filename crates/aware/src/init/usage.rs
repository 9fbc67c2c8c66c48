//! The error of a setup that the user can fix (a bad flag, a file init will not rewrite): it
//! exits 2 with its message, where other failures exit 1.

#[derive(Debug)]
pub struct UsageError(pub String);
impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for UsageError {}
