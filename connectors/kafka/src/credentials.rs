//! SASL credentials replaced while the clients run (`--kafka-password-file`
//! rotating): librdkafka's `rd_kafka_sasl_set_credentials`, which the
//! client uses the next time it authenticates to a broker (a new or re-made
//! connection); connections already open stay as they are.
//!
//! A [`SaslCredentials`] holds its client weakly: it never keeps a
//! consumer or producer alive past its owner, and setting the credentials
//! of a client that is gone does nothing. Called from any thread (librdkafka
//! guards the credentials with the client's lock).

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{Producer, ThreadedProducer};
use std::ffi::{CStr, CString};
use std::sync::{Arc, Weak};

/// A librdkafka client whose SASL credentials can be replaced.
pub trait NativeClient: Send + Sync {
    /// The client's handle, valid while `self` is.
    fn native(&self) -> *mut rdsys::rd_kafka_t;
}

impl<C: rdkafka::consumer::ConsumerContext + 'static> NativeClient for BaseConsumer<C> {
    fn native(&self) -> *mut rdsys::rd_kafka_t {
        self.client().native_ptr()
    }
}

impl<C: rdkafka::producer::ProducerContext + 'static> NativeClient for ThreadedProducer<C> {
    fn native(&self) -> *mut rdsys::rd_kafka_t {
        self.client().native_ptr()
    }
}

/// One client's SASL credentials, settable while it runs.
#[derive(Clone)]
pub struct SaslCredentials {
    client: Weak<dyn NativeClient>,
    /// What the client is, for logs ("consumer", "dead-letter producer").
    pub what: &'static str,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("what", &self.what)
            .finish()
    }
}

impl SaslCredentials {
    pub(crate) fn of(client: &Arc<dyn NativeClient>, what: &'static str) -> Self {
        Self {
            client: Arc::downgrade(client),
            what,
        }
    }

    /// Use `username` and `password` from the client's next authentication
    /// on. `Ok(false)`: the client is gone (nothing to set).
    ///
    /// # Errors
    /// A NUL byte in either, or librdkafka refused them: its message. (For
    /// a client that does not use SASL PLAIN or SCRAM, librdkafka stores
    /// them and nothing uses them.)
    pub fn set(&self, username: &str, password: &str) -> Result<bool, String> {
        let Some(client) = self.client.upgrade() else {
            return Ok(false);
        };
        let user =
            CString::new(username).map_err(|_| "the user name holds a NUL byte".to_owned())?;
        let pass =
            CString::new(password).map_err(|_| "the password holds a NUL byte".to_owned())?;
        // SAFETY: the client is alive (held by `client` for the call); the
        // strings outlive it (librdkafka copies them).
        let err = unsafe {
            rdsys::rd_kafka_sasl_set_credentials(client.native(), user.as_ptr(), pass.as_ptr())
        };
        if err.is_null() {
            return Ok(true);
        }
        // SAFETY: a non-null error is ours to read and destroy, once.
        let message = unsafe {
            let m = CStr::from_ptr(rdsys::rd_kafka_error_string(err))
                .to_string_lossy()
                .into_owned();
            rdsys::rd_kafka_error_destroy(err);
            m
        };
        Err(message)
    }
}
