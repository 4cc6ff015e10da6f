//! The host's small HTTP(S) server: hyper (HTTP/1.1) on a current-thread tokio runtime on one
//! thread beside the network driver, TLS by tokio-openssl. What it answers is a [`Service`]:
//! `routes` for browsers (thread `host-http`), the operator's dashboard
//! (`crate::host::dashboard`, thread `host-dashboard`); this file keeps it from being held up
//! by any client:
//!
//! - at most [`MAX_CONNECTIONS`] connections, [`MAX_PER_ADDRESS`] from one address. A new
//!   connection past either takes the place of the oldest *idle* one (no request being
//!   answered: waiting for its TLS handshake or a request's header, or kept alive between
//!   requests) — of its own address when that address is at its share, else of any — which is
//!   closed; only when every connection in the way is answering a request is the new one
//!   refused (`503` in plain HTTP, closed under TLS). So idle sockets, however many addresses
//!   open them and however often they reopen, cannot keep a visitor out (issue 33);
//! - deadlines: the TLS handshake ([`TLS_HANDSHAKE`]), a request's header
//!   ([`HEADER_READ`], which also ends an idle keep-alive connection), its body (`routes`),
//!   and a connection's whole life ([`CONNECTION_LIFETIME`]);
//! - every connection is a task on the one thread (no thread per connection), and the thread
//!   looks at the host's stop flag every [`STOP_POLL`]: on stop the runtime and its tasks
//!   are dropped, whatever a client is doing, so the host never waits on a client.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use openssl::pkey::PKey;
use openssl::ssl::{Ssl, SslAcceptor, SslMethod};
use openssl::x509::X509;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::task::LocalSet;
use tokio_openssl::SslStream;

use super::cert::PageCert;
use super::routes::Reply;
use crate::host::shared::HostShared;

/// What a server answers, on its thread (one instance, shared by its connections).
pub(crate) trait Service {
    fn handle(
        self: Rc<Self>,
        req: Request<Incoming>,
        from: SocketAddr,
    ) -> Pin<Box<dyn Future<Output = Reply>>>;
}

/// Makes the server's [`Service`] on its thread.
pub(crate) type MakeService = Box<dyn FnOnce() -> Rc<dyn Service> + Send>;

/// Which server: its configuration key (for errors) and its thread's name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServerName {
    pub key: &'static str,
    pub thread: &'static str,
}

/// Connections served at once.
pub(super) const MAX_CONNECTIONS: usize = 64;
/// Connections served at once from one address.
pub(super) const MAX_PER_ADDRESS: usize = 16;
/// How long a client has for its TLS handshake.
pub(super) const TLS_HANDSHAKE: Duration = Duration::from_secs(10);
/// How long a client has for a request's header, and how long a keep-alive connection may
/// stay idle.
pub(super) const HEADER_READ: Duration = Duration::from_secs(10);
/// The longest a connection lives, whatever it does.
pub(super) const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);
/// How often the server looks at the host's stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);
/// What a connection past the limits gets (plain HTTP) before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
Content-Length: 33\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections to the host\n";

