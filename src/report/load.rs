//! Trace files → [`Trajectory`] values.

use std::path::{Path, PathBuf};

use super::Trajectory;

/// Errors reading trace files.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Every `*.jsonl` file under `paths` (files are taken as given; directories are searched
/// recursively), sorted.
///
/// Errors: a path that cannot be read.
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut files = Vec::new();
    for path in paths {
        collect(path, &mut files)?;
    }
    files.sort();
    Ok(files)
}

fn collect(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    if !path.is_dir() {
        std::fs::metadata(path).map_err(io)?;
        files.push(path.to_path_buf());
        return Ok(());
    }
    for entry in std::fs::read_dir(path).map_err(io)? {
        let entry = entry.map_err(io)?;
        let child = entry.path();
        if child.is_dir() {
            collect(&child, files)?;
        } else if child.extension().is_some_and(|e| e == "jsonl") {
            files.push(child);
        }
    }
    Ok(())
}

/// The trajectory recorded in one session file; `None` for a file with no `session` record
/// or no model turns (a passthrough log is read like any other).
///
/// Errors: the file cannot be read, or a record other than a torn last line is not valid.
pub fn trajectory(path: &Path) -> Result<Option<Trajectory>, LoadError> {
    Err(LoadError::Invalid {
        path: path.to_path_buf(),
        message: "trace reading is being rewritten".into(),
    })
}
