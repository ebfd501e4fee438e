//! An upstream with a known capacity, for the demo and the loopback lab: a fixed number of
//! workers, each request taking a time drawn from the simulated lab's service-time distributions
//! (times a slowdown factor that can be changed while it runs); more requests wait for a worker.
//!
//! A request may name its own work instead, in nanoseconds, with [`WORK_HEADER`] (at most
//! [`MAX_NAMED_WORK`]): the loopback lab's generator draws each request's work and sends it with
//! every attempt, so that a retry does the work its request drew, as in the simulation. A
//! request whose client leaves is still worked on to its end.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use spillway_lab::{ServiceSampler, ServiceTime};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// What the upstream does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpstreamShape {
    /// Requests worked on at once.
    pub workers: usize,
    /// How long each takes: fixed, or drawn (each request its own time, in arrival order at the
    /// workers, from `seed`).
    pub service: ServiceTime,
    /// The seed of the service times drawn.
    pub seed: u64,
    /// The demo's `/api/flaky`: answers 503 from the upstream's third second to its seventh.
    pub flaky: bool,
}

impl UpstreamShape {
    /// Requests a second it completes at most, on average: workers / mean service time.
    pub fn capacity(&self) -> f64 {
        self.workers as f64 / self.service.mean().as_secs_f64()
    }
}

/// The header a request names its work in, in nanoseconds.
pub const WORK_HEADER: &str = "x-lab-work-ns";

/// A request may say by when its work must start, in nanoseconds from the upstream's start
/// ([`Upstream::started`]): one whose work starts later is counted
/// ([`Upstream::late_starts`]), as work wasted on a client that gave up.
pub const DEADLINE_HEADER: &str = "x-lab-deadline-ns";

