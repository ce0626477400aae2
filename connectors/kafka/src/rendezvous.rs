//! A question asked from inside a blocking call and answered by the thread
//! that made the call: how a rebalance callback reaches the runtime's
//! `Revoker` without the revoker ever leaving the controller thread.
//!
//! [`call_serving`] runs the blocking call (the consumer poll) on a scoped,
//! named thread and, on the calling thread, answers every [`Request`] that
//! arrives until the call returns. Inside the call, [`ask`] sends a
//! question and blocks on the answer, bounded by a wait. Nothing borrowed
//! crosses a thread: questions and answers are owned values on channels.

use crossbeam_channel::{bounded, select, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// A question and where its answer goes.
pub(crate) struct Request<Q, A> {
    pub(crate) question: Q,
    reply: Sender<A>,
}

impl<Q, A> Request<Q, A> {
    /// Answer the asker; a no-op if it stopped waiting.
    pub(crate) fn answer(self, answer: A) {
        let _ = self.reply.send(answer);
    }
}

/// Why [`ask`] got no answer.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AskError {
    /// Nobody serves requests (not inside [`call_serving`]).
    #[error("nobody serves the request")]
    NoServer,
    /// The server did not answer within the wait.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

/// Ask `question` on `to` and wait up to `wait` for the answer.
pub(crate) fn ask<Q, A>(
    to: &Sender<Request<Q, A>>,
    question: Q,
    wait: Duration,
) -> Result<A, AskError> {
    let (reply, answer) = bounded(1);
    to.send(Request { question, reply })
        .map_err(|_| AskError::NoServer)?;
    answer.recv_timeout(wait).map_err(|e| match e {
        RecvTimeoutError::Timeout => AskError::TimedOut(wait),
        RecvTimeoutError::Disconnected => AskError::NoServer,
    })
}

/// Run `call` on a scoped thread named `name` and serve, on this thread,
/// every request that arrives on `requests` until it returns. Requests
/// still queued afterwards (their asker stopped waiting) are served too,
/// so the server's state stays whole; their answers reach nobody.
///
/// # Errors
/// The thread could not be spawned, or `call` panicked.
pub(crate) fn call_serving<T: Send, Q, A>(
    name: &str,
    call: impl FnOnce() -> T + Send,
    requests: &Receiver<Request<Q, A>>,
    mut serve: impl FnMut(Request<Q, A>),
) -> Result<T, String> {
    let result = std::thread::scope(|scope| {
        let (done_tx, done) = bounded(1);
        let caller = std::thread::Builder::new()
            .name(name.to_string())
            .spawn_scoped(scope, move || {
                let _ = done_tx.send(call());
            })
            .map_err(|e| format!("spawning thread {name}: {e}"))?;
        let returned = loop {
            select! {
                recv(requests) -> request => {
                    if let Ok(request) = request {
                        serve(request);
                    }
                }
                recv(done) -> returned => break returned,
            }
        };
        match (caller.join(), returned) {
            (Ok(()), Ok(value)) => Ok(value),
            _ => Err(format!("thread {name} panicked")),
        }
    });
    while let Ok(request) = requests.try_recv() {
        serve(request);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;
    use std::sync::{Arc, Mutex};

    #[test]
    fn the_call_gets_its_answer_from_the_calling_thread_before_it_goes_on() {
        let (tx, rx) = unbounded::<Request<u32, u32>>();
        let order = Arc::new(Mutex::new(Vec::new()));
        let in_call = order.clone();
        let me = std::thread::current().id();
        let out = call_serving(
            "asker",
            move || {
                assert_ne!(std::thread::current().id(), me, "the call runs elsewhere");
                let answer = ask(&tx, 20, Duration::from_secs(10));
                in_call.lock().unwrap().push("call continues");
                answer
            },
            &rx,
            |request| {
                assert_eq!(std::thread::current().id(), me, "served on the caller");
                order.lock().unwrap().push("served");
                let q = request.question;
                request.answer(q + 1);
            },
        );
        assert_eq!(out, Ok(Ok(21)));
        assert_eq!(*order.lock().unwrap(), vec!["served", "call continues"]);
    }

    #[test]
    fn a_slow_answer_times_out_and_the_request_is_still_served_late() {
        let (tx, rx) = unbounded::<Request<u32, u32>>();
        let (gate_tx, gate) = unbounded::<()>();
        let mut served = Vec::new();
        let out = call_serving(
            "asker",
            move || {
                let answer = ask(&tx, 7, Duration::from_millis(20));
                drop(gate_tx);
                answer
            },
            &rx,
            |request| {
                // Answer only once the asker gave up.
                let _ = gate.recv();
                served.push(request.question);
                request.answer(0);
            },
        );
        assert_eq!(out, Ok(Err(AskError::TimedOut(Duration::from_millis(20)))));
        assert_eq!(served, vec![7]);
    }

    #[test]
    fn asking_without_a_server_fails_at_once() {
        let (tx, rx) = unbounded::<Request<u32, u32>>();
        drop(rx);
        assert_eq!(
            ask(&tx, 1, Duration::from_secs(10)),
            Err(AskError::NoServer)
        );
    }

    #[test]
    fn a_panicking_call_is_an_error_not_a_panic() {
        let (_tx, rx) = unbounded::<Request<u32, u32>>();
        let out: Result<(), String> = call_serving("boom", || panic!("boom"), &rx, |_| {});
        assert!(out.unwrap_err().contains("panicked"));
    }
}
