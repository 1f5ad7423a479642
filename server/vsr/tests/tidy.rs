//! Tidy: the core must stay sans-IO.
/// The core must stay sans-IO: no runtime, no filesystem, no sockets, no clock.
#[test]
fn sources_are_sans_io() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let banned = [
        ["com", "pio"].concat(),
        ["std::", "fs"].concat(),
        ["std::", "net"].concat(),
        ["Instant::", "now"].concat(),
        ["SystemTime::", "now"].concat(),
    ];
    let mut files = vec![root.join("Cargo.toml")];
    let mut directories = vec![root.join("src")];
    while let Some(directory) = directories.pop() {
        for item in std::fs::read_dir(directory).unwrap() {
            let path = item.unwrap().path();
            if path.is_dir() {
                directories.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 5);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for word in &banned {
            assert!(
                !text.contains(word.as_str()),
                "{} contains {word}",
                file.display()
            );
        }
    }
}
