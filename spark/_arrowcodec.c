/*
 * pocketmq.spark._arrowcodec: commit-log records to Arrow buffers and back, compiled.
 *
 * Optional, like broker/store/_speedups.c. spark/arrowcodec.py picks this
 * module or its pure-Python references (built on the SDK's decode_messages and
 * encode_message) and tests/spark/test_arrowcodec.py checks that they agree:
 *
 *   decode_block   records (pull replies, a mapped segment) -> Arrow buffers of the
 *                  source's columns (spark/schema.py), no Python object per record
 *   encode_chunks  Arrow columns of the sink (via the Arrow C data interface,
 *                  __arrow_c_array__) -> SendBatch blobs of records
 *   set_queue_id   a blob aimed at another queue (a retry)
 *   record_starts  record boundaries of a segment every N bytes (its read split in parts)
 *
 * The record layout is the one drawn in common/record_layout.py (all integers
 * big-endian; B and S are the born and store host sizes, 8 or 20):
 *
 *      0 TOTALSIZE i32     4 MAGICCODE u32    8 BODYCRC i32    12 QUEUEID i32
 *     16 FLAG i32         20 QUEUEOFFSET i64  28 PHYSICALOFFSET i64
 *     36 SYSFLAG i32      40 BORNTIMESTAMP i64
 *     48 BORNHOST B       48+B STORETIMESTAMP i64      56+B STOREHOST S
 *     56+B+S RECONSUMETIMES i32   60+B+S PREPAREDTRANSACTIONOFFSET i64
 *     68+B+S BODYLEN i32, BODY    TOPICLEN u8 (V1) | u16 (V2), TOPIC
 *     PROPLEN u16, PROPERTIES ("k\x01v\x02" pairs, UTF-8)
 *
 * Input comes from the network or from files: every length is checked against
 * what is left of the record before anything is read through it. Text that is
 * not valid UTF-8 is decoded by Python's own codec with errors="replace" (the
 * SDK's behaviour), so both paths produce the same strings. The GIL is held.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "pmq_record_layout.h"  /* common/csrc: HEAD_SIZE, POS_*, magic codes, sysflags */
#include "pmq_crc32.h"  /* common/csrc: crc32_fast */

#define ARROWCODEC_VERSION 4

/* -- record layout ----------------------------------------------------------------
 * The record's fields are in common/csrc/pmq_record_layout.h; what only this codec
 * needs is below. common/record_layout.py is the definition;
 * tests/unit/test_record_layout.py checks every number against it. */

#define MAX_TOPIC_LENGTH_V1 127
#define ZLIB_LEVEL 5                /* message_codec.ZLIB_LEVEL */
/* ms that fit Arrow's timestamp[us] (int64 microseconds) */
#define MAX_TIMESTAMP_MS (INT64_MAX / 1000)

/* decode_block's modes and stops (spark/arrowcodec.py mirrors them) */
#define MODE_SEGMENT 1          /* BLANK/zeros end the block; PHYSICALOFFSET must match */
#define MODE_DISPATCHED 2       /* skip prepared and rolled-back transaction records */
#define STOP_LIMIT 0            /* every byte up to limit was decoded */
#define STOP_FULL 1             /* max_rows or max_bytes reached; more may follow */
#define STOP_END 2              /* a BLANK record or zeros (segment mode) */
#define STOP_DAMAGED 3          /* the record at stop_pos is damaged (reason given) */

static inline uint32_t rd_u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline int32_t rd_i32(const unsigned char *p) { return (int32_t)rd_u32(p); }
static inline int64_t rd_i64(const unsigned char *p) {
    return (int64_t)(((uint64_t)rd_u32(p) << 32) | rd_u32(p + 4));
}
static inline uint16_t rd_u16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline void wr_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}
static inline void wr_i64(unsigned char *p, int64_t v) {
    wr_u32(p, (uint32_t)((uint64_t)v >> 32)); wr_u32(p + 4, (uint32_t)v);
}

/* -- CRC-32 (zlib's, the record's BODYCRC): crc32_fast of common/csrc/pmq_crc32.h,
 * folded with PCLMULQDQ where the CPU has it (zlib's table loop was half of decoding a
 * stored record). tests/spark/test_arrowcodec.py checks it against zlib.crc32. */

static inline uint32_t body_crc32(const unsigned char *p, Py_ssize_t n) {
    return crc32_fast(0, p, (size_t)n);
}

PyDoc_STRVAR(crc32_doc,
"crc32(data) -> int\n\nzlib.crc32 of data, computed as decode_block and encode_chunks do\n"
"(folded with PCLMULQDQ where the CPU has it); for tests.");

