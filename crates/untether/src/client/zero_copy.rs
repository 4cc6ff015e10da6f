//! Zero-copy on the client's side (`untether_media::zero_copy`): whether the decoder leaves
//! pictures on the GPU for the presenter, the line that says which path they take, and the
//! download for whoever reads their planes.

use untether_media::codec::{DecodedFrame, HwAccel};
use untether_media::present::{Presenter, PresenterKind};

use super::options::{ClientOptions, Display};
use super::ClientError;

/// Whether decoded pictures stay on the GPU for the presenter: a window that may be the GL
/// presenter, and a hardware decoder whose zero-copy path has its device here (the presenter
/// still falls back, saying why, when its import cannot run).
pub(crate) fn keep_on_gpu(options: &ClientOptions) -> Result<bool, ClientError> {
    let (_, hwaccel) = options.client.decoder_choice()?;
    if options.display != Display::Window || options.client.presenter == PresenterKind::Sdl {
        return Ok(false);
    }
    untether_media::zero_copy::keep_on_gpu(hwaccel)
        .map_err(|e| ClientError::Media(untether_media::MediaError::Other(e.to_string())))
}

/// Logs, once per presenter, which path decoded pictures take (with `--hwaccel`).
pub(crate) fn log_plan(options: &ClientOptions, p: &dyn Presenter) {
    if let Ok((_, hwaccel)) = options.client.decoder_choice() {
        if hwaccel != HwAccel::None {
            if std::env::var("UNTETHER_ZERO_COPY").as_deref() == Ok("off") {
                log::info!(
                    "client: zero-copy off (UNTETHER_ZERO_COPY=off); decoded pictures go \
                     through system memory"
                );
                return;
            }
            let plan = untether_media::zero_copy::plan(hwaccel, p.egl_support().as_ref());
            log::info!("client: {plan}");
        }
    }
}

/// Whether `picture` must be downloaded before it is shown: it is on the GPU, and the
/// presenter cannot take it or a sink reads its planes.
pub(crate) fn must_download(
    picture: &DecodedFrame,
    presenter: Option<&dyn Presenter>,
    sink: bool,
) -> bool {
    picture.gpu().is_some() && (sink || presenter.is_none_or(|p| !p.takes_gpu_pictures()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_media::present::HeadlessPresenter;
    use untether_media::zero_copy::memfd::memfd_nv12_picture;

    #[test]
    fn a_picture_on_the_gpu_is_downloaded_for_whoever_reads_planes() {
        let on_gpu = memfd_nv12_picture(64, 32, [81, 90, 240]).unwrap();
        let in_memory = on_gpu.download().unwrap();
        let headless = HeadlessPresenter;
        assert!(must_download(&on_gpu, Some(&headless), false));
        assert!(must_download(&on_gpu, None, false));
        assert!(!must_download(&in_memory, Some(&headless), true));
        assert!(!must_download(&in_memory, None, true));
    }
}
