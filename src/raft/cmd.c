/* The raft command codec: every change of state is one command, one raft
 * entry. Pure: no I/O, no clock, no allocation when decoding.
 *
 * Entries are read back from disk and from peers, so the decoder treats its
 * input as untrusted: every length is checked against what remains before it
 * is used, and a push body must end exactly after its last item. */
#include "raft/cmd.h"

#include <string.h>

#include "base/aead.h"
#include "base/uuid7.h"
#include "store/schema.h"

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

void cmd_set_stamp(void *p, int64_t stamp)
{
    uint8_t *b = (uint8_t *)p + 8;
    uint64_t v = (uint64_t)stamp;

    for (int i = 7; i >= 0; i--) {
        b[i] = (uint8_t)v;
        v >>= 8;
    }
}

const char *cmd_type_name(int type)
{
    static const char *const names[CMD_TYPE_COUNT] = {"noop", "push", "kv",
                                                      "configure", "retention"};

    if (type < 0 || type >= CMD_TYPE_COUNT) {
        return "unknown";
    }
    return names[type];
}

int cmd_begin(struct buf *out, int type, const uint8_t tenant[16],
              struct err *err)
{
    uint8_t h[CMD_HEADER_LEN] = {0};

    ASSERT(type >= 0 && type < CMD_TYPE_COUNT);
    h[0] = CMD_MAGIC;
    h[1] = CMD_VERSION;
    h[2] = (uint8_t)type;
    memcpy(h + 16, tenant, 16);
    return buf_append(out, h, sizeof(h), err);
}

int cmd_finish(struct buf *out, size_t start, struct err *err)
{
    size_t body;

    ASSERT(start + CMD_HEADER_LEN <= out->len);
    body = out->len - start - CMD_HEADER_LEN;
    if (body > CMD_BODY_MAX) {
        return err_set(err, ERR_TOO_BIG, "command body of %zu B exceeds %zu B",
                       body, CMD_BODY_MAX);
    }
    put_u32((uint8_t *)out->data + start + 4, (uint32_t)body);
    return 0;
}

static int check_item(const struct cmd_push_item *it, size_t i, struct err *err)
{
    if (it->queue.len == 0 || it->queue.len > CMD_NAME_MAX) {
        return err_set(err, ERR_INVALID,
                       "item %zu: queue name of %zu B is not within 1..%d", i,
                       it->queue.len, CMD_NAME_MAX);
    }
    if (it->partition.len == 0 || it->partition.len > CMD_NAME_MAX) {
        return err_set(err, ERR_INVALID,
                       "item %zu: partition name of %zu B is not within 1..%d",
                       i, it->partition.len, CMD_NAME_MAX);
    }
    if (it->txn.len > CMD_TXN_MAX) {
        return err_set(err, ERR_INVALID,
                       "item %zu: transaction id of %zu B exceeds %d", i,
                       it->txn.len, CMD_TXN_MAX);
    }
    if (it->payload.len > CMD_BODY_MAX) {
        return err_set(err, ERR_TOO_BIG, "item %zu: payload too big", i);
    }
    if (it->sealed && it->payload.len < AEAD_SEALED_OVERHEAD) {
        return err_set(err, ERR_INVALID,
                       "item %zu: sealed payload of %zu B is short", i,
                       it->payload.len);
    }
    return 0;
}

static size_t item_size(const struct cmd_push_item *it)
{
    return 2 + it->queue.len + 2 + it->partition.len + 2 +
           (it->txn_is_id ? 0 : it->txn.len) + 16 + 4 + it->payload.len;
}

