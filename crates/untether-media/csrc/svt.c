/* A thin shim over SVT-AV1's encoder API (EbSvtAv1Enc.h) for untether's direct SVT-AV1
 * backend (crates/untether-media/src/codec/svt.rs): the configuration structure's layout
 * changes between SVT-AV1 versions, so it is filled here, against the installed header, and
 * Rust only sees these functions. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <EbSvtAv1Enc.h>

typedef struct ut_svt {
    EbComponentType *handle;
    EbSvtAv1EncConfiguration cfg;
    EbBufferHeaderType in;
    EbSvtIOFormat io;
    EbBufferHeaderType *out;
    int started;
} ut_svt;

/* A new encoder handle with SVT-AV1's defaults; NULL on failure. */
ut_svt *ut_svt_new(void) {
    ut_svt *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (svt_av1_enc_init_handle(&s->handle, s, &s->cfg) != EB_ErrorNone) {
        free(s);
        return NULL;
    }
    return s;
}

/* The low-latency configuration (docs/CODECS.md): low-delay prediction, CBR at `bps`, no
 * lookahead, no scene-change keyframes, a keyframe every `intra_period` + 1 frames (-1:
 * never after the first), BT.601 limited range, 8-bit 4:2:0. Returns an EbErrorType. */
int ut_svt_configure(ut_svt *s, uint32_t width, uint32_t height, uint32_t fps, int preset,
                     uint32_t bps, uint32_t threads, int32_t intra_period, int64_t buffer_ms) {
    EbSvtAv1EncConfiguration *c = &s->cfg;
    c->source_width = width;
    c->source_height = height;
    c->frame_rate_numerator = fps;
    c->frame_rate_denominator = 1;
    c->encoder_bit_depth = 8;
    c->encoder_color_format = EB_YUV420;
    c->enc_mode = (int8_t)preset;
    c->pred_structure = 1; /* SVT_AV1_PRED_LOW_DELAY_B */
    c->rate_control_mode = 2; /* CBR */
    c->target_bit_rate = bps;
    c->look_ahead_distance = 0;
    c->scene_change_detection = 0;
    c->enable_overlays = 0;
    c->intra_period_length = intra_period;
    c->logical_processors = threads;
    c->maximum_buffer_size_ms = buffer_ms;
    c->starting_buffer_level_ms = 20;
    c->optimal_buffer_level_ms = 20;
    c->color_description_present_flag = 1;
    c->color_primaries = EB_CICP_CP_BT_601;
    c->transfer_characteristics = EB_CICP_TC_BT_601;
    c->matrix_coefficients = EB_CICP_MC_BT_601;
    c->color_range = EB_CR_STUDIO_RANGE;
    return 0;
}

/* Extra `key=value` parameters (svtav1-params names); an EbErrorType. */
int ut_svt_parse(ut_svt *s, const char *key, const char *value) {
    return svt_av1_enc_parse_parameter(&s->cfg, key, value);
}

/* Applies the configuration and starts the encoder; an EbErrorType. */
int ut_svt_start(ut_svt *s) {
    EbErrorType e = svt_av1_enc_set_parameter(s->handle, &s->cfg);
    if (e != EB_ErrorNone)
        return e;
    e = svt_av1_enc_init(s->handle);
    s->started = e == EB_ErrorNone;
    return e;
}

/* Sends one 8-bit I420 picture (the planes are read during the call: SVT copies them). */
int ut_svt_send(ut_svt *s, const uint8_t *y, const uint8_t *u, const uint8_t *v, uint32_t ys,
                uint32_t us, uint32_t vs, int64_t pts) {
    memset(&s->io, 0, sizeof(s->io));
    memset(&s->in, 0, sizeof(s->in));
    s->io.luma = (uint8_t *)y;
    s->io.cb = (uint8_t *)u;
    s->io.cr = (uint8_t *)v;
    s->io.y_stride = ys;
    s->io.cb_stride = us;
    s->io.cr_stride = vs;
    s->io.width = s->cfg.source_width;
    s->io.height = s->cfg.source_height;
    s->in.size = sizeof(s->in);
    s->in.p_buffer = (uint8_t *)&s->io;
    s->in.n_filled_len = ys * s->cfg.source_height + (us + vs) * ((s->cfg.source_height + 1) / 2);
    s->in.n_alloc_len = s->in.n_filled_len;
    s->in.pts = pts;
    s->in.pic_type = EB_AV1_INVALID_PICTURE;
    return svt_av1_enc_send_picture(s->handle, &s->in);
}

/* The next packet, without waiting: 1 and its bytes (valid until ut_svt_release), 0 if none is
 * ready yet, < 0 (an EbErrorType) on failure. `key` is 1 for a key frame. */
int ut_svt_poll(ut_svt *s, const uint8_t **data, uint32_t *len, int64_t *pts, int *key) {
    if (s->out) {
        svt_av1_enc_release_out_buffer(&s->out);
        s->out = NULL;
    }
    EbBufferHeaderType *p = NULL;
    EbErrorType e = svt_av1_enc_get_packet(s->handle, &p, 0);
    if (e == EB_NoErrorEmptyQueue || p == NULL)
        return 0;
    if (e != EB_ErrorNone)
        return (int)e;
    s->out = p;
    *data = p->p_buffer;
    *len = p->n_filled_len;
    *pts = p->pts;
    *key = p->pic_type == EB_AV1_KEY_PICTURE;
    return 1;
}

void ut_svt_free(ut_svt *s) {
    if (!s)
        return;
    if (s->out)
        svt_av1_enc_release_out_buffer(&s->out);
    if (s->started) {
        /* End of stream, then drain (bounded): SVT-AV1 wants it before deinit. */
        EbBufferHeaderType eos;
        memset(&eos, 0, sizeof(eos));
        eos.size = sizeof(eos);
        eos.flags = EB_BUFFERFLAG_EOS;
        eos.pic_type = EB_AV1_INVALID_PICTURE;
        svt_av1_enc_send_picture(s->handle, &eos);
        for (int i = 0; i < 64; i++) {
            EbBufferHeaderType *p = NULL;
            if (svt_av1_enc_get_packet(s->handle, &p, 1) != EB_ErrorNone || !p)
                break;
            int end = (p->flags & EB_BUFFERFLAG_EOS) != 0;
            svt_av1_enc_release_out_buffer(&p);
            if (end)
                break;
        }
    }
    svt_av1_enc_deinit(s->handle);
    svt_av1_enc_deinit_handle(s->handle);
    free(s);
}

const char *ut_svt_version(void) { return svt_av1_get_version(); }