static PyObject *py_crc32(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:crc32", &view)) return NULL;
    uint32_t crc = body_crc32(view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* -- a growable bytes object ------------------------------------------------------ */

typedef struct {
    PyObject *obj;              /* a bytes object, resized as it grows */
    Py_ssize_t len, cap;
} gbuf;

static int gb_init(gbuf *b, Py_ssize_t cap) {
    if (cap < 64) cap = 64;
    b->obj = PyBytes_FromStringAndSize(NULL, cap);
    b->len = 0;
    b->cap = cap;
    return b->obj ? 0 : -1;
}
static int gb_reserve(gbuf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap * 2;
    if (cap < b->len + more) cap = b->len + more;
    if (_PyBytes_Resize(&b->obj, cap) < 0) return -1;
    b->cap = cap;
    return 0;
}
static inline unsigned char *gb_ptr(gbuf *b) { return (unsigned char *)PyBytes_AS_STRING(b->obj); }
static inline int gb_put(gbuf *b, const void *src, Py_ssize_t n) {
    if (gb_reserve(b, n) < 0) return -1;
    memcpy(gb_ptr(b) + b->len, src, n);
    b->len += n;
    return 0;
}
static inline int gb_i32(gbuf *b, int32_t v) { return gb_put(b, &v, 4); }
static inline int gb_i64(gbuf *b, int64_t v) { return gb_put(b, &v, 8); }
static PyObject *gb_finish(gbuf *b) {          /* steals: the bytes, cut to length */
    if (_PyBytes_Resize(&b->obj, b->len) < 0) return NULL;
    PyObject *o = b->obj;
    b->obj = NULL;
    return o;
}
static void gb_free(gbuf *b) { Py_CLEAR(b->obj); }

/* -- UTF-8 ----------------------------------------------------------------------- */

/* Strict UTF-8 as Python's decoder takes it (no surrogates, no overlongs, <= U+10FFFF). */
static int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        while (i + 8 <= n) {                      /* ASCII runs, 8 bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && c1 < 0xA0) return 0;
            if (c == 0xED && c1 >= 0xA0) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && c1 < 0x90) return 0;
            if (c == 0xF4 && c1 >= 0x90) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* A text region as valid UTF-8: itself, or (rarely) Python's errors="replace" decode of
 * it, kept alive in *holder. Returns 0, or -1 with an exception set. */
static int utf8_text(const unsigned char *s, Py_ssize_t n, const unsigned char **out,
                     Py_ssize_t *out_n, PyObject **holder) {
    *holder = NULL;
    if (utf8_valid(s, n)) {
        *out = s;
        *out_n = n;
        return 0;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, "replace");
    if (text == NULL) return -1;
    PyObject *raw = PyUnicode_AsUTF8String(text);
    Py_DECREF(text);
    if (raw == NULL) return -1;
    *holder = raw;
    *out = (const unsigned char *)PyBytes_AS_STRING(raw);
    *out_n = PyBytes_GET_SIZE(raw);
    return 0;
}

/* -- decode_block ------------------------------------------------------------------ */

typedef struct {                  /* one string column: int32 offsets and data */
    gbuf offs, data;
} strbuf;

static int sb_init(strbuf *s, Py_ssize_t rows, Py_ssize_t bytes) {
    if (gb_init(&s->offs, 4 * (rows + 1)) < 0 || gb_init(&s->data, bytes) < 0) return -1;
    return gb_i32(&s->offs, 0);
}
static inline int sb_add(strbuf *s, const void *p, Py_ssize_t n) {
    if (gb_put(&s->data, p, n) < 0) return -1;
    if (s->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "an Arrow string column passed 2 GiB");
        return -1;
    }
    return gb_i32(&s->offs, (int32_t)s->data.len);
}
static inline int sb_null(strbuf *s) { return gb_i32(&s->offs, (int32_t)s->data.len); }
static void sb_free(strbuf *s) { gb_free(&s->offs); gb_free(&s->data); }

typedef struct {
    strbuf topic, body, key_items, tags, prop_keys, prop_values, msg_id;
    gbuf queue_id, queue_offset, store_us, born_us, key_offs, prop_offs;
    gbuf tags_valid, msg_id_valid;     /* one byte per row, packed into bitmaps at the end */
    Py_ssize_t n, tags_nulls, msg_id_nulls;
} columns;

static int cols_init(columns *c, Py_ssize_t rows, Py_ssize_t bytes) {
    memset(c, 0, sizeof(*c));
    if (sb_init(&c->topic, rows, 16 * rows) < 0 || sb_init(&c->body, rows, bytes) < 0
        || sb_init(&c->key_items, rows, 16 * rows) < 0 || sb_init(&c->tags, rows, 8 * rows) < 0
        || sb_init(&c->prop_keys, rows, 16 * rows) < 0
        || sb_init(&c->prop_values, rows, 16 * rows) < 0
        || sb_init(&c->msg_id, rows, 32 * rows) < 0
        || gb_init(&c->queue_id, 4 * rows) < 0 || gb_init(&c->queue_offset, 8 * rows) < 0
        || gb_init(&c->store_us, 8 * rows) < 0 || gb_init(&c->born_us, 8 * rows) < 0
        || gb_init(&c->key_offs, 4 * (rows + 1)) < 0 || gb_init(&c->prop_offs, 4 * (rows + 1)) < 0
        || gb_init(&c->tags_valid, rows) < 0 || gb_init(&c->msg_id_valid, rows) < 0)
        return -1;
    if (gb_i32(&c->key_offs, 0) < 0 || gb_i32(&c->prop_offs, 0) < 0) return -1;
    return 0;
}

static void cols_free(columns *c) {
    sb_free(&c->topic); sb_free(&c->body); sb_free(&c->key_items); sb_free(&c->tags);
    sb_free(&c->prop_keys); sb_free(&c->prop_values); sb_free(&c->msg_id);
    gb_free(&c->queue_id); gb_free(&c->queue_offset); gb_free(&c->store_us);
    gb_free(&c->born_us); gb_free(&c->key_offs); gb_free(&c->prop_offs);
    gb_free(&c->tags_valid); gb_free(&c->msg_id_valid);
}

/* One-byte-per-row flags as an Arrow validity bitmap (None when nothing is null). */
static PyObject *bitmap(gbuf *flags, Py_ssize_t n, Py_ssize_t nulls) {
    if (nulls == 0) Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (out == NULL) return NULL;
    unsigned char *bits = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *f = gb_ptr(flags);
    memset(bits, 0, (n + 7) / 8);
    for (Py_ssize_t i = 0; i < n; i++)
        if (f[i]) bits[i >> 3] |= (unsigned char)(1u << (i & 7));
    return out;
}

typedef struct { const unsigned char *k, *v; Py_ssize_t kn, vn; } pair;

typedef struct {                   /* a topic filter's answers, asked once per topic */
    PyObject *fn;                  /* callable(topic: bytes) -> bool, or NULL: every topic */
    PyObject *cache;               /* dict bytes -> bool */
    const unsigned char *last;     /* the previous record's topic (in the input buffer) */
    Py_ssize_t last_n;
    int last_yes;                  /* and its answer */
} topic_filter;

static int topic_asked(topic_filter *tf, const unsigned char *t, Py_ssize_t n);

/* Records of one topic come in runs: the previous record's answer is reused when its
 * topic bytes are the same, with no Python object and no dict look-up per record (a
 * topic remembered only when it lies in the input, which outlives the call). */
static int topic_wanted(topic_filter *tf, const unsigned char *t, Py_ssize_t n,
                        int in_input) {     /* t lies in the input (not a replaced copy) */
    if (tf->fn == NULL) return 1;
    if (tf->last != NULL && n == tf->last_n && memcmp(t, tf->last, (size_t)n) == 0)
        return tf->last_yes;
    int yes = topic_asked(tf, t, n);
    if (yes >= 0 && in_input) {
        tf->last = t;
        tf->last_n = n;
        tf->last_yes = yes;
    }
    return yes;
}

static int topic_asked(topic_filter *tf, const unsigned char *t, Py_ssize_t n) {
    PyObject *key = PyBytes_FromStringAndSize((const char *)t, n);
    if (key == NULL) return -1;
    PyObject *hit = PyDict_GetItemWithError(tf->cache, key);
    if (hit != NULL) {
        Py_DECREF(key);
        return hit == Py_True;
    }
    if (PyErr_Occurred()) { Py_DECREF(key); return -1; }
    PyObject *r = PyObject_CallOneArg(tf->fn, key);
    if (r == NULL) { Py_DECREF(key); return -1; }
    int yes = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (yes < 0 || PyDict_SetItem(tf->cache, key, yes ? Py_True : Py_False) < 0) {
        Py_DECREF(key);
        return -1;
    }
    Py_DECREF(key);
    return yes;
}

/* Inflate a zlib stream (zlib.decompress) onto the body column. 0, or -1 (bad stream:
 * *reason set) or -2 (Python error). */
static int inflate_body(strbuf *body, const unsigned char *src, Py_ssize_t n, char *reason,
                        size_t reason_size) {
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    if (inflateInit(&zs) != Z_OK) {
        snprintf(reason, reason_size, "compressed body does not inflate: inflateInit failed");
        return -1;
    }
    zs.next_in = (Bytef *)src;
    zs.avail_in = (uInt)n;
    int rc;
    do {
        if (gb_reserve(&body->data, n * 2 + 4096) < 0) { inflateEnd(&zs); return -2; }
        zs.next_out = gb_ptr(&body->data) + body->data.len;
        zs.avail_out = (uInt)(body->data.cap - body->data.len);
        Py_ssize_t before = zs.avail_out;
        rc = inflate(&zs, Z_NO_FLUSH);
        body->data.len += before - zs.avail_out;
        if (rc != Z_OK && rc != Z_STREAM_END && !(rc == Z_BUF_ERROR && zs.avail_out == 0)) {
            snprintf(reason, reason_size, "compressed body does not inflate: %s",
                     zs.msg ? zs.msg : "incomplete or truncated stream");
            inflateEnd(&zs);
            return -1;
        }
        if (rc == Z_BUF_ERROR && zs.avail_in == 0 && zs.avail_out != 0) break;
    } while (rc != Z_STREAM_END);
    inflateEnd(&zs);
    if (rc != Z_STREAM_END) {
        snprintf(reason, reason_size,
                 "compressed body does not inflate: incomplete or truncated stream");
        return -1;
    }
    if (body->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "an Arrow binary column passed 2 GiB");
        return -2;
    }
    return gb_i32(&body->offs, (int32_t)body->data.len) < 0 ? -2 : 0;
}

#define KEYIS(p, n, lit) ((n) == (Py_ssize_t)(sizeof(lit) - 1) && memcmp((p), lit, (n)) == 0)

/* Properties of one record: the user's pairs onto the map columns (TAGS, KEYS and
 * UNIQ_KEY have columns of their own; PMQ_IDEM is dropped), deduplicated as a dict would (first position,
 * last value). Sets the system values found. 0 or -1. */
static int emit_properties(columns *c, const unsigned char *s, Py_ssize_t n, pair *sys,
                           pair **scratch, Py_ssize_t *scratch_cap) {
    /* sys[0] TAGS, sys[1] KEYS, sys[2] UNIQ_KEY, sys[3] RETRY_TOPIC; v == NULL: absent */
    Py_ssize_t np = 0;
    const unsigned char *p = s, *end = s + n;
    while (p <= end) {
        const unsigned char *sep = memchr(p, 0x02, end - p);
        const unsigned char *stop = sep ? sep : end;
        const unsigned char *eq = memchr(p, 0x01, stop - p);
        if (eq != NULL && eq > p && stop > eq + 1) {
            if (np == *scratch_cap) {
                Py_ssize_t cap = *scratch_cap ? *scratch_cap * 2 : 16;
                pair *grown = PyMem_Realloc(*scratch, cap * sizeof(pair));
                if (grown == NULL) { PyErr_NoMemory(); return -1; }
                *scratch = grown;
                *scratch_cap = cap;
            }
            pair *q = &(*scratch)[np];
            q->k = p; q->kn = eq - p; q->v = eq + 1; q->vn = stop - eq - 1;
            /* a repeated name keeps its first place and takes the last value */
            Py_ssize_t j;
            for (j = 0; j < np; j++)
                if ((*scratch)[j].kn == q->kn && memcmp((*scratch)[j].k, q->k, q->kn) == 0) break;
            if (j < np) { (*scratch)[j].v = q->v; (*scratch)[j].vn = q->vn; }
            else np++;
        }
        if (sep == NULL) break;
        p = sep + 1;
    }
    Py_ssize_t user = 0;
    for (Py_ssize_t i = 0; i < np; i++) {
        pair *q = &(*scratch)[i];
        int which = KEYIS(q->k, q->kn, "TAGS") ? 0 : KEYIS(q->k, q->kn, "KEYS") ? 1
                    : KEYIS(q->k, q->kn, "UNIQ_KEY") ? 2 : -1;
        if (KEYIS(q->k, q->kn, "RETRY_TOPIC")) sys[3] = *q;
        if (which >= 0) { sys[which] = *q; continue; }
        if (KEYIS(q->k, q->kn, "PMQ_IDEM")) continue;   /* the idempotence stamp */
        if (sb_add(&c->prop_keys, q->k, q->kn) < 0 || sb_add(&c->prop_values, q->v, q->vn) < 0)
            return -1;
        user++;
    }
    int32_t last;
    memcpy(&last, gb_ptr(&c->prop_offs) + c->prop_offs.len - 4, 4);
    return gb_i32(&c->prop_offs, last + (int32_t)user);
}

static int emit_keys(columns *c, const pair *keys) {
    int32_t count = 0;
    if (keys->v != NULL && keys->vn > 0) {
        const unsigned char *p = keys->v, *end = keys->v + keys->vn;
        for (;;) {                               /* str.split(" "): empty pieces kept */
            const unsigned char *sp = memchr(p, ' ', end - p);
            const unsigned char *stop = sp ? sp : end;
            if (sb_add(&c->key_items, p, stop - p) < 0) return -1;
            count++;
            if (sp == NULL) break;
            p = sp + 1;
        }
    }
    int32_t last;
    memcpy(&last, gb_ptr(&c->key_offs) + c->key_offs.len - 4, 4);
    return gb_i32(&c->key_offs, last + count);
}

static int emit_nullable(strbuf *col, gbuf *valid, Py_ssize_t *nulls, const pair *v) {
    unsigned char flag = v->v != NULL && v->vn > 0;
    if (gb_put(valid, &flag, 1) < 0) return -1;
    if (!flag) { (*nulls)++; return sb_null(col); }
    return sb_add(col, v->v, v->vn);
}

/* Where a record's parts lie; filled by check_record. */
typedef struct {
    int64_t total, queue_offset, phys, born_ms, store_ms;
    int32_t queue_id, sysflag, crc;
    uint32_t magic;
    Py_ssize_t body, body_len, topic, topic_len, props, props_len;
} layout;

/* Checks the record at pos (not BLANK); 0 with *lay filled, or 1 with *reason set. */
static int check_record(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t limit,
                        layout *lay, char *reason, size_t rs) {
    const unsigned char *r = buf + pos;
    Py_ssize_t left = limit - pos;
    int64_t total = rd_i32(r);
    lay->magic = rd_u32(r + POS_MAGIC);
    if (lay->magic != MESSAGE_MAGIC_CODE && lay->magic != MESSAGE_MAGIC_CODE_V2) {
        snprintf(reason, rs, "magic code is 0x%08X", lay->magic);
        return 1;
    }
    if (total < HEAD_SIZE || total > left) {
        snprintf(reason, rs, "TOTALSIZE is %lld; %lld bytes are left", (long long)total,
                 (long long)left);
        return 1;
    }
    lay->total = total;
    lay->crc = rd_i32(r + POS_BODYCRC);
    lay->queue_id = rd_i32(r + POS_QUEUEID);
    lay->queue_offset = rd_i64(r + POS_QUEUEOFFSET);
    lay->phys = rd_i64(r + POS_PHYSICALOFFSET);
    lay->sysflag = rd_i32(r + POS_SYSFLAG);
    lay->born_ms = rd_i64(r + POS_BORNTIMESTAMP);
    Py_ssize_t born = (lay->sysflag & SYSFLAG_BORNHOST_V6) ? HOST_V6_SIZE : HOST_V4_SIZE;
    Py_ssize_t store = (lay->sysflag & SYSFLAG_STOREHOST_V6) ? HOST_V6_SIZE : HOST_V4_SIZE;
    Py_ssize_t p = HEAD_SIZE + born;               /* relative to the record */
    if (p + STORE_TIMESTAMP_SIZE + store + TAIL_AFTER_STOREHOST + BODYLEN_SIZE > total) {
        snprintf(reason, rs, "TOTALSIZE %lld is too short for its fixed fields",
                 (long long)total);
        return 1;
    }
    lay->store_ms = rd_i64(r + p);
    p += STORE_TIMESTAMP_SIZE + store + TAIL_AFTER_STOREHOST;
    int32_t body_len = rd_i32(r + p);
    p += BODYLEN_SIZE;
    if (body_len < 0 || p + body_len > total) {
        snprintf(reason, rs, "BODYLEN %d does not fit TOTALSIZE %lld", body_len,
                 (long long)total);
        return 1;
    }
    lay->body = pos + p;
    lay->body_len = body_len;
    p += body_len;
    Py_ssize_t tlen_size = lay->magic == MESSAGE_MAGIC_CODE ? 1 : 2;
    if (p + tlen_size > total) {
        snprintf(reason, rs, "topic length lies past TOTALSIZE %lld", (long long)total);
        return 1;
    }
    lay->topic_len = tlen_size == 1 ? r[p] : rd_u16(r + p);
    p += tlen_size;
    lay->topic = pos + p;
    p += lay->topic_len;
    if (p + 2 > total) {
        snprintf(reason, rs, "properties length lies past TOTALSIZE %lld", (long long)total);
        return 1;
    }
    lay->props_len = rd_u16(r + p);
    p += 2;
    lay->props = pos + p;
    if (p + lay->props_len != total) {
        snprintf(reason, rs, "TOTALSIZE is %lld but the parts add up to %lld",
                 (long long)total, (long long)(p + lay->props_len));
        return 1;
    }
    return 0;
}

static PyObject *build_result(columns *c, Py_ssize_t stop_pos, int stop, const char *reason) {
    PyObject *t_valid = bitmap(&c->tags_valid, c->n, c->tags_nulls);
    PyObject *m_valid = t_valid ? bitmap(&c->msg_id_valid, c->n, c->msg_id_nulls) : NULL;
    if (m_valid == NULL) { Py_XDECREF(t_valid); return NULL; }
    PyObject *items[] = {
        gb_finish(&c->topic.offs), gb_finish(&c->topic.data),
        gb_finish(&c->queue_id), gb_finish(&c->queue_offset),
        gb_finish(&c->body.offs), gb_finish(&c->body.data),
        gb_finish(&c->key_offs), gb_finish(&c->key_items.offs), gb_finish(&c->key_items.data),
        gb_finish(&c->tags.offs), gb_finish(&c->tags.data),
        gb_finish(&c->prop_offs), gb_finish(&c->prop_keys.offs), gb_finish(&c->prop_keys.data),
        gb_finish(&c->prop_values.offs), gb_finish(&c->prop_values.data),
        gb_finish(&c->store_us), gb_finish(&c->born_us),
        gb_finish(&c->msg_id.offs), gb_finish(&c->msg_id.data),
    };
    const Py_ssize_t nitems = sizeof(items) / sizeof(items[0]);
    PyObject *cols = PyTuple_New(nitems);
    int failed = cols == NULL;
    for (Py_ssize_t i = 0; i < nitems; i++) {
        if (items[i] == NULL) failed = 1;
        if (cols != NULL) PyTuple_SET_ITEM(cols, i, items[i]);
        else Py_XDECREF(items[i]);
    }
    if (failed) { Py_XDECREF(cols); Py_DECREF(t_valid); Py_DECREF(m_valid); return NULL; }
    return Py_BuildValue("(nnisNNN)", c->n, stop_pos, stop, reason, cols, t_valid, m_valid);
}

/* The decoder's state across the buffers of one block. */
typedef struct {
    columns c;
    topic_filter tf;
    pair *scratch;
    Py_ssize_t scratch_cap;
    int mode, check_crc;
    long long base_phys, max_qo;
    Py_ssize_t max_rows, max_bytes;
    char reason[200];
} decoder;

/* Decode the records of buf[*ppos:limit] (stopping before end_pos) onto d's columns.
 * Returns the STOP_* code with *ppos where it stopped, or -1 with a Python error set. */
static int decode_span(decoder *d, const unsigned char *buf, Py_ssize_t *ppos,
                       Py_ssize_t limit, Py_ssize_t end_pos) {
    Py_ssize_t pos = *ppos;
    int stop = STOP_LIMIT;
    while (pos < limit && pos < end_pos) {
        if (d->c.n >= d->max_rows || d->c.body.data.len >= d->max_bytes) {
            stop = STOP_FULL;
            break;
        }
        Py_ssize_t left = limit - pos;
        if (left < HEAD_SIZE) {
            if (d->mode & MODE_SEGMENT) { stop = STOP_END; break; }
            snprintf(d->reason, sizeof(d->reason), "%zd bytes left; a record head is %d", left,
                     HEAD_SIZE);
            stop = STOP_DAMAGED;
            break;
        }
        int32_t total = rd_i32(buf + pos);
        uint32_t magic = rd_u32(buf + pos + POS_MAGIC);
        if (magic == BLANK_MAGIC_CODE && ((d->mode & MODE_SEGMENT) || total > 0)) {
            if (d->mode & MODE_SEGMENT) { stop = STOP_END; break; }
            pos += total;
            continue;
        }
        if ((d->mode & MODE_SEGMENT) && total == 0 && magic == 0) { stop = STOP_END; break; }
        layout lay;
        if (check_record(buf, pos, limit, &lay, d->reason, sizeof(d->reason))) {
            stop = STOP_DAMAGED;
            break;
        }
        if ((d->mode & MODE_SEGMENT) && lay.phys != d->base_phys + pos) {
            snprintf(d->reason, sizeof(d->reason), "PHYSICALOFFSET says %lld (unfinished or stale "
                     "record)", (long long)lay.phys);
            stop = STOP_DAMAGED;
            break;
        }
        if (lay.store_ms > MAX_TIMESTAMP_MS || lay.store_ms < -MAX_TIMESTAMP_MS
                || lay.born_ms > MAX_TIMESTAMP_MS || lay.born_ms < -MAX_TIMESTAMP_MS) {
            snprintf(d->reason, sizeof(d->reason), "a timestamp is out of range (%lld, %lld ms)",
                     (long long)lay.born_ms, (long long)lay.store_ms);
            stop = STOP_DAMAGED;
            break;
        }
        if (d->check_crc && (int32_t)(body_crc32(buf + lay.body, lay.body_len) & 0x7FFFFFFF)
                != lay.crc) {
            snprintf(d->reason, sizeof(d->reason), "body CRC mismatch");
            stop = STOP_DAMAGED;
            break;
        }
        /* text parts, as Python decodes them (errors="replace") */
        const unsigned char *topic, *props;
        Py_ssize_t topic_n, props_n;
        PyObject *topic_hold, *props_hold;
        if (utf8_text(buf + lay.topic, lay.topic_len, &topic, &topic_n, &topic_hold) < 0)
            { *ppos = pos; return -1; }
        if (utf8_text(buf + lay.props, lay.props_len, &props, &props_n, &props_hold) < 0) {
            Py_XDECREF(topic_hold);
            { *ppos = pos; return -1; }
        }
        /* the record's columns, rolled back if a filter refuses it (the SDK decodes a
         * record whole, body inflated, before the reader filters it: so does this) */
        Py_ssize_t mark_pk = d->c.prop_keys.data.len, mark_pko = d->c.prop_keys.offs.len;
        Py_ssize_t mark_pv = d->c.prop_values.data.len, mark_pvo = d->c.prop_values.offs.len;
        Py_ssize_t mark_po = d->c.prop_offs.len;
        Py_ssize_t mark_bd = d->c.body.data.len, mark_bo = d->c.body.offs.len;
        pair sys[4] = {{0}};
        int rc = emit_properties(&d->c, props, props_n, sys, &d->scratch, &d->scratch_cap);
        int wanted = 0;
        if (rc == 0) {
            if (topic_n >= 7 && memcmp(topic, "%RETRY%", 7) == 0 && sys[3].v != NULL) {
                topic = sys[3].v;               /* a retry: the topic it was sent to */
                topic_n = sys[3].vn;
            }
            if (lay.sysflag & SYSFLAG_COMPRESSED) {
                int z = inflate_body(&d->c.body, buf + lay.body, lay.body_len, d->reason,
                                     sizeof(d->reason));
                rc = z == -2 ? -1 : z == -1 ? 1 : 0;
            } else if (sb_add(&d->c.body, buf + lay.body, lay.body_len) < 0) {
                rc = -1;
            }
        }
        if (rc == 0) {
            int kind = lay.sysflag & SYSFLAG_TRANSACTION_MASK;
            wanted = !((d->mode & MODE_DISPATCHED) && (kind == SYSFLAG_TRANSACTION_PREPARED
                                                    || kind == SYSFLAG_TRANSACTION_ROLLBACK))
                     && lay.queue_offset < d->max_qo;
            if (wanted)      /* in_input: neither a replaced copy nor a freed holder's bytes */
                wanted = topic_wanted(&d->tf, topic, topic_n,
                                      topic >= buf && topic + topic_n <= buf + limit);
            if (wanted < 0) rc = -1;
        }
        if (rc == 0 && wanted
            && (sb_add(&d->c.topic, topic, topic_n) < 0 || gb_i32(&d->c.queue_id, lay.queue_id) < 0
                || gb_i64(&d->c.queue_offset, lay.queue_offset) < 0
                || emit_keys(&d->c, &sys[1]) < 0
                || emit_nullable(&d->c.tags, &d->c.tags_valid, &d->c.tags_nulls, &sys[0]) < 0
                || gb_i64(&d->c.store_us, (int64_t)((uint64_t)lay.store_ms * 1000u)) < 0
                || gb_i64(&d->c.born_us, (int64_t)((uint64_t)lay.born_ms * 1000u)) < 0
                || emit_nullable(&d->c.msg_id, &d->c.msg_id_valid, &d->c.msg_id_nulls,
                                 &sys[2]) < 0))
            rc = -1;
        Py_XDECREF(topic_hold);
        Py_XDECREF(props_hold);
        if (rc < 0) { *ppos = pos; return -1; }
        if (rc == 1 || !wanted) {
            d->c.prop_keys.data.len = mark_pk; d->c.prop_keys.offs.len = mark_pko;
            d->c.prop_values.data.len = mark_pv; d->c.prop_values.offs.len = mark_pvo;
            d->c.prop_offs.len = mark_po;
            d->c.body.data.len = mark_bd; d->c.body.offs.len = mark_bo;
            if (rc == 1) { stop = STOP_DAMAGED; break; }
            pos += lay.total;
            continue;
        }
        d->c.n++;
        pos += lay.total;
    }
    *ppos = pos;
    return stop;
}

PyDoc_STRVAR(decode_block_doc,
"decode_block(buf, pos, limit, end_pos, mode, base_phys, max_queue_offset, check_crc,\n"
"             max_rows, max_bytes, topic_filter) -> (rows, stop_pos, stop, reason, buffers,\n"
"                                          tags_validity, msg_id_validity)\n\n"
"Decode the records of buf[pos:limit] into the Arrow buffers of the source's\n"
"columns; spark/arrowcodec.py documents the arguments and assembles the batch.\n"
"buf may be a list of buffers (pull replies): they are read as their concatenation,\n"
"with no copy made of it; a record must lie within one of them.");

/* The buffers of decode_block's buf: one, or each of a list; 0 or -1 (error set). */
static int get_views(PyObject *buf, Py_buffer **views, Py_ssize_t *n) {
    PyObject *seq = PyList_Check(buf) ? buf : NULL;
    *n = seq ? PyList_GET_SIZE(seq) : 1;
    *views = PyMem_Calloc((size_t)(*n > 0 ? *n : 1), sizeof(Py_buffer));
    if (*views == NULL) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < *n; i++) {
        if (PyObject_GetBuffer(seq ? PyList_GET_ITEM(seq, i) : buf, &(*views)[i],
                               PyBUF_SIMPLE) < 0) {
            for (Py_ssize_t j = 0; j < i; j++) PyBuffer_Release(&(*views)[j]);
            PyMem_Free(*views);
            return -1;
        }
    }
    return 0;
}

