//! A spinner for steps that may take a while (compiling a kernel): shown on standard error only
//! when it is a terminal and only once the step has taken longer than [`SHOW_AFTER`], so quick
//! steps and piped runs print nothing.

use std::sync::mpsc;
use std::time::Duration;

/// A step shorter than this shows nothing.
pub const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Runs `step`, with a spinner saying `what` on a terminal if it outlasts [`SHOW_AFTER`]; the
/// spinner is cleared when the step ends, whatever it returns.
pub fn during<T>(what: &str, step: impl FnOnce() -> T) -> T {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return step();
    }
    let (done, wait) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            if wait.recv_timeout(SHOW_AFTER).is_ok() {
                return; // finished in time: nothing shown
            }
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            bar.set_message(what.to_string());
            bar.enable_steady_tick(Duration::from_millis(120));
            // Until the step ends (its sender dropped or sent).
            let _ = wait.recv();
            bar.finish_and_clear();
        });
        let out = step();
        let _ = done.send(());
        out
    })
}
