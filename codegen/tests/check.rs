//! The committed generated/ must match spec/.
#[test]
fn generated_is_up_to_date() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let outputs = iggy_codegen::generate(&root).expect("spec parses and validates");
    let stale = iggy_codegen::stale(&outputs);
    assert!(stale.is_empty(), "stale files, run `cargo codegen`: {stale:?}");
}

#[test]
fn overlapping_offsets_are_reported_with_file_and_line() {
    let mut m = iggy_codegen::Model::default();
    let text = "struct A fixed=8\n  0 a u64\n  4 b u32\nend\n";
    iggy_codegen::parse_file("t.spec", text, &mut m).unwrap();
    let d: Vec<String> = m.validate().iter().map(|d| d.to_string()).collect();
    assert_eq!(d, vec!["t.spec:3: field `b` at 4 overlaps the previous field ending at 8"], "overlap");
    let mut m = iggy_codegen::Model::default();
    iggy_codegen::parse_file("u.spec", "struct B fixed=16\n  0 a u64\n  12 b u32\nend\nstruct B fixed=1\n  0 c nope\nend\n", &mut m).unwrap();
    let d: Vec<String> = m.validate().iter().map(|d| d.to_string()).collect();
    assert_eq!(d, vec![
        "u.spec:5: duplicate name `B` (first at line 1)",
        "u.spec:3: gap before `b`: 8..12",
        "u.spec:6: unknown type `nope`",
        "u.spec:5: fields cover 0 bytes, fixed=1",
    ]);
}

#[test]
fn a_command_reusing_a_retired_code_is_rejected() {
    let mut m = iggy_codegen::Model::default();
    let text = "retired 14 old\ncommand 1 ping op=NonReplicated class=none rf=no perm=none req=A resp=A\ncommand 14 again\ncommand 1 dup\n";
    iggy_codegen::parse_file("c.spec", text, &mut m).unwrap();
    let d: Vec<String> = m.validate().iter().map(|d| d.to_string()).collect();
    assert_eq!(d, vec![
        "c.spec:3: command `again` reuses retired code 14 (retired at c.spec:1)",
        "c.spec:4: duplicate command code 1 (first at line 2)",
    ]);
}

#[test]
fn const_rows_are_checked() {
    let mut m = iggy_codegen::Model::default();
    let text = "const A u8 256\nconst B string 5\nconst C bytes[4] \"abc\"\nconst A u16 1\nconst D u64 0x10\nconst E string \"ok\"\n";
    iggy_codegen::parse_file("k.spec", text, &mut m).unwrap();
    let d: Vec<String> = m.validate().iter().map(|d| d.to_string()).collect();
    assert_eq!(d, vec![
        "k.spec:1: const `A`: `256` is not a u8 value",
        "k.spec:2: const `B`: a string value is quoted",
        "k.spec:3: const `C`: a bytes[4] value is 4 quoted ASCII characters",
        "k.spec:4: duplicate const `A` (first at line 1)",
    ]);
}

#[test]
fn option_rows_are_checked() {
    let mut m = iggy_codegen::Model::default();
    let text = "enum OptionsScope u8\n  1 Topic\nend\nconst OPTION_KIND_UINT32 u8 11\nconst OPTION_FLAG_UPDATABLE u8 1\n\
        option Topic a uint32 default=7 flags=updatable\n\
        option Topic a uint32 default=8\n\
        option Topic b uint32 default=4294967296\n\
        option Topic c string default=x\n\
        option Topic d uint32 default=1 flags=hidden\n\
        option Queue e uint32 default=1\n";
    iggy_codegen::parse_file("o.spec", text, &mut m).unwrap();
    let d: Vec<String> = m.validate().iter().map(|d| d.to_string()).collect();
    assert_eq!(d, vec![
        "o.spec:7: duplicate option `a` in scope Topic (first at line 6)",
        "o.spec:8: default `4294967296` is not a uint32 value",
        "o.spec:9: option kind `string`: no const OPTION_KIND_STRING in this file",
        "o.spec:10: option flag: no const OPTION_FLAG_HIDDEN in this file",
        "o.spec:11: option scope `Queue` is not an OptionsScope variant",
    ]);
}