/* Decode [pos, limit) of the views' concatenation, a view at a time. */
static int decode_views(decoder *d, Py_buffer *views, Py_ssize_t n, Py_ssize_t *ppos,
                        Py_ssize_t limit, Py_ssize_t end_pos) {
    Py_ssize_t base = 0, pos = *ppos;
    long long base_phys = d->base_phys;
    int stop = STOP_LIMIT;
    for (Py_ssize_t i = 0; i < n && pos < limit && pos < end_pos; i++) {
        Py_ssize_t len = views[i].len, local = pos - base;
        if (local < len) {
            Py_ssize_t lim = (limit < base + len ? limit : base + len) - base;
            Py_ssize_t end = end_pos - base < lim ? end_pos - base : lim;
            d->base_phys = base_phys + base;
            stop = decode_span(d, views[i].buf, &local, lim, end);
            pos = base + local;
            if (stop != STOP_LIMIT) break;
        }
        base += len;
    }
    d->base_phys = base_phys;
    *ppos = pos;
    return stop;
}

static PyObject *decode_block(PyObject *self, PyObject *args) {
    PyObject *buf, *filter_fn, *result = NULL;
    Py_ssize_t pos, limit, end_pos, n_views = 0, total = 0;
    Py_buffer *views = NULL;
    decoder d;
    memset(&d, 0, sizeof(d));
    if (!PyArg_ParseTuple(args, "OnnniLLpnnO:decode_block", &buf, &pos, &limit, &end_pos,
                          &d.mode, &d.base_phys, &d.max_qo, &d.check_crc, &d.max_rows,
                          &d.max_bytes, &filter_fn))
        return NULL;
    if (get_views(buf, &views, &n_views) < 0) return NULL;
    for (Py_ssize_t i = 0; i < n_views; i++) total += views[i].len;
    d.tf.fn = filter_fn == Py_None ? NULL : filter_fn;
    d.tf.cache = PyDict_New();
    if (d.tf.cache == NULL) goto done;
    if (limit > total) limit = total;
    if (pos < 0 || pos > limit) {
        PyErr_Format(PyExc_ValueError, "pos %zd is outside 0..%zd", pos, limit);
        goto done;
    }
    if (d.max_rows < 1) d.max_rows = 1;
    Py_ssize_t est = (limit - pos) / 1024 + 16;
    if (est > d.max_rows) est = d.max_rows;
    /* a guess: growing by doubling costs less than touching a huge first allocation */
    Py_ssize_t bytes = limit - pos;
    if (bytes > d.max_bytes) bytes = d.max_bytes;
    if (bytes > ((Py_ssize_t)4 << 20)) bytes = (Py_ssize_t)4 << 20;
    if (cols_init(&d.c, est, bytes + 64) >= 0) {
        int stop = decode_views(&d, views, n_views, &pos, limit, end_pos);
        if (stop >= 0) result = build_result(&d.c, pos, stop, d.reason);
    }
    cols_free(&d.c);
done:
    PyMem_Free(d.scratch);
    Py_XDECREF(d.tf.cache);
    for (Py_ssize_t i = 0; i < n_views; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    return result;
}

/* -- the Arrow C data interface (arrow/c/abi.h), for reading the sink's columns ---- */

struct ArrowArray {
    int64_t length, null_count, offset, n_buffers, n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

typedef struct {                 /* a string/binary array with int32 offsets */
    const unsigned char *valid, *data;
    const int32_t *offs;
    int64_t off, len;
} strcol;

static void strcol_of(const struct ArrowArray *a, strcol *s) {
    s->valid = a->null_count != 0 ? a->buffers[0] : NULL;
    s->offs = a->buffers[1];
    s->data = a->buffers[2];
    s->off = a->offset;
    s->len = a->length;
}
static inline int bit_set(const unsigned char *valid, int64_t j) {
    return valid == NULL || (valid[j >> 3] >> (j & 7)) & 1;
}
/* Element j (absolute, offset applied by the caller): 1 with its bytes, or 0 when null. */
static inline int str_at(const strcol *s, int64_t j, const unsigned char **p, Py_ssize_t *n) {
    if (!bit_set(s->valid, j)) return 0;
    *p = s->data + s->offs[j];
    *n = s->offs[j + 1] - s->offs[j];
    return 1;
}

static struct ArrowArray *array_of(PyObject *capsule) {
    if (capsule == Py_None) return NULL;
    struct ArrowArray *a = PyCapsule_GetPointer(capsule, "arrow_array");
    if (a != NULL && a->release == NULL) {
        PyErr_SetString(PyExc_ValueError, "the Arrow array was released");
        return NULL;
    }
    return a;
}

/* -- encode_chunks --------------------------------------------------------------- */

static const char HEX[] = "0123456789ABCDEF";

typedef struct {
    strcol body, tags, keys_str, keys_items, pkeys, pvals;
    const unsigned char *keys_valid, *props_valid;
    const int32_t *keys_offs, *props_offs;
    int64_t keys_off, props_off, entries_off;
    int has_tags, keys_kind, has_props;   /* keys_kind: 0 none, 1 string, 2 list<string> */
} sink_cols;

static int row_error(int64_t row, const char *what) {
    PyErr_Format(PyExc_ValueError, "row %lld: %s", (long long)row, what);
    return -1;
}

/* client/model.py's SYSTEM_PROPERTIES: set by the client, refused from the user */
static int is_system_property(const unsigned char *k, Py_ssize_t n) {
    return KEYIS(k, n, "TAGS") || KEYIS(k, n, "KEYS") || KEYIS(k, n, "UNIQ_KEY")
           || KEYIS(k, n, "TIMER_DELIVER_MS") || KEYIS(k, n, "TIMER_DELAY_MS")
           || KEYIS(k, n, "PMQ_IDEM");
}

/* The user properties, TAGS, KEYS and "UNIQ_KEY\x01" of row i (the id follows),
 * appended to *out, in encode_message's order. 0 or -1. */
static int row_properties(const sink_cols *sc, int64_t i, gbuf *out) {
    const unsigned char *p;
    Py_ssize_t n;
    if (sc->has_props && bit_set(sc->props_valid, sc->props_off + i)) {
        int64_t a = sc->props_offs[sc->props_off + i], b = sc->props_offs[sc->props_off + i + 1];
        for (int64_t e = a; e < b; e++) {
            const unsigned char *k, *v;
            Py_ssize_t kn, vn;
            int64_t ke = sc->entries_off + e;
            if (!str_at(&sc->pkeys, sc->pkeys.off + ke, &k, &kn) || kn == 0)
                return row_error(i, "a property has an empty or null name");
            int64_t dup = a;
            for (; dup < e; dup++) {     /* dict(pairs): first place, last value */
                const unsigned char *k2 = NULL;
                Py_ssize_t kn2 = -1;
                if (str_at(&sc->pkeys, sc->pkeys.off + sc->entries_off + dup, &k2, &kn2)
                        && kn2 == kn && memcmp(k2, k, kn) == 0)
                    break;
            }
            if (dup < e) continue;
            int64_t last = e;
            for (int64_t later = e + 1; later < b; later++) {
                const unsigned char *k2;
                Py_ssize_t kn2;
                if (str_at(&sc->pkeys, sc->pkeys.off + sc->entries_off + later, &k2, &kn2)
                        && kn2 == kn && memcmp(k2, k, kn) == 0)
                    last = later;
            }
            if (!str_at(&sc->pvals, sc->pvals.off + sc->entries_off + last, &v, &vn) || vn == 0)
                return row_error(i, "a property has an empty or null value");
            if (memchr(k, 1, kn) || memchr(k, 2, kn) || memchr(v, 1, vn) || memchr(v, 2, vn))
                return row_error(i, "a property contains a \\x01/\\x02 separator");
            if (is_system_property(k, kn))
                return row_error(i, "a property is named as one the client sets (TAGS, KEYS, "
                                    "UNIQ_KEY, TIMER_*, PMQ_IDEM): use the tags and keys "
                                    "columns");
            if (gb_put(out, k, kn) < 0 || gb_put(out, "\x01", 1) < 0 || gb_put(out, v, vn) < 0
                || gb_put(out, "\x02", 1) < 0)
                return -1;
        }
    }
    if (sc->has_tags && str_at(&sc->tags, sc->tags.off + i, &p, &n) && n > 0) {
        if (gb_put(out, "TAGS\x01", 5) < 0 || gb_put(out, p, n) < 0 || gb_put(out, "\x02", 1) < 0)
            return -1;
    }
    if (sc->keys_kind == 1 && str_at(&sc->keys_str, sc->keys_str.off + i, &p, &n)) {
        /* a string of space-separated keys: split, each must be non-empty */
        if (n == 0 || p[0] == ' ' || p[n - 1] == ' ')
            return row_error(i, "a message key is empty or contains a space");
        for (Py_ssize_t q = 1; q < n; q++)
            if (p[q] == ' ' && p[q - 1] == ' ')
                return row_error(i, "a message key is empty or contains a space");
        if (gb_put(out, "KEYS\x01", 5) < 0 || gb_put(out, p, n) < 0 || gb_put(out, "\x02", 1) < 0)
            return -1;
    } else if (sc->keys_kind == 2 && bit_set(sc->keys_valid, sc->keys_off + i)) {
        int64_t a = sc->keys_offs[sc->keys_off + i], b = sc->keys_offs[sc->keys_off + i + 1];
        for (int64_t e = a; e < b; e++) {
            if (!str_at(&sc->keys_items, sc->keys_items.off + e, &p, &n) || n == 0
                    || memchr(p, ' ', n))
                return row_error(i, "a message key is empty, null or contains a space");
            if (gb_put(out, e == a ? "KEYS\x01" : " ", e == a ? 5 : 1) < 0 || gb_put(out, p, n) < 0)
                return -1;
        }
        if (b > a && gb_put(out, "\x02", 1) < 0) return -1;
    }
    return gb_put(out, "UNIQ_KEY\x01", 9);
}

PyDoc_STRVAR(encode_chunks_doc,
"encode_chunks(body, tags, keys, keys_is_list, properties, start, stop, topic,\n"
"              born_host, born_timestamp_ms, id_prefix, counter, compress_over,\n"
"              max_body_bytes, chunk_rows, chunk_bytes, queue_id_of_chunk, stamped=0)\n"
"    -> (chunks: list[(blob, rows)], counter)\n\n"
"Encode rows start..stop of the sink's columns (capsules of __arrow_c_array__, or\n"
"None) as encode_message would; see spark/arrowcodec.py. stamped: the callback is\n"
"called with the rows of the previous chunk and returns (queue id, producer id, epoch,\n"
"first sequence); each record then ends in PMQ_IDEM=<pid>.<epoch>.<seq>.");

static PyObject *encode_chunks(PyObject *self, PyObject *args) {
    PyObject *body_c, *tags_c, *keys_c, *props_c, *next_queue;
    int keys_is_list;
    Py_ssize_t start, stop, chunk_rows, chunk_bytes;
    Py_buffer topic, born_host, id_prefix;
    long long born_ms, counter, compress_over, max_body;
    int stamped = 0;
    long long pid = 0, epoch = 0, seq = 0;
    char stamp[64];
    int stamp_n = 0;
    if (!PyArg_ParseTuple(args, "OOOpOnny*y*Ly*LLLnnO|p:encode_chunks", &body_c, &tags_c,
                          &keys_c, &keys_is_list, &props_c, &start, &stop, &topic,
                          &born_host, &born_ms, &id_prefix, &counter, &compress_over,
                          &max_body, &chunk_rows, &chunk_bytes, &next_queue, &stamped))
        return NULL;
    PyObject *chunks = NULL, *result = NULL;
    gbuf blob = {0}, props = {0}, packed = {0};
    sink_cols sc;
    memset(&sc, 0, sizeof(sc));
    struct ArrowArray *body = array_of(body_c), *tags = NULL, *keys = NULL, *pmap = NULL;
    if (body == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "no body column");
        goto done;
    }
    if ((tags = array_of(tags_c)) == NULL && PyErr_Occurred()) goto done;
    if ((keys = array_of(keys_c)) == NULL && PyErr_Occurred()) goto done;
    if ((pmap = array_of(props_c)) == NULL && PyErr_Occurred()) goto done;
    if (topic.len > MAX_TOPIC_LENGTH_V1) {
        PyErr_Format(PyExc_ValueError, "topic is %zd bytes; at most %d fit a record",
                     topic.len, MAX_TOPIC_LENGTH_V1);
        goto done;
    }
    if ((born_host.len != HOST_V4_SIZE && born_host.len != HOST_V6_SIZE) || id_prefix.len != 28) {
        PyErr_SetString(PyExc_ValueError, "born_host is 8 or 20 bytes, id_prefix 28 characters");
        goto done;
    }
    if (start < 0 || stop > body->length || start > stop) {
        PyErr_SetString(PyExc_ValueError, "rows out of range");
        goto done;
    }
    strcol_of(body, &sc.body);
    if (tags) { strcol_of(tags, &sc.tags); sc.has_tags = 1; }
    if (keys && !keys_is_list) { strcol_of(keys, &sc.keys_str); sc.keys_kind = 1; }
    if (keys && keys_is_list) {
        sc.keys_kind = 2;
        sc.keys_valid = keys->null_count ? keys->buffers[0] : NULL;
        sc.keys_offs = keys->buffers[1];
        sc.keys_off = keys->offset;
        strcol_of(keys->children[0], &sc.keys_items);
    }
    if (pmap) {
        sc.has_props = 1;
        sc.props_valid = pmap->null_count ? pmap->buffers[0] : NULL;
        sc.props_offs = pmap->buffers[1];
        sc.props_off = pmap->offset;
        struct ArrowArray *entries = pmap->children[0];
        sc.entries_off = entries->offset;
        strcol_of(entries->children[0], &sc.pkeys);
        strcol_of(entries->children[1], &sc.pvals);
    }
    chunks = PyList_New(0);
    if (chunks == NULL || gb_init(&props, 256) < 0 || gb_init(&packed, 64) < 0) goto done;
    const Py_ssize_t born_size = born_host.len;
    const Py_ssize_t fixed = HEAD_SIZE + born_size + STORE_TIMESTAMP_SIZE + HOST_V4_SIZE
                             + TAIL_AFTER_STOREHOST + BODYLEN_SIZE;
    Py_ssize_t rows_in_chunk = 0, body_in_chunk = 0, last_chunk_rows = 0;
    int32_t queue_id = 0;
    for (Py_ssize_t i = start; i < stop; i++) {
        const unsigned char *b;
        Py_ssize_t bn;
        if (!str_at(&sc.body, sc.body.off + i, &b, &bn)) {
            row_error(i, "the body is null; every message needs a body");
            goto done;
        }
        if (bn == 0) { row_error(i, "the body is empty; a message needs a body"); goto done; }
        if (bn > max_body) {
            PyErr_Format(PyExc_ValueError, "row %zd: message body is %zd bytes; the limit is "
                         "%lld (max_message_size_bytes)", i, bn, max_body);
            goto done;
        }
        if (rows_in_chunk > 0 && (rows_in_chunk >= chunk_rows || body_in_chunk >= chunk_bytes)) {
            PyObject *item = Py_BuildValue("(Nn)", gb_finish(&blob), rows_in_chunk);
            if (item == NULL || PyList_Append(chunks, item) < 0) { Py_XDECREF(item); goto done; }
            Py_DECREF(item);
            last_chunk_rows = rows_in_chunk;
            rows_in_chunk = body_in_chunk = 0;
        }
        if (rows_in_chunk == 0) {
            if (stamped) {
                PyObject *q = PyObject_CallFunction(next_queue, "n", last_chunk_rows);
                if (q == NULL) goto done;
                long qv;
                int ok = PyArg_ParseTuple(q, "lLLL", &qv, &pid, &epoch, &seq);
                Py_DECREF(q);
                if (!ok) goto done;
                queue_id = (int32_t)qv;
            } else {
                PyObject *q = PyObject_CallNoArgs(next_queue);
                if (q == NULL) goto done;
                long v = PyLong_AsLong(q);
                Py_DECREF(q);
                if (v == -1 && PyErr_Occurred()) goto done;
                queue_id = (int32_t)v;
            }
            Py_ssize_t est = chunk_rows < stop - i ? chunk_rows : stop - i;
            if (gb_init(&blob, est * (fixed + bn + topic.len + 96)) < 0) goto done;
        }
        props.len = 0;
        if (row_properties(&sc, i, &props) < 0) goto done;
        if (stamped)    /* "\x02PMQ_IDEM\x01<pid>.<epoch>.<seq>" after the id */
            stamp_n = snprintf(stamp, sizeof(stamp), "\x02PMQ_IDEM\x01%lld.%lld.%lld", pid,
                               epoch, seq + (long long)rows_in_chunk);
        Py_ssize_t props_len = props.len + 32 + stamp_n + 1;  /* + the id (stamp), \x02 */
        if (props_len > MAX_PROPERTIES_LENGTH) {
            PyErr_Format(PyExc_ValueError, "row %zd: properties are %zd bytes; at most %d fit "
                         "a record", i, props_len, MAX_PROPERTIES_LENGTH);
            goto done;
        }
        int32_t sysflag = born_size == HOST_V6_SIZE ? SYSFLAG_BORNHOST_V6 : 0;
        const unsigned char *payload = b;
        Py_ssize_t payload_n = bn;
        if (bn > compress_over) {               /* as encode_message: zlib level 5 if smaller */
            uLongf zn = compressBound((uLong)bn);
            packed.len = 0;
            if (gb_reserve(&packed, (Py_ssize_t)zn) < 0) goto done;
            if (compress2(gb_ptr(&packed), &zn, b, (uLong)bn, ZLIB_LEVEL) != Z_OK) {
                PyErr_SetString(PyExc_RuntimeError, "zlib compress2 failed");
                goto done;
            }
            if ((Py_ssize_t)zn < bn) {
                payload = gb_ptr(&packed);
                payload_n = (Py_ssize_t)zn;
                sysflag |= SYSFLAG_COMPRESSED;
            }
        }
        Py_ssize_t total = fixed + payload_n + 1 + topic.len + 2 + props_len;
        if (gb_reserve(&blob, total) < 0) goto done;
        unsigned char *r = gb_ptr(&blob) + blob.len;
        memset(r, 0, fixed);
        wr_u32(r, (uint32_t)total);
        wr_u32(r + POS_MAGIC, MESSAGE_MAGIC_CODE);
        wr_u32(r + POS_BODYCRC, (body_crc32(payload, payload_n) & 0x7FFFFFFF));
        wr_u32(r + POS_QUEUEID, (uint32_t)queue_id);
        wr_u32(r + POS_SYSFLAG, (uint32_t)sysflag);
        wr_i64(r + POS_BORNTIMESTAMP, born_ms);
        memcpy(r + HEAD_SIZE, born_host.buf, born_size);
        /* STORETIMESTAMP, STOREHOST (8 zero bytes), RECONSUMETIMES, PREPARED: zeros */
        wr_u32(r + fixed - BODYLEN_SIZE, (uint32_t)payload_n);
        unsigned char *p = r + fixed;
        memcpy(p, payload, payload_n);
        p += payload_n;
        *p++ = (unsigned char)topic.len;
        memcpy(p, topic.buf, topic.len);
        p += topic.len;
        *p++ = (unsigned char)(props_len >> 8);
        *p++ = (unsigned char)props_len;
        memcpy(p, gb_ptr(&props), props.len);
        p += props.len;
        memcpy(p, id_prefix.buf, 28);
        p += 28;
        unsigned v = (unsigned)(counter & 0xFFFF);
        *p++ = HEX[(v >> 12) & 15]; *p++ = HEX[(v >> 8) & 15];
        *p++ = HEX[(v >> 4) & 15]; *p++ = HEX[v & 15];
        if (stamp_n) { memcpy(p, stamp, stamp_n); p += stamp_n; }
        *p++ = 0x02;
        counter++;
        blob.len += total;
        rows_in_chunk++;
        body_in_chunk += bn;
    }
    if (rows_in_chunk > 0) {
        PyObject *item = Py_BuildValue("(Nn)", gb_finish(&blob), rows_in_chunk);
        if (item == NULL || PyList_Append(chunks, item) < 0) { Py_XDECREF(item); goto done; }
        Py_DECREF(item);
    }
    result = Py_BuildValue("(OL)", chunks, counter);
done:
    Py_XDECREF(chunks);
    gb_free(&blob);
    gb_free(&props);
    gb_free(&packed);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&born_host);
    PyBuffer_Release(&id_prefix);
    return result;
}