/// Why an HTTP server (the browser page's, the dashboard's) cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// The address cannot be bound (or used): named with the server's configuration key.
    #[error("{key} {addr}: {source}")]
    Bind {
        key: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the HTTP server: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot start the HTTP thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The page's certificate does not make a TLS server.
    #[error("webrtc.cert: {0}")]
    Tls(#[source] openssl::error::ErrorStack),
    #[error("webrtc.cert: no certificate")]
    NoCertificate,
}

/// A running HTTP server.
pub(crate) struct HttpServer {
    pub addr: SocketAddr,
    pub https: bool,
    pub thread: JoinHandle<()>,
}

/// Binds `addr` (TCP) and starts serving what `make` makes on its own thread until the host
/// stops.
pub(crate) fn start_http(
    name: ServerName,
    addr: SocketAddr,
    cert: Option<&PageCert>,
    make: MakeService,
    shared: Arc<HostShared>,
) -> Result<HttpServer, HttpError> {
    let key = name.key;
    let bind = |source| HttpError::Bind { key, addr, source };
    let listener = std::net::TcpListener::bind(addr).map_err(bind)?;
    listener.set_nonblocking(true).map_err(bind)?;
    let local = listener.local_addr().map_err(bind)?;
    let tls = cert.map(acceptor).transpose()?;
    let https = tls.is_some();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(HttpError::Runtime)?;
    let thread = std::thread::Builder::new()
        .name(name.thread.into())
        .spawn(move || run(rt, listener, tls, make, &shared))
        .map_err(HttpError::Thread)?;
    Ok(HttpServer {
        addr: local,
        https,
        thread,
    })
}

/// The TLS side of the page's certificate.
fn acceptor(cert: &PageCert) -> Result<Arc<SslAcceptor>, HttpError> {
    let err = HttpError::Tls;
    let chain = X509::stack_from_pem(&cert.pem).map_err(err)?;
    let key = PKey::private_key_from_pem(&cert.pem).map_err(err)?;
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).map_err(err)?;
    let mut certs = chain.into_iter();
    let leaf = certs.next().ok_or(HttpError::NoCertificate)?;
    b.set_certificate(&leaf).map_err(err)?;
    for c in certs {
        b.add_extra_chain_cert(c).map_err(err)?;
    }
    b.set_private_key(&key).map_err(err)?;
    b.check_private_key().map_err(err)?;
    Ok(Arc::new(b.build()))
}

/// The thread: serves until the host stops, then drops every connection.
fn run(
    rt: Runtime,
    listener: std::net::TcpListener,
    tls: Option<Arc<SslAcceptor>>,
    make: MakeService,
    shared: &HostShared,
) {
    let tasks = LocalSet::new();
    let routes = make();
    let limits = Arc::new(Limits::new(MAX_CONNECTIONS, MAX_PER_ADDRESS));
    rt.block_on(tasks.run_until(accept_loop(listener, tls, routes, limits, shared)));
    // Whatever a client was doing: its task ends here, its socket is closed.
    drop(tasks);
    rt.shutdown_background();
}

async fn accept_loop(
    listener: std::net::TcpListener,
    tls: Option<Arc<SslAcceptor>>,
    routes: Rc<dyn Service>,
    limits: Arc<Limits>,
    shared: &HostShared,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            shared.note(format!("the page's server cannot listen: {e}"));
            return;
        }
    };
    while !shared.stopped() {
        let (tcp, from) = match tokio::time::timeout(STOP_POLL, listener.accept()).await {
            // Time to look at the stop flag.
            Err(_) => continue,
            Ok(Err(e)) => {
                // Out of descriptors and the like: wait a little rather than spin.
                log::debug!("host: http: accept: {e}");
                tokio::time::sleep(STOP_POLL).await;
                continue;
            }
            Ok(Ok(a)) => a,
        };
        let Some(slot) = limits.take_or_evict(from.ip()) else {
            if tls.is_none() {
                let _ = tcp.try_write(BUSY);
            }
            log::debug!("host: http: refused a connection from {from} (too many)");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::task::spawn_local(serve(tcp, from, tls.clone(), routes.clone(), slot));
    }
}

/// One connection, under its deadlines; its slot is given back when it ends.
async fn serve(
    tcp: TcpStream,
    from: SocketAddr,
    tls: Option<Arc<SslAcceptor>>,
    routes: Rc<dyn Service>,
    slot: Slot,
) {
    let (idle, evicted) = (slot.idle.clone(), slot.evicted.clone());
    let work = async move {
        let Some(acceptor) = tls else {
            return connection(tcp, from, routes, idle).await;
        };
        let Ok(mut stream) = Ssl::new(acceptor.context()).and_then(|s| SslStream::new(s, tcp))
        else {
            return;
        };
        match tokio::time::timeout(TLS_HANDSHAKE, Pin::new(&mut stream).accept()).await {
            Ok(Ok(())) => connection(stream, from, routes, idle).await,
            Ok(Err(e)) => log::debug!("host: http: TLS handshake with {from}: {e}"),
            Err(_) => log::debug!("host: http: no TLS handshake from {from} in time"),
        }
    };
    tokio::select! {
        done = tokio::time::timeout(CONNECTION_LIFETIME, work) => {
            if done.is_err() {
                log::debug!("host: http: closed the connection from {from} (too long)");
            }
        }
        _ = evicted.notified() => {
            log::debug!("host: http: closed the idle connection from {from} for a new one");
        }
    }
    drop(slot);
}

