//! A relay between a client and a real Redis that puts two calls on one connection in an order
//! no timing decides: it can hold the client's commands, answer the first held one itself with
//! an error, and send the rest on to Redis when told.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the relay does with the client's commands.
#[derive(Default)]
struct Plan {
    /// The connections it has accepted.
    accepted: usize,
    /// Hold the commands of the connections accepted before this many (each task holds its
    /// own, in order); the others pass.
    hold_below: usize,
    /// How many of the first held commands to answer with an error, unsent.
    to_fail: usize,
    /// How many commands are held.
    held: usize,
}

/// A relay on a free loopback port to a Redis on `to`, for as long as the test runs.
pub(crate) struct Relay {
    port: u16,
    plan: Arc<Mutex<Plan>>,
    /// Bumped at each change of the plan, which wakes the connections' tasks.
    changed: watch::Sender<u64>,
    /// How many commands are held, for the test to wait on.
    held: watch::Receiver<usize>,
}

impl Relay {
    pub(crate) async fn start(to: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let plan = Arc::new(Mutex::new(Plan::default()));
        let (changed, _) = watch::channel(0u64);
        let (held_tx, held) = watch::channel(0usize);
        let held_tx = Arc::new(held_tx);
        let (relay_plan, relay_changed) = (plan.clone(), changed.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let redis = TcpStream::connect(("127.0.0.1", to)).await.unwrap();
                let woken = relay_changed.subscribe();
                let (plan, held) = (relay_plan.clone(), held_tx.clone());
                let index = {
                    let mut plan = plan.lock().unwrap();
                    plan.accepted += 1;
                    plan.accepted - 1
                };
                tokio::spawn(relay(index, client, redis, plan, woken, held));
            }
        });
        Self {
            port,
            plan,
            changed,
            held,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn change(&self, change: impl FnOnce(&mut Plan)) {
        change(&mut self.plan.lock().unwrap());
        self.changed.send_modify(|turn| *turn += 1);
    }

    /// Holds the commands of the connections open now, from now on; later connections pass.
    pub(crate) fn hold(&self) {
        self.change(|plan| plan.hold_below = plan.accepted);
    }

    /// Waits until `count` commands are held.
    pub(crate) async fn held(&self, count: usize) {
        let mut held = self.held.clone();
        held.wait_for(|&held| held >= count).await.unwrap();
    }

    /// Answers the first command a connection holds with an error, unsent; the others stay
    /// held (a test holds one connection's).
    pub(crate) fn fail_first(&self) {
        self.change(|plan| plan.to_fail += 1);
    }

    /// Sends the held commands on, and every command from now on.
    pub(crate) fn release(&self) {
        self.change(|plan| plan.hold_below = 0);
    }
}

/// Relays connection `index` as `plan` says.
async fn relay(
    index: usize,
    mut client: TcpStream,
    mut redis: TcpStream,
    plan: Arc<Mutex<Plan>>,
    mut woken: watch::Receiver<u64>,
    held_count: Arc<watch::Sender<usize>>,
) {
    let (mut from_client, mut from_redis) = (Vec::new(), vec![0u8; 64 * 1024]);
    let mut held: VecDeque<Vec<u8>> = VecDeque::new();
    loop {
        tokio::select! {
            read = client.read_buf(&mut from_client) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return;
                }
            }
            read = redis.read(&mut from_redis) => match read {
                Ok(n) if n > 0 => client.write_all(&from_redis[..n]).await.unwrap(),
                _ => return,
            },
            changed = woken.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        let (to_redis, to_client) = {
            let mut plan = plan.lock().unwrap();
            let before = held.len();
            while let Some(end) = command_end(&from_client) {
                held.push_back(from_client.drain(..end).collect());
            }
            let mut to_client = Vec::new();
            let holding = index < plan.hold_below;
            while holding && plan.to_fail > 0 && !held.is_empty() {
                held.pop_front();
                plan.to_fail -= 1;
                to_client.extend_from_slice(b"-ERR failed by the test's relay\r\n");
            }
            let mut to_redis = Vec::new();
            if !holding {
                to_redis = held.drain(..).flatten().collect();
            }
            plan.held = (plan.held + held.len()).saturating_sub(before);
            held_count.send_replace(plan.held);
            (to_redis, to_client)
        };
        client.write_all(&to_client).await.unwrap();
        redis.write_all(&to_redis).await.unwrap();
    }
}

/// Where the first whole command of `bytes` ends (RESP: an array of bulk strings), if it is
/// whole.
fn command_end(bytes: &[u8]) -> Option<usize> {
    let line = |at: usize| -> Option<(usize, usize)> {
        let end = at + bytes.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let number = std::str::from_utf8(&bytes[at + 1..end])
            .ok()?
            .parse()
            .ok()?;
        Some((number, end + 2))
    };
    let (items, mut at) = line(0)?;
    for _ in 0..items {
        let (len, data) = line(at)?;
        at = data + len + 2;
        if at > bytes.len() {
            return None;
        }
    }
    Some(at)
}