/// The deadline a request with `headers` names in [`DEADLINE_HEADER`], if a valid one.
fn named_deadline(headers: &http::HeaderMap) -> Option<Duration> {
    let nanos: u64 = headers.get(DEADLINE_HEADER)?.to_str().ok()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// The longest work a request may name: longer is cut to it.
pub const MAX_NAMED_WORK: Duration = Duration::from_secs(10);

/// The work a request with `headers` names in [`WORK_HEADER`], if it names a valid one.
fn named_work(headers: &http::HeaderMap) -> Option<Duration> {
    let nanos: u64 = headers.get(WORK_HEADER)?.to_str().ok()?.parse().ok()?;
    Some(Duration::from_nanos(nanos).min(MAX_NAMED_WORK))
}

/// What the workers did: requests worked, the time drawn for them, the time they took.
#[derive(Debug, Default)]
struct Worked {
    requests: AtomicU64,
    drawn_nanos: AtomicU64,
    held_nanos: AtomicU64,
    /// Work that started after the deadline its request named.
    late: AtomicU64,
}

/// A running upstream; dropping it stops it, every connection it holds, and the work still
/// waiting for a worker (work under way runs to its end).
#[derive(Debug)]
pub struct Upstream {
    addr: SocketAddr,
    /// The slowdown factor, as `f64` bits.
    factor: Arc<AtomicU64>,
    worked: Arc<Worked>,
    /// Its workers: closed when it stops, so that work still waiting for one ends.
    workers: Arc<Semaphore>,
    /// How many.
    worker_count: usize,
    /// When it started.
    started: tokio::time::Instant,
    tasks: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Binds a loopback port and serves there.
    ///
    /// # Errors
    ///
    /// If it cannot bind a loopback port.
    pub async fn start(shape: UpstreamShape) -> std::io::Result<Self> {
        let draws = ServiceSampler::new(shape.service, shape.seed).map_err(|err| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, err.to_string())
        })?;
        let draws = Arc::new(Mutex::new(draws));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let workers = Arc::new(Semaphore::new(shape.workers));
        let stopping = workers.clone();
        let factor = Arc::new(AtomicU64::new(1.0f64.to_bits()));
        let started = tokio::time::Instant::now();
        let serving_factor = factor.clone();
        let worked = Arc::new(Worked::default());
        let serving_worked = worked.clone();
        let tasks = tokio::spawn(async move {
            // Connections live in the set, so that stopping the upstream stops them.
            let mut connections = JoinSet::new();
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    Some(_) = connections.join_next() => continue,
                };
                let Ok((stream, _)) = accepted else {
                    // Out of descriptors or similar: back off rather than spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (workers, factor) = (workers.clone(), serving_factor.clone());
                let (draws, worked) = (draws.clone(), serving_worked.clone());
                connections.spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let (workers, factor) = (workers.clone(), factor.clone());
                        let (draws, worked) = (draws.clone(), worked.clone());
                        async move {
                            let named = named_work(request.headers());
                            let deadline = named_deadline(request.headers());
                            // The work runs in a task of its own: a request whose client
                            // leaves (the proxy drops its upstream request) is still queued
                            // for and worked on to its end, as a service finishes what it
                            // started, and as the simulated lab's service does.
                            let work = tokio::spawn(async move {
                                // Closed when the upstream stops: what still waits ends.
                                let Ok(_worker) = workers.acquire().await else {
                                    return;
                                };
                                if deadline.is_some_and(|at| started.elapsed() > at) {
                                    worked.late.fetch_add(1, Ordering::Relaxed);
                                }
                                let slowdown = f64::from_bits(factor.load(Ordering::Relaxed));
                                let work = named
                                    .unwrap_or_else(|| {
                                        draws
                                            .lock()
                                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                                            .next_time()
                                    })
                                    .mul_f64(slowdown);
                                let began = tokio::time::Instant::now();
                                tokio::time::sleep(work).await;
                                let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(0);
                                // Relaxed: totals read once the work is done.
                                worked.requests.fetch_add(1, Ordering::Relaxed);
                                worked.drawn_nanos.fetch_add(nanos(work), Ordering::Relaxed);
                                worked
                                    .held_nanos
                                    .fetch_add(nanos(began.elapsed()), Ordering::Relaxed);
                            });
                            let _ = work.await;
                            let mut response =
                                Response::new(Full::new(Bytes::from_static(b"ok\n")));
                            let failing = (3..7).contains(&started.elapsed().as_secs());
                            if shape.flaky && request.uri().path() == "/api/flaky" && failing {
                                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                            }
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            factor,
            worked,
            workers: stopping,
            worker_count: shape.workers,
            started,
            tasks,
        })
    }

    /// When it started: what [`DEADLINE_HEADER`] counts from.
    pub fn started(&self) -> tokio::time::Instant {
        self.started
    }

    /// Requests whose work started after the deadline they named in [`DEADLINE_HEADER`].
    pub fn late_starts(&self) -> u64 {
        self.worked.late.load(Ordering::Relaxed)
    }

    /// Workers at work now.
    pub fn busy_workers(&self) -> usize {
        self.worker_count
            .saturating_sub(self.workers.available_permits())
    }

    /// How much longer than drawn the work took on average so far (tokio's timer rounds each
    /// sleep up to its next millisecond tick, and a busy machine wakes it later still); `None`
    /// before any work.
    pub fn timer_overhead(&self) -> Option<Duration> {
        let requests = self.worked.requests.load(Ordering::Relaxed);
        let drawn = self.worked.drawn_nanos.load(Ordering::Relaxed);
        let held = self.worked.held_nanos.load(Ordering::Relaxed);
        (requests > 0).then(|| Duration::from_nanos(held.saturating_sub(drawn) / requests))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Makes work that starts from now on take `factor` times as long (1: as configured).
    pub fn set_slowdown(&self, factor: f64) {
        // Relaxed: a plain setting, read once per request.
        self.factor.store(factor.to_bits(), Ordering::Relaxed);
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.workers.close();
        self.tasks.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_its_work_in_nanoseconds_up_to_ten_seconds() {
        let named = |value: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(WORK_HEADER, value.parse().unwrap());
            named_work(&headers)
        };
        assert_eq!(named("12500000"), Some(Duration::from_micros(12_500)));
        assert_eq!(named("99999999999999"), Some(MAX_NAMED_WORK));
        assert_eq!(named("-1"), None);
        assert_eq!(named("soon"), None);
        assert_eq!(named_work(&http::HeaderMap::new()), None);
    }
}
