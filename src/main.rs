/// mimalloc rather than glibc malloc: messages are allocated on one tokio
/// worker and freed on another, which glibc serves with arena locks (a
/// profile of the publish/deliver path showed ~8% of the broker's time in
/// malloc's futex); mimalloc frees across threads without a lock.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(stablemq::cli::main());
}
