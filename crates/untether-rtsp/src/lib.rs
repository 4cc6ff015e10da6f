//! RTSP for ordinary players (ffplay, VLC, GStreamer): the host's one encoded stream, served by
//! gst-rtsp-server over RTP/UDP and RTP/TCP interleaved, without a second encode.
//!
//! [`RtspServer`] is a [`StreamConsumer`] of an untether host (`HostSetup::consumers`): it gets
//! every x264 access unit and Opus packet as the host produces them (shared, never copied for
//! it), hands them to one shared media pipeline (`appsrc ! rtph264pay`, `appsrc ! rtpopuspay`)
//! whose packets gst-rtsp-server sends to every viewer, and asks the encoder for a keyframe
//! when a viewer starts playing, when a player asks (RTCP PLI/FIR), or after it had to drop a
//! frame. The encoder never waits for it: a full queue drops, counts, and skips to the next
//! keyframe. Viewers authenticate with RTSP digest unless the host is open.
//!
//! A connection counts against `rtsp.max_viewers` only once a DESCRIBE, SETUP or PLAY of it
//! got past authentication; one that does not within [`IDLE_CONNECTION`] is closed. Each
//! connection that reaches authentication is an `Incoming` of the host's one admission
//! (`untether_proto::admission::Admission`, given by the caller and shared with the host's other
//! doors): it takes one attempt of its address's budget, and its wrong credentials count with
//! the address's wrong links and PINs — after a few in a row the address is refused, its
//! credentials unchecked, for a growing while (the log says so once per refusal, not per
//! guess). On an open server (no credentials) a connection's first DESCRIBE, SETUP or PLAY is
//! its `Incoming` alike: a burst from one address beyond its budget is answered 503.
//!
//! Threads: gst-rtsp-server runs on its own GLib main loop (`host-rtsp`); its media pipelines
//! have their GStreamer streaming threads. The host's threads only push into `appsrc`s.
//!
//! This is its own crate so that GStreamer stays out of the `untether` library and the C API.

mod auth;
mod feed;
mod ffi;
mod media;
mod viewers;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gst_rtsp_server::glib;
use gst_rtsp_server::gst_rtsp::{RTSPHeaderField, RTSPLowerTrans, RTSPStatusCode};
use gst_rtsp_server::prelude::*;
use gst_rtsp_server::{
    RTSPClient, RTSPFilterResult, RTSPMediaFactory, RTSPServer, RTSPSuspendMode,
    RTSP_PERM_MEDIA_FACTORY_ACCESS, RTSP_PERM_MEDIA_FACTORY_CONSTRUCT,
};
use untether::clock::now_us;
use untether::config::{ConfigError, RtspAuth, RtspToml};
use untether::host::{ConsumerSummary, EncodedVideo, KeyframeRequests, StreamConsumer, StreamInfo};
use untether::identity::Access;
use untether_proto::admission::{
    Admission, CredentialKind, Decision, Failure, Incoming, RefuseReason,
};
use untether_proto::{AudioPacket, Micros};

pub use auth::Credentials;
use auth::{Checked, CountingAuth, Gate};
use media::{Media, Pushed};
use viewers::{Connection, Seat, Viewers};

/// The GStreamer elements the server needs, and the Debian package of each.
const ELEMENTS: [(&str, &str); 4] = [
    ("appsrc", "gstreamer1.0-plugins-base"),
    ("rtph264pay", "gstreamer1.0-plugins-good"),
    ("rtpopuspay", "gstreamer1.0-plugins-good"),
    ("rtpbin", "gstreamer1.0-plugins-good"),
];

/// How often sessions whose viewer went away without a TEARDOWN are looked for.
const SESSION_CLEANUP: Duration = Duration::from_secs(2);

/// How long a connection may stay without becoming a viewer (a DESCRIBE, SETUP or PLAY past
/// authentication) before it is closed: a player does it within a round trip or two.
pub const IDLE_CONNECTION: Duration = Duration::from_secs(5);