static void write_item(uint8_t *p, const struct cmd_push_item *it)
{
    const struct slice none = {"", 0};
    const struct slice *s[3] = {&it->queue, &it->partition,
                                it->txn_is_id ? &none : &it->txn};

    for (int k = 0; k < 3; k++) {
        put_u16(p, (uint16_t)s[k]->len);
        if (s[k]->len > 0) {
            memcpy(p + 2, s[k]->ptr, s[k]->len);
        }
        p += 2 + s[k]->len;
    }
    if (it->txn_is_id) {
        put_u16(p - 2, (uint16_t)CMD_TXN_IS_ID);
    }
    memcpy(p, it->message_id, 16);
    put_u32(p + 16,
            (uint32_t)it->payload.len | (it->sealed ? CMD_PAYLOAD_SEALED : 0));
    if (it->payload.len > 0) {
        memcpy(p + 20, it->payload.ptr, it->payload.len);
    }
}

int cmd_push_encode(struct buf *out, const uint8_t tenant[16],
                    const struct cmd_push_item *items, size_t n,
                    struct err *err)
{
    size_t body = 4;
    size_t start = out->len;
    uint8_t *p;

    if (n == 0 || n > CMD_PUSH_MAX_ITEMS) {
        return err_set(err, ERR_INVALID,
                       "push of %zu items is not within 1..%d", n,
                       CMD_PUSH_MAX_ITEMS);
    }
    for (size_t i = 0; i < n; i++) {
        if (check_item(&items[i], i, err) != 0) {
            return err->code;
        }
        body += item_size(&items[i]);
        if (body > CMD_BODY_MAX) {
            return err_set(err, ERR_TOO_BIG,
                           "push command exceeds %zu B at item %zu",
                           CMD_BODY_MAX, i);
        }
    }
    if (buf_reserve(out, CMD_HEADER_LEN + body, err) != 0) {
        return err->code;
    }
    if (cmd_begin(out, CMD_PUSH, tenant, err) != 0) {
        return err->code;
    }
    p = (uint8_t *)out->data + out->len;
    put_u32(p, (uint32_t)n);
    p += 4;
    for (size_t i = 0; i < n; i++) {
        write_item(p, &items[i]);
        p += item_size(&items[i]);
    }
    out->len += body;
    out->data[out->len] = '\0';
    return cmd_finish(out, start, err);
}

static bool zero_pad(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0) {
            return false;
        }
    }
    return true;
}

int cmd_decode_header(const void *p, size_t len, struct cmd_header *h,
                      struct err *err)
{
    const uint8_t *b = p;
    uint32_t body;
    uint64_t stamp = 0;

    if (len < CMD_HEADER_LEN) {
        return err_set(err, ERR_CORRUPT, "command of %zu B is shorter than %d",
                       len, CMD_HEADER_LEN);
    }
    if (b[0] != CMD_MAGIC || b[1] != CMD_VERSION) {
        return err_set(err, ERR_CORRUPT,
                       "command magic/version %02x/%u is not %02x/%u", b[0],
                       b[1], CMD_MAGIC, CMD_VERSION);
    }
    if (b[2] >= CMD_TYPE_COUNT || b[3] != 0) {
        return err_set(err, ERR_CORRUPT, "unknown command type %u", b[2]);
    }
    body = get_u32(b + 4);
    if ((size_t)body > len - CMD_HEADER_LEN ||
        len - CMD_HEADER_LEN - body > CMD_PAD_MAX || body > CMD_BODY_MAX ||
        !zero_pad(b + CMD_HEADER_LEN + body, len - CMD_HEADER_LEN - body)) {
        return err_set(err, ERR_CORRUPT,
                       "command body length %u does not match %zu B", body,
                       len - CMD_HEADER_LEN);
    }
    for (int i = 0; i < 8; i++) {
        stamp = stamp << 8 | b[8 + i];
    }
    h->type = b[2];
    h->stamp = (int64_t)stamp;
    memcpy(h->tenant, b + 16, 16);
    h->body.ptr = (const char *)b + CMD_HEADER_LEN;
    h->body.len = body;
    return 0;
}

