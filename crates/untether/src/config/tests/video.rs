//! `[video]`, `[display]` and `[vr]`: codec, encoder, refresh, conversion, decoder, slices,
//! resolutions and bit rates.

use super::super::*;

#[test]
fn rgb_encoder_implies_rgb_path() {
    use untether_media::codec::{Codec, EncoderChoice};
    use untether_media::convert::Conversion;
    let v = VideoToml {
        encoder: Some("libx264rgb".into()),
        ..Default::default()
    }
    .validate()
    .unwrap();
    assert_eq!(v.selection.conversion, Conversion::Rgb);
    assert_eq!(v.selection.codec, Some(Codec::H264Rgb));
    assert_eq!(v.codecs()[0], untether_proto::Codec::H264Rgb);
    let v = ConfigToml::parse("[video]\nconversion = \"rgb\"\n", "t.toml")
        .unwrap()
        .video
        .validate()
        .unwrap();
    assert_eq!(
        v.selection.encoder,
        EncoderChoice::Named("libx264rgb".into())
    );
    let e = VideoToml {
        encoder: Some("libx264".into()),
        conversion: Some("rgb".into()),
        ..Default::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("video.encoder, video.conversion:") && e.contains("libx264rgb"),
        "{e}"
    );
    let e = ConfigToml::parse(
        "[video]\nencoder = \"libx264rgb\"\nconversion = \"simd\"\n",
        "t.toml",
    )
    .unwrap()
    .video
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("video.encoder, video.conversion:") && e.contains("\"simd\""),
        "{e}"
    );
}