/// How long a DESCRIBE waits for the previous media to go down (it takes a few
/// milliseconds: the pipeline to NULL).
const UNPREPARE_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum RtspError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("rtsp.listen is empty: no RTSP server was asked for")]
    Off,
    #[error("RTSP: cannot start GStreamer: {0}")]
    Init(String),
    #[error(
        "RTSP: the GStreamer element {element} is missing: install {package} (scripts/setup.sh does)"
    )]
    MissingElement {
        element: &'static str,
        package: &'static str,
    },
    #[error("RTSP: cannot listen on {addr} (rtsp.listen, --rtsp): {reason}")]
    Listen { addr: SocketAddr, reason: String },
    #[error("RTSP: cannot start its thread: {0}")]
    Thread(std::io::Error),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct RtspCounters {
    frames_sent: AtomicU64,
    frames_dropped: AtomicU64,
    frames_skipped: AtomicU64,
    audio_sent: AtomicU64,
    audio_dropped: AtomicU64,
}

/// One RTSP connection.
struct Conn {
    id: u64,
    ip: String,
    /// Its address for the admission (unspecified when it could not be read: such
    /// connections share one budget rather than each getting a fresh one).
    addr: IpAddr,
    /// The admission accepted it (at its first request that needed credentials): its next
    /// requests take nothing more from the budget, only the throttle is asked.
    accepted: AtomicBool,
    state: Mutex<Connection>,
    /// A request of it had the right credentials (or none are needed).
    authenticated: AtomicBool,
}

/// The key of a client's connection in `Inner::conns` (its object's address, while open).
fn conn_key(client: &RTSPClient) -> usize {
    client.as_ptr() as usize
}

/// What the host's threads and the server's callbacks share.
struct Inner {
    cfg: RtspToml,
    credentials: Option<Credentials>,
    local_addr: SocketAddr,
    started: Instant,
    server: RTSPServer,
    stream: OnceLock<StreamInfo>,
    keyframes: OnceLock<KeyframeRequests>,
    medias: Mutex<Vec<Media>>,
    /// Notified when a media is down (unprepared): see [`Inner::wait_while_going_down`].
    media_down: Condvar,
    viewers: Mutex<Viewers>,
    counters: RtspCounters,
    next_client: AtomicU64,
    /// The host's one admission: the budget and the wrong-credential throttle per source
    /// address, shared with the host's other doors.
    admission: Admission,
    /// The open connections, by their client object.
    conns: Mutex<HashMap<usize, Arc<Conn>>>,
    /// The server's main context (its thread runs it): timers of connections go there.
    context: glib::MainContext,
}

impl Inner {
    /// Seconds since the server started (the viewers' times; the admission reads the
    /// runtime's one clock, `now_us`, as the host's other doors do).
    fn now_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn request_keyframe(&self) {
        if let Some(k) = self.keyframes.get() {
            k.request();
        }
    }

    /// A new media (the first viewer's DESCRIBE, or after all had left): its feeds.
    fn media_configured(&self, media: &gst_rtsp_server::RTSPMedia, this: Weak<Inner>) {
        let fps = self.stream.get().map_or(60, |s| s.fps);
        let Some(m) = Media::new(
            media,
            self.cfg.queue_frames,
            self.cfg.keyframe_interval_ms,
            fps,
        ) else {
            log::error!("rtsp: the media pipeline has no appsrc named video");
            return;
        };
        // After gst-rtsp-server's own handlers (the factory's drops the media from its cache
        // there): a DESCRIBE let go by `media_down` finds no stale media.
        media.connect("unprepared", true, move |args| {
            let media = args.first()?.get::<gst_rtsp_server::RTSPMedia>().ok()?;
            if let Some(inner) = this.upgrade() {
                lock(&inner.medias).retain(|m| m.media != media);
                inner.media_down.notify_all();
            }
            None
        });
        lock(&self.medias).push(m);
        // Its first frame must be a keyframe: ask now rather than at the next frame.
        self.request_keyframe();
    }

    /// Waits (up to [`UNPREPARE_WAIT`]) while the shared media is being torn down. The last
    /// connection that used it has just closed (its viewer left, or a DESCRIBE-only check):
    /// gst-rtsp-server would find that media for the next DESCRIBE and answer 503 while it
    /// goes down (measured: 29 of 100 DESCRIBEs right after the previous connection closed).
    /// Once it is down, the DESCRIBE gets a new one.
    fn wait_while_going_down(&self) {
        let medias = lock(&self.medias);
        if !medias.iter().any(Media::going_down) {
            return;
        }
        let waited = Instant::now();
        let (medias, wait) = self
            .media_down
            .wait_timeout_while(medias, UNPREPARE_WAIT, |ms| {
                ms.iter().any(Media::going_down)
            })
            .unwrap_or_else(|e| e.into_inner());
        drop(medias);
        if wait.timed_out() {
            log::warn!(
                "rtsp: the previous media was still going down after {} ms; the viewer may be \
                 answered 503",
                UNPREPARE_WAIT.as_millis()
            );
        } else {
            log::debug!(
                "rtsp: waited {:.1} ms for the previous media to go down",
                waited.elapsed().as_secs_f64() * 1e3
            );
        }
    }