PyDoc_STRVAR(set_queue_id_doc,
"set_queue_id(blob, queue_id) -> bytes\n\nThe records of blob with QUEUEID queue_id.");

static PyObject *set_queue_id(PyObject *self, PyObject *args) {
    Py_buffer view;
    int queue_id;
    if (!PyArg_ParseTuple(args, "y*i:set_queue_id", &view, &queue_id)) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(view.buf, view.len);
    if (out != NULL) {
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
        Py_ssize_t pos = 0;
        while (pos + POS_QUEUEID + 4 <= view.len) {
            int32_t total = rd_i32(p + pos);
            if (total < HEAD_SIZE || pos + total > view.len) {
                Py_CLEAR(out);
                PyErr_Format(PyExc_ValueError, "record at %zd has TOTALSIZE %d", pos, total);
                break;
            }
            wr_u32(p + pos + POS_QUEUEID, (uint32_t)queue_id);
            pos += total;
        }
    }
    PyBuffer_Release(&view);
    return out;
}

PyDoc_STRVAR(record_starts_doc,
"record_starts(buf, limit, base_phys, every) -> list[int]\n\n"
"Where a segment's records start, one every `every` bytes or more: 0, then the first\n"
"record start at or past each mark, until the records end (BLANK, zeros, damage).");

