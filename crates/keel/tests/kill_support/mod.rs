//! What the SIGKILL tests share: killing a child process that prints what
//! it acknowledged, and collecting what it printed.

use std::io::Read;
use std::process::Child;
use std::time::Duration;

/// Let `child` run for `after`, SIGKILL it, and return what it wrote on
/// stdout. Fails if the child panicked or exited before the kill.
pub fn kill_and_collect(mut child: Child, after: Duration) -> String {
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).unwrap();
        s
    });
    std::thread::sleep(after);
    // SIGKILL: no destructor, no flush, no chance to finish a write.
    let _ = child.kill();
    let status = child.wait().unwrap();
    let out = reader.join().unwrap();
    let err = err_reader.join().unwrap();
    assert!(
        !status.success() && !err.contains("panicked"),
        "the child failed or exited before the kill ({status}): {err}"
    );
    out
}
