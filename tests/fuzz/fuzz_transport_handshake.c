/* Fuzz target: the raft transport's handshake parser (src/raft/transport.h,
 * wire format). Anything may arrive on the raft port, so any bytes must be
 * parsed or refused without a crash, and only a hello made with the token
 * for this server nonce may verify. Each input is tried as a challenge, a
 * hello and a verdict; its bytes then also seed a well-formed hello, which
 * must verify, round-trip, and be refused once one byte changes or by a
 * listener of another raft id. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "raft/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char token[] = "fuzz-token";
static const uint8_t ns[RTRANSPORT_NONCE_LEN] = {1, 2, 3, 4, 5, 6, 7, 8};
#define FUZZ_SELF_ID 3 /* the listener's raft id */

static void as_received(const uint8_t *data, size_t size)
{
    struct rtransport_hello h;
    uint8_t nonce[RTRANSPORT_NONCE_LEN];
    uint8_t again[RTRANSPORT_HELLO_MAX];
    size_t alen = 0;

    if (size >= RTRANSPORT_CHALLENGE_LEN) {
        (void)rtransport_challenge_parse(data, nonce);
        (void)rtransport_verdict_check(token, ns, ns, data);
    }
    if (size >= RTRANSPORT_HELLO_FIXED &&
        rtransport_hello_head(data, &alen) == RTRANSPORT_R_OK &&
        alen > RTRANSPORT_ADDRESS_MAX) {
        abort();
    }
    if (rtransport_hello_verify(token, ns, FUZZ_SELF_ID, data, size, &h) !=
        RTRANSPORT_R_OK) {
        return;
    }
    /* Only a hello made with the token verifies: it must re-encode to the
     * same bytes. */
    if (rtransport_hello_encode(token, ns, &h, again) != size ||
        memcmp(again, data, size) != 0) {
        abort();
    }
}

static void as_seed(const uint8_t *data, size_t size)
{
    struct rtransport_hello h;
    uint8_t hello[RTRANSPORT_HELLO_MAX];
    uint8_t verdict[RTRANSPORT_VERDICT_LEN];
    uint8_t nc[RTRANSPORT_NONCE_LEN] = {0};
    char address[RTRANSPORT_ADDRESS_MAX + 1];
    size_t alen = size > 9 ? (size - 9) % (RTRANSPORT_ADDRESS_MAX + 1) : 0;
    uint64_t id = 0;
    size_t n;

    for (size_t i = 0; i < alen; i++) {
        address[i] = data[9 + i] != 0 ? (char)data[9 + i] : 'a';
    }
    address[alen] = '\0';
    for (size_t i = 1; i < 9 && i < size; i++) {
        id = (id << 8) | data[i];
    }
    memcpy(nc, data, size < sizeof(nc) ? size : sizeof(nc));
    memset(&h, 0, sizeof(h));
    h.kind = size > 0 ? data[0] : 0;
    h.id = id;
    h.to_id = FUZZ_SELF_ID;
    memcpy(h.nonce, nc, sizeof(nc));
    h.address_len = alen;
    memcpy(h.address, address, alen + 1);
    n = rtransport_hello_encode(token, ns, &h, hello);
    memset(&h, 0, sizeof(h));
    if (n != RTRANSPORT_HELLO_FIXED + alen ||
        rtransport_hello_verify(token, ns, FUZZ_SELF_ID, hello, n, &h) !=
            RTRANSPORT_R_OK ||
        h.id != id || h.address_len != alen ||
        strcmp(h.address, address) != 0) {
        abort();
    }
    /* meant for another listener: refused by this one (transport.h (2)) */
    if (rtransport_hello_verify(token, ns, FUZZ_SELF_ID + 1, hello, n, &h) ==
        RTRANSPORT_R_OK) {
        abort();
    }
    (void)rtransport_hello_verify(token, ns, FUZZ_SELF_ID, hello, n, &h);
    rtransport_verdict_encode(token, RTRANSPORT_VERDICT_OK, &h, verdict);
    if (rtransport_verdict_check(token, nc, hello + 48, verdict) != 0) {
        abort();
    }
    /* One changed byte anywhere: the hello or the verdict is refused. */
    if (size > 0) {
        size_t at = data[size - 1] % n;
        hello[at] ^= 0x5a;
        if (rtransport_hello_verify(token, ns, FUZZ_SELF_ID, hello, n, &h) ==
            RTRANSPORT_R_OK) {
            abort();
        }
        verdict[8 + data[size - 1] % RTRANSPORT_PROOF_LEN] ^= 1;
        if (rtransport_verdict_check(token, nc, hello + 48, verdict) == 0) {
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    as_received(data, size);
    as_seed(data, size);
    return 0;
}