    /// A request of `conn` that needs no more authentication (open, or its credentials were
    /// right): whether it goes on (else 503: the connection was turned away,
    /// `rtsp.max_viewers` being there when it became a viewer).
    fn admit(&self, conn: &Conn) -> bool {
        let mut state = lock(&conn.state);
        let seat = lock(&self.viewers).admit(&mut state, conn.id, &conn.ip, self.now_s());
        match seat {
            Seat::Joined => log::info!("rtsp: viewer connected from {}", conn.ip),
            Seat::TurnedAway => log::warn!(
                "rtsp: turned away a viewer at {}: {} are watching (rtsp.max_viewers)",
                conn.ip,
                self.cfg.max_viewers
            ),
            Seat::Viewer | Seat::StillAway => {}
        }
        seat.goes_on()
    }

    /// The connection of `client`, while it is open.
    fn conn(&self, client: &RTSPClient) -> Option<Arc<Conn>> {
        lock(&self.conns).get(&conn_key(client)).cloned()
    }

    /// A connection: a viewer once a request of it needs no more authentication (open, or
    /// with the right credentials; turned away then when `rtsp.max_viewers` are there),
    /// closed after [`IDLE_CONNECTION`] if it has not become one.
    fn client_connected(self: &Arc<Self>, client: &RTSPClient) {
        let ip = ffi::client_ip(client);
        let conn = Arc::new(Conn {
            id: self.next_client.fetch_add(1, Ordering::Relaxed),
            addr: parse_ip(ip.as_deref()),
            ip: ip.unwrap_or_else(|| "?".into()),
            accepted: AtomicBool::new(false),
            state: Mutex::new(Connection::Pending),
            authenticated: AtomicBool::new(self.credentials.is_none()),
        });
        let id = conn.id;
        log::debug!("rtsp: connection from {}", conn.ip);
        lock(&self.conns).insert(conn_key(client), conn.clone());
        // These signals come before gst-rtsp-server checks the request's credentials: a
        // connection whose credentials were right (in an earlier request, or in this one:
        // then at its next) is let in or turned away; others go on to that check. On an open
        // server (no credentials, so no check) the connection's first request is its
        // `Incoming` here: it takes one attempt of its address's budget like at every door,
        // and an address refused there (or for wrong credentials elsewhere) gets 503.
        let admission = || {
            let (weak, conn) = (Arc::downgrade(self), conn.clone());
            move |_: &RTSPClient, _: &gst_rtsp_server::RTSPContext| match weak.upgrade() {
                Some(inner)
                    if inner.credentials.is_none()
                        && !inner.may_try(&conn, CredentialKind::None) =>
                {
                    RTSPStatusCode::ServiceUnavailable
                }
                Some(inner)
                    if conn.authenticated.load(Ordering::Relaxed) && !inner.admit(&conn) =>
                {
                    RTSPStatusCode::ServiceUnavailable
                }
                _ => RTSPStatusCode::Ok,
            }
        };
        let describe = admission();
        let weak = Arc::downgrade(self);
        client.connect_pre_describe_request(move |client, ctx| {
            if let Some(inner) = weak.upgrade() {
                inner.wait_while_going_down();
            }
            describe(client, ctx)
        });
        client.connect_pre_setup_request(admission());
        client.connect_pre_play_request(admission());
        let (weak_client, idle) = (client.downgrade(), conn.clone());
        glib::timeout_source_new(
            IDLE_CONNECTION,
            Some("untether-rtsp-idle"),
            glib::Priority::DEFAULT,
            move || {
                if *lock(&idle.state) != Connection::Viewer {
                    if let Some(client) = weak_client.upgrade() {
                        log::debug!(
                            "rtsp: closed the connection from {}: not a viewer after {} s",
                            idle.ip,
                            IDLE_CONNECTION.as_secs()
                        );
                        client.close();
                    }
                }
                glib::ControlFlow::Break
            },
        )
        .attach(Some(&self.context));
        let weak = Arc::downgrade(self);
        client.connect_setup_request(move |_, ctx| {
            if let Some(inner) = weak.upgrade() {
                if let Some(t) = ffi::request_header(ctx, RTSPHeaderField::Transport) {
                    lock(&inner.viewers).set_transport(id, ffi::transport_name(&t));
                }
            }
        });
        let weak = Arc::downgrade(self);
        client.connect_play_request(move |_, _| {
            if let Some(inner) = weak.upgrade() {
                // A viewer starting to play needs a picture it can decode: a keyframe.
                let mut want = false;
                for m in lock(&inner.medias).iter_mut() {
                    m.viewer_plays();
                    want |= m.needs_keyframe();
                }
                if want {
                    inner.request_keyframe();
                }
                let v = lock(&inner.viewers);
                log::info!(
                    "rtsp: viewer at {} playing ({})",
                    v.address(id).unwrap_or("?"),
                    v.summaries()
                        .last()
                        .map(|s| s.transport.clone())
                        .unwrap_or_default()
                );
            }
        });
        let weak = Arc::downgrade(self);
        client.connect_closed(move |client| {
            if let Some(inner) = weak.upgrade() {
                lock(&inner.conns).remove(&conn_key(client));
                let now = inner.now_s();
                if let Some(v) = lock(&inner.viewers).leave(id, now) {
                    log::info!(
                        "rtsp: viewer at {} left after {:.1} s",
                        v.address,
                        now - v.connected_s
                    );
                }
            }
        });
    }

