//! What `meshflow bench` shows while it runs: progress bars on a terminal, plain lines on
//! stderr otherwise.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// Progress bars on a terminal; plain lines otherwise.
pub struct Ui {
    mp: MultiProgress,
    tty: bool,
}

impl Ui {
    pub fn new() -> Ui {
        let tty = std::io::stderr().is_terminal();
        let mp = if tty {
            MultiProgress::new()
        } else {
            MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        };
        Ui { mp, tty }
    }

    pub fn bar(&self, len: u64, msg: &str) -> ProgressBar {
        let pb = self.mp.add(ProgressBar::new(len));
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {msg:<28} [{bar:30}] {pos}/{len} {elapsed_precise}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_message(msg.to_string());
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    }

    pub fn say(&self, line: &str) {
        if self.tty {
            let _ = self.mp.println(line);
        } else {
            eprintln!("{line}");
        }
    }
}

impl Default for Ui {
    fn default() -> Ui {
        Ui::new()
    }
}
