//! `syncline`: the server binary.

fn main() {
    println!("syncline {}", env!("CARGO_PKG_VERSION"));
}
