//! Records the git commit the proxy is built from (`ASAP_BUILD_COMMIT`, 12 hex digits, empty
//! outside a git checkout: a source archive, the Docker build context), so that trace session
//! records and `report` can tell two builds of the same version apart (issue 17: a protocol
//! that differs between two compared labels must not pass silently). An environment variable
//! `ASAP_BUILD_COMMIT` set for the build wins (for builds without `.git`).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=ASAP_BUILD_COMMIT");
    // Only paths that exist: a missing one would rerun this script, and rebuild the crate, on
    // every build (a git worktree's `.git` is a file).
    println!("cargo:rerun-if-changed=build.rs");
    for path in [".git/HEAD", ".git/refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let commit = std::env::var("ASAP_BUILD_COMMIT").ok().unwrap_or_else(|| {
        Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    });
    println!("cargo:rustc-env=ASAP_BUILD_COMMIT={commit}");
}
