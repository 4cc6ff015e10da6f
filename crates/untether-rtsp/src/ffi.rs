//! Two getters the Rust bindings of gst-rtsp-server 1.22 leave out (marked TODO there): a
//! client's peer address, and a request header. Both only read, and check every pointer.

use std::ffi::CStr;
use std::os::raw::c_char;

use gst_rtsp_server::glib::translate::{IntoGlib, ToGlibPtr};
use gst_rtsp_server::gst_rtsp::{self, RTSPHeaderField};
use gst_rtsp_server::{RTSPClient, RTSPContext};

/// The IP address of the client's RTSP connection.
pub(crate) fn client_ip(client: &RTSPClient) -> Option<String> {
    // SAFETY: the connection belongs to the client, which the caller holds; it is only read,
    // and the returned string is copied before the call returns.
    unsafe {
        let conn = gst_rtsp_server::ffi::gst_rtsp_client_get_connection(client.to_glib_none().0);
        if conn.is_null() {
            return None;
        }
        let ip = gst_rtsp::ffi::gst_rtsp_connection_get_ip(conn);
        if ip.is_null() {
            return None;
        }
        Some(CStr::from_ptr(ip).to_string_lossy().into_owned())
    }
}

/// The first value of a header of the request being handled.
pub(crate) fn request_header(ctx: &RTSPContext, field: RTSPHeaderField) -> Option<String> {
    let msg = ctx.request()?;
    // SAFETY: the message lives as long as the context the caller holds; the header value
    // is owned by the message and copied before the call returns.
    unsafe {
        let mut value: *mut c_char = std::ptr::null_mut();
        let res = gst_rtsp::ffi::gst_rtsp_message_get_header(
            msg.to_glib_none().0,
            field.into_glib(),
            &mut value,
            0,
        );
        if res != gst_rtsp::ffi::GST_RTSP_OK || value.is_null() {
            return None;
        }
        Some(CStr::from_ptr(value).to_string_lossy().into_owned())
    }
}

/// `rtp/tcp` or `rtp/udp`, from a SETUP request's `Transport` header
/// (`RTP/AVP/TCP;unicast;interleaved=0-1` or `RTP/AVP;unicast;client_port=…`).
pub(crate) fn transport_name(header: &str) -> &'static str {
    let first = header.split(',').next().unwrap_or_default();
    let proto = first.split(';').next().unwrap_or_default().trim();
    if proto.eq_ignore_ascii_case("RTP/AVP/TCP") || proto.eq_ignore_ascii_case("RTP/AVPF/TCP") {
        "rtp/tcp"
    } else {
        "rtp/udp"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_are_named_from_the_setup_header() {
        assert_eq!(
            transport_name("RTP/AVP/TCP;unicast;interleaved=0-1"),
            "rtp/tcp"
        );
        assert_eq!(
            transport_name("RTP/AVP;unicast;client_port=5000-5001"),
            "rtp/udp"
        );
        assert_eq!(
            transport_name("RTP/AVP/UDP;unicast;client_port=5000-5001,RTP/AVP/TCP"),
            "rtp/udp"
        );
        assert_eq!(transport_name(""), "rtp/udp");
    }
}
