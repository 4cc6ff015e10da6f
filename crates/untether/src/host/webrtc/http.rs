//! The host's small HTTP(S) server: hyper (HTTP/1.1) on a current-thread tokio runtime on one
//! thread beside the network driver, TLS by tokio-openssl. What it answers is a [`Service`]:
//! `routes` for browsers (thread `host-http`), the operator's dashboard
//! (`crate::host::dashboard`, thread `host-dashboard`); this file keeps it from being held up
//! by any client:
//!
//! - at most [`MAX_CONNECTIONS`] connections, [`MAX_PER_ADDRESS`] from one address; a
//!   connection past either is refused at once (`503` in plain HTTP, closed under TLS);
//! - deadlines: the TLS handshake ([`TLS_HANDSHAKE`]), a request's header
//!   ([`HEADER_READ`], which also ends an idle keep-alive connection), its body (`routes`),
//!   and a connection's whole life ([`CONNECTION_LIFETIME`]);
//! - every connection is a task on the one thread (no thread per connection), and the thread
//!   looks at the host's stop flag every [`STOP_POLL`]: on stop the runtime and its tasks
//!   are dropped, whatever a client is doing, so the host never waits on a client.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
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
) -> Result<HttpServer, String> {
    let key = name.key;
    let listener = std::net::TcpListener::bind(addr).map_err(|e| format!("{key} {addr}: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("{key} {addr}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("{key} {addr}: {e}"))?;
    let tls = cert.map(acceptor).transpose()?;
    let https = tls.is_some();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the HTTP server: {e}"))?;
    let thread = std::thread::Builder::new()
        .name(name.thread.into())
        .spawn(move || run(rt, listener, tls, make, &shared))
        .map_err(|e| format!("cannot start the HTTP thread: {e}"))?;
    Ok(HttpServer {
        addr: local,
        https,
        thread,
    })
}

/// The TLS side of the page's certificate.
fn acceptor(cert: &PageCert) -> Result<Arc<SslAcceptor>, String> {
    let err = |e: openssl::error::ErrorStack| format!("webrtc.cert: {e}");
    let chain = X509::stack_from_pem(&cert.pem).map_err(err)?;
    let key = PKey::private_key_from_pem(&cert.pem).map_err(err)?;
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).map_err(err)?;
    let mut certs = chain.into_iter();
    let leaf = certs
        .next()
        .ok_or_else(|| "webrtc.cert: no certificate".to_string())?;
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
        let Some(slot) = limits.take(from.ip()) else {
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
    let work = async move {
        let Some(acceptor) = tls else {
            return connection(tcp, from, routes).await;
        };
        let Ok(mut stream) = Ssl::new(acceptor.context()).and_then(|s| SslStream::new(s, tcp))
        else {
            return;
        };
        match tokio::time::timeout(TLS_HANDSHAKE, Pin::new(&mut stream).accept()).await {
            Ok(Ok(())) => connection(stream, from, routes).await,
            Ok(Err(e)) => log::debug!("host: http: TLS handshake with {from}: {e}"),
            Err(_) => log::debug!("host: http: no TLS handshake from {from} in time"),
        }
    };
    if tokio::time::timeout(CONNECTION_LIFETIME, work)
        .await
        .is_err()
    {
        log::debug!("host: http: closed the connection from {from} (too long)");
    }
    drop(slot);
}

/// HTTP/1.1 on a connection: requests until the client closes, idles too long or errs.
async fn connection<I>(io: I, from: SocketAddr, routes: Rc<dyn Service>)
where
    I: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let service = service_fn(move |req| {
        let routes = routes.clone();
        async move { Ok::<_, Infallible>(routes.handle(req, from).await) }
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

/// How many connections are served, in all and per address.
#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
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
    ip: IpAddr,
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

    /// A slot for a connection from `ip`, if the limits leave one.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let mut c = self.counts();
        let mine = c.by_address.get(&ip).copied().unwrap_or(0);
        if c.total >= self.max_total || mine >= self.max_per_address {
            return None;
        }
        c.total += 1;
        c.by_address.insert(ip, mine + 1);
        Some(Slot {
            limits: self.clone(),
            ip,
        })
    }

    /// Connections served now.
    #[cfg(test)]
    fn total(&self) -> usize {
        self.counts().total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.limits.counts();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.by_address.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.by_address.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_capped_in_all_and_per_address() {
        let limits = Arc::new(Limits::new(3, 2));
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let a1 = limits.take(a).unwrap();
        let _a2 = limits.take(a).unwrap();
        assert!(limits.take(a).is_none(), "per address");
        let _b1 = limits.take(b).unwrap();
        assert!(limits.take(b).is_none(), "in all");
        assert_eq!(limits.total(), 3);
        drop(a1);
        assert_eq!(limits.total(), 2);
        assert!(limits.take(b).is_some());
    }

    #[test]
    fn the_page_certificate_makes_a_tls_acceptor() {
        let c = super::super::cert::self_signed(&[]).unwrap();
        assert!(acceptor(&c).is_ok());
        let bad = PageCert {
            pem: b"nothing".to_vec(),
            fingerprint: String::new(),
        };
        assert!(acceptor(&bad).is_err());
    }

    #[test]
    fn the_busy_answer_is_well_formed() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }
}
