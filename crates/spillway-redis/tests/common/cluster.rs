//! A real three-node Redis Cluster for a test: three `redis-server`s in cluster mode on free
//! loopback ports, joined by `redis-cli --cluster create`, stopped when dropped.

use super::{free_port, spawn};
use std::time::Duration;
use tokio::process::{Child, Command};

/// Longest `redis-cli --cluster create` may take (never reached when it works).
const FORM: Duration = Duration::from_secs(60);

pub(crate) struct RedisCluster {
    nodes: Vec<Child>,
    ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts three primaries and gives them the 16,384 slots.
    pub(crate) async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        let mut ports = Vec::new();
        for n in 0..3 {
            let port = free_port();
            let node_dir = dir.path().join(format!("node{n}"));
            std::fs::create_dir(&node_dir).unwrap();
            let extra = ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"];
            nodes.push(spawn(port, &node_dir, &extra).await);
            ports.push(port);
        }
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output();
        let created = tokio::time::timeout(FORM, created)
            .await
            .expect("redis-cli --cluster create answers")
            .expect("redis-cli runs (Debian's redis-tools, which redis-server brings)");
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        // `redis-cli --cluster create` returns once the nodes have joined and agree on the
        // slots, but a node marks the cluster ok a little later, and answers CLUSTERDOWN until
        // then: wait until every node says `cluster_state:ok`.
        let ok = tokio::time::timeout(FORM, async {
            for port in &ports {
                loop {
                    let info = Command::new("redis-cli")
                        .args(["-p", &port.to_string(), "cluster", "info"])
                        .output()
                        .await
                        .expect("redis-cli runs");
                    if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                        break;
                    }
                    // Polled: the node's state is only read, not announced.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        ok.await.expect("every node says the cluster is ok");
        Self {
            nodes,
            ports,
            _dir: dir,
        }
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// A new cluster connection: a process of the fleet, as far as Redis can tell.
    pub(crate) async fn connect(&self) -> redis::cluster_async::ClusterConnection {
        let client = redis::cluster::ClusterClient::new(self.urls()).unwrap();
        client.get_async_connection().await.unwrap()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.start_kill();
        }
    }
}
