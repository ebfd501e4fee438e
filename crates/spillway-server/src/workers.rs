//! The proxy's worker threads, as nginx's worker processes: each runs a single-threaded
//! runtime that accepts from the one listening socket and serves the connections it accepted
//! to their end, with its own idle upstream connections. No task moves between threads and no
//! wake-up crosses one on a request's way, which a work-stealing runtime pays for at every
//! hop (a request through the proxy is several: the client's connection, the upstream's, and
//! the channels between them).

mod balance;
mod index;
mod loads;

pub(crate) use balance::{Arrivals, Seat};
pub(crate) use index::current;
pub(crate) use loads::Loads;

use crate::proxy::Proxy;
use balance::{Balancer, Inbox};
use spillway_tower::LimitedListener;
use std::future::Future;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::AsFd;
use tokio::sync::{oneshot, watch};

/// Where the workers are in their life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Serving,
    /// Stop accepting and finish the requests in flight.
    Draining,
    /// Stop now, cutting the requests in flight.
    Stopping,
}

/// Tells the workers to stop at once if it is dropped before they were told to drain.
struct StopOnDrop(watch::Sender<Phase>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.send_if_modified(|phase| {
            let serving = *phase == Phase::Serving;
            if serving {
                *phase = Phase::Stopping;
            }
            serving
        });
    }
}

/// Serves `listener` on `workers` threads until `shutdown` completes, then drains each (see
/// [`Server::run_on_workers`](crate::Server::run_on_workers)).
pub(crate) async fn run(
    workers: NonZeroUsize,
    listener: LimitedListener,
    proxy: Proxy,
    limits: crate::conn::Limits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let (phase, watching) = watch::channel(Phase::Serving);
    let phase = StopOnDrop(phase);
    let listener = std::sync::Arc::new(listener);
    let (balancer, inboxes) = Balancer::new(workers.get());
    proxy.listener_counts().set_worker_loads(balancer.loads());
    let mut ended = Vec::with_capacity(workers.get());
    let beats = proxy.health().expect_workers(workers.get());
    for ((index, inbox), beat) in inboxes.into_iter().enumerate().zip(beats) {
        let (listener, proxy) = (listener.clone(), proxy.clone());
        let (balancer, watching) = (balancer.clone(), watching.clone());
        let (done, end) = oneshot::channel();
        std::thread::Builder::new()
            .name(format!("spillway-worker-{index}"))
            .spawn(move || {
                index::set(index);
                let (health, mine) = (proxy.health().clone(), beat.clone());
                let result = work(
                    Place {
                        listener,
                        index,
                        balancer,
                        inbox,
                        beat,
                    },
                    proxy,
                    limits,
                    watching,
                );
                if let Err(err) = &result {
                    tracing::error!(worker = index, error = %err, "a worker could not start");
                }
                // Ended: stalled for the probes, unless the process drains.
                health.end(&mine);
                let _ = done.send(result);
            })?;
        ended.push(end);
    }
    // Each worker lets go of it once it has its own clone of the socket: the socket closes
    // when the last worker closes its clone. The channels between workers close with them.
    drop((listener, balancer));
    shutdown.await;
    phase.0.send_replace(Phase::Draining);
    let mut first_error = None;
    for end in ended {
        // A worker that ended without a word panicked: its connections are gone either way.
        if let Ok(Err(err)) = end.await {
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Where a worker stands among the others: the socket they share, its number, and how
/// connections are spread between them.
struct Place {
    listener: std::sync::Arc<LimitedListener>,
    index: usize,
    balancer: std::sync::Arc<Balancer>,
    inbox: Inbox,
    /// Its beat, for the health probes.
    beat: crate::health::Beat,
}

/// A worker: its runtime, then serving until told to drain (and draining), or to stop.
fn work(
    place: Place,
    proxy: Proxy,
    limits: crate::conn::Limits,
    mut phase: watch::Receiver<Phase>,
) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let Place {
            listener: original,
            index,
            balancer,
            inbox,
            beat,
        } = place;
        // A clone of the socket, registered with this runtime, under the shared cap.
        let socket = original.get_ref().as_fd().try_clone_to_owned()?;
        let listener = original.share(tokio::net::TcpListener::from_std(socket.into())?);
        drop(original);
        let arrivals = Arrivals::new(listener, index, balancer, inbox);
        // What this worker's connections freed goes back to the system while it idles.
        let giving_back = tokio::spawn(crate::freed_memory::give_back_periodically());
        // Serving from here on: its first beat now, then one a second while its loop turns.
        proxy.health().beat(&beat);
        let beating = tokio::spawn(proxy.health().clone().beat_forever(beat));
        let mut stopping = phase.clone();
        let serving = crate::serve::serve(arrivals.into(), proxy, limits, async move {
            let _ = phase.wait_for(|phase| *phase != Phase::Serving).await;
        });
        tokio::select! {
            () = serving => {}
            _ = stopping.wait_for(|phase| *phase == Phase::Stopping) => {}
        }
        giving_back.abort();
        beating.abort();
        Ok(())
    })
    // Dropping the runtime ends the tasks left: connections cut by a stop.
}