int cmd_push_iter_init(struct cmd_push_iter *it, struct slice body,
                       struct err *err)
{
    memset(it, 0, sizeof(*it));
    if (body.len < 4) {
        return err_set(err, ERR_CORRUPT, "push body of %zu B has no count",
                       body.len);
    }
    it->p = (const uint8_t *)body.ptr;
    it->len = body.len;
    it->count = get_u32(it->p);
    it->pos = 4;
    if (it->count == 0 || it->count > CMD_PUSH_MAX_ITEMS) {
        return err_set(err, ERR_CORRUPT, "push count %u is not within 1..%d",
                       it->count, CMD_PUSH_MAX_ITEMS);
    }
    return 0;
}

/* Take a u16-length-prefixed field of at most max bytes (min bytes at
 * least). */
static bool take_name(struct cmd_push_iter *it, struct slice *s, size_t min,
                      size_t max)
{
    size_t n;

    if (it->len - it->pos < 2) {
        return false;
    }
    n = get_u16(it->p + it->pos);
    if (n < min || n > max || it->len - it->pos - 2 < n) {
        return false;
    }
    s->ptr = (const char *)it->p + it->pos + 2;
    s->len = n;
    it->pos += 2 + n;
    return true;
}

/* The transaction id field: bytes, or the CMD_TXN_IS_ID mark (no bytes;
 * the caller fills txn once it has read the message id). */
static bool take_txn(struct cmd_push_iter *it, struct cmd_push_item *item)
{
    if (it->len - it->pos >= 2 && get_u16(it->p + it->pos) == CMD_TXN_IS_ID) {
        it->pos += 2;
        item->txn_is_id = true;
        return true;
    }
    return take_name(it, &item->txn, 0, CMD_TXN_MAX);
}

int cmd_push_next(struct cmd_push_iter *it, struct cmd_push_item *item,
                  struct err *err)
{
    size_t n;

    if (it->index == it->count) {
        if (it->pos != it->len) {
            return err_set(err, ERR_CORRUPT,
                           "push body has %zu B after its last item",
                           it->len - it->pos);
        }
        return 0;
    }
    item->txn_is_id = false;
    if (!take_name(it, &item->queue, 1, CMD_NAME_MAX) ||
        !take_name(it, &item->partition, 1, CMD_NAME_MAX) ||
        !take_txn(it, item) || it->len - it->pos < 20) {
        return err_set(err, ERR_CORRUPT, "push item %u is malformed",
                       it->index);
    }
    memcpy(item->message_id, it->p + it->pos, 16);
    if (item->txn_is_id) {
        uuid7_format(item->message_id, item->txn_text);
        item->txn.ptr = item->txn_text;
        item->txn.len = 36;
    }
    n = get_u32(it->p + it->pos + 16);
    item->sealed = (n & CMD_PAYLOAD_SEALED) != 0;
    n &= ~(size_t)CMD_PAYLOAD_SEALED;
    it->pos += 20;
    if (it->len - it->pos < n) {
        return err_set(err, ERR_CORRUPT,
                       "push item %u: payload of %zu B overruns the body",
                       it->index, n);
    }
    if (item->sealed && n < AEAD_SEALED_OVERHEAD) {
        return err_set(err, ERR_CORRUPT,
                       "push item %u: sealed payload of %zu B is short",
                       it->index, n);
    }
    item->payload.ptr = (const char *)it->p + it->pos;
    item->payload.len = n;
    it->pos += n;
    it->index++;
    return 1;
}

int cmd_push_validate(struct slice body, uint32_t *count, struct err *err)
{
    struct cmd_push_iter it;
    struct cmd_push_item item;
    int rc;

    if (cmd_push_iter_init(&it, body, err) != 0) {
        return err->code;
    }
    while ((rc = cmd_push_next(&it, &item, err)) == 1) {
    }
    if (rc != 0) {
        return rc;
    }
    *count = it.count;
    return 0;
}

/* ---- CONFIGURE ---------------------------------------------------------- */

