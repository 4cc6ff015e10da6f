//! Standard output that a closed pipe does not crash: `untether … | head` ends quietly with
//! status 0 once `head` has read what it wanted, instead of a panic (Rust's `print!` panics on
//! EPIPE, because Rust ignores SIGPIPE). Every write to stdout in this crate goes through
//! [`out!`] / [`outln!`] or returns its `io::Error` to `main`, which treats a broken pipe the
//! same way ([`is_broken_pipe`]).

use std::io::Write;

/// Writes `args` to standard output and flushes; a reader that went away ends the process
/// (status 0, no message), another write error ends it with a message (status 1).
pub fn write(args: std::fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("untether: error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// Whether `e` (or one of its causes) is a write to a pipe whose reader is gone.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `print!` that ends quietly on a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*)) };
}

/// `println!` that ends quietly on a closed pipe.
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}
