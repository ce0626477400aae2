//! The process exit: its code and the one line that explains it.
//!
//! Every subcommand returns `Result<(), Exit>`; `main` prints
//! `spate: error: <message>` on stderr and exits with the code: 0
//! completed, 1 the pipeline (or a service) failed, 2 usage or
//! configuration error. Used on the main thread only.

/// A process exit: code and the one line that explains it.
#[derive(Debug)]
pub struct Exit {
    code: i32,
    message: String,
}

impl Exit {
    /// A usage or configuration error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }

    /// A pipeline failure (exit 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }

    /// The same exit, its message naming pipeline `name` when the process
    /// runs `several`.
    #[must_use]
    pub fn in_pipeline(self, name: &str, several: bool) -> Self {
        if !several {
            return self;
        }
        Self {
            code: self.code,
            message: format!("pipeline {name}: {}", self.message),
        }
    }

    /// The process exit code.
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The explanation, without the `spate: error: ` prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn codes_and_pipeline_names() {
        assert_eq!(Exit::usage("u").code(), 2);
        assert_eq!(Exit::failed("f").code(), 1);
        let e = Exit::failed("down").in_pipeline("a", true);
        assert_eq!((e.code(), e.message()), (1, "pipeline a: down"));
        let e = Exit::usage("bad").in_pipeline("a", false);
        assert_eq!(e.message(), "bad");
    }
}
