//! Integration tests of `fawn-config`: the example files, error reporting, path precedence
//! and DeerFlow compatibility.

// Tests may unwrap (project standard); helper functions are not `#[test]`s, so say it here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod compat;
mod errors;
mod examples;
mod paths;

use fawn_config::{ConfigErrors, LoadOptions, Loaded};
use std::path::PathBuf;

/// The repository root (where the example files live).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A hermetic load of YAML (and optional extensions JSON) with the given variables.
pub fn load_with(
    yaml: &str,
    ext: Option<&str>,
    vars: &[(&str, &str)],
) -> Result<Loaded, ConfigErrors> {
    let opts = LoadOptions::with_vars("/nonexistent-cwd", vars.iter().copied());
    fawn_config::load_str(yaml, ext, &opts)
}

/// The error lines of a failed load.
pub fn error_lines(r: Result<Loaded, ConfigErrors>) -> Vec<String> {
    match r {
        Ok(l) => panic!(
            "expected errors, loaded fine with warnings {:?}",
            l.warnings
        ),
        Err(e) => e.to_string().lines().map(str::to_string).collect(),
    }
}

/// The warning lines of a successful load.
pub fn warning_lines(r: Result<Loaded, ConfigErrors>) -> Vec<String> {
    match r {
        Ok(l) => l.warnings.iter().map(ToString::to_string).collect(),
        Err(e) => panic!("expected a load, got errors:\n{e}"),
    }
}
