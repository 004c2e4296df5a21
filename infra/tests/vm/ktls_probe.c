/* infra/tests/vm/ktls_probe.c — smoke test of the VM harness for the kTLS use case.
 * Inside the guest: TCP over loopback, TCP_ULP "tls" on both ends, TLS 1.3 AES-GCM-128 keys
 * installed as TX on the client and RX on the server, then "hello" goes through the kernel's
 * TLS record layer and must come out decrypted. Exit 0 on success; prints what failed. */
#include <arpa/inet.h>
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SOL_TLS
#define SOL_TLS 282
#endif

static int fail(const char *what) { perror(what); return 1; }

int main(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &al))
        return fail("listen on 127.0.0.1");
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a)) return fail("connect");
    int s = accept(l, NULL, NULL);
    if (s < 0) return fail("accept");
    if (setsockopt(c, SOL_TCP, TCP_ULP, "tls", sizeof "tls")) return fail("TCP_ULP tls (client)");
    if (setsockopt(s, SOL_TCP, TCP_ULP, "tls", sizeof "tls")) return fail("TCP_ULP tls (server)");
    struct tls12_crypto_info_aes_gcm_128 ci;
    memset(&ci, 0, sizeof ci);
    ci.info.version = TLS_1_3_VERSION;
    ci.info.cipher_type = TLS_CIPHER_AES_GCM_128;
    memset(ci.key, 0x11, sizeof ci.key);
    memset(ci.iv, 0x22, sizeof ci.iv);
    memset(ci.salt, 0x33, sizeof ci.salt);
    if (setsockopt(c, SOL_TLS, TLS_TX, &ci, sizeof ci)) return fail("TLS_TX");
    if (setsockopt(s, SOL_TLS, TLS_RX, &ci, sizeof ci)) return fail("TLS_RX");
    if (write(c, "hello", 5) != 5) return fail("write through kTLS");
    char buf[16] = {0};
    ssize_t n = read(s, buf, sizeof buf - 1);
    if (n != 5 || memcmp(buf, "hello", 5)) {
        fprintf(stderr, "read %zd bytes: '%s'\n", n, buf);
        return fail("read through kTLS");
    }
    printf("kTLS OK: TCP_ULP tls + TLS_TX/TLS_RX AES-GCM-128 round trip on loopback\n");
    return 0;
}