#[test]
fn codec_encoder_and_refresh_keys() {
    use untether_media::codec::{Codec, EncoderChoice, Refresh};
    let v = |toml: &str| ConfigToml::parse(toml, "t.toml").unwrap().video.validate();
    // Defaults: H.264, the best encoder that opens, keyframes on demand.
    let d = v("").unwrap();
    assert_eq!(d.codecs(), vec![Codec::H264]);
    assert_eq!(d.selection.encoder, EncoderChoice::Auto);
    assert_eq!((d.refresh, d.refresh_period), (Refresh::Idr, 30));
    // An encoder's codec follows from it; auto offers every codec.
    assert_eq!(
        v("[video]\nencoder = \"libx265\"\n").unwrap().codecs(),
        vec![Codec::Hevc]
    );
    assert_eq!(
        v("[video]\ncodec = \"auto\"\n").unwrap().codecs(),
        vec![Codec::H264, Codec::Hevc, Codec::Av1]
    );
    let e = v("[video]\ncodec = \"av1\"\nencoder = \"libx264\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("video.codec, video.encoder:") && e.contains("libx264"),
        "{e}"
    );
    let e = v("[video]\ncodec = \"vp8\"\n").unwrap_err().to_string();
    assert!(e.starts_with("video.codec:") && e.contains("hevc"), "{e}");
    let e = v("[video]\nencoder = \"x265\"\n").unwrap_err().to_string();
    assert!(
        e.starts_with("video.encoder:") && e.contains("libx265"),
        "{e}"
    );
    // Intra refresh: x264 and NVENC only, refused clearly elsewhere.
    let i = v("[video]\nrefresh = \"intra\"\nrefresh_period = 20\n").unwrap();
    assert_eq!((i.refresh, i.refresh_period), (Refresh::Intra, 20));
    assert!(v("[video]\nrefresh = \"intra\"\nencoder = \"h264_nvenc\"\n").is_ok());
    let e = v("[video]\nrefresh = \"intra\"\nencoder = \"libx265\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("video.refresh, video.encoder:") && e.contains("libx265"),
        "{e}"
    );
    let e = v("[video]\nrefresh = \"intra\"\ncodec = \"av1\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("video.refresh, video.codec:"), "{e}");
    let e = v("[video]\nrefresh = \"sometimes\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("video.refresh:") && e.contains("idr, intra"),
        "{e}"
    );
    let e = ConfigToml::parse("[video]\nrefresh_period = 1\n", "t.toml")
        .map(|c| c.video.validate().map(|_| ()))
        .unwrap()
        .unwrap_err()
        .to_string();
    assert_eq!(e, "video.refresh_period: 1 is out of range 2..=600");
}

#[test]
fn client_codecs_decoder_and_hwaccel_keys() {
    use untether_media::codec::{Codec, DecoderChoice, HwAccel};
    let c = ClientToml::default();
    assert_eq!(
        c.codec_list().unwrap(),
        vec![Codec::H264, Codec::H264Rgb, Codec::Hevc, Codec::Av1]
    );
    assert_eq!(
        c.decoder_choice().unwrap(),
        (DecoderChoice::Auto, HwAccel::None)
    );
    let with = |f: &dyn Fn(&mut ClientToml) -> Result<(), ConfigError>| {
        let mut c = ClientToml::default();
        f(&mut c)
            .and_then(|()| c.validate())
            .map_err(|e| e.to_string())
    };
    let e = with(&|c| {
        c.codecs = parse_key("hevc,mpeg2")?;
        Ok(())
    })
    .unwrap_err();
    assert!(
        e.starts_with("client.codecs:") && e.contains("mpeg2"),
        "{e}"
    );
    let e = with(&|c| {
        c.codecs = parse_key("hevc, hevc")?;
        Ok(())
    })
    .unwrap_err();
    assert!(e.contains("twice"), "{e}");
    assert!(with(&|c| {
        c.codecs = parse_key("")?;
        Ok(())
    })
    .is_err());
    // The file: an array, parsed as it is read (a bad name is named with its key).
    let c = ConfigToml::parse("[client]\ncodecs = [\"hevc\", \"h264\"]\n", "t.toml").unwrap();
    assert_eq!(
        c.client.codec_list().unwrap(),
        vec![Codec::Hevc, Codec::H264]
    );
    let e = ConfigToml::parse("[client]\ncodecs = [\"vp8\"]\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("client.codecs") && e.contains("vp8"), "{e}");
    let e = with(&|c| {
        c.hwaccel = parse_key("opencl")?;
        Ok(())
    })
    .unwrap_err();
    assert!(
        e.starts_with("client.hwaccel:") && e.contains("vaapi"),
        "{e}"
    );
    let e = with(&|c| {
        c.decoder = parse_key("magic")?;
        Ok(())
    })
    .unwrap_err();
    assert!(
        e.starts_with("client.decoder:") && e.contains("software"),
        "{e}"
    );
    let e = with(&|c| {
        c.decoder = DecoderChoice::Software;
        c.hwaccel = HwAccel::Vaapi;
        Ok(())
    })
    .unwrap_err();
    assert!(e.starts_with("client.decoder, client.hwaccel:"), "{e}");
    assert!(with(&|c| {
        c.decoder = DecoderChoice::Named("h264_v4l2m2m".into());
        c.hwaccel = HwAccel::Vaapi;
        Ok(())
    })
    .is_ok());
}

#[test]
fn bitrate_key_takes_units() {
    let c = ConfigToml::parse("[video]\nbitrate_kbps = \"10M\"\n", "t.toml").unwrap();
    assert_eq!(c.video.bitrate_kbps, 10_000);
    let c = ConfigToml::parse("[video]\nbitrate_kbps = 8000\n", "t.toml").unwrap();
    assert_eq!(c.video.bitrate_kbps, 8000);
    let e = ConfigToml::parse("[video]\nbitrate_kbps = \"fast\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bitrate_kbps") && e.contains("10M"), "{e}");
}

#[test]
fn resolutions() {
    assert_eq!(
        "1080p".parse::<Resolution>().unwrap(),
        Resolution {
            width: 1920,
            height: 1080
        }
    );
    assert_eq!("1920X1080".parse::<Resolution>().unwrap().height, 1080);
    assert_eq!("360p".parse::<Resolution>().unwrap().width, 640);
    assert!("1281x720"
        .parse::<Resolution>()
        .unwrap()
        .validate()
        .is_err());
    assert!("big".parse::<Resolution>().is_err());
    for (name, ..) in units::NAMED_SIZES {
        name.parse::<Resolution>().unwrap().validate().unwrap();
    }
}

#[test]
fn display_and_vr_keys_are_checked() {
    let c = ConfigToml::parse(
        "[client]\npresenter = \"gl\"\nfullscreen = true\noverlay = true\n[vr]\nenabled = true\nlate_warp = false\n",
        "t",
    )
    .unwrap();
    validate_client(&c.client, &c.network).unwrap();
    assert_eq!(
        c.client.presenter,
        untether_media::present::PresenterKind::Gl
    );
    assert!(c.vr.enabled && !c.vr.late_warp && c.client.fullscreen && c.client.overlay);
    assert_eq!(c.vr.lens_profile().unwrap().name, "generic");
    let e = parse_key::<untether_media::present::PresenterKind>("vulkan")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("client.presenter") && e.contains("auto, gl, sdl"),
        "{e}"
    );
    // A lens profile is read and checked at start; the error names vr.lens, the file and
    // the profile's key.
    let dir = std::env::temp_dir().join(format!("untether-lens-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "name = \"x\"\nk = [0.2]\nchromatic = [1.0, 1.0, 1.5]\ncenter = [0.5, 0.5]\nfit = 1.0\n",
    )
    .unwrap();
    let vr = VrToml {
        lens: file.display().to_string(),
        ..Default::default()
    };
    let e = vr.validate().unwrap_err();
    assert_eq!(e.key(), Some("vr.lens"));
    let msg = e.to_string();
    assert!(
        msg.contains("bad.toml") && msg.contains("chromatic: the blue scale 1.5"),
        "{msg}"
    );
    let missing = VrToml {
        lens: "/nonexistent/lens.toml".into(),
        ..Default::default()
    };
    assert!(missing
        .validate()
        .unwrap_err()
        .to_string()
        .contains("cannot read it"));
    let e = ConfigToml::parse("[vr]\nlens_file = \"x\"\n", "t").unwrap_err();
    assert!(e.to_string().contains("lens_file"), "{e}");
    assert!(parse_on_off("--late-warp", "on").unwrap());
    assert!(!parse_on_off("--late-warp", "off").unwrap());
    assert!(parse_on_off("--late-warp", "maybe").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slices_are_checked_by_the_one_validator() {
    // The file's key: a count out of range names the key and its range.
    let e = ConfigToml::parse("[video]\nslices = 17\n", "t.toml")
        .map(|c| c.video.validate())
        .and_then(|r| r.map(|_| ()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("video.slices") && e.contains("1..=16"), "{e}");
    let e = ConfigToml::parse("[video]\nslices = -1\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("video.slices"), "{e}");
    let mut v = VideoToml {
        slices: 0,
        ..Default::default()
    };
    let e = v.validate().unwrap_err().to_string();
    assert!(e.starts_with("video.slices"), "{e}");
    // Slices need libx264: libx264rgb sends frames whole.
    v.slices = 4;
    v.encoder = Some("libx264rgb".into());
    let e = v.validate().unwrap_err().to_string();
    assert!(
        e.starts_with("video.slices, video.encoder") && e.contains("libx264"),
        "{e}"
    );
    v.encoder = None;
    assert_eq!(v.validate().unwrap().slices, 4);
    let c = ConfigToml::parse("[video]\nslices = 8\n", "t.toml").unwrap();
    assert_eq!(c.video.validate().unwrap().slices, 8);
    assert_eq!(VideoConfig::default().slices, 1);
    // The wire and the encoder agree on the bound.
    assert_eq!(
        untether_proto::wire::MAX_SLICES as usize,
        untether_media::x264::MAX_SLICES
    );
}

#[test]
fn slices_are_refused_by_name_where_libx264_does_not_send_them() {
    use untether_media::codec::{Codec, EncoderChoice, Refresh};
    let named = |n: &str| EncoderChoice::Named(n.into());
    let h264 = Some(Codec::H264);
    assert!(slices_refused(1, None, &named("libx265"), Refresh::Intra).is_none());
    assert!(slices_refused(4, h264, &EncoderChoice::Auto, Refresh::Idr).is_none());
    assert!(slices_refused(4, h264, &named("libx264"), Refresh::Idr).is_none());
    let (keys, why) = slices_refused(4, h264, &named("h264_nvenc"), Refresh::Idr).unwrap();
    assert_eq!(keys, "video.slices, video.encoder");
    assert!(
        why.contains("h264_nvenc") && why.contains("libx264"),
        "{why}"
    );
    let (keys, why) =
        slices_refused(2, Some(Codec::Hevc), &EncoderChoice::Auto, Refresh::Idr).unwrap();
    assert_eq!(keys, "video.slices, video.codec");
    assert!(why.contains("hevc"), "{why}");
    let (keys, why) = slices_refused(2, None, &EncoderChoice::Auto, Refresh::Idr).unwrap();
    assert_eq!(keys, "video.slices, video.codec");
    assert!(why.contains("auto"), "{why}");
    let (keys, why) = slices_refused(8, h264, &EncoderChoice::Auto, Refresh::Intra).unwrap();
    assert_eq!(keys, "video.slices, video.refresh");
    assert!(why.contains("refresh idr"), "{why}");
    // Through the file's keys, as the CLI's flags go.
    for (toml, keys) in [
        (
            "slices = 4\ncodec = \"hevc\"\n",
            "video.slices, video.codec",
        ),
        (
            "slices = 4\ncodec = \"auto\"\n",
            "video.slices, video.codec",
        ),
        (
            "slices = 4\nencoder = \"libx265\"\n",
            "video.slices, video.encoder",
        ),
        (
            "slices = 4\nrefresh = \"intra\"\n",
            "video.slices, video.refresh",
        ),
    ] {
        let e = ConfigToml::parse(&format!("[video]\n{toml}"), "t.toml")
            .unwrap()
            .video
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(keys), "{toml}: {e}");
    }
    let c = ConfigToml::parse(
        "[video]\nslices = 4\ncodec = \"h264\"\nencoder = \"libx264\"\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.video.validate().unwrap().slices, 4);
}

/// Issue 24: every encoder setting is inside the validated configuration: the keyframe
/// interval, the encoder family's own options and the audio bit rate are keys of the file,
/// checked with the others (they were setup fields no validator saw).
#[test]
fn gop_encoder_params_and_audio_bitrate_are_validated_keys() {
    let c = ConfigToml::parse(
        "[video]\ngop_frames = 120\nencoder_params = \"aq-mode=0:rc-lookahead=0\"\n\
         [host]\naudio_bitrate_kbps = 96\n",
        "t.toml",
    )
    .unwrap();
    let v = c.video.validate().unwrap();
    assert_eq!(v.gop_frames, 120);
    assert_eq!(v.encoder_params, "aq-mode=0:rc-lookahead=0");
    assert_eq!(c.host.audio_bitrate_kbps, 96);
    c.host.validate().unwrap();
    // Out of range: named with its key and range, in the file and when set in code.
    let e = ConfigToml::parse("[video]\ngop_frames = 100001\n", "t.toml")
        .unwrap()
        .video
        .validate()
        .unwrap_err()
        .to_string();
    assert_eq!(e, "video.gop_frames: 100001 is out of range 0..=100000");
    let e = ConfigToml::parse("[host]\naudio_bitrate_kbps = 8\n", "t.toml")
        .unwrap()
        .host
        .validate()
        .unwrap_err()
        .to_string();
    assert_eq!(e, "host.audio_bitrate_kbps: 8 is out of range 16..=510");
    for bad in ["keyint", "=5", "a=1:", "a b=1", "a=1:b"] {
        let e = VideoToml {
            encoder_params: bad.into(),
            ..Default::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("video.encoder_params:") && e.contains("key=value"),
            "{bad}: {e}"
        );
    }
}
