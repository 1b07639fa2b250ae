//! Progress on stderr for the CLI's long-running commands (`ingest`,
//! `rebuild`, `compact`, `backup`, `restore`, `verify`, `eval`, `bench`).
//!
//! A [`Progress`] draws only when stderr is a terminal that understands
//! cursor movement (`TERM` set, and not `dumb`) and `--quiet` was not
//! given; otherwise it is hidden and every call on it costs next to nothing,
//! so pipes, files and scripts see no progress noise at all. Work that
//! reports how far it got (records ingested, cases evaluated) gets a bar with
//! counts, rate and ETA; work the engine does in one call without callbacks
//! (rebuild, compact, restore, verify, backup) gets a spinner with the
//! elapsed time.
//!
//! A bar is erased when it finishes or is dropped (an error path included),
//! and commands finish it before they write results, so what is left on the
//! terminal is the result alone.
//!
//! This module must never write to stdout, and never carry anything a user
//! needs once the command ended: results, warnings and errors are printed
//! by the commands, not here.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};

/// How often an active bar or spinner is redrawn even when nothing advanced
/// (the spinner turns, elapsed time and ETA move on).
const TICK_INTERVAL_MS: u64 = 120;
/// Redraws per second at most.
const DRAW_RATE_HZ: u8 = 10;

/// A progress bar or spinner on stderr, or nothing (see the module doc).
/// Clones share one bar (writer threads of a benchmark advance it
/// together); the bar is erased when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// Whether progress is drawn: stderr is a capable terminal and not
    /// `--quiet`.
    pub fn is_shown(quiet: bool) -> bool {
        !quiet && std::io::stderr().is_terminal() && !ProgressDrawTarget::stderr().is_hidden()
    }

    /// Progress that draws nothing.
    pub fn hidden() -> Self {
        Progress {
            bar: ProgressBar::hidden(),
        }
    }

    /// A bar over `total` items, e.g. `ingest [=====>   ] 12,000/20,000
    /// records  9,812/s  ETA 1s`, then the message, cut to the terminal's
    /// width. `unit` names the items (`records`).
    pub fn counter(
        quiet: bool,
        label: impl Into<Cow<'static, str>>,
        total: u64,
        unit: &'static str,
    ) -> Self {
        if !Self::is_shown(quiet) {
            return Self::hidden();
        }
        let style = ProgressStyle::with_template(&format!(
            "{{spinner}} {{prefix}} [{{bar:24}}] {{human_pos}}/{{human_len}} {unit}  {{per_sec:0}}  ETA {{eta}}  {{wide_msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        Self::start(ProgressBar::new(total), style, label.into())
    }

    /// A spinner with the elapsed time, for work that reports no progress:
    /// e.g. `rebuild: rebuilding derived state from the log  3s`.
    pub fn spinner(quiet: bool, label: impl Into<Cow<'static, str>>) -> Self {
        if !Self::is_shown(quiet) {
            return Self::hidden();
        }
        let style = ProgressStyle::with_template("{spinner} {prefix}  {elapsed}  {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        Self::start(ProgressBar::no_length(), style, label.into())
    }

    fn start(bar: ProgressBar, style: ProgressStyle, label: Cow<'static, str>) -> Self {
        let bar = bar
            .with_finish(ProgressFinish::AndClear)
            .with_style(style)
            .with_prefix(label);
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(DRAW_RATE_HZ));
        // Draw at once: even work shorter than one tick shows what it does.
        bar.tick();
        bar.enable_steady_tick(Duration::from_millis(TICK_INTERVAL_MS));
        Progress { bar }
    }

    /// Whether this progress draws anything.
    pub fn is_drawn(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Advances the count by `n_items`.
    pub fn inc(&self, n_items: u64) {
        self.bar.inc(n_items);
    }

    /// Sets the count to `n_items` done.
    pub fn set_position(&self, n_items: u64) {
        self.bar.set_position(n_items);
    }

    /// A short note after the counts (the current phase, say).
    pub fn set_message(&self, msg: impl Into<Cow<'static, str>>) {
        self.bar.set_message(msg);
    }

    /// Prints a line above the bar (shown only when the bar is drawn: it is
    /// progress too, not a result).
    pub fn note(&self, line: impl AsRef<str>) {
        if self.is_drawn() {
            self.bar.println(line);
        }
    }

    /// Erases the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_progress_is_hidden_and_harmless() {
        for p in [
            Progress::counter(true, "ingest", 10, "records"),
            Progress::spinner(true, "rebuild"),
            Progress::hidden(),
        ] {
            assert!(!p.is_drawn());
            p.inc(3);
            p.set_position(7);
            p.set_message("phase");
            p.note("not printed");
            p.finish();
        }
    }
}
