//! Checks of the architecture that the compiler cannot make: the module graph of a crate (from
//! its `crate::` paths), its cycles and the direction of its layers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path of a source file relative to `src/`: `main.rs`/`lib.rs` are the root (`""`),
/// `a/mod.rs` is `a`, `a/b.rs` is `a::b`.
pub fn module_of(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && (stem == "main" || stem == "lib"))) {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

/// The text of `source` without comments and without its `#[cfg(test)]` items: a test module
/// may reach anywhere without making the shipped code depend on it.
fn shipped_code(source: &str) -> String {
    let mut out = String::new();
    let mut skipping_depth: Option<usize> = None;
    let mut depth = 0usize;
    let mut pending_test = false;
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        let trimmed = code.trim();
        if skipping_depth.is_none() && trimmed.starts_with("#[cfg(test)]") {
            pending_test = true;
            continue;
        }
        let opens = code.matches('{').count();
        let closes = code.matches('}').count();
        if pending_test && skipping_depth.is_none() {
            // The item after the attribute: skip it whole (a one-line item ends at once).
            pending_test = false;
            if opens > closes {
                skipping_depth = Some(depth);
                depth += opens - closes;
            }
            continue;
        }
        if let Some(start) = skipping_depth {
            depth = (depth + opens).saturating_sub(closes);
            if depth <= start {
                skipping_depth = None;
            }
            continue;
        }
        depth = (depth + opens).saturating_sub(closes);
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Every path written after `crate::`, with `use crate::a::{b, c::d}` groups expanded.
pub fn crate_paths(source: &str) -> Vec<String> {
    let code = shipped_code(source);
    let mut paths = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        expand("", rest, &mut paths);
    }
    paths
}

/// Reads one path (with an optional brace group) from the start of `text` after `prefix`.
fn expand(prefix: &str, text: &str, paths: &mut Vec<String>) {
    let ident_end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let path = text[..ident_end].trim_end_matches(':');
    let joined = match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) => format!("{prefix}::{path}"),
    };
    let after = &text[ident_end..];
    if text[..ident_end].ends_with("::") && after.starts_with('{') {
        // A group: split its top-level items.
        let mut depth = 0;
        let mut start = 1;
        for (i, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        expand(&joined, after[start..i].trim_start(), paths);
                        return;
                    }
                }
                ',' if depth == 1 => {
                    expand(&joined, after[start..i].trim_start(), paths);
                    start = i + 1;
                }
                _ => {}
            }
        }
        return;
    }
    if !joined.is_empty() {
        paths.push(joined);
    }
}

