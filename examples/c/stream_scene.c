/* stream_scene: an application that streams what it renders with untether's C API.
 *
 * It draws an animated scene in software (moving gradients and a bouncing box) into its own
 * BGRA buffer, stamps each frame's number and render time into the top-left corner (so the
 * client can check them from the decoded pixels), and sends it, either synchronously from this
 * loop (default) or by publishing it to untether's sending thread (--thread). Input from the
 * client is printed as it arrives.
 *
 *   stream_scene [--port N | --bind IP:PORT] [--state-dir DIR] [--access allowlist|pin|open]
 *                [--frames N] [--fps N] [--size WxH] [--thread] [--audio]
 *   untether client 127.0.0.1:N          (in another terminal; with --access pin: --pin PIN)
 *
 * It prints the host's fingerprint (what the client shows on first contact) and, with
 * --access pin, the one-time PIN to pair with.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <untether.h>

static void render(uint8_t *px, int w, int h, int n) {
    int bx = (n * 7) % (w - 160), by = (int)((h - 160) * (0.5 + 0.5 * sin(n * 0.05)));
    for (int y = 0; y < h; y++) {
        uint8_t *row = px + (size_t)y * w * 4;
        for (int x = 0; x < w; x++) {
            uint8_t *p = row + x * 4;
            int in_box = x >= bx && x < bx + 160 && y >= by && y < by + 160;
            p[0] = in_box ? 40 : (uint8_t)(x + n * 3);         /* B */
            p[1] = in_box ? 200 : (uint8_t)(y + n);            /* G */
            p[2] = in_box ? 240 : (uint8_t)((x ^ y) + n * 2);  /* R */
            p[3] = 255;
        }
    }
}

static int check(int rc, const char *what) {
    if (rc < 0) {
        fprintf(stderr, "stream_scene: %s failed (%d): %s\n", what, rc, untether_last_error());
        exit(1);
    }
    return rc;
}

int main(int argc, char **argv) {
    int port = 9710, frames = 600, fps = 60, w = 1280, h = 720, threaded = 0, audio = 0;
    const char *bind = NULL, *state_dir = NULL, *access = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bind") && i + 1 < argc) bind = argv[++i];
        else if (!strcmp(argv[i], "--state-dir") && i + 1 < argc) state_dir = argv[++i];
        else if (!strcmp(argv[i], "--access") && i + 1 < argc) access = argv[++i];
        else if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fps") && i + 1 < argc) fps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) sscanf(argv[++i], "%dx%d", &w, &h);
        else if (!strcmp(argv[i], "--thread")) threaded = 1;
        else if (!strcmp(argv[i], "--audio")) audio = 1;
        else {
            fprintf(stderr, "usage: %s [--port N | --bind IP:PORT] [--state-dir DIR] [--access allowlist|pin|open] "
                            "[--frames N] [--fps N] [--size WxH] [--thread] [--audio]\n", argv[0]);
            return 2;
        }
    }
    UntetherHost *host = NULL;
    check(untether_host_new(&host, UNTETHER_ENCODER_X264, UNTETHER_TRANSPORT_UDP,
                            UNTETHER_FORMAT_BGRA, (uint32_t)w, (uint32_t)h), "untether_host_new");
    check(untether_host_set_feature(host, UNTETHER_FEATURE_FPS, fps), "set fps");
    check(untether_host_set_feature(host, UNTETHER_FEATURE_BITRATE_KBPS, 8000), "set bitrate");
    if (bind) check(untether_host_set_bind(host, bind), "set bind address");
    else check(untether_host_set_feature(host, UNTETHER_FEATURE_PORT, port), "set port");
    if (state_dir) check(untether_host_set_state_dir(host, state_dir), "set state directory");
    if (access) check(untether_host_set_access(host, access), "set access policy");
    check(untether_host_set_feature(host, UNTETHER_FEATURE_AUDIO, audio), "set audio");
    size_t len = (size_t)w * h * 4;
    uint8_t *px = malloc(len);
    if (!px) return 1;
    check(untether_host_set_frame_buffer(host, px, len, (uint32_t)w * 4), "set frame buffer");
    check(untether_host_start(host, threaded ? UNTETHER_MODE_THREAD : UNTETHER_MODE_SYNC), "start");
    printf("stream_scene: listening on udp port %d (%s mode)\n", untether_host_local_port(host),
           threaded ? "thread" : "sync");
    char fingerprint[UNTETHER_FINGERPRINT_SIZE], pin[UNTETHER_PIN_SIZE];
    check(untether_host_fingerprint(host, fingerprint, sizeof fingerprint), "read the fingerprint");
    printf("stream_scene: host fingerprint %s\n", fingerprint);
    if (check(untether_host_pairing_pin(host, pin, sizeof pin), "read the pairing PIN") > 0)
        printf("stream_scene: pairing PIN %s (untether client THIS-HOST --pin %s)\n", pin, pin);
    fflush(stdout);
    if (check(untether_host_wait_client(host, 20000), "wait for a client") == 0) {
        fprintf(stderr, "stream_scene: no client within 20 s\n");
        untether_host_free(host);
        return 1;
    }
    uint64_t start = untether_now_us(), interval = 1000000 / (uint64_t)fps;
    int sent = 0;
    int16_t pcm[480 * 2];
    for (int n = 0; n < frames; n++) {
        render(px, w, h, n);
        check(untether_stamp_bgra(px, (uint32_t)w * 4, (uint32_t)w, (uint32_t)h, (uint32_t)n,
                                  untether_now_us()), "stamp");
        if (threaded) check(untether_host_publish_frame(host, NULL), "publish");
        else sent += check(untether_host_send_frame(host, NULL), "send");
        if (audio) {
            /* A 440 Hz tone, 10 ms per frame tick (the demo's rate need not match video's). */
            for (int i = 0; i < 480; i++)
                pcm[2 * i] = pcm[2 * i + 1] = (int16_t)(8000 * sin(2 * M_PI * 440 * (n * 480 + i) / 48000.0));
            check(untether_host_push_audio(host, pcm, 480, 2, 0), "push audio");
        }
        UntetherInputEvent ev;
        while (check(untether_host_poll_input(host, &ev), "poll input") == 1)
            printf("input #%u: kind %d device %u a %d b %d c %d d %d\n", ev.seq, (int)ev.kind,
                   ev.device, ev.a, ev.b, ev.c, ev.d);
        uint64_t next = start + (uint64_t)(n + 1) * interval, now = untether_now_us();
        if (next > now) {
            struct timespec ts = {(time_t)((next - now) / 1000000), (long)((next - now) % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
    }
    printf("stream_scene: %d frames rendered, %d sent synchronously\n", frames, sent);
    untether_host_free(host);
    free(px);
    return 0;
}
