//! What can go wrong starting or driving a host.

use crate::config::ConfigError;
use crate::identity::IdentityError;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Net(#[from] untether_net::NetError),
    #[error(transparent)]
    Media(#[from] untether_media::MediaError),
    #[error("cannot start thread: {0}")]
    Thread(std::io::Error),
    /// The call does not fit how the host was set up (e.g. publishing to a scene host).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Kms(#[from] untether_capture::kms::KmsError),
    /// The desktop portal's screen cast (`--capture portal`) cannot start or ended.
    #[error("desktop portal capture: {0}")]
    Portal(String),
    #[error("identity: {0}")]
    Identity(#[from] IdentityError),
    /// The host stopped (a fatal error, or it was asked to).
    #[error("the host has stopped{}", .0.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Stopped(Option<String>),
}
