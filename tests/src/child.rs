//! Scenarios that need a process of their own (a process-wide recorder or
//! subscriber, the lease keeper's one thread): the test runs its own test
//! binary again, that test alone, with a marker variable set, and the child
//! runs the scenario.

use std::process::Command;

/// What a child prints once its scenario passed.
const PASSED: &str = "child scenario passed";

/// The variable that tells a child apart.
const MARKER: &str = "IDEM_TEST_CHILD";

/// In the test process, runs the test `name` (its path in the test binary,
/// as `--exact` takes it) again in a child process and asserts that its
/// scenario passed, returning `false`. In that child, runs `scenario`,
/// prints that it passed, and returns `true`.
pub fn run_in_child(name: &str, scenario: impl FnOnce()) -> bool {
    if std::env::var(MARKER).is_ok_and(|child| child == name) {
        scenario();
        println!("{PASSED}");
        return true;
    }
    let output = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(MARKER, name)
        .output()
        .expect("running the child process");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && stdout.contains(PASSED), "the child process failed:\n{stdout}\n{stderr}");
    false
}
