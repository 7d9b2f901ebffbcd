/* S3 answer documents: a small tag scan over the XML S3 returns. Pure.
 *
 * S3 answers are small, flat and machine-written, so a scan for <Tag> ...
 * </Tag> is enough: UploadId, ETag, Key, IsTruncated, Code and Message.
 * Nothing here trusts the input: every index is checked against n, a value
 * is capped at S3XML_MAX_VALUE, and a truncated document simply lacks the
 * element that was cut off. */
#include "s3/xml.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* Where <tag ...> or <tag/> starts at or after from; sets *body to the first
 * byte after '>' and *empty for <tag/>. Returns false when there is none. */
static bool find_open(const char *x, size_t n, const char *tag, size_t from,
                      size_t *body, bool *empty)
{
    size_t tl = strlen(tag);

    for (size_t i = from; i + tl + 1 < n; i++) {
        const char *p;
        char c;

        p = memchr(x + i, '<', n - i);
        if (p == NULL) {
            return false;
        }
        i = (size_t)(p - x);
        if (i + tl + 1 >= n || memcmp(x + i + 1, tag, tl) != 0) {
            continue;
        }
        c = x[i + 1 + tl];
        if (c != '>' && c != '/' && c != ' ' && c != '\t' && c != '\n' &&
            c != '\r') {
            continue; /* invariant (1): <Key> is not <KeyCount> */
        }
        p = memchr(x + i + 1 + tl, '>', n - (i + 1 + tl));
        if (p == NULL) {
            return false;
        }
        *empty = p[-1] == '/';
        *body = (size_t)(p - x) + 1;
        return true;
    }
    return false;
}

/* Where </tag> starts at or after from, or n when there is none. */
static size_t find_close(const char *x, size_t n, const char *tag, size_t tl,
                         size_t from)
{
    for (size_t i = from; i + tl + 2 < n; i++) {
        const char *p = memchr(x + i, '<', n - i);

        if (p == NULL) {
            return n;
        }
        i = (size_t)(p - x);
        if (i + tl + 2 < n && x[i + 1] == '/' &&
            memcmp(x + i + 2, tag, tl) == 0 && x[i + 2 + tl] == '>') {
            return i;
        }
    }
    return n;
}

static size_t utf8_put(unsigned long cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode a numeric reference "#NN" or "#xHH" (without '&' and ';'). */
static size_t numeric_ref(const char *s, size_t n, char out[4])
{
    unsigned long cp = 0;
    bool hex = n > 1 && (s[1] == 'x' || s[1] == 'X');
    size_t i = hex ? 2 : 1;

    if (i >= n || n - i > 8) {
        return 0;
    }
    for (; i < n; i++) {
        char c = s[i];
        int d;

        if (c >= '0' && c <= '9') {
            d = c - '0';
        } else if (hex && c >= 'a' && c <= 'f') {
            d = c - 'a' + 10;
        } else if (hex && c >= 'A' && c <= 'F') {
            d = c - 'A' + 10;
        } else {
            return 0;
        }
        cp = cp * (hex ? 16 : 10) + (unsigned long)d;
    }
    if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return 0;
    }
    return utf8_put(cp, out);
}

/* Decode the entity starting at s[0] == '&' into out; returns the bytes of
 * input it used, or 0 when it is not one we decode (invariant (2)). */
static size_t entity(const char *s, size_t n, char out[4], size_t *out_len)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {
        {"quot", '"'}, {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"apos", '\''}};
    const char *semi = memchr(s, ';', n < 12 ? n : 12);
    size_t len;

    if (semi == NULL) {
        return 0;
    }
    len = (size_t)(semi - s) - 1; /* between '&' and ';' */
    for (size_t i = 0; i < ARRAY_LEN(named); i++) {
        if (strlen(named[i].name) == len &&
            memcmp(s + 1, named[i].name, len) == 0) {
            out[0] = named[i].c;
            *out_len = 1;
            return len + 2;
        }
    }
    if (len > 0 && s[1] == '#') {
        *out_len = numeric_ref(s + 1, len, out);
        return *out_len > 0 ? len + 2 : 0;
    }
    return 0;
}

