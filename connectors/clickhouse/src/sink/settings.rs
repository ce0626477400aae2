//! The insert settings spate relies on, chosen once per sink from the
//! server version at start (`SinkPool::prepare`) and sent with every
//! insert. Pure.
//!
//! Every setting that decides when a 200 arrives is set explicitly, so a
//! server or user profile cannot change what an acknowledgement means:
//! - `async_insert=0` (>= 21.11, [`ServerFeatures::async_insert`]): recent
//!   servers turn asynchronous inserts on by default, and an asynchronous
//!   insert's 200 would not mean the rows are in the table.
//! - `wait_end_of_query=1` (every version: an HTTP-interface parameter,
//!   parsed by `HTTPHandler` long before 18.16): the server buffers its
//!   answer until the query finished, so no 200 status can be sent before
//!   an exception at the end of the insert.

use crate::schema::ServerFeatures;

/// The settings to send with every insert to a server with `features`.
#[must_use]
pub(crate) fn insert_settings(features: ServerFeatures) -> Vec<(String, String)> {
    let mut s = Vec::new();
    if features.async_insert {
        s.push(("async_insert".to_string(), "0".to_string()));
    }
    s.push(("wait_end_of_query".to_string(), "1".to_string()));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(version: &str) -> Vec<(String, String)> {
        insert_settings(ServerFeatures::from_version(version).unwrap())
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn per_version() {
        let old = pairs(&[("wait_end_of_query", "1")]);
        let new = pairs(&[("async_insert", "0"), ("wait_end_of_query", "1")]);
        assert_eq!(settings("18.16.1"), old);
        assert_eq!(settings("21.10.6.2"), old);
        assert_eq!(settings("21.11.1.8636"), new);
        assert_eq!(settings("24.3.1.2672"), new);
        assert_eq!(settings("25.8.1.1"), new);
    }
}
