fn main() {
    std::process::exit(stablemq::cli::main());
}
