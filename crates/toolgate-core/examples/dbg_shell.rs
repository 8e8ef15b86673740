fn main() {
    let line = std::env::args().nth(1).unwrap_or_default();
    println!("{:#?}", toolgate_core::shell::analyze(&line));
}
