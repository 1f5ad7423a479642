#[test]
fn rest_must_be_last_and_types_must_exist() {
    let mut m = iggy_codegen::Model::default();
    let text = "struct A\n  tail rest\n  x u8\n  y wat\nend\n";
    iggy_codegen::parse_file("v.spec", text, &mut m).unwrap();
    let d: Vec<String> = m.validate().iter().map(|d| d.to_string()).collect();
    assert_eq!(d, vec!["v.spec:2: `tail` consumes the rest and must be last", "v.spec:4: unknown type `wat`"]);
}
