//! Generator output and diagnostics pinned with insta over the spec cases in `tests/cases/`:
//! each `<case>.spec` is loaded alone; an invalid one snapshots its diagnostics (each naming
//! `spec/<case>.spec:<line>`), a valid one its generated files.
use std::path::Path;

fn case(name: &str) -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases").join(format!("{name}.spec"));
    vec![(format!("{name}.spec"), std::fs::read_to_string(path).expect("case file"))]
}

fn diagnostics(name: &str) -> String {
    match iggy_codegen::build(&case(name)) {
        Ok(_) => panic!("{name}.spec should be rejected"),
        Err(diags) => {
            let text: Vec<String> = diags.iter().map(ToString::to_string).collect();
            for d in &diags {
                assert!(d.file.ends_with(&format!("{name}.spec")) && d.line > 0, "{d} names no file:line");
            }
            text.join("\n")
        }
    }
}

macro_rules! diag_case {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            insta::assert_snapshot!(stringify!($name), diagnostics(stringify!($name)));
        }
    )*};
}

diag_case!(
    duplicate_codes,
    duplicate_names,
    overlapping_offsets,
    gapped_offsets,
    size_mismatch,
    unknown_type,
    since_above_current,
    retired_reuse,
    bad_example,
    bad_enum_size,
);

#[test]
fn small_output() {
    let out = iggy_codegen::build(&case("small")).expect("small.spec is valid");
    let mut text = String::new();
    for (path, body) in out {
        text.push_str(&format!("==> {path} <==\n{body}\n"));
    }
    insta::assert_snapshot!("small_output", text);
}
