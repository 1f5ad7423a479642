//! `cargo codegen` writes generated/ from spec/; `cargo codegen --check` only compares.
use std::path::PathBuf;

fn main() {
    let check = std::env::args().any(|a| a == "--check");
    let root = workspace_root();
    let outputs = match iggy_codegen::generate(&root) {
        Ok(o) => o,
        Err(diags) => {
            for d in diags {
                eprintln!("error: {d}");
            }
            std::process::exit(2);
        }
    };
    let stale = iggy_codegen::stale(&outputs);
    if check {
        for p in &stale {
            eprintln!("stale: {}", p.display());
        }
        std::process::exit(if stale.is_empty() { 0 } else { 1 });
    }
    for (p, t) in &outputs {
        if stale.contains(p) {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir).expect("create output directory");
            }
            std::fs::write(p, t).expect("write generated file");
            eprintln!("wrote {}", p.display());
        }
    }
}

/// The workspace being generated: the nearest ancestor of the working directory with a `spec/`
/// directory. Not the compile-time manifest dir: a target dir shared between checkouts would
/// then regenerate another checkout.
fn workspace_root() -> PathBuf {
    let start = std::env::current_dir().expect("working directory");
    let mut dir = start.as_path();
    loop {
        if dir.join("spec").is_dir() && dir.join("codegen").is_dir() {
            return dir.to_path_buf();
        }
        match dir.parent() {
            Some(parent) => dir = parent,
            None => {
                eprintln!("error: no spec/ directory above {}", start.display());
                std::process::exit(2);
            }
        }
    }
}