/// Module dependency graph: for each module, the modules its shipped code names through
/// `crate::` (the longest known module that prefixes each path; not itself).
pub fn module_graph(sources: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<&str> = sources.keys().map(String::as_str).collect();
    let mut graph = BTreeMap::new();
    for (module, source) in sources {
        let mut targets = BTreeSet::new();
        for path in crate_paths(source) {
            let segments: Vec<&str> = path.split("::").collect();
            let target = (1..=segments.len())
                .rev()
                .map(|n| segments[..n].join("::"))
                .find(|candidate| modules.contains(candidate.as_str()))
                .unwrap_or_default();
            if &target != module {
                targets.insert(target);
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// The strongly connected components with more than one module: each is a cycle of imports.
pub fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative over the (small) graph.
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        let graph = state.graph;
        for target in graph.get(node).into_iter().flatten() {
            let target = target.as_str();
            if !graph.contains_key(target) {
                continue;
            }
            if !state.index.contains_key(target) {
                visit(state, target);
                let low = state.low[target].min(state.low[node]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(target) {
                let low = state.index[target].min(state.low[node]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member.to_string());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

/// Imports that go against the layer order: `layers` lists top-level modules from the outermost
/// (which may import every later one) to the innermost; a module may import its own layer or
/// any later one. Modules outside every layer (the root, configuration) are unconstrained as
/// targets and as sources.
pub fn backward_imports(
    graph: &BTreeMap<String, BTreeSet<String>>,
    layers: &[&str],
) -> Vec<String> {
    let rank = |module: &str| {
        let top = module.split("::").next().unwrap_or("");
        layers.iter().position(|layer| *layer == top)
    };
    let mut found = Vec::new();
    for (module, targets) in graph {
        let Some(from) = rank(module) else { continue };
        for target in targets {
            if let Some(to) = rank(target)
                && to < from
            {
                found.push(format!("{module} -> {target}"));
            }
        }
    }
    found
}

/// Every `.rs` file under `dir`, at any depth.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut directories = vec![dir.to_path_buf()];
    while let Some(directory) = directories.pop() {
        for entry in std::fs::read_dir(&directory).expect("readable source directory") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                directories.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The `(module, source)` of every `.rs` file under `src`.
pub fn read_sources(src: &Path) -> BTreeMap<String, String> {
    rust_files(src)
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(src).expect("under src");
            let text = std::fs::read_to_string(&path).expect("readable source");
            (module_of(relative), text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files
            .iter()
            .map(|(path, text)| (module_of(Path::new(path)), text.to_string()))
            .collect()
    }

    #[test]
    fn module_paths_follow_the_file_tree() {
        assert_eq!(module_of(Path::new("main.rs")), "");
        assert_eq!(module_of(Path::new("config.rs")), "config");
        assert_eq!(module_of(Path::new("service/mod.rs")), "service");
        assert_eq!(
            module_of(Path::new("service/dispatch.rs")),
            "service::dispatch"
        );
    }

    #[test]
    fn grouped_imports_and_inline_paths_are_edges_but_tests_and_comments_are_not() {
        let text = "use crate::runtime::{node::{Node, Shared}, shard};\n\
                    // crate::transport::tcp in a comment\n\
                    fn f() { crate::consensus::group::x(); }\n\
                    #[cfg(test)]\nmod tests {\n    use crate::transport::tcp;\n}\n";
        let mut paths = crate_paths(text);
        paths.sort();
        assert_eq!(
            paths,
            [
                "consensus::group::x",
                "runtime::node::Node",
                "runtime::node::Shared",
                "runtime::shard"
            ]
        );
    }

    #[test]
    fn a_cycle_and_a_backward_import_are_reported() {
        let clean = sources(&[
            ("main.rs", "use crate::transport::tcp;"),
            ("transport/tcp.rs", "use crate::service::dispatch::run;"),
            ("service/dispatch.rs", "use crate::runtime::node::Node;"),
            (
                "runtime/node.rs",
                "use crate::consensus::group::Group; use crate::config::C;",
            ),
            ("consensus/group.rs", ""),
            ("config.rs", ""),
        ]);
        let layers = ["transport", "service", "runtime", "consensus"];
        let graph = module_graph(&clean);
        assert!(cycles(&graph).is_empty());
        assert!(backward_imports(&graph, &layers).is_empty());

        // runtime reaching up into the service layer: backwards, and here also a cycle.
        let mut tangled = clean.clone();
        tangled.insert(
            "runtime::node".into(),
            "use crate::consensus::group::Group; use crate::service::dispatch::now;".into(),
        );
        let graph = module_graph(&tangled);
        assert_eq!(
            backward_imports(&graph, &layers),
            ["runtime::node -> service::dispatch"]
        );
        assert_eq!(
            cycles(&graph),
            [vec![
                "runtime::node".to_string(),
                "service::dispatch".to_string()
            ]]
        );

        // Two modules of one layer importing each other: a cycle, not a backward import.
        let mut same_layer = clean;
        same_layer.insert(
            "runtime::shard".into(),
            "use crate::runtime::node::Node;".into(),
        );
        same_layer.insert(
            "runtime::node".into(),
            "use crate::runtime::shard::spawn;".into(),
        );
        let graph = module_graph(&same_layer);
        assert!(backward_imports(&graph, &layers).is_empty());
        assert_eq!(cycles(&graph).len(), 1);
    }
}
