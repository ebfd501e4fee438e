//! Spreading connections over the workers: each connection goes to the worker with the fewest
//! open, the one that accepted it when tied. Every worker is woken for a new connection, and
//! the one already awake usually wins the accept and goes on accepting what queued behind it:
//! left alone, a burst of connections (a client opening its pool) lands on one worker while
//! the others idle.
//!
//! A connection another worker should serve is taken off the accepting worker's runtime and
//! handed over on a channel: one wake-up of another thread per connection moved, none per
//! request.

use super::loads::Loads;
use crate::conn::{self, ListenerCounts};
use crate::per_client::ClientSeat;
use spillway_tower::{DetachedStream, LimitedListener, LimitedStream};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// A connection's place in its worker's load, given back when dropped (the connection closed).
#[derive(Debug)]
pub(crate) struct Seat {
    loads: Arc<Loads>,
    worker: usize,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.loads.0[self.worker].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection on its way to the worker that serves it.
#[derive(Debug)]
struct Handed {
    stream: DetachedStream,
    peer: SocketAddr,
    seat: Seat,
    client: ClientSeat,
}

impl Handed {
    /// `stream` taken off this worker's runtime to be handed over; `None` (the connection
    /// closed) if it cannot be.
    fn new(
        stream: LimitedStream,
        peer: SocketAddr,
        seat: Seat,
        client: ClientSeat,
    ) -> Option<Self> {
        match stream.detach() {
            Ok(stream) => Some(Self {
                stream,
                peer,
                seat,
                client,
            }),
            Err(err) => {
                tracing::debug!(%peer, error = %err, "a connection could not be handed over");
                None
            }
        }
    }
}

/// Where connections go: the workers' loads, and a channel to each.
#[derive(Debug)]
pub(crate) struct Balancer {
    loads: Arc<Loads>,
    inboxes: Box<[mpsc::UnboundedSender<Handed>]>,
}

impl Balancer {
    /// A balancer over `workers` workers, and each worker's end of its channel.
    pub(crate) fn new(workers: usize) -> (Arc<Self>, Vec<Inbox>) {
        let (senders, inboxes) = (0..workers)
            .map(|_| {
                let (sender, receiver) = mpsc::unbounded_channel();
                (sender, Inbox(receiver))
            })
            .unzip::<_, _, Vec<_>, Vec<_>>();
        let loads = Loads((0..workers).map(|_| AtomicUsize::new(0)).collect());
        let balancer = Self {
            loads: Arc::new(loads),
            inboxes: senders.into_boxed_slice(),
        };
        (Arc::new(balancer), inboxes)
    }

    /// The workers' loads, for metrics.
    pub(crate) fn loads(&self) -> Arc<Loads> {
        Arc::clone(&self.loads)
    }

    /// Which worker serves a connection that worker `me` accepted: the one with the fewest
    /// open connections, `me` among those tied. Its load counts the connection from now on,
    /// so that the next placement (on any worker) sees it.
    fn place(&self, me: usize) -> Seat {
        let loads = &self.loads.0;
        let mut worker = me;
        let mut least = loads[me].load(Ordering::Relaxed);
        for (index, load) in loads.iter().enumerate() {
            let load = load.load(Ordering::Relaxed);
            if load < least {
                (worker, least) = (index, load);
            }
        }
        loads[worker].fetch_add(1, Ordering::Relaxed);
        Seat {
            loads: Arc::clone(&self.loads),
            worker,
        }
    }
}

/// A worker's end of its channel: the connections other workers hand it.
#[derive(Debug)]
pub(crate) struct Inbox(mpsc::UnboundedReceiver<Handed>);

/// The connections one worker serves: those it accepts and keeps, and those handed to it.
#[derive(Debug)]
pub(crate) struct Arrivals {
    listener: LimitedListener,
    me: usize,
    balancer: Arc<Balancer>,
    inbox: Inbox,
}

impl Arrivals {
    /// Worker `me`'s arrivals: from its clone of the listening socket and from `inbox`.
    pub(crate) fn new(
        listener: LimitedListener,
        me: usize,
        balancer: Arc<Balancer>,
        inbox: Inbox,
    ) -> Self {
        Self {
            listener,
            me,
            balancer,
            inbox,
        }
    }