    /// Whether the credentials of a request of `conn` may be checked (false: answered 401
    /// unchecked). A connection's first such request is its `Incoming`: the admission decides
    /// (one attempt of the address's budget, none while it is refused for wrong credentials);
    /// its next ones only ask whether the address is refused now.
    fn may_try(&self, conn: &Conn, credential: CredentialKind) -> bool {
        let now = now_us();
        let refused = if conn.accepted.load(Ordering::Relaxed) {
            let until = self.admission.refused_until(now, conn.addr);
            if until.is_some() {
                self.admission.note_refused(now, conn.addr);
            }
            until.map(|u| (RefuseReason::WrongCredentials, u.saturating_sub(now)))
        } else {
            let incoming = Incoming::connection(conn.addr, credential);
            match self.admission.decide(now, &incoming) {
                Decision::Accept => {
                    conn.accepted.store(true, Ordering::Relaxed);
                    None
                }
                Decision::Refuse {
                    reason,
                    retry_after_us,
                } => Some((reason, retry_after_us)),
                // Not for a connection (its address is validated); refused alike.
                Decision::Retry | Decision::Ignore => Some((RefuseReason::Budget, 0)),
            }
        };
        let Some((reason, after_us)) = refused else {
            return true;
        };
        lock(&self.viewers).refused += 1;
        let why = match reason {
            RefuseReason::WrongCredentials => "too many wrong credentials",
            RefuseReason::Budget => "too many attempts from that address",
        };
        log::debug!(
            "rtsp: refused a request from {} unchecked ({why}; for {} s more)",
            conn.ip,
            after_us.div_ceil(1_000_000)
        );
        false
    }

    /// What checking the credentials of a request of `conn` came to.
    fn checked(&self, conn: &Conn, outcome: Checked) {
        let ip = &conn.ip;
        let incoming = Incoming::connection(conn.addr, CredentialKind::RtspDigest);
        match outcome {
            Checked::Valid => {
                self.admission.checked(now_us(), &incoming, true);
                // A viewer now, or turned away: its next request hears which.
                conn.authenticated.store(true, Ordering::Relaxed);
                self.admit(conn);
            }
            Checked::Missing => {
                lock(&self.viewers).challenged += 1;
                log::debug!("rtsp: asked the viewer at {ip} for credentials (401)");
            }
            Checked::Wrong => {
                lock(&self.viewers).refused += 1;
                match self.admission.checked(now_us(), &incoming, false) {
                    Some(Failure::First) | None => {
                        log::warn!("rtsp: refused a viewer at {ip}: wrong user or password")
                    }
                    Some(Failure::Again) => {
                        log::debug!("rtsp: refused a viewer at {ip}: wrong user or password")
                    }
                    Some(Failure::Blocked {
                        failures,
                        for_us,
                        refused_before,
                    }) => log::warn!("{}", blocked_line(ip, failures, for_us, refused_before)),
                }
            }
        }
    }
}