#define CONF_INTS STORE_OPTIONS_INTS

int cmd_configure_encode(struct buf *out, const uint8_t tenant[16],
                         struct slice queue,
                         const struct store_queue_options *o, struct err *err)
{
    const char *strs[3] = {o->namespace_, o->task, o->retention_sink_hold};
    uint8_t fixed[4 * CONF_INTS + 1];
    int32_t v[CONF_INTS];
    uint8_t q[2];
    size_t start = out->len;

    if (queue.len == 0 || queue.len > CMD_NAME_MAX) {
        return err_set(err, ERR_INVALID, "queue name of %zu B is not 1..%d",
                       queue.len, CMD_NAME_MAX);
    }
    for (int i = 0; i < 3; i++) {
        if (strlen(strs[i]) > CMD_OPTION_STR_MAX) {
            return err_set(err, ERR_INVALID, "option string over %d B",
                           CMD_OPTION_STR_MAX);
        }
    }
    store_options_ints(o, v);
    for (int i = 0; i < CONF_INTS; i++) {
        put_u32(fixed + (size_t)4 * i, (uint32_t)v[i]);
    }
    fixed[(size_t)4 * CONF_INTS] = store_options_flags(o);
    put_u16(q, (uint16_t)queue.len);
    if (cmd_begin(out, CMD_CONFIGURE, tenant, err) != 0 ||
        buf_append(out, q, 2, err) != 0 ||
        buf_append(out, queue.ptr, queue.len, err) != 0 ||
        buf_append(out, fixed, sizeof(fixed), err) != 0) {
        goto out_undo;
    }
    for (int i = 0; i < 3; i++) {
        uint8_t n = (uint8_t)strlen(strs[i]);

        if (buf_append_byte(out, (char)n, err) != 0 ||
            buf_append(out, strs[i], n, err) != 0) {
            goto out_undo;
        }
    }
    if (cmd_finish(out, start, err) == 0) {
        return 0;
    }
out_undo:
    out->len = start;
    out->data[start] = '\0';
    return err->code;
}

int cmd_configure_decode(struct slice body, struct slice *queue,
                         struct store_queue_options *o, struct err *err)
{
    char *strs[3] = {o->namespace_, o->task, o->retention_sink_hold};
    const uint8_t *p = (const uint8_t *)body.ptr;
    int32_t v[CONF_INTS];
    size_t pos;
    size_t n;

    memset(o, 0, sizeof(*o));
    if (body.len < 2 || (n = get_u16(p)) == 0 || n > CMD_NAME_MAX ||
        body.len - 2 < n + (size_t)4 * CONF_INTS + 1) {
        return err_set(err, ERR_CORRUPT, "configure body is malformed");
    }
    queue->ptr = body.ptr + 2;
    queue->len = n;
    pos = 2 + n;
    for (int i = 0; i < CONF_INTS; i++) {
        v[i] = (int32_t)get_u32(p + pos + 4 * (size_t)i);
    }
    store_options_set_ints(o, v);
    pos += (size_t)4 * CONF_INTS;
    if ((p[pos] & ~STORE_OPTIONS_FLAGS) != 0) {
        return err_set(err, ERR_CORRUPT, "configure flags %02x are unknown",
                       p[pos]);
    }
    store_options_set_flags(o, p[pos]);
    pos++;
    for (int i = 0; i < 3; i++) {
        if (pos >= body.len || (n = p[pos]) > CMD_OPTION_STR_MAX ||
            body.len - pos - 1 < n || memchr(p + pos + 1, '\0', n) != NULL) {
            return err_set(err, ERR_CORRUPT, "configure option %d is cut", i);
        }
        memcpy(strs[i], p + pos + 1, n);
        strs[i][n] = '\0';
        pos += 1 + n;
    }
    if (pos != body.len) {
        return err_set(err, ERR_CORRUPT,
                       "configure body has %zu B after its options",
                       body.len - pos);
    }
    return 0;
}

