//! How `aware init` reads and writes the CLIs' config files, safely in a repository it does not
//! trust (a cloned project may ship any file, symlink or directory under the names init writes).
//!
//! - A file is written through a new temporary file created exclusively with an unpredictable
//!   name in the target's own directory (`tempfile`: `O_EXCL`, never a planted name), then
//!   renamed over the target: a symlink planted at any temporary name cannot redirect the write.
//! - A project file whose path, once every symlink is resolved, leaves the project (a symlinked
//!   `.claude/` or `settings.json` pointing into `~` or `/etc`) is refused, with the reason; a
//!   symlink that stays inside the project is written through (the link is kept).
//! - The file keeps its mode; a read-only file is refused rather than replaced.
//! - A JSON file with duplicate keys or integers beyond 64 bits is refused: a rewrite would
//!   silently drop all but one of the keys, or change the number's digits.

use super::usage::UsageError;
use anyhow::{bail, Context as _, Result};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where a file may be written.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Inside this (canonical) project directory only.
    Project(PathBuf),
    /// The user's own configuration (`~/.codex`): symlinks are the user's, followed.
    User,
}

/// One file init would write: its path, its text now (None when missing) and its new text.
#[derive(Debug)]
pub struct Change {
    pub path: PathBuf,
    pub old: Option<String>,
    pub new: String,
    pub scope: Scope,
}

impl Change {
    pub fn verb(&self) -> &'static str {
        match &self.old {
            None => "created",
            Some(o) if *o == self.new => "unchanged",
            Some(_) => "updated",
        }
    }
}

/// The path init really writes: `path` itself, or where its symlinks lead when that stays in
/// the scope. Refused when it leaves the project.
pub fn resolve(path: &Path, scope: &Scope) -> Result<PathBuf> {
    let Scope::Project(root) = scope else {
        return Ok(match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(_) => path.to_path_buf(),
        });
    };
    // The deepest existing ancestor, resolved; the rest of the path does not exist yet, so it
    // cannot be a link.
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    let real = loop {
        match std::fs::canonicalize(&existing) {
            Ok(p) => break p,
            Err(_) => {
                let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
                    bail!("cannot resolve {}", path.display());
                };
                rest.push(name);
                if !existing.pop() {
                    bail!("cannot resolve {}", path.display());
                }
            }
        }
    };
    if !real.starts_with(root) {
        bail!(UsageError(format!(
            "{} leads to {}, outside the project {} (a symlink); aware init does not write \
             outside the project it sets up: replace the link with a real file or directory",
            path.display(),
            real.display(),
            root.display()
        )));
    }
    let mut out = real;
    for n in rest.into_iter().rev() {
        out.push(n);
    }
    Ok(out)
}