/// The one line of a refusal's start.
fn blocked_line(ip: &str, failures: u32, for_us: Micros, refused_before: u64) -> String {
    format!(
        "rtsp: {failures} wrong user/password attempts from {ip}: its requests are refused \
         unchecked for {} s{}",
        for_us.div_ceil(1_000_000),
        if refused_before > 0 {
            format!(" ({refused_before} were refused during its previous refusal)")
        } else {
            String::new()
        }
    )
}

/// A connection's address as the admission keys it; unreadable: the unspecified address.
fn parse_ip(ip: Option<&str>) -> IpAddr {
    ip.and_then(|s| s.parse().ok())
        .unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

/// The server's [`Gate`]: the host's one admission for each connection, and the counts and
/// log lines of refusals.
struct ServerGate(Weak<Inner>);

impl ServerGate {
    /// The connection of the request (one made on the spot should it be unknown: then it
    /// is asked about like a new one each time).
    fn conn(inner: &Inner, ctx: &gst_rtsp_server::RTSPContext) -> Arc<Conn> {
        if let Some(c) = ctx.client().and_then(|c| inner.conn(c)) {
            return c;
        }
        let ip = ctx.client().and_then(ffi::client_ip);
        Arc::new(Conn {
            id: u64::MAX,
            addr: parse_ip(ip.as_deref()),
            ip: ip.unwrap_or_else(|| "?".into()),
            accepted: AtomicBool::new(false),
            state: Mutex::new(Connection::Pending),
            authenticated: AtomicBool::new(false),
        })
    }
}

impl Gate for ServerGate {
    fn may_try(&self, ctx: &gst_rtsp_server::RTSPContext) -> bool {
        let Some(inner) = self.0.upgrade() else {
            return true;
        };
        let credential = if ctx
            .request()
            .is_some_and(|m| !m.parse_auth_credentials().is_empty())
        {
            CredentialKind::RtspDigest
        } else {
            CredentialKind::None
        };
        inner.may_try(&Self::conn(&inner, ctx), credential)
    }

    fn checked(&self, ctx: &gst_rtsp_server::RTSPContext, outcome: Checked) {
        if let Some(inner) = self.0.upgrade() {
            inner.checked(&Self::conn(&inner, ctx), outcome);
        }
    }
}

/// An RTSP server for an untether host. Give it to the host as a consumer
/// (`HostSetup::consumers`); the stream is mounted when the host attaches it.
pub struct RtspServer {
    inner: Arc<Inner>,
    main_loop: glib::MainLoop,
    context: glib::MainContext,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl RtspServer {
    /// [`RtspServer::start_with`] an admission of its own (a server alone in its process).
    pub fn start(cfg: &RtspToml, access: Access) -> Result<RtspServer, RtspError> {
        RtspServer::start_with(cfg, access, Admission::default())
    }

    /// Checks `cfg`, starts GStreamer and listens on `rtsp.listen`. Viewers must authenticate
    /// (digest) unless `rtsp.auth`, or `auto` with an open host (`access`), says otherwise.
    /// `admission`: the host's one (`HostSetup::admission`), so that an address has one budget
    /// and one count of wrong credentials for RTSP and the host's other doors.
    pub fn start_with(
        cfg: &RtspToml,
        access: Access,
        admission: Admission,
    ) -> Result<RtspServer, RtspError> {
        cfg.validate()?;
        let addr = cfg.listen_addr()?.ok_or(RtspError::Off)?;
        let auth_mode = cfg.auth_mode(access)?;
        cfg.transports()?;
        gst::init().map_err(|e| RtspError::Init(e.to_string()))?;
        for (element, package) in ELEMENTS {
            if gst::ElementFactory::find(element).is_none() {
                return Err(RtspError::MissingElement { element, package });
            }
        }
        let server = RTSPServer::new();
        server.set_address(&addr.ip().to_string());
        server.set_service(&addr.port().to_string());
        let credentials =
            (auth_mode == RtspAuth::Digest).then(|| Credentials::new(&cfg.user, &cfg.password));
        let context = glib::MainContext::new();
        let source = server
            .attach(Some(&context))
            .map_err(|_| RtspError::Listen {
                addr,
                // gst-rtsp-server only says it failed: ask the system why.
                reason: match std::net::TcpListener::bind(addr) {
                    Err(e) => e.to_string(),
                    Ok(_) => "the RTSP server could not open its socket".into(),
                },
            })?;
        let port = u16::try_from(server.bound_port()).unwrap_or(addr.port());
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            credentials: credentials.clone(),
            local_addr: SocketAddr::new(addr.ip(), port),
            started: Instant::now(),
            server: server.clone(),
            stream: OnceLock::new(),
            keyframes: OnceLock::new(),
            medias: Mutex::new(Vec::new()),
            media_down: Condvar::new(),
            viewers: Mutex::new(Viewers::new(cfg.max_viewers)),
            counters: RtspCounters::default(),
            next_client: AtomicU64::new(0),
            admission,
            conns: Mutex::new(HashMap::new()),
            context: context.clone(),
        });
        if let Some(c) = &credentials {
            let auth = CountingAuth::digest(c, Box::new(ServerGate(Arc::downgrade(&inner))));
            server.set_auth(Some(&auth));
        }
        let weak = Arc::downgrade(&inner);
        server.connect_client_connected(move |_, client| {
            if let Some(inner) = weak.upgrade() {
                inner.client_connected(client);
            }
        });
        // Sessions of players that vanished without a TEARDOWN time out (60 s) only when
        // someone looks.
        let pool_server = server.clone();
        glib::timeout_source_new(
            SESSION_CLEANUP,
            Some("untether-rtsp-cleanup"),
            glib::Priority::DEFAULT,
            move || {
                if let Some(pool) = pool_server.session_pool() {
                    pool.cleanup();
                }
                glib::ControlFlow::Continue
            },
        )
        .attach(Some(&context));
        let main_loop = glib::MainLoop::new(Some(&context), false);
        let thread = {
            let (main_loop, context) = (main_loop.clone(), context.clone());
            std::thread::Builder::new()
                .name("host-rtsp".into())
                .spawn(move || {
                    let run = context.with_thread_default(|| main_loop.run());
                    if run.is_err() {
                        log::error!("rtsp: the server's main context is in use elsewhere");
                    }
                    // The listening socket closes with its source (ours, not the default
                    // context's: `SourceId::remove` would look there).
                    if let Some(src) = context.find_source_by_id(&source) {
                        src.destroy();
                    }
                })
                .map_err(RtspError::Thread)?
        };
        log::info!(
            "rtsp: listening on {} ({})",
            inner.local_addr,
            if inner.credentials.is_some() {
                "digest authentication"
            } else {
                "no authentication"
            }
        );
        Ok(RtspServer {
            inner,
            main_loop,
            context,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The address the server listens on (the port it got, when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// The digest credentials viewers need (None: no authentication).
    pub fn credentials(&self) -> Option<&Credentials> {
        self.inner.credentials.as_ref()
    }

    /// The stream's URL as a player on `host` opens it, with the credentials when
    /// `with_credentials` (`rtsp://untether:PASSWORD@HOST:PORT/untether`).
    pub fn url_for(&self, host: &str, with_credentials: bool) -> String {
        let host = match host.parse::<IpAddr>() {
            Ok(IpAddr::V6(ip)) => format!("[{ip}]"),
            _ => host.to_string(),
        };
        let userinfo = match (&self.inner.credentials, with_credentials) {
            (Some(c), true) => c.userinfo(),
            _ => String::new(),
        };
        format!(
            "rtsp://{userinfo}{host}:{}{}",
            self.inner.local_addr.port(),
            self.inner.cfg.path
        )
    }

    /// The URL on the address it listens on (without credentials), as in the summary.
    pub fn url(&self) -> String {
        self.url_for(&self.inner.local_addr.ip().to_string(), false)
    }

    /// Viewers connected now.
    pub fn viewers(&self) -> usize {
        lock(&self.inner.viewers).connected()
    }

    /// Ends the streams, closes every viewer's connection and the listening socket, and
    /// stops the server's thread. Called by `Drop` too.
    pub fn stop(&self) {
        let Some(thread) = lock(&self.thread).take() else {
            return;
        };
        for m in lock(&self.inner.medias).iter() {
            m.end();
        }
        let (server, main_loop) = (self.inner.server.clone(), self.main_loop.clone());
        self.context.invoke(move || {
            server.client_filter(Some(&mut |_, _| RTSPFilterResult::Remove));
            if let Some(pool) = server.session_pool() {
                pool.filter(Some(&mut |_, _| RTSPFilterResult::Remove));
            }
            main_loop.quit();
        });
        let _ = thread.join();
        lock(&self.inner.medias).clear();
    }

    fn mount(&self, stream: &StreamInfo) {
        let cfg = &self.inner.cfg;
        let factory = RTSPMediaFactory::new();
        factory.set_launch(&media::launch_line(
            stream.audio_channels,
            cfg.queue_frames,
            cfg.mtu,
        ));
        // One pipeline for every viewer: each frame is packetized once.
        factory.set_shared(true);
        factory.set_suspend_mode(RTSPSuspendMode::None);
        let (udp, tcp) = cfg.transports().unwrap_or((true, true));
        let mut protocols = RTSPLowerTrans::empty();
        if udp {
            protocols |= RTSPLowerTrans::UDP;
        }
        if tcp {
            protocols |= RTSPLowerTrans::TCP;
        }
        factory.set_protocols(protocols);
        if self.inner.credentials.is_some() {
            factory.add_role_from_structure(
                &gst::Structure::builder(auth::VIEWER_ROLE)
                    .field(RTSP_PERM_MEDIA_FACTORY_ACCESS.as_str(), true)
                    .field(RTSP_PERM_MEDIA_FACTORY_CONSTRUCT.as_str(), true)
                    .build(),
            );
        }
        let weak = Arc::downgrade(&self.inner);
        factory.connect_media_configure(move |_, media| {
            if let Some(inner) = weak.upgrade() {
                inner.media_configured(media, weak.clone());
            }
        });
        if let Some(mounts) = self.inner.server.mount_points() {
            mounts.add_factory(&cfg.path, factory);
        }
    }
}

impl Drop for RtspServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl StreamConsumer for RtspServer {
    fn attach(&self, stream: StreamInfo, keyframes: KeyframeRequests) {
        if self.inner.stream.set(stream).is_err() {
            log::warn!("rtsp: attached to a second host; ignored");
            return;
        }
        let _ = self.inner.keyframes.set(keyframes);
        self.mount(&stream);
    }

    fn video(&self, frame: &EncodedVideo) {
        let c = &self.inner.counters;
        let mut want = false;
        for m in lock(&self.inner.medias).iter_mut() {
            let counter = match m.push_video(frame) {
                Pushed::Sent => &c.frames_sent,
                Pushed::Dropped => &c.frames_dropped,
                Pushed::Skipped => &c.frames_skipped,
                Pushed::Gone => continue,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            want |= m.needs_keyframe();
        }
        if want {
            self.inner.request_keyframe();
        }
    }

    fn audio(&self, packet: &AudioPacket) {
        let c = &self.inner.counters;
        for m in lock(&self.inner.medias).iter_mut() {
            match m.push_audio(packet) {
                Some(Pushed::Sent) => c.audio_sent.fetch_add(1, Ordering::Relaxed),
                Some(Pushed::Dropped) => c.audio_dropped.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
        }
    }

    /// A viewer is connected and a media exists: gst-rtsp-server makes one only for a viewer
    /// it let in, so an unauthenticated connection does not make the host render and encode.
    fn watching(&self) -> bool {
        self.viewers() > 0 && !lock(&self.inner.medias).is_empty()
    }

    fn summary(&self) -> ConsumerSummary {
        let c = &self.inner.counters;
        let v = lock(&self.inner.viewers);
        let (asked, ignored) = self.inner.keyframes.get().map_or((0, 0), |k| k.counts());
        ConsumerSummary {
            kind: "rtsp".into(),
            url: self.url(),
            viewers: v.summaries(),
            viewers_total: v.total,
            refused: v.refused + v.turned_away,
            frames_sent: c.frames_sent.load(Ordering::Relaxed),
            frames_dropped: c.frames_dropped.load(Ordering::Relaxed),
            frames_skipped: c.frames_skipped.load(Ordering::Relaxed),
            audio_packets_sent: c.audio_sent.load(Ordering::Relaxed),
            audio_packets_dropped: c.audio_dropped.load(Ordering::Relaxed),
            keyframe_requests: asked,
            keyframe_requests_ignored: ignored,
        }
    }
}
