//! The verdict of `spate check`: every problem that would make `spate run`
//! fail, in the order found, each printed as a `FAIL:` line when found,
//! and the exit they make together (2 if any is the configuration's
//! fault, else 1 if any, else 0).
//!
//! Filled and read on the calling thread.

use crate::exit::Exit;

/// What would make `run` fail, in the order found.
#[derive(Default)]
pub(super) struct Verdict {
    /// The configuration is at fault (exit 2).
    pub config: Vec<String>,
    /// A service or the data is at fault (exit 1).
    pub failed: Vec<String>,
}

impl Verdict {
    pub fn config(&mut self, problem: String) {
        println!("  FAIL: {problem}");
        if !self.config.contains(&problem) {
            self.config.push(problem);
        }
    }

    pub fn failed(&mut self, problem: String) {
        println!("  FAIL: {problem}");
        self.failed.push(problem);
    }

    pub fn finish(self) -> Result<(), Exit> {
        let problems: Vec<&String> = self.config.iter().chain(&self.failed).collect();
        let Some(first) = problems.first() else {
            println!(
                "\nOK: `spate run` with these flags would start and insert the sampled messages"
            );
            return Ok(());
        };
        println!("\nFAILED: {} problem(s):", problems.len());
        for p in &problems {
            println!("  - {p}");
        }
        let message = match problems.len() {
            1 => (*first).clone(),
            n => format!("{first} (and {} more problem(s), see the report)", n - 1),
        };
        Err(if self.config.is_empty() {
            Exit::failed(message)
        } else {
            Exit::usage(message)
        })
    }
}