/// HTTP/1.1 on a connection: requests until the client closes, idles too long or errs.
async fn connection<I>(io: I, from: SocketAddr, routes: Rc<dyn Service>, idle: Arc<AtomicBool>)
where
    I: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let service = service_fn(move |req| {
        let (routes, idle) = (routes.clone(), idle.clone());
        async move {
            // Answering a request: not to be evicted for a newcomer until it is answered.
            idle.store(false, Ordering::Relaxed);
            let reply = routes.handle(req, from).await;
            idle.store(true, Ordering::Relaxed);
            Ok::<_, Infallible>(reply)
        }
    });
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ)
        .max_buf_size(16 * 1024)
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(e) = served {
        log::debug!("host: http: {from}: {e}");
    }
}

/// A connection being served: its address, whether it is idle (no request being answered),
/// and how to close it.
#[derive(Debug)]
struct Conn {
    ip: IpAddr,
    idle: Arc<AtomicBool>,
    evict: Arc<tokio::sync::Notify>,
}

/// The connections served, oldest first, and how many per address.
#[derive(Debug, Default)]
struct Counts {
    conns: BTreeMap<u64, Conn>,
    by_address: HashMap<IpAddr, usize>,
    next: u64,
}

impl Counts {
    fn forget(&mut self, id: u64) -> Option<Conn> {
        let conn = self.conns.remove(&id)?;
        if let Some(n) = self.by_address.get_mut(&conn.ip) {
            *n -= 1;
            if *n == 0 {
                self.by_address.remove(&conn.ip);
            }
        }
        Some(conn)
    }
}

/// The connection limits.
#[derive(Debug)]
pub(super) struct Limits {
    counts: Mutex<Counts>,
    max_total: usize,
    max_per_address: usize,
}

/// A connection's place within the limits, given back when dropped.
#[derive(Debug)]
pub(super) struct Slot {
    limits: Arc<Limits>,
    id: u64,
    /// No request being answered (set by the connection as requests come and go).
    idle: Arc<AtomicBool>,
    /// Notified when a newcomer takes this connection's place: the connection then ends.
    evicted: Arc<tokio::sync::Notify>,
}