/* ---- RETENTION ---------------------------------------------------------- */

int cmd_trim_encode(struct buf *out, const uint8_t tenant[16],
                    const struct cmd_trim_item *items, size_t n,
                    struct err *err)
{
    size_t start = out->len;
    uint8_t h[26];

    if (n == 0 || n > CMD_TRIM_MAX_ITEMS) {
        return err_set(err, ERR_INVALID, "trim count %zu is not within 1..%d",
                       n, CMD_TRIM_MAX_ITEMS);
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].partition.len == 0 ||
            items[i].partition.len > CMD_NAME_MAX || items[i].log_start < 0) {
            return err_set(err, ERR_INVALID, "trim item %zu is malformed", i);
        }
    }
    put_u32(h, (uint32_t)n);
    if (cmd_begin(out, CMD_RETENTION, tenant, err) != 0 ||
        buf_append(out, h, 4, err) != 0) {
        goto out_undo;
    }
    for (size_t i = 0; i < n; i++) {
        be64_put(h, items[i].queue_id);
        be64_put(h + 8, items[i].partition_id);
        be64_put(h + 16, (uint64_t)items[i].log_start);
        put_u16(h + 24, (uint16_t)items[i].partition.len);
        if (buf_append(out, h, sizeof(h), err) != 0 ||
            buf_append(out, items[i].partition.ptr, items[i].partition.len,
                       err) != 0) {
            goto out_undo;
        }
    }
    if (cmd_finish(out, start, err) == 0) {
        return 0;
    }
out_undo:
    out->len = start;
    out->data[start] = '\0';
    return err->code;
}

int cmd_trim_iter_init(struct cmd_trim_iter *it, struct slice body,
                       struct err *err)
{
    memset(it, 0, sizeof(*it));
    if (body.len < 4) {
        return err_set(err, ERR_CORRUPT, "trim body of %zu B has no count",
                       body.len);
    }
    it->p = (const uint8_t *)body.ptr;
    it->len = body.len;
    it->count = get_u32(it->p);
    it->pos = 4;
    if (it->count == 0 || it->count > CMD_TRIM_MAX_ITEMS) {
        return err_set(err, ERR_CORRUPT, "trim count %u is not within 1..%d",
                       it->count, CMD_TRIM_MAX_ITEMS);
    }
    return 0;
}

int cmd_trim_next(struct cmd_trim_iter *it, struct cmd_trim_item *item,
                  struct err *err)
{
    const uint8_t *q;
    size_t n;

    if (it->index == it->count) {
        if (it->pos != it->len) {
            return err_set(err, ERR_CORRUPT,
                           "trim body has %zu B after its last item",
                           it->len - it->pos);
        }
        return 0;
    }
    if (it->len - it->pos < 26) {
        return err_set(err, ERR_CORRUPT, "trim item %u is cut", it->index);
    }
    q = it->p + it->pos;
    n = get_u16(q + 24);
    item->queue_id = be64_get(q);
    item->partition_id = be64_get(q + 8);
    item->log_start = (int64_t)be64_get(q + 16);
    if (n == 0 || n > CMD_NAME_MAX || it->len - it->pos - 26 < n ||
        item->log_start < 0) {
        return err_set(err, ERR_CORRUPT, "trim item %u is malformed",
                       it->index);
    }
    item->partition.ptr = (const char *)q + 26;
    item->partition.len = n;
    it->pos += 26 + n;
    it->index++;
    return 1;
}

int cmd_trim_validate(struct slice body, uint32_t *count, struct err *err)
{
    struct cmd_trim_iter it;
    struct cmd_trim_item item;
    int rc;

    if (cmd_trim_iter_init(&it, body, err) != 0) {
        return err->code;
    }
    while ((rc = cmd_trim_next(&it, &item, err)) == 1) {
    }
    if (rc != 0) {
        return rc;
    }
    *count = it.count;
    return 0;
}
