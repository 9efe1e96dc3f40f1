//! Sends requests to one API server and records what came back, normalised, as a [`Transcript`];
//! [`compare`] lines two transcripts of the same scenario up step by step.

use std::time::Duration;

use futures::StreamExt;
use kube::{api::WatchEvent, client::Body};
use serde_json::{Value, json};

use crate::{
    diff::{Difference, diff},
    normalize::Normalizer,
};

/// One recorded request and its normalised outcome.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// What the step checks, e.g. `configmap: update with a stale resourceVersion`.
    pub step: String,
    /// `METHOD path?query`.
    pub request: String,
    /// The HTTP status Kubernetes' documented semantics call for.
    pub expected: u16,
    /// The HTTP status received (for a watch: 200 when the stream opened).
    pub status: u16,
    /// The normalised response body; for a watch, the array of `{type, object}` events.
    pub body: Value,
}

impl Exchange {
    /// True when the server answered with the status Kubernetes' semantics call for.
    pub fn as_expected(&self) -> bool {
        self.status == self.expected
    }
}

/// Everything one server answered during a scenario.
#[derive(Debug, Default)]
pub struct Transcript {
    pub exchanges: Vec<Exchange>,
}

impl Transcript {
    /// Exchanges whose status is not the one Kubernetes' semantics call for.
    pub fn unexpected(&self) -> impl Iterator<Item = &Exchange> {
        self.exchanges.iter().filter(|e| !e.as_expected())
    }
}

/// Transport-level failure (the server could not be reached or the body not read); HTTP error
/// statuses are outcomes to record, not errors.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("step {step:?}: building request: {source}")]
    Build {
        step: String,
        source: kube::core::request::Error,
    },
    #[error("step {step:?}: {request}: {source}")]
    Transport {
        step: String,
        request: String,
        source: kube::Error,
    },
    #[error("scenario input: {message}")]
    Scenario { message: String },
}

/// A client plus the transcript being recorded.
pub struct Session {
    client: kube::Client,
    norm: Normalizer,
    transcript: Transcript,
}

/// How long a poll for an asynchronous effect (garbage collection, namespace deletion) may take.
/// The real garbage collector picks up a CRD's kind only on its next discovery sync (every 30 s).
pub const POLL_DEADLINE: Duration = Duration::from_secs(120);
const POLL_INTERVAL: Duration = Duration::from_millis(200);

impl Session {
    pub fn new(client: kube::Client) -> Self {
        Session {
            client,
            norm: Normalizer::new(),
            transcript: Transcript::default(),
        }
    }

    pub fn into_transcript(self) -> Transcript {
        self.transcript
    }

