//! `untether host --capture wlr[:OUTPUT] [--region X,Y,WxH]` and `--capture portal`: the
//! Wayland capture arguments.

use anyhow::{bail, Result};
use untether::host::SourceSpec;
use untether_media::wlr::WlrTarget;

/// Whether `--capture` names a Wayland capture.
pub fn is_wayland(capture: &str) -> bool {
    capture == "wlr"
        || capture.starts_with("wlr:")
        || capture == "portal"
        || capture.starts_with("pipewire:")
}

/// The source for `--capture wlr[:OUTPUT]` and `--region` (the compositor in $WAYLAND_DISPLAY).
pub fn source(capture: &str, region: Option<&str>, cursor: bool) -> Result<SourceSpec> {
    if capture == "portal" {
        if region.is_some() {
            bail!("--region goes with --capture wlr (with --capture portal the portal's dialog picks a monitor or a window)");
        }
        return Ok(SourceSpec::Portal { token_file: None });
    }
    if let Some(target) = capture.strip_prefix("pipewire:") {
        if target.is_empty() || region.is_some() {
            bail!("--capture {capture:?}: expected pipewire:NODE (a node.name or serial, see pw-cli ls Node), without --region");
        }
        return Ok(SourceSpec::PipeWire {
            target: target.to_string(),
        });
    }
    let output = match capture.strip_prefix("wlr") {
        Some("") => None,
        Some(o) => match o.strip_prefix(':') {
            Some(o) if !o.is_empty() => Some(o.to_string()),
            _ => bail!("--capture {capture:?}: expected wlr or wlr:OUTPUT (a name like HEADLESS-1 or DP-1, or an index from 0)"),
        },
        None => bail!("--capture {capture:?}: expected wlr or wlr:OUTPUT"),
    };
    let region = region.map(parse_region).transpose()?;
    Ok(SourceSpec::Wlr {
        display: None,
        target: WlrTarget {
            output,
            region,
            cursor,
        },
    })
}

/// `X,Y,WxH` (or slurp's `X,Y WxH`) in the output's logical coordinates.
pub fn parse_region(s: &str) -> Result<(i32, i32, i32, i32)> {
    let bad = || {
        anyhow::anyhow!(
            "--region {s:?}: expected X,Y,WxH (e.g. 0,0,1280x720; slurp's \"X,Y WxH\" too)"
        )
    };
    let (xy, wh) = s.rsplit_once([',', ' ']).ok_or_else(bad)?;
    let (x, y) = xy.split_once(',').ok_or_else(bad)?;
    let (w, h) = wh.split_once('x').ok_or_else(bad)?;
    let n = |v: &str| v.trim().parse::<i32>().map_err(|_| bad());
    let r = (n(x)?, n(y)?, n(w)?, n(h)?);
    if r.2 <= 0 || r.3 <= 0 || r.0 < 0 || r.1 < 0 {
        bail!("--region {s:?}: the origin must be ≥ 0 and the size > 0");
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_parse_and_bad_ones_say_the_form() {
        assert_eq!(parse_region("10,20,640x480").unwrap(), (10, 20, 640, 480));
        assert_eq!(parse_region("10,20 640x480").unwrap(), (10, 20, 640, 480));
        for bad in ["10,20", "a,b,1x1", "0,0,0x5", "-1,0,4x4"] {
            let e = parse_region(bad).unwrap_err().to_string();
            assert!(e.contains("--region"), "{bad}: {e}");
        }
        assert!(source("wlr:", None, false).is_err());
        assert!(matches!(
            source("wlr:HEADLESS-1", None, false).unwrap(),
            SourceSpec::Wlr { target, .. } if target.output.as_deref() == Some("HEADLESS-1")
        ));
        assert_eq!(
            source("portal", None, false).unwrap(),
            SourceSpec::Portal { token_file: None }
        );
        let e = source("portal", Some("0,0,8x8"), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--region") && e.contains("portal"), "{e}");
    }
}