static PyObject *record_starts(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t limit, every;
    long long base_phys;
    if (!PyArg_ParseTuple(args, "y*nLn:record_starts", &view, &limit, &base_phys, &every))
        return NULL;
    if (limit > view.len) limit = view.len;
    if (every < 1) every = 1;
    PyObject *out = PyList_New(0);
    PyObject *zero = PyLong_FromLong(0);
    if (out == NULL || zero == NULL || PyList_Append(out, zero) < 0) {
        Py_XDECREF(out); Py_XDECREF(zero); PyBuffer_Release(&view); return NULL;
    }
    Py_DECREF(zero);
    const unsigned char *buf = view.buf;
    Py_ssize_t pos = 0, mark = every;
    while (limit - pos >= HEAD_SIZE) {
        int32_t total = rd_i32(buf + pos);
        uint32_t magic = rd_u32(buf + pos + POS_MAGIC);
        if ((magic != MESSAGE_MAGIC_CODE && magic != MESSAGE_MAGIC_CODE_V2)
                || total < HEAD_SIZE || total > limit - pos
                || rd_i64(buf + pos + POS_PHYSICALOFFSET) != base_phys + pos)
            break;                        /* the end, or damage: the last part reports it */
        pos += total;
        if (pos >= mark) {
            PyObject *v = PyLong_FromSsize_t(pos);
            if (v == NULL || PyList_Append(out, v) < 0) {
                Py_XDECREF(v); Py_DECREF(out); PyBuffer_Release(&view); return NULL;
            }
            Py_DECREF(v);
            mark = pos + every;
        }
    }
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"record_starts", record_starts, METH_VARARGS, record_starts_doc},
    {"crc32", py_crc32, METH_VARARGS, crc32_doc},
    {"decode_block", decode_block, METH_VARARGS, decode_block_doc},
    {"encode_chunks", encode_chunks, METH_VARARGS, encode_chunks_doc},
    {"set_queue_id", set_queue_id, METH_VARARGS, set_queue_id_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "pocketmq.spark._arrowcodec",
    "Commit-log records to Arrow buffers and back (spark/arrowcodec.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__arrowcodec(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "VERSION", ARROWCODEC_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