static int decode(const char *s, size_t n, struct buf *out, struct err *err)
{
    size_t i = 0;

    while (i < n) {
        const char *amp = memchr(s + i, '&', n - i);
        size_t plain = amp == NULL ? n - i : (size_t)(amp - (s + i));
        char u[4];
        size_t ul = 0;
        size_t used;

        if (buf_append(out, s + i, plain, err) != 0) {
            return err->code;
        }
        i += plain;
        if (i >= n) {
            break;
        }
        used = entity(s + i, n - i, u, &ul);
        if (used == 0) {
            used = 1;
            u[0] = '&';
            ul = 1;
        }
        if (buf_append(out, u, ul, err) != 0) {
            return err->code;
        }
        i += used;
    }
    return 0;
}

int s3xml_next(const char *xml, size_t n, const char *tag, size_t *pos,
               struct buf *out, struct err *err)
{
    size_t tl = strlen(tag);
    size_t body;
    size_t end;
    bool empty;

    buf_reset(out);
    if (xml == NULL || *pos >= n ||
        !find_open(xml, n, tag, *pos, &body, &empty)) {
        return ERR_NOT_FOUND;
    }
    if (empty) {
        *pos = body;
        return 0;
    }
    end = find_close(xml, n, tag, tl, body);
    if (end == n) {
        return ERR_NOT_FOUND; /* truncated: the element never closes */
    }
    if (end - body > S3XML_MAX_VALUE) {
        return err_set(err, ERR_TOO_BIG, "s3 xml: <%s> holds %zu bytes", tag,
                       end - body);
    }
    if (decode(xml + body, end - body, out, err) != 0) {
        buf_reset(out);
        return err->code;
    }
    *pos = end + tl + 3;
    return 0;
}

int s3xml_find(const char *xml, size_t n, const char *tag, struct buf *out,
               struct err *err)
{
    size_t pos = 0;

    return s3xml_next(xml, n, tag, &pos, out, err);
}

bool s3xml_error(const char *xml, size_t n, struct buf *code,
                 struct buf *message)
{
    struct buf c;
    struct err err = {0};
    bool found;

    buf_init(&c, S3XML_MAX_VALUE * 2);
    found = s3xml_find(xml, n, "Code", &c, &err) == 0;
    if (found && code != NULL) {
        buf_reset(code);
        (void)buf_append(code, c.data == NULL ? "" : c.data, c.len, &err);
    }
    if (found && message != NULL &&
        s3xml_find(xml, n, "Message", message, &err) != 0) {
        buf_reset(message);
    }
    buf_free(&c);
    return found;
}

int s3xml_parse_list(const char *xml, size_t n, struct s3xml_list *l,
                     struct err *err)
{
    struct buf v;
    size_t pos = 0;
    size_t cap = 0;
    int rc;

    memset(l, 0, sizeof(*l));
    buf_init(&v, S3XML_MAX_VALUE * 4);
    while ((rc = s3xml_next(xml, n, "Key", &pos, &v, err)) == 0) {
        if (l->n_keys == S3XML_MAX_KEYS) {
            rc = err_set(err, ERR_TOO_BIG, "s3 xml: more than %d keys",
                         S3XML_MAX_KEYS);
            break;
        }
        if (l->n_keys == cap) {
            cap = cap == 0 ? 64 : cap * 2;
            l->keys = xrealloc(l->keys, cap * sizeof(*l->keys));
        }
        l->keys[l->n_keys++] = xstrndup(v.data == NULL ? "" : v.data, v.len);
    }
    if (rc == ERR_NOT_FOUND) {
        rc = 0;
        l->is_truncated = s3xml_find(xml, n, "IsTruncated", &v, err) == 0 &&
                          strcmp(v.data == NULL ? "" : v.data, "true") == 0;
    }
    buf_free(&v);
    if (rc != 0) {
        s3xml_list_free(l);
    }
    return rc;
}

void s3xml_list_free(struct s3xml_list *l)
{
    for (size_t i = 0; i < l->n_keys; i++) {
        free(l->keys[i]);
    }
    free(l->keys);
    memset(l, 0, sizeof(*l));
}

void s3xml_unquote(struct buf *b)
{
    if (b->len >= 2 && b->data[0] == '"' && b->data[b->len - 1] == '"') {
        memmove(b->data, b->data + 1, b->len - 2);
        b->len -= 2;
        b->data[b->len] = '\0';
    }
}
