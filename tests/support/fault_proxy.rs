//! A TCP proxy that puts network faults between workers and a server (Redis, PostgreSQL):
//! every connection is piped through it, and the test switches what it does to them: pass
//! bytes on, delay the server's replies, drop the server's replies after it received (and
//! perhaps committed) the request, cut every connection, or partition (accept, forward
//! nothing). It runs on a thread and runtime of its own, so a test drives it from anywhere.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Bytes pass both ways.
    Pass,
    /// The server's replies wait this long before they are passed on.
    DelayReplies(Duration),
    /// The server's replies are dropped (the requests still reach it), and the connection is
    /// cut once one is dropped.
    DropReplies,
    /// Nothing is forwarded either way (a partition): connections stay open and silent.
    Partition,
}

/// The running proxy.
#[derive(Debug)]
pub struct FaultProxy {
    /// Where workers connect.
    pub addr: SocketAddr,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    fault: std::sync::Mutex<Fault>,
    /// Bumped to cut every connection open at that moment.
    generation: AtomicU64,
}

impl State {
    fn fault(&self) -> Fault {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FaultProxy {
    /// A proxy to `upstream` (`host:port`), listening on a free local port.
    pub fn start(upstream: &str) -> FaultProxy {
        let upstream = upstream.to_owned();
        let state = Arc::new(State {
            fault: std::sync::Mutex::new(Fault::Pass),
            generation: AtomicU64::new(0),
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the proxy's runtime");
            runtime.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind the proxy");
                tx.send(listener.local_addr().expect("its address")).ok();
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let (state, upstream) = (shared.clone(), upstream.clone());
                    tokio::spawn(async move {
                        if let Ok(server) = TcpStream::connect(&upstream).await {
                            pipe(client, server, state).await;
                        }
                    });
                }
            });
        });
        let addr = rx.recv().expect("the proxy started");
        FaultProxy { addr, state }
    }

    /// From now on, do `fault` to traffic.
    pub fn set(&self, fault: Fault) {
        *self.state.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }

    /// Cut every connection open now (new ones are accepted).
    pub fn cut(&self) {
        self.state.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// Read what `from` sends next into `buf`: its length, or `None` once `from` closed or failed,
/// or the connection was cut (`alive` is asked while nothing arrives).
async fn read_while_alive(
    from: &mut (impl AsyncReadExt + Unpin),
    buf: &mut [u8],
    alive: impl Fn() -> bool,
) -> Option<usize> {
    loop {
        match tokio::time::timeout(Duration::from_millis(50), from.read(buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(n)) => return Some(n),
            Err(_) if alive() => continue,
            Err(_) => return None,
        }
    }
}

/// Hold the bytes in hand while the proxy partitions and the connection lives.
async fn wait_out_partition(state: &State, alive: impl Fn() -> bool) {
    while state.fault() == Fault::Partition && alive() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pipe one connection both ways under the proxy's current fault, until either side closes or
/// the connection is cut.
async fn pipe(client: TcpStream, server: TcpStream, state: Arc<State>) {
    let born = state.generation.load(Ordering::SeqCst);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let alive = |state: &State| state.generation.load(Ordering::SeqCst) == born;
    let requests = {
        let state = state.clone();
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let Some(n) = read_while_alive(&mut client_read, &mut buf, || alive(&state)).await
                else {
                    return;
                };
                wait_out_partition(&state, || alive(&state)).await;
                if !alive(&state) || server_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    let replies = {
        let state = state.clone();
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let Some(n) = read_while_alive(&mut server_read, &mut buf, || alive(&state)).await
                else {
                    return;
                };
                match state.fault() {
                    Fault::DelayReplies(d) => tokio::time::sleep(d).await,
                    // The server did its part; the worker never hears of it.
                    Fault::DropReplies => return,
                    Fault::Partition => wait_out_partition(&state, || alive(&state)).await,
                    Fault::Pass => {}
                }
                if !alive(&state) || client_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    // Either direction ending ends the connection (both halves drop).
    tokio::select! {
        () = requests => {}
        () = replies => {}
    }
}
