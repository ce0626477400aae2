//! Secrets: reading them from files (`--password-file`,
//! `--kafka-password-file`), `${VAR}` references in `--config` values, and
//! the last line of defence that keeps a secret's text out of what spate
//! writes.
//!
//! Every secret spate reads is [`register`]ed when the flags are validated
//! (main thread, before anything is contacted). From then on, every log
//! line ([`RedactingStderr`], the tracing writer; any thread), the final
//! error line ([`redact`], main thread) and a panic message
//! ([`install_panic_hook`], the panicking thread) have each registered
//! secret's text replaced by `***`. The settings themselves never print
//! secrets either (`--print-config` masks them, `Secret` prints `***`):
//! redaction is for what a server or library echoes back.

use crate::exit::Exit;
use std::borrow::Cow;
use std::io::Write;
use std::path::Path;
use std::sync::RwLock;

/// Shorter secrets are not redacted from output: replacing every `ab` in
/// every log line would garble the logs and hide nothing.
const MIN_REDACTED_LEN: usize = 4;

/// librdkafka properties whose values are secrets (matched as substrings
/// of the key, lower-cased); the same rule `--print-config` masks by.
pub(crate) const SECRET_KEY_WORDS: &[&str] = &["password", "secret", "jaas", "token", "key.pem"];

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Whether a librdkafka property's value is a secret.
pub(crate) fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    SECRET_KEY_WORDS.iter().any(|w| k.contains(w))
}

/// Remember `secret` so that no output of this process shows it.
pub(crate) fn register(secret: &str) {
    if secret.len() < MIN_REDACTED_LEN {
        return;
    }
    let mut all = SECRETS.write().unwrap_or_else(|p| p.into_inner());
    if !all.iter().any(|s| s == secret) {
        all.push(secret.to_owned());
        // Longest first, so a secret containing another is masked whole.
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with every registered secret replaced by `***`.
pub(crate) fn redact(text: &str) -> Cow<'_, str> {
    let all = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    if !all.iter().any(|s| text.contains(s.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_owned();
    for s in all.iter() {
        out = out.replace(s.as_str(), "***");
    }
    Cow::Owned(out)
}

/// The secret in `path`: its first line, without the line ending. An
/// unreadable or empty file is a usage error naming the flag and the path
/// (never the contents).
pub(crate) fn read_file(flag: &str, path: &Path) -> Result<String, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Exit::usage(format!("{flag} {}: {e}", path.display())))?;
    let line = text.lines().next().unwrap_or("").to_owned();
    if line.is_empty() {
        return Err(Exit::usage(format!(
            "{flag} {}: the file is empty (the secret is its first line)",
            path.display()
        )));
    }
    register(&line);
    Ok(line)
}

/// Why a `${VAR}` reference could not be replaced.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InterpolateError {
    /// The variable is not set (or not valid Unicode).
    #[error("references ${{{0}}}, which is not set in the environment")]
    Unset(String),
    /// `${` without a closing `}` or with an empty name.
    #[error("has a malformed ${{...}} reference (write $${{ for a literal ${{)")]
    Malformed,
}

/// `value` with every `${NAME}` replaced by the environment variable
/// `NAME` (`$${` stands for a literal `${`). An unset variable is an
/// error naming it; an empty one is allowed.
pub(crate) fn interpolate(value: &str) -> Result<String, InterpolateError> {
    interpolate_with(value, |name| std::env::var(name).ok())
}

fn interpolate_with(
    value: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, InterpolateError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after.find('}').ok_or(InterpolateError::Malformed)?;
            let name = &after[..end];
            let valid =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(InterpolateError::Malformed);
            }
            let v = lookup(name).ok_or_else(|| InterpolateError::Unset(name.to_owned()))?;
            out.push_str(&v);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The tracing writer: stderr, each formatted event with the registered
/// secrets masked. The fmt layer formats an event into one buffer and
/// writes it at once; this writer collects it and writes it on drop.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RedactingStderr;

/// One event's bytes, written to stderr (redacted) when dropped.
pub(crate) struct RedactedEvent(Vec<u8>);

impl Write for RedactedEvent {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedEvent {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        // Nowhere to report a failed write to stderr.
        let _ = std::io::stderr().write_all(redact(&text).as_bytes());
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactingStderr {
    type Writer = RedactedEvent;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedEvent(Vec::with_capacity(256))
    }
}

/// The text of a panic, as the default hook prints it, secrets masked.
fn panic_text(payload: &(dyn std::any::Any + Send), location: Option<String>) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "Box<dyn Any>".to_owned());
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("<unnamed>");
    let at = location.map(|l| format!(" at {l}")).unwrap_or_default();
    redact(&format!("thread '{name}' panicked{at}:\n{message}\n")).into_owned()
}

/// Replace the panic hook with one that prints the default hook's text
/// with secrets masked (panics inside spate's threads are still caught
/// and reported by the runtime as before).
pub(crate) fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(ToString::to_string);
        let _ = std::io::stderr().write_all(panic_text(info.payload(), location).as_bytes());
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_replaced_and_an_unset_one_is_named() {
        let env = |n: &str| match n {
            "KAFKA_PASSWORD" => Some("pw".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        assert_eq!(
            interpolate_with("a${KAFKA_PASSWORD}b${EMPTY}c", env).unwrap(),
            "apwbc"
        );
        assert_eq!(
            interpolate_with("$5 and $${X}", env).unwrap(),
            "$5 and ${X}"
        );
        assert_eq!(
            interpolate_with("${NOPE}", env),
            Err(InterpolateError::Unset("NOPE".into()))
        );
        let e = InterpolateError::Unset("NOPE".into()).to_string();
        assert_eq!(e, "references ${NOPE}, which is not set in the environment");
        assert_eq!(
            interpolate_with("${open", env),
            Err(InterpolateError::Malformed)
        );
        assert_eq!(
            interpolate_with("${a-b}", env),
            Err(InterpolateError::Malformed)
        );
    }

    #[test]
    fn registered_secrets_are_masked_everywhere() {
        register("s3cr3t-redact-me");
        register("ab");
        assert_eq!(redact("pw=s3cr3t-redact-me!"), "pw=***!");
        assert_eq!(redact("ab stays"), "ab stays");
        let payload: Box<dyn std::any::Any + Send> = Box::new(String::from("bad s3cr3t-redact-me"));
        let text = panic_text(payload.as_ref(), Some("src/x.rs:1:2".into()));
        assert!(
            text.ends_with("panicked at src/x.rs:1:2:\nbad ***\n"),
            "{text}"
        );
    }

    #[test]
    fn a_secret_file_gives_its_first_line() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("spate-secret-{}", std::process::id()));
        std::fs::write(&path, "hunter2-file\nignored\n").unwrap();
        assert_eq!(read_file("--password-file", &path).unwrap(), "hunter2-file");
        assert_eq!(redact("x hunter2-file"), "x ***");
        std::fs::write(&path, "\n").unwrap();
        let e = read_file("--password-file", &path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(e.code(), 2);
        assert!(e.message().contains("is empty"), "{}", e.message());
        assert!(read_file("--password-file", Path::new("/nonexistent/pw"))
            .unwrap_err()
            .message()
            .starts_with("--password-file /nonexistent/pw: "));
    }
}