    /// Sends `request` and returns `(status, raw body)` without recording it (set-up and polls).
    pub async fn call(
        &self,
        step: &str,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<(u16, Value), SendError> {
        let request = request.map_err(|source| SendError::Build {
            step: step.to_owned(),
            source,
        })?;
        let line = describe(&request);
        let transport = |source| SendError::Transport {
            step: step.to_owned(),
            request: line.clone(),
            source,
        };
        let response = self
            .client
            .send(request.map(Body::from))
            .await
            .map_err(transport)?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect_bytes().await.map_err(transport)?;
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok((status, body))
    }

    /// Sends and records one request; returns the raw (not normalised) body for later steps.
    pub async fn send(
        &mut self,
        step: &str,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        expected: u16,
    ) -> Result<Value, SendError> {
        let line = request.as_ref().map(describe).unwrap_or_default();
        let (status, body) = self.call(step, request).await?;
        self.record(step, line, expected, status, &body);
        Ok(body)
    }

    /// Polls `request` until `done(status, body)` holds or [`POLL_DEADLINE`] passes, then records
    /// the last answer once (expected = `expected`; a timeout shows up as that status mismatch or,
    /// when the status matched but the body never did, as status 0).
    pub async fn poll_until(
        &mut self,
        step: &str,
        request: impl Fn() -> Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        expected: u16,
        done: impl Fn(u16, &Value) -> bool,
    ) -> Result<Value, SendError> {
        let deadline = tokio::time::Instant::now() + POLL_DEADLINE;
        let line = request().as_ref().map(describe).unwrap_or_default();
        loop {
            let (status, body) = self.call(step, request()).await?;
            if done(status, &body) {
                self.record(step, line, expected, status, &body);
                return Ok(body);
            }
            if tokio::time::Instant::now() >= deadline {
                let status = if status == expected { 0 } else { status };
                let timed_out = json!({"timedOutAfterSeconds": POLL_DEADLINE.as_secs(), "last": body});
                self.record(step, line, expected, status, &timed_out);
                return Ok(body);
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Opens a watch and records the events it delivers: it reads until `expected_events` arrived
    /// (or 15 s passed), then keeps listening briefly so surplus events are caught too. Bookmarks are
    /// dropped (their timing is the server's choice).
    pub async fn watch(
        &mut self,
        step: &str,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        expected_events: usize,
    ) -> Result<(), SendError> {
        let request = request.map_err(|source| SendError::Build {
            step: step.to_owned(),
            source,
        })?;
        let line = describe(&request);
        let events = match self.client.request_events::<Value>(request).await {
            Ok(stream) => read_events(stream, expected_events).await,
            Err(kube::Error::Api(status)) => {
                let body = serde_json::to_value(&*status).unwrap_or(Value::Null);
                self.record(step, line, 200, status.code, &body);
                return Ok(());
            }
            Err(source) => {
                return Err(SendError::Transport {
                    step: step.to_owned(),
                    request: line,
                    source,
                });
            }
        };
        self.record(step, line, 200, 200, &Value::Array(events));
        Ok(())
    }

    fn record(&mut self, step: &str, request: String, expected: u16, status: u16, body: &Value) {
        let mut body = body.clone();
        mask_list_version(&mut body);
        self.norm.normalize(&mut body);
        self.transcript.exchanges.push(Exchange {
            step: step.to_owned(),
            request,
            expected,
            status,
            body,
        });
    }
}

async fn read_events(
    stream: impl futures::Stream<Item = Result<WatchEvent<Value>, kube::Error>>,
    expected: usize,
) -> Vec<Value> {
    let mut stream = std::pin::pin!(stream);
    let mut events = Vec::new();
    let until_expected = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let deadline = if events.len() >= expected {
            tokio::time::Instant::now() + Duration::from_millis(700)
        } else {
            until_expected
        };
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(WatchEvent::Bookmark(_)))) => {}
            Ok(Some(Ok(event))) => events.push(serde_json::to_value(&event).unwrap_or(Value::Null)),
            Ok(Some(Err(error))) => events.push(json!({"clientError": error.to_string()})),
            Ok(None) | Err(_) => break,
        }
    }
    events
}

/// A list's own resourceVersion is the store's global revision, which counts writes of other
/// clients (the controller-manager) too; only its presence is comparable.
fn mask_list_version(body: &mut Value) {
    if body.get("items").is_some()
        && let Some(rv) = body.pointer_mut("/metadata/resourceVersion")
    {
        *rv = Value::String("<list>".to_owned());
    }
}

fn describe(request: &http::Request<Vec<u8>>) -> String {
    format!("{} {}", request.method(), request.uri())
}

/// Result of lining up two transcripts of the same scenario.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Exchanges present in both transcripts and compared.
    pub compared: usize,
    pub differences: Vec<StepDifference>,
}

/// A difference at one step.
#[derive(Debug, Clone)]
pub struct StepDifference {
    pub index: usize,
    pub step: String,
    pub request: String,
    pub difference: Difference,
}

/// Compares status and normalised body of each step; a length mismatch is itself a difference.
pub fn compare(emulator: &Transcript, real: &Transcript) -> Comparison {
    let mut out = Comparison::default();
    for (index, (e, r)) in emulator.exchanges.iter().zip(&real.exchanges).enumerate() {
        out.compared += 1;
        let push = |out: &mut Comparison, difference| {
            out.differences.push(StepDifference {
                index,
                step: r.step.clone(),
                request: r.request.clone(),
                difference,
            })
        };
        if e.step != r.step {
            let difference = Difference {
                path: "<step>".into(),
                emulator: e.step.clone(),
                real: r.step.clone(),
            };
            push(&mut out, difference);
            continue;
        }
        if e.status != r.status {
            let difference = Difference {
                path: "<http status>".into(),
                emulator: e.status.to_string(),
                real: r.status.to_string(),
            };
            push(&mut out, difference);
        }
        for difference in diff(&e.body, &r.body) {
            push(&mut out, difference);
        }
    }
    if emulator.exchanges.len() != real.exchanges.len() {
        out.differences.push(StepDifference {
            index: out.compared,
            step: "<transcript length>".into(),
            request: String::new(),
            difference: Difference {
                path: String::new(),
                emulator: emulator.exchanges.len().to_string(),
                real: real.exchanges.len().to_string(),
            },
        });
    }
    out
}