    /// The next connection to serve here, with its seat and its client's place. Each one
    /// accepted here is given its client's place by `place` before it is placed on a worker:
    /// one that gets none (its client holds its cap) is closed here. Accepting pauses on
    /// errors as [`conn::accept_with_backoff`] does. Cancel-safe: dropped while waiting, it
    /// loses no connection.
    pub(crate) async fn next(
        &mut self,
        counts: &ListenerCounts,
        place: &(dyn Fn(SocketAddr) -> Option<ClientSeat> + Sync),
    ) -> (LimitedStream, SocketAddr, Seat, ClientSeat) {
        loop {
            let listener = &self.listener;
            tokio::select! {
                // Those handed over first: they have waited already.
                biased;
                Some(handed) = self.inbox.0.recv() => {
                    let Handed { stream, peer, seat, client } = handed;
                    match stream.attach() {
                        Ok(stream) => return (stream, peer, seat, client),
                        Err(err) => tracing::debug!(%peer, error = %err, "a handed connection could not be registered"),
                    }
                }
                (stream, peer) = conn::accept_with_backoff("proxy", counts, || listener.accept()) => {
                    let Some(client) = place(peer) else {
                        continue;
                    };
                    let seat = self.balancer.place(self.me);
                    if seat.worker == self.me {
                        return (stream, peer, seat, client);
                    }
                    self.hand(Handed::new(stream, peer, seat, client));
                }
            }
        }
    }

    /// Hands a connection to the worker its seat is on; if that worker has stopped (it is
    /// draining), the connection is closed, as one it would not have accepted.
    fn hand(&self, handed: Option<Handed>) {
        let Some(handed) = handed else {
            return;
        };
        let peer = handed.peer;
        let inbox = &self.balancer.inboxes[handed.seat.worker];
        if inbox.send(handed).is_err() {
            tracing::debug!(%peer, "closed: its worker is draining");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection its client's cap refuses is closed where it was accepted: it takes no
    /// worker's seat and reaches no inbox; the next one is served.
    #[tokio::test]
    async fn a_connection_refused_its_client_s_place_is_closed_before_it_is_placed() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (balancer, mut inboxes) = Balancer::new(2);
        let inbox = inboxes.remove(0);
        let listener = LimitedListener::new(listener, 0);
        let mut arrivals = Arrivals::new(listener, 0, Arc::clone(&balancer), inbox);
        let mut refused = tokio::net::TcpStream::connect(addr).await.unwrap();
        let refused_port = refused.local_addr().unwrap().port();
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let place = move |peer: SocketAddr| {
            // The first client's connection is refused; every other gets a place.
            let first = asked.fetch_add(1, Ordering::Relaxed) == 0;
            assert_eq!(first, peer.port() == refused_port, "accepted in order");
            (!first).then(ClientSeat::none)
        };
        let counts = ListenerCounts::default();
        let served = tokio::spawn(async move {
            let next = arrivals.next(&counts, &place).await;
            (next.1, next.2.worker, balancer.loads().get())
        });
        let mut read = Vec::new();
        refused.read_to_end(&mut read).await.unwrap();
        assert!(read.is_empty(), "closed unanswered");
        let kept = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (peer, worker, loads) = served.await.unwrap();
        assert_eq!(peer, kept.local_addr().unwrap());
        assert_eq!(
            (worker, loads),
            (0, vec![1, 0]),
            "one seat, the served one's"
        );
        assert!(inboxes[0].0.try_recv().is_err(), "nothing handed over");
    }

    #[test]
    fn a_connection_goes_to_the_least_loaded_worker_and_stays_when_tied() {
        let (balancer, _inboxes) = Balancer::new(3);
        // Tied: each keeps what it accepts.
        let first = balancer.place(1);
        assert_eq!(first.worker, 1);
        // Worker 1 has one: the next it accepts goes to worker 0, the first of the least.
        let second = balancer.place(1);
        assert_eq!(second.worker, 0);
        let third = balancer.place(0);
        assert_eq!(third.worker, 2);
        assert_eq!(balancer.loads().get(), [1, 1, 1]);
        // A closed connection leaves its worker's load.
        drop(first);
        assert_eq!(balancer.loads().get(), [1, 0, 1]);
        let fourth = balancer.place(2);
        assert_eq!(fourth.worker, 1);
        let fifth = balancer.place(2);
        assert_eq!(fifth.worker, 2);
        assert_eq!(balancer.loads().get(), [1, 1, 2]);
        drop((second, third, fourth, fifth));
        assert_eq!(balancer.loads().get(), [0, 0, 0]);
    }
}