impl Limits {
    pub fn new(max_total: usize, max_per_address: usize) -> Limits {
        Limits {
            counts: Mutex::new(Counts::default()),
            max_total,
            max_per_address,
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a connection from `ip`. Past the limits, the oldest idle connection in the
    /// way (this address's when it is at its share, else any) is closed for it; None when
    /// every one in the way is answering a request.
    pub fn take_or_evict(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let mut c = self.counts();
        let mine = c.by_address.get(&ip).copied().unwrap_or(0);
        let own_share = mine >= self.max_per_address;
        if own_share || c.conns.len() >= self.max_total {
            let victim = c
                .conns
                .iter()
                .find(|(_, k)| k.idle.load(Ordering::Relaxed) && (!own_share || k.ip == ip))
                .map(|(&id, _)| id)?;
            if let Some(conn) = c.forget(victim) {
                conn.evict.notify_one();
            }
        }
        let id = c.next;
        c.next += 1;
        let (idle, evicted) = (Arc::new(AtomicBool::new(true)), Arc::default());
        c.conns.insert(
            id,
            Conn {
                ip,
                idle: idle.clone(),
                evict: Arc::clone(&evicted),
            },
        );
        *c.by_address.entry(ip).or_insert(0) += 1;
        Some(Slot {
            limits: self.clone(),
            id,
            idle,
            evicted,
        })
    }

    /// Connections served now.
    #[cfg(test)]
    fn total(&self) -> usize {
        self.counts().conns.len()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Already forgotten when it was evicted.
        self.limits.counts().forget(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Busy connections (answering a request) are capped in all and per address.
    #[test]
    fn busy_connections_are_capped_in_all_and_per_address() {
        let limits = Arc::new(Limits::new(3, 2));
        let busy = |s: Slot| {
            s.idle.store(false, Ordering::Relaxed);
            s
        };
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let a1 = busy(limits.take_or_evict(a).unwrap());
        let _a2 = busy(limits.take_or_evict(a).unwrap());
        assert!(limits.take_or_evict(a).is_none(), "per address");
        let _b1 = busy(limits.take_or_evict(b).unwrap());
        assert!(limits.take_or_evict(b).is_none(), "in all");
        assert_eq!(limits.total(), 3);
        drop(a1);
        assert_eq!(limits.total(), 2);
        assert!(limits.take_or_evict(b).is_some());
    }

    /// Issue 33: 64 idle sockets from 4 addresses (16 each), reopened as they close, kept
    /// every other visitor out with 503. Now a visitor takes the oldest idle one's place, and
    /// an address at its share only ever evicts its own.
    #[test]
    fn idle_sockets_cannot_keep_a_visitor_out() {
        let limits = Arc::new(Limits::new(MAX_CONNECTIONS, MAX_PER_ADDRESS));
        let mut held = Vec::new();
        for i in 0..MAX_CONNECTIONS {
            let ip: IpAddr = format!("198.51.100.{}", i / MAX_PER_ADDRESS + 1)
                .parse()
                .unwrap();
            held.push(limits.take_or_evict(ip).expect("within the limits"));
        }
        assert_eq!(limits.total(), MAX_CONNECTIONS);
        let oldest = held[0].evicted.clone();
        let visitor: IpAddr = "203.0.113.9".parse().unwrap();
        let mine = limits.take_or_evict(visitor).expect("a visitor gets in");
        assert_eq!(limits.total(), MAX_CONNECTIONS);
        // The oldest idle connection was told to close (a permit is stored for its task).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(100), oldest.notified())
                .await
                .expect("the oldest idle connection is evicted")
        });
        // Its slot was forgotten once: dropping it later changes nothing.
        drop(held.remove(0));
        assert_eq!(limits.total(), MAX_CONNECTIONS);
        // A flooding address at its share only evicts its own connections.
        let flooder: IpAddr = "198.51.100.2".parse().unwrap();
        let before = held[MAX_PER_ADDRESS - 1].evicted.clone();
        let _flood = limits.take_or_evict(flooder).expect("in place of its own");
        rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(100), before.notified())
                .await
                .expect("its own oldest")
        });
        assert!(
            mine.idle.load(Ordering::Relaxed),
            "the visitor's connection stays"
        );
        assert_eq!(limits.total(), MAX_CONNECTIONS);
    }

    #[test]
    fn the_page_certificate_makes_a_tls_acceptor() {
        let c = super::super::cert::self_signed(&[]).unwrap();
        assert!(acceptor(&c).is_ok());
        let bad = PageCert {
            pem: b"nothing".to_vec(),
            fingerprint: String::new(),
        };
        // No key in it: OpenSSL's error, named with the key.
        let e = acceptor(&bad).err().unwrap();
        assert!(matches!(e, HttpError::Tls(_)), "{e:?}");
        assert!(e.to_string().starts_with("webrtc.cert: "), "{e}");
    }

    #[test]
    fn a_taken_address_names_the_key() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let name = ServerName {
            key: "host.dashboard",
            thread: "test-http",
        };
        let make: MakeService = Box::new(|| unreachable!("never served"));
        let shared = Arc::new(HostShared::new((0, 0)));
        let e = start_http(name, addr, None, make, shared).err().unwrap();
        assert!(
            matches!(&e, HttpError::Bind { key: "host.dashboard", addr: a, .. } if *a == addr),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("host.dashboard {addr}: ")),
            "{e}"
        );
    }

    #[test]
    fn the_busy_answer_is_well_formed() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }
}