/// The file's text, or None when it does not exist.
pub fn read(path: &Path, scope: &Scope) -> Result<Option<String>> {
    let real = resolve(path, scope)?;
    match std::fs::read_to_string(&real) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Writes `change.new` (see the module docs for the rules).
pub fn write(change: &Change) -> Result<()> {
    let real = resolve(&change.path, &change.scope)?;
    let dir = real
        .parent()
        .with_context(|| format!("{} has no parent directory", real.display()))?;
    create_dirs(dir, &change.scope)?;
    let mode = match std::fs::metadata(&real) {
        Ok(m) => {
            let mode = m.permissions().mode() & 0o7777;
            if mode & 0o200 == 0 {
                bail!(UsageError(format!(
                    "{} is read-only (mode {mode:04o}); nothing was written: make it writable \
                     if aware may change it",
                    change.path.display()
                )));
            }
            Some(mode)
        }
        Err(_) => None,
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".aware-init-")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    tmp.write_all(change.new.as_bytes())
        .and_then(|_| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write a temporary file in {}", dir.display()))?;
    // A new file gets the usual 0644 of a config file (tempfile creates 0600); an old one keeps
    // its own mode.
    let mode = mode.unwrap_or(0o644);
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", tmp.path().display()))?;
    tmp.persist(&real)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot write {}", change.path.display()))?;
    Ok(())
}

/// `create_dir_all` that refuses a directory leading out of the project (re-checked here, as
/// the tree may have changed since the plan was made).
fn create_dirs(dir: &Path, scope: &Scope) -> Result<()> {
    if let Scope::Project(_) = scope {
        resolve(dir, scope)?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// Refuses a JSON text that a rewrite would change beyond aware's entries: an object that repeats
/// a key (only one would be kept), an integer too large for 64 bits (it would become a float).
pub fn check_faithful(text: &str) -> std::result::Result<(), String> {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    struct Strict;
    impl<'de> serde::Deserialize<'de> for Strict {
        fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Strict, D::Error> {
            d.deserialize_any(StrictVisitor)
        }
    }
    struct StrictVisitor;
    impl<'de> Visitor<'de> for StrictVisitor {
        type Value = Strict;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> std::result::Result<Strict, E> {
            Ok(Strict)
        }
        fn visit_i64<E>(self, _: i64) -> std::result::Result<Strict, E> {
            Ok(Strict)
        }
        fn visit_u64<E>(self, _: u64) -> std::result::Result<Strict, E> {
            Ok(Strict)
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Strict, E> {
            // An integer beyond i64/u64 arrives as a float: rewriting it would change its digits.
            if v.fract() == 0.0 && v.abs() >= 9_007_199_254_740_992.0 {
                return Err(E::custom(format!(
                    "the number {v:e} is too large to be rewritten exactly"
                )));
            }
            Ok(Strict)
        }
        fn visit_str<E>(self, _: &str) -> std::result::Result<Strict, E> {
            Ok(Strict)
        }
        fn visit_unit<E>(self) -> std::result::Result<Strict, E> {
            Ok(Strict)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> std::result::Result<Strict, A::Error> {
            while a.next_element::<Strict>()?.is_some() {}
            Ok(Strict)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> std::result::Result<Strict, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(k) = a.next_key::<String>()? {
                if !seen.insert(k.clone()) {
                    return Err(serde::de::Error::custom(format!(
                        "the key \"{k}\" appears twice in one object"
                    )));
                }
                a.next_value::<Strict>()?;
            }
            Ok(Strict)
        }
    }
    serde_json::from_str::<Strict>(text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A line diff (longest common subsequence; the files are small): removed lines before the
/// lines that replace them, as `diff -u` shows them.
pub fn diff(path: &Path, old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut s = format!("--- {}\n+++ {}\n", path.display(), path.display());
    let (mut i, mut j) = (0, 0);
    let mut changed = false;
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            s.push_str(&format!(" {}\n", a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            s.push_str(&format!("-{}\n", a[i]));
            i += 1;
            changed = true;
        } else {
            s.push_str(&format!("+{}\n", b[j]));
            j += 1;
            changed = true;
        }
    }
    if !changed {
        return format!("{}: unchanged", path.display());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_marks_removed_before_added_lines() {
        let d = diff(Path::new("f"), "a\nb\nc\n", "a\nx\nc\n");
        assert!(d.contains(" a\n-b\n+x\n c\n"), "{d}");
        assert_eq!(diff(Path::new("f"), "a\n", "a\n"), "f: unchanged");
    }

    #[test]
    fn duplicate_keys_are_found_at_any_depth() {
        assert!(check_faithful(r#"{"a":1,"b":{"c":[{"d":1.5}]}}"#).is_ok());
        let e = check_faithful(r#"{"a":1,"b":{"c":[{"d":1,"d":2}]}}"#).unwrap_err();
        assert!(e.contains("\"d\" appears twice"), "{e}");
        let e = check_faithful(r#"{"n": 123456789012345678901234567890}"#).unwrap_err();
        assert!(e.contains("too large"), "{e}");
        assert!(check_faithful(r#"{"n": 18446744073709551615}"#).is_ok());
    }

    #[test]
    fn symlinks_out_of_the_project_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root_path = std::fs::canonicalize(root.path()).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join(".claude")).unwrap();
        let scope = Scope::Project(root_path.clone());
        let e = resolve(&root.path().join(".claude/settings.json"), &scope).unwrap_err();
        assert!(e.to_string().contains("outside the project"), "{e}");
        std::fs::create_dir(root.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", root.path().join("inner")).unwrap();
        let p = resolve(&root.path().join("inner/x.json"), &scope).unwrap();
        assert_eq!(p, root_path.join("real/x.json"));
    }
}
