/*
 * pocketmq.broker.store._speedups: the store's write path, compiled.
 *
 * Optional. Every function here has a pure-Python reference that defines what
 * it does, byte for byte and error message for error message;
 * broker/store/speedups.py picks one or the other, and
 * tests/unit/test_speedups.py checks that they agree:
 *
 *   scan_batch         batch.py          py_scan_batch
 *   patch_batch        commitlog.py      py_patch_batch
 *   queue_units        batch.py          py_queue_units
 *   index_key_hashes   index_file_set.py  py_index_key_hashes
 *   insert_entries     index_file.py     py_insert_entries
 *   java_string_hash   common/hashing.py java_string_hash (used by the others)
 *   gather_records     reads.py          py_gather_records  (the read path)
 *   populate_write     mapped_file.py    MappedFile.prefault's pread (the page warmer)
 *   frame_end          replication.py    py_frame_end       (a master's replication frames)
 *   frame_columns      replication.py    py_frame_columns   (a replica's dispatch)
 *   scan_frame         replication.py    py_scan_frame      (a replica's check of a frame)
 *   frame_dispatch     replication.py    py_frame_dispatch  (a replica's check and dispatch)
 *   crc32_fast         zlib.crc32                           (every body CRC)
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
 * A batch comes from the network: every length read from it is checked
 * against what is left of the buffer before anything is read through it, and
 * every value is read once (a bytearray could change under a Python callback).
 * The GIL is held throughout: each call is a few microseconds of work per
 * record, and the buffers it holds pin their exporters (an mmap cannot be
 * closed or a bytearray resized while a call runs).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <zlib.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pmq_record_layout.h"  /* common/csrc: HEAD_SIZE, POS_*, magic codes, sysflags */
#include "pmq_crc32.h"  /* common/csrc: crc32_fast */

#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#define MADV_POPULATE_WRITE 23     /* Linux 5.14; older kernels answer EINVAL */
#endif

/* Bumped whenever a signature or a behaviour changes; speedups.py refuses a
 * stale build (an editable install keeps the old .so until it is rebuilt). */
#define SPEEDUPS_VERSION 6

/* -- layout -----------------------------------------------------------------------
 * The record's fields are in common/csrc/pmq_record_layout.h; what only the store
 * needs is below. common/record_layout.py (and consume_queue.py, index_file.py) is
 * the definition; tests/unit/test_record_layout.py checks every number against it,
 * and test_speedups the LAYOUT table built from them. */

#define MAX_TOPIC_LENGTH 127        /* a topic name, in characters: common/validation.py */

#define CQ_UNIT_SIZE 20             /* phys_offset i64, size i32, tags_code i64 */
#define INDEX_HEADER_SIZE 40
#define HASH_SLOT_SIZE 4
#define INDEX_ENTRY_SIZE 20         /* keyHash i32, phyOffset i64, timeDiff i32, prevIndex i32 */
#define SLOTS_FETCHED_AHEAD 8       /* insert_entries: slots fetched ahead of the one written */
#define QUEUE_RUNS 8                /* patch_batch, queue_units: queues followed without a dict */
#define SCAN_ROOM_AHEAD 4096        /* scan_batch: records its lists make room for at once */

/* -- big-endian access ---------------------------------------------------------- */

static inline uint32_t
rd_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int32_t
rd_i32(const unsigned char *p)
{
    return (int32_t)rd_u32(p);
}

static inline uint16_t
rd_u16(const unsigned char *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static inline void
wr_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void
wr_u64(unsigned char *p, uint64_t v)
{
    wr_u32(p, (uint32_t)(v >> 32));
    wr_u32(p + 4, (uint32_t)v);
}

/* -- module-wide objects ---------------------------------------------------------- */

static PyObject *empty_str;           /* "" */
static PyObject *str_illegal;         /* BatchError kinds */
static PyObject *str_properties;
static PyObject *str_body_too_large;
static PyObject *str_empty_body;
static PyObject *attr_positions, *attr_sizes, *attr_topics, *attr_queue_ids, *attr_sysflags,
    *attr_store_ts_positions, *attr_tags_codes;
static PyObject *scanned_fields;      /* ScannedBatch's fields, in the order we pass them */
static PyObject *check_topic;         /* pocketmq.common.validation.check_topic */

/* batch.py imports this module (through speedups.py), so its classes are
 * fetched on first use, when batch.py is complete. */
static PyObject *batch_error_cls;     /* pocketmq.broker.store.batch.BatchError */
static PyObject *scanned_batch_cls;   /* pocketmq.broker.store.batch.ScannedBatch */

static int
load_batch_classes(void)
{
    if (scanned_batch_cls != NULL) {
        return 0;
    }
    PyObject *mod = PyImport_ImportModule("pocketmq.broker.store.batch");
    if (mod == NULL) {
        return -1;
    }
    if (scanned_batch_cls != NULL) {            /* loaded by another thread meanwhile */
        Py_DECREF(mod);
        return 0;
    }
    PyObject *err = PyObject_GetAttrString(mod, "BatchError");
    PyObject *cls = err ? PyObject_GetAttrString(mod, "ScannedBatch") : NULL;
    Py_DECREF(mod);
    if (cls == NULL) {
        Py_XDECREF(err);
        return -1;
    }
    /* ScannedBatch is called with positional arguments (half the cost of
     * keywords), so its fields must be ours, in our order: the dataclass lists
     * them in __match_args__. */
    PyObject *fields = PyObject_GetAttrString(cls, "__match_args__");
    int same = fields != NULL ? PyObject_RichCompareBool(fields, scanned_fields, Py_EQ) : -1;
    Py_XDECREF(fields);
    if (same != 1) {
        if (same == 0) {
            PyErr_Format(PyExc_ImportError, "ScannedBatch's fields are not %R; rebuild "
                         "pocketmq.broker.store._speedups", scanned_fields);
        }
        Py_DECREF(err);
        Py_DECREF(cls);
        return -1;
    }
    batch_error_cls = err;
    scanned_batch_cls = cls;
    return 0;
}

/* Raise BatchError(kind, message); *fmt* is PyUnicode_FromFormat's. Returns NULL. */
static PyObject *
batch_error(PyObject *kind, const char *fmt, ...)
{
    if (load_batch_classes() < 0) {
        return NULL;
    }
    va_list va;
    va_start(va, fmt);
    PyObject *message = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (message == NULL) {
        return NULL;
    }
    PyObject *exc = PyObject_CallFunctionObjArgs(batch_error_cls, kind, message, NULL);
    Py_DECREF(message);
    if (exc != NULL) {
        PyErr_SetObject(batch_error_cls, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* -- Java String.hashCode (common/hashing.py) --------------------------------------- */

static inline uint32_t
java_hash_bytes(uint32_t h, const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        h = 31 * h + p[i];
    }
    return h;
}

/* h = 31*h + unit over the UTF-16 code units of *text*, continuing from *h*.
 * ASCII straight from the string's bytes; anything else through the same
 * "utf-16-be" encoding as the reference, so that a character outside the BMP
 * counts as its two surrogates and a lone surrogate raises the same error. */
static int
java_hash_str(PyObject *text, uint32_t *h)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "expected str, got %.100s", Py_TYPE(text)->tp_name);
        return -1;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) {            /* a no-op from 3.12 on */
        return -1;
    }
#endif
    if (PyUnicode_IS_ASCII(text)) {
        *h = java_hash_bytes(*h, PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text));
        return 0;
    }
    PyObject *units = PyUnicode_AsEncodedString(text, "utf-16-be", "strict");
    if (units == NULL) {
        return -1;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(units);
    Py_ssize_t n = PyBytes_GET_SIZE(units);
    uint32_t acc = *h;
    for (Py_ssize_t i = 0; i + 1 < n; i += 2) {
        acc = 31 * acc + (((uint32_t)p[i] << 8) | p[i + 1]);
    }
    Py_DECREF(units);
    *h = acc;
    return 0;
}

PyDoc_STRVAR(java_string_hash_doc,
"java_string_hash(text, /)\n--\n\n"
"Java's String.hashCode of *text* as a signed 32-bit int.");

static PyObject *
java_string_hash(PyObject *module, PyObject *text)
{
    uint32_t h = 0;
    if (java_hash_str(text, &h) < 0) {
        return NULL;
    }
    return PyLong_FromLong((long)(int32_t)h);
}

/* RocketMQ's stored keyHash: abs(hashCode), 0 for Integer.MIN_VALUE (index_file.py). */
static inline int32_t
index_key_hash(uint32_t h)
{
    int32_t s = (int32_t)h;
    return s == INT32_MIN ? 0 : (s < 0 ? -s : s);
}

/* -- scan_batch (batch.py, py_scan_batch) -------------------------------------------- */

enum {
    L_POSITIONS, L_SIZES, L_TOPICS, L_QUEUE_IDS, L_SYSFLAGS, L_STORE_TS_POSITIONS,
    L_TAGS_CODES, L_KEYS, L_UNIQ_KEYS, N_LISTS
};
static const char *const list_names[N_LISTS] = {
    "positions", "sizes", "topics", "queue_ids", "sysflags", "store_ts_positions",
    "tags_codes", "keys", "uniq_keys",
};

/* Append *item* (a new reference, or NULL after an error) and drop our reference. */
static inline int
append_new(PyObject *list, PyObject *item)
{
    if (item == NULL) {
        return -1;
    }
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* The records a scan of buf[0:end] walks through if it succeeds, *limit* at most:
 * TOTALSIZE after TOTALSIZE while each fits (where the walk stops, the scan refuses
 * the blob). */
static Py_ssize_t
count_records(const unsigned char *buf, Py_ssize_t end, Py_ssize_t limit)
{
    Py_ssize_t n = 0;
    for (Py_ssize_t pos = 0; n < limit && end - pos >= HEAD_SIZE;) {
        Py_ssize_t total = rd_i32(buf + pos);
        if (total < HEAD_SIZE || total > end - pos) {
            break;
        }
        pos += total;
        n++;
    }
    return n;
}

/* An empty list with room for *capacity* items: a scan appends one item per record to
 * each of its lists, which would otherwise grow (and be copied) a dozen times each. The
 * spare slots are NULL and past the list's size, where CPython's list keeps its
 * over-allocation; appending past them grows the list as usual. */
static PyObject *
empty_list(Py_ssize_t capacity)
{
    PyObject *list = PyList_New(capacity);
    if (list != NULL) {
        Py_SET_SIZE(list, 0);
    }
    return list;
}

/* An int the scan made last, and its value: the records of a batch mostly have one size
 * and one tag code, so their lists share one int instead of a new one per record. */
typedef struct {
    PyObject *obj;
    long long value;
} cached_int;

static cached_int last_size, last_tags_code;

/* *value* as an int (a new reference), *cache*'s when it holds that value. */
static PyObject *
same_int(cached_int *cache, long long value)
{
    if (cache->obj == NULL || cache->value != value) {
        PyObject *made = PyLong_FromLongLong(value);
        if (made == NULL) {
            return NULL;
        }
        Py_XSETREF(cache->obj, made);
        cache->value = value;
    }
    return Py_NewRef(cache->obj);
}

/* A str from bytes known to be valid UTF-8; *ascii* says whether all are < 0x80. */
static PyObject *
str_from(const unsigned char *p, Py_ssize_t n, int ascii)
{
    if (!ascii) {
        return PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    }
    PyObject *s = PyUnicode_New(n, 127);
    if (s != NULL && n > 0) {
        memcpy(PyUnicode_1BYTE_DATA(s), p, (size_t)n);
    }
    return s;
}

static int
all_ascii(const unsigned char *p, Py_ssize_t n)
{
    uint64_t acc = 0;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {                /* eight bytes a step: properties run long */
        uint64_t word;
        memcpy(&word, p + i, 8);
        acc |= word;
    }
    for (; i < n; i++) {
        acc |= p[i];
    }
    return (acc & UINT64_C(0x8080808080808080)) == 0;
}

/* [%|a-zA-Z0-9_-], common/validation.py's topic characters. */
static int
topic_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
           || c == '%' || c == '|' || c == '_' || c == '-';
}

/* Topics met in one call: the raw bytes (inside the blob) and their str. */
#define TOPIC_CACHE 8
typedef struct {
    const unsigned char *raw;
    Py_ssize_t len;
    PyObject *str;
} seen_topic;

/* The checked topic of the record at *pos* as a new reference; NULL with
 * BatchError set when check_topic refuses it. Names made only of allowed
 * characters and 1..127 long pass without calling Python; anything else asks
 * check_topic, which words the refusal (and is the authority either way). */
static PyObject *
topic_of(seen_topic *seen, int *n_seen, const unsigned char *raw, Py_ssize_t len,
         Py_ssize_t pos)
{
    for (int i = 0; i < *n_seen; i++) {
        if (seen[i].len == len && memcmp(seen[i].raw, raw, (size_t)len) == 0) {
            return Py_NewRef(seen[i].str);
        }
    }
    int ok = len >= 1 && len <= MAX_TOPIC_LENGTH;
    for (Py_ssize_t i = 0; ok && i < len; i++) {
        ok = topic_char_ok(raw[i]);
    }
    PyObject *topic;
    if (ok) {
        topic = str_from(raw, len, 1);
    }
    else {
        topic = PyUnicode_DecodeUTF8((const char *)raw, len, "replace");
        if (topic == NULL) {
            return NULL;
        }
        PyObject *problem = PyObject_CallOneArg(check_topic, topic);
        if (problem == NULL) {
            Py_DECREF(topic);
            return NULL;
        }
        if (problem != Py_None) {
            Py_DECREF(topic);
            batch_error(str_illegal, "record at batch offset %zd: %S", pos, problem);
            Py_DECREF(problem);
            return NULL;
        }
        Py_DECREF(problem);
    }
    if (topic != NULL && *n_seen < TOPIC_CACHE) {
        seen[*n_seen].raw = raw;
        seen[*n_seen].len = len;
        seen[*n_seen].str = Py_NewRef(topic);
        (*n_seen)++;
    }
    return topic;
}

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} span;

/* ScannedBatch.markers bits (batch.py MARK_*): properties the broker acts on. */
#define MARK_DELAY 1                /* DELAY */
#define MARK_TIMER 2                /* TIMER_DELIVER_MS, TIMER_DELAY_MS, TIMER_DELAY_SEC */

/* TAGS, KEYS and UNIQ_KEY of "k\x01v\x02" pairs, as decode_properties reads
 * them: split on \x02, a pair's name ends at its first \x01, pairs with no
 * \x01 or an empty name or value are ignored, the last pair of a name wins.
 * The separators are ASCII, so splitting the bytes splits the text. MARK_*
 * bits of the names seen are or-ed into *markers*. */
static void
find_properties(const unsigned char *p, Py_ssize_t n, span *tags, span *keys, span *uniq,
                unsigned *markers)
{
    Py_ssize_t i = 0;
    while (i < n) {
        const unsigned char *pair = p + i;
        const unsigned char *stop = memchr(pair, 0x02, (size_t)(n - i));
        Py_ssize_t len = stop ? stop - pair : n - i;
        const unsigned char *sep = memchr(pair, 0x01, (size_t)len);
        if (sep != NULL && sep > pair && sep + 1 < pair + len) {
            Py_ssize_t name_len = sep - pair;
            span value = {sep + 1, pair + len - (sep + 1)};
            if (name_len == 4 && memcmp(pair, "TAGS", 4) == 0) {
                *tags = value;
            }
            else if (name_len == 4 && memcmp(pair, "KEYS", 4) == 0) {
                *keys = value;
            }
            else if (name_len == 8 && memcmp(pair, "UNIQ_KEY", 8) == 0) {
                *uniq = value;
            }
            else if (name_len == 5 && memcmp(pair, "DELAY", 5) == 0) {
                *markers |= MARK_DELAY;
            }
            else if (name_len > 9 && memcmp(pair, "TIMER_DEL", 9) == 0) {
                *markers |= MARK_TIMER;
            }
        }
        i += len + 1;
    }
}

/* 0 when the properties are UTF-8; else -1 with BatchError in the decoder's
 * own words, as py_scan_batch words it. */
static int
check_utf8(const unsigned char *p, Py_ssize_t n, Py_ssize_t pos)
{
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (text != NULL) {
        Py_DECREF(text);
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        return -1;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *reason = value ? PyUnicodeDecodeError_GetReason(value) : NULL;
    Py_ssize_t start = 0;
    if (reason != NULL && PyUnicodeDecodeError_GetStart(value, &start) == 0) {
        batch_error(str_illegal,
                    "record at batch offset %zd: properties are not valid UTF-8 (%U at byte %zd)",
                    pos, reason, start);
    }
    Py_XDECREF(reason);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return -1;
}


/* What the checks of one record learn of it (check_record). */
typedef struct {
    PyObject *topic;            /* new reference */
    const unsigned char *topic_raw;
    Py_ssize_t topic_len;
    int32_t queue_id, sysflag;
    Py_ssize_t store_ts_pos;    /* STORETIMESTAMP's position in the record */
    int ascii;                  /* the properties are ASCII */
    span tags, keys, uniq;
} record_view;

/* Tag code, keys list and UNIQ_KEY of a checked record's properties, into items[]
 * (new references; left NULL on error, which the caller cleans up). */
static int
properties_items(PyObject **items, const record_view *rec)
{
    int ascii = rec->ascii;
    span tags = rec->tags, keys = rec->keys, uniq = rec->uniq;
    uint32_t code = 0;                          /* tags_code: 0 when there is no TAGS */
    if (tags.n > 0) {
        if (ascii) {
            code = java_hash_bytes(0, tags.p, tags.n);
        }
        else {
            PyObject *text = str_from(tags.p, tags.n, 0);
            int rc = text ? java_hash_str(text, &code) : -1;
            Py_XDECREF(text);
            if (rc < 0) {
                return -1;
            }
        }
    }
    items[L_TAGS_CODES] = same_int(&last_tags_code, (int32_t)code);
    if (items[L_TAGS_CODES] == NULL) {
        return -1;
    }

    items[L_UNIQ_KEYS] = uniq.n > 0 ? str_from(uniq.p, uniq.n, ascii) : Py_NewRef(empty_str);
    Py_ssize_t n_keys = uniq.n > 0;
    for (Py_ssize_t i = 0; i < keys.n; i++) {   /* pieces of KEYS: a non-space after a space */
        n_keys += keys.p[i] != ' ' && (i == 0 || keys.p[i - 1] == ' ');
    }
    items[L_KEYS] = empty_list(n_keys);
    if (items[L_UNIQ_KEYS] == NULL || items[L_KEYS] == NULL) {
        return -1;
    }
    const unsigned char *k = keys.p, *end = keys.n > 0 ? keys.p + keys.n : keys.p;
    while (k < end) {                           /* KEYS split on " ", empty pieces dropped */
        const unsigned char *space = memchr(k, ' ', (size_t)(end - k));
        const unsigned char *stop = space ? space : end;
        if (stop > k && append_new(items[L_KEYS], str_from(k, stop - k, ascii)) < 0) {
            return -1;
        }
        k = stop + 1;
    }
    if (uniq.n > 0) {                           /* UNIQ_KEY is indexed too, last */
        return PyList_Append(items[L_KEYS], items[L_UNIQ_KEYS]);
    }
    return 0;
}

/* What every scan of records needs before it starts (scan_batch, scan_frame,
 * frame_dispatch): a STOREHOST size this layout has, and the batch classes loaded. */
static int
scan_ready(Py_ssize_t store_host_size)
{
    if (store_host_size != HOST_V4_SIZE && store_host_size != HOST_V6_SIZE) {
        PyErr_Format(PyExc_ValueError, "store_host_size is %zd; a STOREHOST is %d or %d bytes",
                     store_host_size, HOST_V4_SIZE, HOST_V6_SIZE);
        return -1;
    }
    return load_batch_classes();
}

/* Check the record at *pos* (*end - pos* bytes left in the blob) into *rec*: its
 * TOTALSIZE, or -1 with BatchError (or another error) set and rec->topic NULL. The
 * checks, their order and their messages are py_scan_batch's; a broker's put gives
 * its body limit and refuses empty bodies, a replica's frame gives neither.
 * MARK_* bits of the property names seen are or-ed into *markers*. */
static Py_ssize_t
check_record(record_view *rec, seen_topic *seen, int *n_seen, const unsigned char *buf,
             Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_body_size,
             Py_ssize_t store_host_size, int allow_empty_body, unsigned *markers)
{
    rec->topic = NULL;
    const unsigned char *r = buf + pos;
    if (end - pos < HEAD_SIZE) {
        batch_error(str_illegal, "record at batch offset %zd is cut short: %zd bytes left, "
                    "a head is %d", pos, end - pos, HEAD_SIZE);
        return -1;
    }
    Py_ssize_t total = rd_i32(r);
    uint32_t magic = rd_u32(r + POS_MAGIC);
    int32_t crc = rd_i32(r + POS_BODYCRC);
    rec->queue_id = rd_i32(r + POS_QUEUEID);
    rec->sysflag = rd_i32(r + POS_SYSFLAG);
    if (magic != MESSAGE_MAGIC_CODE && magic != MESSAGE_MAGIC_CODE_V2) {
        char got[16], want[16];         /* PyUnicode_FromFormat has no %X */
        PyOS_snprintf(got, sizeof got, "%08X", (unsigned int)magic);
        PyOS_snprintf(want, sizeof want, "%08X", (unsigned int)MESSAGE_MAGIC_CODE);
        batch_error(str_illegal, "record at batch offset %zd has magic code 0x%s; expected "
                    "0x%s", pos, got, want);
        return -1;
    }
    if (total < HEAD_SIZE || total > end - pos) {
        batch_error(str_illegal, "record at batch offset %zd has TOTALSIZE %zd, but %zd bytes "
                    "are left in the batch", pos, total, end - pos);
        return -1;
    }
    /* From here on every position is below record_end <= end. */
    int store_v6 = store_host_size == HOST_V6_SIZE;
    if (((rec->sysflag & SYSFLAG_STOREHOST_V6) != 0) != store_v6) {
        batch_error(str_illegal, "record at batch offset %zd reserves %d bytes for STOREHOST; "
                    "this broker writes %zd", pos, store_v6 ? HOST_V4_SIZE : HOST_V6_SIZE,
                    store_host_size);
        return -1;
    }
    Py_ssize_t born_size = (rec->sysflag & SYSFLAG_BORNHOST_V6) ? HOST_V6_SIZE : HOST_V4_SIZE;
    rec->store_ts_pos = POS_BORNHOST + born_size;
    Py_ssize_t record_end = pos + total;
    Py_ssize_t p = pos + rec->store_ts_pos + STORE_TIMESTAMP_SIZE + store_host_size + TAIL_AFTER_STOREHOST;
    if (p + BODYLEN_SIZE > record_end) {
        batch_error(str_illegal, "record at batch offset %zd: TOTALSIZE %zd is smaller than "
                    "its fixed fields", pos, total);
        return -1;
    }
    Py_ssize_t body_len = rd_i32(buf + p);
    Py_ssize_t body_pos = p + BODYLEN_SIZE;
    p = body_pos + body_len;
    if (body_len < 0 || p > record_end) {
        batch_error(str_illegal, "record at batch offset %zd: BODYLEN %zd does not fit "
                    "TOTALSIZE %zd", pos, body_len, total);
        return -1;
    }
    if (body_len > max_body_size) {
        batch_error(str_body_too_large, "message body is %zd bytes; this broker accepts at most %zd "
                    "(max_message_size_bytes)", body_len, max_body_size);
        return -1;
    }
    if (body_len == 0 && !allow_empty_body) {
        batch_error(str_empty_body, "record at batch offset %zd: message body is empty; a "
                    "message needs a body", pos);
        return -1;
    }
    Py_ssize_t topic_len;
    if (magic == MESSAGE_MAGIC_CODE) {
        topic_len = p < record_end ? buf[p] : -1;
        p += 1;
    }
    else {
        topic_len = p + 2 <= record_end ? rd_u16(buf + p) : -1;
        p += 2;
    }
    if (topic_len < 0 || p + topic_len + 2 > record_end) {
        batch_error(str_illegal, "record at batch offset %zd: topic length %zd does not fit "
                    "TOTALSIZE %zd", pos, topic_len, total);
        return -1;
    }
    rec->topic = topic_of(seen, n_seen, buf + p, topic_len, pos);
    if (rec->topic == NULL) {
        return -1;
    }
    rec->topic_raw = buf + p;
    rec->topic_len = topic_len;
    p += topic_len;
    Py_ssize_t props_len = rd_u16(buf + p);     /* p + 2 <= record_end: checked above */
    p += 2;
    if (p + props_len != record_end) {
        batch_error(str_illegal, "record at batch offset %zd: TOTALSIZE is %zd but its parts "
                    "add up to %zd", pos, total, p + props_len - pos);
        goto fail;
    }
    if (props_len > MAX_PROPERTIES_LENGTH) {
        batch_error(str_properties, "properties are %zd bytes; at most %d are allowed",
                    props_len, MAX_PROPERTIES_LENGTH);
        goto fail;
    }
    /* 0 <= body_len < 2**31 fits zlib's uInt. */
    long actual_crc = (long)(crc32_fast(0, buf + body_pos, (size_t)body_len) & 0x7FFFFFFFu);
    if (actual_crc != crc) {
        batch_error(str_illegal, "record at batch offset %zd: body CRC is %ld, the record says "
                    "%d", pos, actual_crc, (int)crc);
        goto fail;
    }
    rec->ascii = all_ascii(buf + p, props_len);
    if (!rec->ascii && check_utf8(buf + p, props_len, pos) < 0) {
        goto fail;
    }
    rec->tags = rec->keys = rec->uniq = (span){NULL, 0};
    find_properties(buf + p, props_len, &rec->tags, &rec->keys, &rec->uniq, markers);
    return total;

fail:
    Py_CLEAR(rec->topic);
    return -1;
}

/* Check the record at *pos* (*end - pos* bytes left in the blob) and append
 * what the append and the dispatch need to the lists. Returns its TOTALSIZE,
 * or -1 with an error set. */
static Py_ssize_t
scan_record(PyObject **lists, seen_topic *seen, int *n_seen, const unsigned char *buf,
            Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_body_size,
            Py_ssize_t store_host_size, int allow_empty_body, unsigned *markers)
{
    PyObject *items[N_LISTS] = {NULL};
    record_view rec;
    Py_ssize_t total = check_record(&rec, seen, n_seen, buf, pos, end, max_body_size,
                                    store_host_size, allow_empty_body, markers);
    if (total < 0) {
        return -1;
    }
    items[L_TOPICS] = rec.topic;
    if (properties_items(items, &rec) < 0) {
        goto fail;
    }
    items[L_POSITIONS] = PyLong_FromSsize_t(pos);
    items[L_SIZES] = same_int(&last_size, total);
    items[L_QUEUE_IDS] = PyLong_FromLong(rec.queue_id);
    items[L_SYSFLAGS] = PyLong_FromLong(rec.sysflag);
    items[L_STORE_TS_POSITIONS] = PyLong_FromSsize_t(rec.store_ts_pos);
    for (int i = 0; i < N_LISTS; i++) {
        if (items[i] == NULL || PyList_Append(lists[i], items[i]) < 0) {
            goto fail;
        }
    }
    for (int i = 0; i < N_LISTS; i++) {
        Py_DECREF(items[i]);
    }
    return total;

fail:
    for (int i = 0; i < N_LISTS; i++) {
        Py_XDECREF(items[i]);
    }
    return -1;
}

/* -- idempotent producers' stamps (producer_state.py: idempotence_of, py_idem_runs) --- */

/* A stamped record ends in "\x02PMQ_IDEM\x01<pid>.<epoch>.<seq>\x02", looked for in
 * its last IDEM_TAIL_WINDOW bytes (producer_state.TAIL_WINDOW). */
static const char IDEM_NEEDLE[] = "\x02PMQ_IDEM\x01";
enum {
    IDEM_NEEDLE_LEN = sizeof IDEM_NEEDLE - 1,
    IDEM_TAIL_WINDOW = IDEM_NEEDLE_LEN + 19 + 1 + 10 + 1 + 20 + 1,
    IDEM_RUN_SEARCH = 16,       /* producer_state.RUN_SEARCH */
};

/* One field of a stamp, -?[0-9]{1,20} within int64, at *p* and ended by *term* (or by
 * *stop*, when term is 0), into *out*: one pass, no search for the terminator first.
 * Returns the position past the terminator, NULL when the field is not one. */
static const unsigned char *
idem_field(const unsigned char *p, const unsigned char *stop, unsigned char term, int64_t *out)
{
    int neg = p < stop && *p == '-';
    p += neg;
    const unsigned char *first = p;
    uint64_t v = 0;
    /* 19 digits stay below 10**19 < UINT64_MAX: only a 20th can overflow */
    while (p < stop && p - first < 19 && (unsigned)(*p - '0') <= 9) {
        v = v * 10 + (unsigned)(*p++ - '0');
    }
    if (p < stop && p - first == 19 && (unsigned)(*p - '0') <= 9) {
        unsigned d = (unsigned)(*p++ - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return NULL;
        }
        v = v * 10 + d;
    }
    if (p == first || v > (uint64_t)INT64_MAX) {
        return NULL;                /* no digit, or past every range a field may have */
    }
    if (term ? p >= stop || *p != term : p != stop) {
        return NULL;                /* a 21st digit, or any other character */
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return p + 1;
}

/* Where the value of the stamp of the record ending at *end* begins (past "PMQ_IDEM\x01"),
 * NULL when the record has no stamp property last. The stamp is found behind the
 * separator of the property before it, or, the record's only property, right behind
 * its 2-byte PROPERTIES_LENGTH, which then counts exactly the bytes from it to *end*
 * (an epoch record written before it got a property ahead of the stamp). */
static const unsigned char *
idem_value(const unsigned char *buf, Py_ssize_t end)
{
    Py_ssize_t start = end > IDEM_TAIL_WINDOW ? end - IDEM_TAIL_WINDOW : 0;
    if (end <= start || buf[end - 1] != 0x02) {
        return NULL;
    }
    Py_ssize_t k = end - IDEM_NEEDLE_LEN;
    while (k >= start && (buf[k] != 0x02 || memcmp(buf + k, IDEM_NEEDLE, IDEM_NEEDLE_LEN))) {
        k--;
    }
    if (k >= start) {
        return buf + k + IDEM_NEEDLE_LEN;
    }
    Py_ssize_t lo = start - 1 > 2 ? start - 1 : 2;
    for (k = end - (IDEM_NEEDLE_LEN - 1); k >= lo; k--) {
        if (buf[k] == 'P' && memcmp(buf + k, IDEM_NEEDLE + 1, IDEM_NEEDLE_LEN - 1) == 0
            && ((Py_ssize_t)buf[k - 2] << 8 | buf[k - 1]) == end - k) {
            return buf + k + IDEM_NEEDLE_LEN - 1;
        }
    }
    return NULL;
}

static int
idem_in_range(const int64_t *ident)
{
    return ident[0] > 0 && ident[1] >= 0 && ident[1] <= INT32_MAX && ident[2] >= -1
           && ident[2] < ((int64_t)1 << 62);
}

/* idempotence_of: the stamp of the record ending at *end*; 1 if it has a valid one. */
static int
idem_of(const unsigned char *buf, Py_ssize_t end, int64_t *ident)
{
    const unsigned char *p = idem_value(buf, end), *stop = buf + end - 1;
    if (p == NULL || (p = idem_field(p, stop, '.', &ident[0])) == NULL
        || (p = idem_field(p, stop, '.', &ident[1])) == NULL
        || idem_field(p, stop, 0, &ident[2]) == NULL) {
        return 0;
    }
    return idem_in_range(ident);
}

typedef struct {
    int64_t pid, epoch, first;
    PyObject *topic;            /* borrowed from the scan's topics list */
    int32_t queue_id;
    PyObject *indices;          /* list of record indices, owned */
} idem_run;

typedef struct {
    idem_run *items;
    Py_ssize_t n, cap;
    /* the "<pid>.<epoch>." of the last stamp parsed (in the scanned buffer) and its
     * values: the records of a producer repeat it, so only their sequence is parsed */
    const unsigned char *head;
    Py_ssize_t head_len;
    int64_t head_pid, head_epoch;
} idem_runs;

static void
idem_runs_free(idem_runs *runs)
{
    for (Py_ssize_t i = 0; i < runs->n; i++) {
        Py_DECREF(runs->items[i].indices);
    }
    PyMem_Free(runs->items);
}

/* idem_of, for the records of one scan: a stamp that begins with the "<pid>.<epoch>."
 * of the one before has only its sequence parsed (the same bytes, the same values). */
static int
idem_of_next(idem_runs *runs, const unsigned char *buf, Py_ssize_t end, int64_t *ident)
{
    const unsigned char *p = idem_value(buf, end), *stop = buf + end - 1;
    if (p == NULL) {
        return 0;
    }
    Py_ssize_t n = runs->head_len;
    if (n > 0 && stop - p >= n && memcmp(p, runs->head, (size_t)n) == 0) {
        ident[0] = runs->head_pid;
        ident[1] = runs->head_epoch;
        p += n;
    }
    else {
        const unsigned char *seq = idem_field(p, stop, '.', &ident[0]);
        if (seq == NULL || (seq = idem_field(seq, stop, '.', &ident[1])) == NULL) {
            return 0;
        }
        runs->head = p;
        runs->head_len = seq - p;
        runs->head_pid = ident[0];
        runs->head_epoch = ident[1];
        p = seq;
    }
    return idem_field(p, stop, 0, &ident[2]) != NULL && idem_in_range(ident);
}

/* py_idem_runs for one more record (index *index*, ending at *end*). 0, or -1 on error. */
static int
idem_note(idem_runs *runs, const unsigned char *buf, Py_ssize_t end, PyObject *topic,
          int32_t queue_id, Py_ssize_t index)
{
    int64_t id[3];
    if (!idem_of_next(runs, buf, end, id)) {
        return 0;
    }
    Py_ssize_t stop = runs->n > IDEM_RUN_SEARCH ? runs->n - IDEM_RUN_SEARCH : 0;
    for (Py_ssize_t j = runs->n - 1; j >= stop; j--) {
        idem_run *r = &runs->items[j];
        if (r->pid == id[0] && r->queue_id == queue_id
            && (r->topic == topic || PyUnicode_Compare(r->topic, topic) == 0)) {
            if (r->epoch == id[1] && r->first >= 0
                && r->first + PyList_GET_SIZE(r->indices) == id[2]) {
                return append_new(r->indices, PyLong_FromSsize_t(index));
            }
            break;
        }
    }
    if (runs->n == runs->cap) {
        Py_ssize_t cap = runs->cap ? runs->cap * 2 : 8;
        idem_run *items = PyMem_Realloc(runs->items, (size_t)cap * sizeof *items);
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        runs->items = items;
        runs->cap = cap;
    }
    PyObject *indices = PyList_New(0);
    if (indices == NULL || append_new(indices, PyLong_FromSsize_t(index)) < 0) {
        Py_XDECREF(indices);
        return -1;
    }
    runs->items[runs->n++] = (idem_run){id[0], id[1], id[2], topic, queue_id, indices};
    return 0;
}

/* The runs as a list of (pid, epoch, topic, queue id, first seq, indices). */
static PyObject *
idem_runs_list(const idem_runs *runs)
{
    PyObject *out = PyList_New(runs->n);
    for (Py_ssize_t i = 0; out != NULL && i < runs->n; i++) {
        const idem_run *r = &runs->items[i];
        PyObject *item = Py_BuildValue("(LLOiLO)", (long long)r->pid, (long long)r->epoch,
                                       r->topic, (int)r->queue_id, (long long)r->first,
                                       r->indices);
        if (item == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

/* ScannedBatch(positions, ..., uniq_keys, blob, markers, idem_runs) of a scan's lists:
 * the order checked in load_batch_classes. */
static PyObject *
new_scanned_batch(PyObject **lists, PyObject *blob, unsigned markers, const idem_runs *runs)
{
    PyObject *marks = PyLong_FromUnsignedLong(markers);
    PyObject *run_list = marks != NULL ? idem_runs_list(runs) : NULL;
    if (run_list == NULL) {
        Py_XDECREF(marks);
        return NULL;
    }
    PyObject *call_args[N_LISTS + 3];
    for (int i = 0; i < N_LISTS; i++) {
        call_args[i] = lists[i];
    }
    call_args[N_LISTS] = blob;
    call_args[N_LISTS + 1] = marks;
    call_args[N_LISTS + 2] = run_list;
    PyObject *batch = PyObject_Vectorcall(scanned_batch_cls, call_args, N_LISTS + 3, NULL);
    Py_DECREF(marks);
    Py_DECREF(run_list);
    return batch;
}

PyDoc_STRVAR(scan_batch_doc,
"scan_batch(blob, *, max_body_size, store_host_size=8, allow_empty_body=True)\n--\n\n"
"Check every record of *blob*; return a ScannedBatch or raise BatchError.\n\n"
"The compiled pocketmq.broker.store.batch.py_scan_batch.");

static PyObject *
scan_batch(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"blob", "max_body_size", "store_host_size", "allow_empty_body",
                             NULL};
    PyObject *blob;
    Py_ssize_t max_body_size = PY_SSIZE_T_MIN;  /* required: keyword-only args parse as optional */
    Py_ssize_t store_host_size = HOST_V4_SIZE;
    int allow_empty_body = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$nnp:scan_batch", kwlist, &blob,
                                     &max_body_size, &store_host_size, &allow_empty_body)) {
        return NULL;
    }
    if (max_body_size == PY_SSIZE_T_MIN) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_batch() missing required keyword-only argument: 'max_body_size'");
        return NULL;
    }
    if (scan_ready(store_host_size) < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(blob, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *lists[N_LISTS] = {NULL};
    seen_topic seen[TOPIC_CACHE];
    int n_seen = 0;
    unsigned markers = 0;
    idem_runs runs = {NULL, 0, 0};
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    /* room for the records ahead, but no more than SCAN_ROOM_AHEAD: a hostile blob of
     * tiny records is refused after its first, before it has cost more than its bytes */
    Py_ssize_t room = count_records(buf, end, SCAN_ROOM_AHEAD);
    for (int i = 0; i < N_LISTS; i++) {
        if ((lists[i] = empty_list(room)) == NULL) {
            goto done;
        }
    }
    if (end == 0) {
        batch_error(str_illegal, "the batch holds no records");
        goto done;
    }
    for (Py_ssize_t pos = 0; pos < end;) {
        Py_ssize_t total = scan_record(lists, seen, &n_seen, buf, pos, end, max_body_size,
                                       store_host_size, allow_empty_body, &markers);
        if (total < 0) {
            goto done;
        }
        Py_ssize_t index = PyList_GET_SIZE(lists[L_TOPICS]) - 1;
        if (idem_note(&runs, buf, pos + total, PyList_GET_ITEM(lists[L_TOPICS], index),
                      rd_i32(buf + pos + POS_QUEUEID), index) < 0) {
            goto done;
        }
        pos += total;
    }
    result = new_scanned_batch(lists, blob, markers, &runs);

done:
    idem_runs_free(&runs);
    for (int i = 0; i < n_seen; i++) {
        Py_DECREF(seen[i].str);
    }
    for (int i = 0; i < N_LISTS; i++) {
        Py_XDECREF(lists[i]);
    }
    PyBuffer_Release(&view);
    return result;
}

/* -- columns of a ScannedBatch ----------------------------------------------------------- */

/* Fetch *n_attrs* list attributes of *obj* into cols[] (new references) and
 * check they and *extra* lists all have one length, returned; -1 on error
 * (cols[] then holds NULLs or references the caller drops with drop_columns). */
static Py_ssize_t
get_columns(PyObject *obj, PyObject *const *attrs, int n_attrs, PyObject **cols,
            PyObject *const *extra, int n_extra)
{
    Py_ssize_t n = -1;
    for (int i = 0; i < n_attrs + n_extra; i++) {
        PyObject *col;
        if (i < n_attrs) {
            col = cols[i] = PyObject_GetAttr(obj, attrs[i]);
            if (col == NULL) {
                return -1;
            }
        }
        else {
            col = extra[i - n_attrs];
        }
        if (!PyList_Check(col)) {
            PyErr_Format(PyExc_TypeError, "expected a list, got %.100s", Py_TYPE(col)->tp_name);
            return -1;
        }
        if (n >= 0 && PyList_GET_SIZE(col) != n) {
            PyErr_Format(PyExc_ValueError, "per-record lists differ in length: %zd and %zd",
                         n, PyList_GET_SIZE(col));
            return -1;
        }
        n = PyList_GET_SIZE(col);
    }
    return n;
}

static void
drop_columns(PyObject **cols, int n)
{
    for (int i = 0; i < n; i++) {
        Py_CLEAR(cols[i]);
    }
}

/* The (topic, queue id) key of record *i*, a new tuple. Exact str and int only:
 * their hash and equality run no Python code, so nothing can change the lists
 * while a loop walks them. */
static PyObject *
queue_key(PyObject *topics, PyObject *queue_ids, Py_ssize_t i)
{
    PyObject *topic = PyList_GET_ITEM(topics, i), *queue_id = PyList_GET_ITEM(queue_ids, i);
    if (!PyUnicode_CheckExact(topic) || !PyLong_CheckExact(queue_id)) {
        PyErr_Format(PyExc_TypeError, "record %zd: topic and queue id must be str and int, "
                     "not %.100s and %.100s", i, Py_TYPE(topic)->tp_name,
                     Py_TYPE(queue_id)->tp_name);
        return NULL;
    }
    return PyTuple_Pack(2, topic, queue_id);
}

static inline int
is_dispatched_to_queue(long sysflag)
{
    long kind = sysflag & SYSFLAG_TRANSACTION_MASK;
    return kind != SYSFLAG_TRANSACTION_PREPARED && kind != SYSFLAG_TRANSACTION_ROLLBACK;
}

/* -- patch_batch (commitlog.py, py_patch_batch) ----------------------------------------- */

PyDoc_STRVAR(patch_batch_doc,
"patch_batch(buf, rel, base, batch, table, store_timestamp_ms, store_host, /)\n--\n\n"
"Assign queue offsets from *table* and patch QUEUEOFFSET, PHYSICALOFFSET,\n"
"STORETIMESTAMP and STOREHOST of the batch's records, which lie in the writable\n"
"buffer *buf* from *rel* on (*base* is the log offset of buf[0]).\n"
"Return (phys_offsets, queue_offsets).");

enum { P_POSITIONS, P_TOPICS, P_QUEUE_IDS, P_SYSFLAGS, P_STORE_TS_POSITIONS, N_PATCH_COLS };

/* Whether record *i*'s (topic, queue id) equals *topic*, *queue_id* (the key of a run
 * kept). Exact str and int only, as queue_key: comparing them runs no Python. */
static int
same_queue(PyObject *topics, PyObject *queue_ids, Py_ssize_t i, PyObject *topic,
           PyObject *queue_id)
{
    PyObject *t = PyList_GET_ITEM(topics, i), *q = PyList_GET_ITEM(queue_ids, i);
    if (!PyUnicode_CheckExact(t) || !PyLong_CheckExact(q)) {
        return 0;                               /* queue_key words the refusal */
    }
    if (q != queue_id) {
        int eq = PyObject_RichCompareBool(q, queue_id, Py_EQ);
        if (eq <= 0) {
            return eq;
        }
    }
    return t == topic || PyUnicode_Compare(t, topic) == 0;
}

/* A run of records of one queue in patch_batch: its key, and the next queue offset,
 * held here and written to the table when the run ends (a dict update per queue and
 * batch, not per record). */
typedef struct {
    PyObject *key;                              /* (topic, queue id), owned; NULL: none */
    long long next;
} queue_run;

/* table[run.key] = run.next; the run is over. Keeps an exception already set. */
static int
end_queue_run(PyObject *table, queue_run *run)
{
    if (run->key == NULL) {
        return 0;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *next = PyLong_FromLongLong(run->next);
    int rc = next != NULL ? PyDict_SetItem(table, run->key, next) : -1;
    Py_XDECREF(next);
    Py_CLEAR(run->key);
    if (type != NULL) {
        if (rc < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(type, value, tb);
        return -1;
    }
    return rc;
}

/* Start the run of record *i*'s queue at table.get(key, 0). */
static int
start_queue_run(PyObject *table, PyObject *topics, PyObject *queue_ids, Py_ssize_t i,
                queue_run *run)
{
    if (end_queue_run(table, run) < 0) {
        return -1;
    }
    PyObject *key = queue_key(topics, queue_ids, i);
    if (key == NULL) {
        return -1;
    }
    PyObject *current = PyDict_GetItemWithError(table, key);  /* borrowed */
    long long next = 0;
    if (current != NULL) {
        next = PyLong_AsLongLong(current);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    run->key = key;
    run->next = next;
    return 0;
}

/* The runs patch_batch keeps: QUEUE_RUNS queues at most, the oldest ended for a new one. */
typedef struct {
    queue_run items[QUEUE_RUNS];
    int n;                                      /* runs in use */
    int last;                                   /* the run of the record before */
    int oldest;                                 /* the next to end when all are in use */
} queue_runs;

/* The run of record *i*'s queue, started (from the table) when none is kept; NULL on error. */
static queue_run *
find_queue_run(queue_runs *runs, PyObject *table, PyObject *topics, PyObject *queue_ids,
               Py_ssize_t i)
{
    for (int k = -1; k < runs->n; k++) {        /* the run of the record before first */
        int at = k < 0 ? runs->last : k;
        if (at >= runs->n || (k >= 0 && at == runs->last)) {
            continue;
        }
        PyObject *key = runs->items[at].key;
        int same = same_queue(topics, queue_ids, i, PyTuple_GET_ITEM(key, 0),
                              PyTuple_GET_ITEM(key, 1));
        if (same < 0) {
            return NULL;
        }
        if (same) {
            runs->last = at;
            return &runs->items[at];
        }
    }
    int at = runs->n < QUEUE_RUNS ? runs->n++ : runs->oldest;
    if (at == runs->oldest && runs->n == QUEUE_RUNS) {
        runs->oldest = (runs->oldest + 1) % QUEUE_RUNS;
    }
    if (start_queue_run(table, topics, queue_ids, i, &runs->items[at]) < 0) {
        return NULL;
    }
    runs->last = at;
    return &runs->items[at];
}

/* End every run (the table gets their next offsets); keeps an exception already set. */
static int
end_queue_runs(PyObject *table, queue_runs *runs)
{
    int rc = 0;
    for (int k = 0; k < runs->n; k++) {
        rc |= end_queue_run(table, &runs->items[k]);
    }
    return rc < 0 ? -1 : 0;
}

static PyObject *
patch_batch(PyObject *module, PyObject *args)
{
    Py_buffer buf, host;
    Py_ssize_t rel;
    long long base, store_ts;
    PyObject *batch, *table;
    if (!PyArg_ParseTuple(args, "w*nLOO!Ly*:patch_batch", &buf, &rel, &base, &batch,
                          &PyDict_Type, &table, &store_ts, &host)) {
        return NULL;
    }
    PyObject *attrs[N_PATCH_COLS] = {attr_positions, attr_topics, attr_queue_ids,
                                     attr_sysflags, attr_store_ts_positions};
    PyObject *cols[N_PATCH_COLS] = {NULL};
    PyObject *phys_list = NULL, *qo_list = NULL, *result = NULL;
    queue_runs runs = {{{NULL, 0}}, 0, 0, 0};
    Py_ssize_t n = get_columns(batch, attrs, N_PATCH_COLS, cols, NULL, 0);
    if (n < 0 || (phys_list = PyList_New(n)) == NULL || (qo_list = PyList_New(n)) == NULL) {
        goto done;
    }
    unsigned char *mem = (unsigned char *)buf.buf;
    Py_ssize_t len = buf.len;
    if (rel < 0 || rel > len) {
        PyErr_Format(PyExc_ValueError, "batch position %zd lies outside the %zd-byte buffer",
                     rel, len);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t pos = PyLong_AsSsize_t(PyList_GET_ITEM(cols[P_POSITIONS], i));
        Py_ssize_t ts_pos = PyLong_AsSsize_t(PyList_GET_ITEM(cols[P_STORE_TS_POSITIONS], i));
        long sysflag = PyLong_AsLong(PyList_GET_ITEM(cols[P_SYSFLAGS], i));
        if (PyErr_Occurred()) {
            goto done;
        }
        /* QUEUEOFFSET..PHYSICALOFFSET and STORETIMESTAMP..STOREHOST must lie in buf. */
        if (pos < 0 || pos > len - rel - (POS_QUEUEOFFSET + 16) || ts_pos < 0
            || ts_pos > len - rel - pos - 8 - host.len) {
            PyErr_Format(PyExc_ValueError, "record %zd at batch offset %zd does not fit the "
                         "buffer", i, pos);
            goto done;
        }
        Py_ssize_t at = rel + pos;
        long long phys = base + at;
        long long qo = 0;
        if (is_dispatched_to_queue(sysflag)) {
            queue_run *run = find_queue_run(&runs, table, cols[P_TOPICS], cols[P_QUEUE_IDS], i);
            if (run == NULL) {
                goto done;
            }
            qo = run->next++;
        }
        PyObject *queue_offset = PyLong_FromLongLong(qo);
        PyObject *phys_obj = queue_offset != NULL ? PyLong_FromLongLong(phys) : NULL;
        if (phys_obj == NULL) {
            Py_XDECREF(queue_offset);
            goto done;
        }
        PyList_SET_ITEM(qo_list, i, queue_offset);  /* steals */
        PyList_SET_ITEM(phys_list, i, phys_obj);
        wr_u64(mem + at + POS_QUEUEOFFSET, (uint64_t)qo);
        wr_u64(mem + at + POS_PHYSICALOFFSET, (uint64_t)phys);
        wr_u64(mem + at + ts_pos, (uint64_t)store_ts);
        memcpy(mem + at + ts_pos + STORE_TIMESTAMP_SIZE, host.buf, (size_t)host.len);
    }
    if (end_queue_runs(table, &runs) == 0) {
        result = PyTuple_Pack(2, phys_list, qo_list);
    }

done:
    end_queue_runs(table, &runs);               /* the offsets taken before an error */
    Py_XDECREF(phys_list);
    Py_XDECREF(qo_list);
    drop_columns(cols, N_PATCH_COLS);
    PyBuffer_Release(&host);
    PyBuffer_Release(&buf);
    return result;
}

/* -- queue_units (batch.py, py_queue_units) ------------------------------------------------ */

PyDoc_STRVAR(queue_units_doc,
"queue_units(batch, phys_offsets, queue_offsets, /)\n--\n\n"
"Consume-queue units of a stored batch, one run per (topic, queue id) in\n"
"first-seen order: [(topic, queue_id, first_queue_offset, units)].\n"
"Prepared and rolled-back transaction records get none.");

enum { U_TOPICS, U_QUEUE_IDS, U_SYSFLAGS, U_SIZES, U_TAGS_CODES, N_UNIT_COLS };

static PyObject *
queue_units(PyObject *module, PyObject *args)
{
    PyObject *batch, *phys_offsets, *queue_offsets;
    if (!PyArg_ParseTuple(args, "OO!O!:queue_units", &batch, &PyList_Type, &phys_offsets,
                          &PyList_Type, &queue_offsets)) {
        return NULL;
    }
    PyObject *attrs[N_UNIT_COLS] = {attr_topics, attr_queue_ids, attr_sysflags, attr_sizes,
                                    attr_tags_codes};
    PyObject *extra[2] = {phys_offsets, queue_offsets};
    PyObject *cols[N_UNIT_COLS] = {NULL};
    PyObject *groups = NULL, *result = NULL, *out = NULL;
    Py_ssize_t *group_of = NULL, *first_of = NULL, *count_of = NULL;
    unsigned char **cursor = NULL;
    Py_ssize_t n = get_columns(batch, attrs, N_UNIT_COLS, cols, extra, 2);
    if (n < 0 || (groups = PyDict_New()) == NULL) {
        goto done;
    }
    Py_ssize_t cap = n > 0 ? n : 1;
    group_of = PyMem_New(Py_ssize_t, cap);
    first_of = PyMem_New(Py_ssize_t, cap);
    count_of = PyMem_New(Py_ssize_t, cap);
    cursor = PyMem_New(unsigned char *, cap);
    if (group_of == NULL || first_of == NULL || count_of == NULL || cursor == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Pass 1: the run of each record, numbered in first-seen order. */
    Py_ssize_t n_groups = 0;
    Py_ssize_t last = -1;                       /* the dispatched record before */
    for (Py_ssize_t i = 0; i < n; i++) {
        long sysflag = PyLong_AsLong(PyList_GET_ITEM(cols[U_SYSFLAGS], i));
        if (sysflag == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (!is_dispatched_to_queue(sysflag)) {
            group_of[i] = -1;
            continue;
        }
        /* The queue of the record before, or one of the first QUEUE_RUNS queues: the
         * batches of a producer feed one queue, or a few in turn; no dict for them. */
        Py_ssize_t found = -1;
        Py_ssize_t probes = n_groups < QUEUE_RUNS ? n_groups : QUEUE_RUNS;
        for (Py_ssize_t k = last >= 0 ? -1 : 0; found < 0 && k < probes; k++) {
            Py_ssize_t g = k < 0 ? group_of[last] : k;
            if (k >= 0 && last >= 0 && g == group_of[last]) {
                continue;                       /* probed first */
            }
            Py_ssize_t j = first_of[g];
            int same = same_queue(cols[U_TOPICS], cols[U_QUEUE_IDS], i,
                                  PyList_GET_ITEM(cols[U_TOPICS], j),
                                  PyList_GET_ITEM(cols[U_QUEUE_IDS], j));
            if (same < 0) {
                goto done;
            }
            found = same ? g : -1;
        }
        if (found >= 0) {
            group_of[i] = found;
            count_of[found]++;
            last = i;
            continue;
        }
        last = i;
        PyObject *key = queue_key(cols[U_TOPICS], cols[U_QUEUE_IDS], i);
        if (key == NULL) {
            goto done;
        }
        PyObject *known = PyDict_GetItemWithError(groups, key);  /* borrowed */
        Py_ssize_t g;
        if (known != NULL) {
            g = PyLong_AsSsize_t(known);
        }
        else if (PyErr_Occurred()) {
            g = -1;
        }
        else {
            g = n_groups++;
            first_of[g] = i;
            count_of[g] = 0;
            PyObject *number = PyLong_FromSsize_t(g);
            if (number == NULL || PyDict_SetItem(groups, key, number) < 0) {
                g = -1;
            }
            Py_XDECREF(number);
        }
        Py_DECREF(key);
        if (g < 0) {
            goto done;
        }
        group_of[i] = g;
        count_of[g]++;
    }
    /* Pass 2: one bytes object per run, filled in place before anyone sees it. */
    if ((out = PyList_New(n_groups)) == NULL) {
        goto done;
    }
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        Py_ssize_t i = first_of[g];
        PyObject *units = PyBytes_FromStringAndSize(NULL, count_of[g] * CQ_UNIT_SIZE);
        if (units == NULL) {
            goto done;
        }
        cursor[g] = (unsigned char *)PyBytes_AS_STRING(units);
        PyObject *run = PyTuple_Pack(4, PyList_GET_ITEM(cols[U_TOPICS], i),
                                     PyList_GET_ITEM(cols[U_QUEUE_IDS], i),
                                     PyList_GET_ITEM(queue_offsets, i), units);
        Py_DECREF(units);                       /* the tuple holds it */
        if (run == NULL) {
            goto done;
        }
        PyList_SET_ITEM(out, g, run);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t g = group_of[i];
        if (g < 0) {
            continue;
        }
        long long phys = PyLong_AsLongLong(PyList_GET_ITEM(phys_offsets, i));
        long size = PyLong_AsLong(PyList_GET_ITEM(cols[U_SIZES], i));
        long long tags = PyLong_AsLongLong(PyList_GET_ITEM(cols[U_TAGS_CODES], i));
        if (PyErr_Occurred()) {
            goto done;
        }
        if (size < INT32_MIN || size > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "record size %ld does not fit an i32", size);
            goto done;
        }
        unsigned char *u = cursor[g];
        wr_u64(u, (uint64_t)phys);
        wr_u32(u + 8, (uint32_t)size);
        wr_u64(u + 12, (uint64_t)tags);
        cursor[g] = u + CQ_UNIT_SIZE;
    }
    result = Py_NewRef(out);

done:
    Py_XDECREF(out);
    Py_XDECREF(groups);
    PyMem_Free(group_of);
    PyMem_Free(first_of);
    PyMem_Free(count_of);
    PyMem_Free(cursor);
    drop_columns(cols, N_UNIT_COLS);
    return result;
}

/* -- index_key_hashes (index_file_set.py, py_index_key_hashes) ----------------------------- */

PyDoc_STRVAR(index_key_hashes_doc,
"index_key_hashes(topics, keys, phys_offsets, after_phys, /)\n--\n\n"
"Stored keyHash of topic#key for every non-empty key of every record past\n"
"*after_phys*, flattened: (hashes, phys_offsets), one item per entry.");

static PyObject *
index_key_hashes(PyObject *module, PyObject *args)
{
    PyObject *topics, *keys, *phys_offsets;
    long long after_phys;
    if (!PyArg_ParseTuple(args, "O!O!O!L:index_key_hashes", &PyList_Type, &topics,
                          &PyList_Type, &keys, &PyList_Type, &phys_offsets, &after_phys)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(topics);
    if (PyList_GET_SIZE(keys) != n || PyList_GET_SIZE(phys_offsets) != n) {
        PyErr_Format(PyExc_ValueError, "per-record lists differ in length: %zd, %zd and %zd",
                     n, PyList_GET_SIZE(keys), PyList_GET_SIZE(phys_offsets));
        return NULL;
    }
    Py_ssize_t n_keys = 0;                      /* room for every key: a list grows once */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *record_keys = PyList_GET_ITEM(keys, i);
        n_keys += PyList_Check(record_keys) ? PyList_GET_SIZE(record_keys) : 0;
    }
    PyObject *hashes = empty_list(n_keys), *entry_phys = empty_list(n_keys), *result = NULL;
    PyObject *prefix_of = NULL;                 /* topic whose "topic#" hash is in prefix */
    uint32_t prefix = 0;
    if (hashes == NULL || entry_phys == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *phys = PyList_GET_ITEM(phys_offsets, i);
        long long phys_value = PyLong_AsLongLong(phys);
        if (phys_value == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (phys_value <= after_phys) {         /* indexed already (re-dispatch) */
            continue;
        }
        PyObject *topic = PyList_GET_ITEM(topics, i);
        PyObject *record_keys = PyList_GET_ITEM(keys, i);
        if (!PyList_Check(record_keys)) {
            PyErr_Format(PyExc_TypeError, "a record's keys must be a list, not %.100s",
                         Py_TYPE(record_keys)->tp_name);
            goto done;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(record_keys); k++) {
            PyObject *key = PyList_GET_ITEM(record_keys, k);
            if (!PyUnicode_Check(key)) {
                PyErr_Format(PyExc_TypeError, "an index key must be str, not %.100s",
                             Py_TYPE(key)->tp_name);
                goto done;
            }
            if (PyUnicode_GetLength(key) == 0) {
                continue;
            }
            if (topic != prefix_of) {
                /* hash("topic#" + key) continues hash("topic#") over the key's units. */
                prefix = 0;
                if (java_hash_str(topic, &prefix) < 0) {
                    goto done;
                }
                prefix = 31 * prefix + '#';
                prefix_of = topic;
            }
            uint32_t h = prefix;
            if (java_hash_str(key, &h) < 0
                || append_new(hashes, PyLong_FromLong(index_key_hash(h))) < 0
                || PyList_Append(entry_phys, phys) < 0) {
                goto done;
            }
        }
    }
    result = PyTuple_Pack(2, hashes, entry_phys);

done:
    Py_XDECREF(hashes);
    Py_XDECREF(entry_phys);
    return result;
}

/* -- insert_entries (index_file.py, py_insert_entries) ------------------------------------- */

PyDoc_STRVAR(insert_entries_doc,
"insert_entries(mm, slots, entry_base, count, hashes, phys_offsets, first, todo,\n"
"               time_diff_s, /)\n--\n\n"
"Write entries count, count+1, ... for hashes[first:first+todo] into the index\n"
"file mapped at *mm*, each linked in front of its slot's chain; return how many\n"
"slots were empty before (hashSlotCount's increase). The header is the caller's.");

static PyObject *
insert_entries(PyObject *module, PyObject *args)
{
    Py_buffer mm;
    Py_ssize_t slots, entry_base, count, first, todo;
    long long time_diff_s;
    PyObject *hashes, *phys_offsets;
    if (!PyArg_ParseTuple(args, "w*nnnO!O!nnL:insert_entries", &mm, &slots, &entry_base,
                          &count, &PyList_Type, &hashes, &PyList_Type, &phys_offsets, &first,
                          &todo, &time_diff_s)) {
        return NULL;
    }
    unsigned char *mem = (unsigned char *)mm.buf;
    Py_ssize_t len = mm.len;
    PyObject *result = NULL;
    /* Slot table and entries count..count+todo-1 inside the mapping; every
     * number written fits an i32. */
    if (slots <= 0 || slots > (len - INDEX_HEADER_SIZE) / HASH_SLOT_SIZE
        || entry_base < INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE || entry_base > len
        || count < 0 || todo < 0 || count > INT32_MAX - todo
        || count + todo > (len - entry_base) / INDEX_ENTRY_SIZE) {
        PyErr_Format(PyExc_ValueError, "entries %zd..%zd with %zd slots from byte %zd do not "
                     "fit the %zd-byte index file", count, count + todo, slots, entry_base, len);
        goto done;
    }
    if (first < 0 || todo > PyList_GET_SIZE(hashes) - first
        || todo > PyList_GET_SIZE(phys_offsets) - first) {
        PyErr_Format(PyExc_ValueError, "entries [%zd, %zd) are not all in the lists", first,
                     first + todo);
        goto done;
    }
    if (time_diff_s < INT32_MIN || time_diff_s > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "timeDiff %lld does not fit an i32", time_diff_s);
        goto done;
    }
    /* The slots are spread over the whole table (20 MB by default), each store a cache
     * miss: read every hash first, then write with the slot SLOTS_FETCHED_AHEAD entries on
     * already on its way, so the misses overlap instead of following one another. */
    int32_t *key_hashes = PyMem_New(int32_t, todo > 0 ? todo : 1);
    int64_t *entry_phys = PyMem_New(int64_t, todo > 0 ? todo : 1);
    Py_ssize_t *slot_of = PyMem_New(Py_ssize_t, todo > 0 ? todo : 1);
    if (key_hashes == NULL || entry_phys == NULL || slot_of == NULL) {
        PyErr_NoMemory();
        goto free_arrays;
    }
    for (Py_ssize_t i = 0; i < todo; i++) {
        long long key_hash = PyLong_AsLongLong(PyList_GET_ITEM(hashes, first + i));
        long long phys = PyLong_AsLongLong(PyList_GET_ITEM(phys_offsets, first + i));
        if (PyErr_Occurred()) {
            goto free_arrays;
        }
        if (key_hash < INT32_MIN || key_hash > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "key hash %lld does not fit an i32", key_hash);
            goto free_arrays;
        }
        long long slot = key_hash % slots;       /* Python's %: never negative */
        if (slot < 0) {
            slot += slots;
        }
        key_hashes[i] = (int32_t)key_hash;
        entry_phys[i] = phys;
        slot_of[i] = (Py_ssize_t)slot;
    }
    Py_ssize_t new_slots = 0;
    for (Py_ssize_t i = 0; i < todo; i++) {
        if (i + SLOTS_FETCHED_AHEAD < todo) {
            Py_ssize_t ahead = slot_of[i + SLOTS_FETCHED_AHEAD];
            __builtin_prefetch(mem + INDEX_HEADER_SIZE + ahead * HASH_SLOT_SIZE, 1);
        }
        unsigned char *slot_at = mem + INDEX_HEADER_SIZE + slot_of[i] * HASH_SLOT_SIZE;
        int32_t prev = rd_i32(slot_at);
        if (prev <= 0 || prev >= count) {       /* empty, or stale past the entries written */
            prev = 0;
            new_slots++;
        }
        unsigned char *entry = mem + entry_base + count * INDEX_ENTRY_SIZE;
        wr_u32(entry, (uint32_t)key_hashes[i]);
        wr_u64(entry + 4, (uint64_t)entry_phys[i]);
        wr_u32(entry + 12, (uint32_t)time_diff_s);
        wr_u32(entry + 16, (uint32_t)prev);
        wr_u32(slot_at, (uint32_t)count);
        count++;
    }
    result = PyLong_FromSsize_t(new_slots);

free_arrays:
    PyMem_Free(key_hashes);
    PyMem_Free(entry_phys);
    PyMem_Free(slot_of);
done:
    PyBuffer_Release(&mm);
    return result;
}

/* -- module ---------------------------------------------------------------------------- */


/* -- gather_records (reads.py, py_gather_records) ------------------------------------------ */

PyDoc_STRVAR(gather_records_doc,
"gather_records(units, upos, n_units, first_queue_offset, log, log_base, log_span,\n"
"               log_wrote, log_min, max_count, max_bytes, have_count, have_bytes,\n"
"               tag_codes, gate_end, split, /)\n--\n\n"
"Copy the records named by consume-queue units units[upos:upos + 20 * n_units]\n"
"out of one commit-log segment (*log*, whose byte 0 is log offset *log_base*,\n"
"covering log_span bytes of which log_wrote are written) in one pass. Returns\n"
"(out, queue_offsets, consumed, taken_bytes, removed, stop): *out* is the\n"
"records back to back (a list of them when *split*), stop is 0 (the units\n"
"ran out), 1 (a count, byte or gate limit) or 2 (the next unit lies in\n"
"another segment; it is not consumed). See py_gather_records.");

#define GATHER_UNITS_DONE 0
#define GATHER_LIMIT 1
#define GATHER_OTHER_SEGMENT 2

static inline int64_t
rd_i64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)rd_u32(p) << 32) | rd_u32(p + 4));
}

/* tag_codes (a set of ints, or None) as an array; codes outside int64 can match no unit. */
static int
tag_code_array(PyObject *tag_codes, int64_t **codes, Py_ssize_t *n_codes)
{
    *codes = NULL;
    *n_codes = -1;                              /* -1: no filter */
    if (tag_codes == Py_None) {
        return 0;
    }
    PyObject *it = PyObject_GetIter(tag_codes);
    if (it == NULL) {
        return -1;
    }
    Py_ssize_t cap = PyObject_Length(tag_codes);
    if (cap < 0) {
        PyErr_Clear();
        cap = 8;
    }
    *codes = PyMem_Malloc(sizeof(int64_t) * (size_t)(cap > 0 ? cap : 1));
    *n_codes = 0;
    PyObject *item;
    while (*codes != NULL && (item = PyIter_Next(it)) != NULL) {
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
        Py_DECREF(item);
        if (value == -1 && PyErr_Occurred()) {
            Py_DECREF(it);
            return -1;
        }
        if (overflow) {
            continue;
        }
        if (*n_codes == cap) {
            cap *= 2;
            int64_t *grown = PyMem_Realloc(*codes, sizeof(int64_t) * (size_t)cap);
            if (grown == NULL) {
                PyMem_Free(*codes);
                *codes = NULL;
                break;
            }
            *codes = grown;
        }
        (*codes)[(*n_codes)++] = value;
    }
    Py_DECREF(it);
    if (*codes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *
gather_records(PyObject *module, PyObject *args)
{
    Py_buffer units, log;
    Py_ssize_t upos, n_units, max_count, have_count;
    long long first_queue_offset, log_base, log_span, log_wrote, log_min, max_bytes, have_bytes,
        gate_end;
    PyObject *tag_codes;
    int split;
    if (!PyArg_ParseTuple(args, "y*nnLy*LLLLnLnLOLp:gather_records", &units, &upos, &n_units,
                          &first_queue_offset, &log, &log_base, &log_span, &log_wrote,
                          &log_min, &max_count, &max_bytes, &have_count, &have_bytes,
                          &tag_codes, &gate_end, &split)) {
        return NULL;
    }
    PyObject *result = NULL, *out = NULL, *offsets = NULL;
    int64_t *codes = NULL;
    Py_ssize_t n_codes = -1;
    int64_t *picked = NULL;                     /* (position in log, size) pairs */
    if (upos < 0 || n_units < 0 || n_units > (units.len - upos) / CQ_UNIT_SIZE
        || upos > units.len) {
        PyErr_Format(PyExc_ValueError, "%zd units at byte %zd do not fit a buffer of %zd bytes",
                     n_units, upos, units.len);
        goto done;
    }
    if (tag_code_array(tag_codes, &codes, &n_codes) < 0) {
        goto done;
    }
    /* Only bytes both written and inside the buffer are ever read. */
    int64_t readable = log_wrote < (long long)log.len ? log_wrote : (int64_t)log.len;
    if (readable < 0) {
        readable = 0;
    }
    if ((offsets = PyList_New(0)) == NULL
        || (picked = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)(n_units ? n_units : 1)))
               == NULL) {
        if (offsets != NULL) {
            PyErr_NoMemory();
        }
        goto done;
    }
    const unsigned char *u = (const unsigned char *)units.buf + upos;
    Py_ssize_t consumed = 0, taken = 0;
    int64_t count = have_count, total = have_bytes;
    int removed = 0, stop = GATHER_UNITS_DONE;
    for (; consumed < n_units; consumed++, u += CQ_UNIT_SIZE) {
        int64_t phys = rd_i64(u);
        int64_t size = rd_i32(u + 8);
        int64_t tag = rd_i64(u + 12);
        if (count >= max_count || (count > 0 && total + size > max_bytes)) {
            stop = GATHER_LIMIT;
            break;
        }
        if (gate_end >= 0 && (__int128)phys + size > gate_end) {
            stop = GATHER_LIMIT;                /* past the confirm offset */
            break;
        }
        if (phys < log_min) {
            removed = 1;
            continue;
        }
        if (n_codes >= 0) {
            int match = 0;
            for (Py_ssize_t k = 0; k < n_codes && !match; k++) {
                match = codes[k] == tag;
            }
            if (!match) {
                continue;
            }
        }
        if (phys < log_base || phys - log_base >= log_span) {
            stop = GATHER_OTHER_SEGMENT;
            break;
        }
        int64_t rel = phys - log_base;
        if (size <= 0 || rel > readable || size > readable - rel) {
            removed = 1;                        /* unwritten, cut or damaged: not served */
            continue;
        }
        picked[2 * taken] = rel;
        picked[2 * taken + 1] = size;
        taken++;
        count++;
        total += size;
        PyObject *qo = PyLong_FromLongLong(first_queue_offset + consumed);
        if (qo == NULL || PyList_Append(offsets, qo) < 0) {
            Py_XDECREF(qo);
            goto done;
        }
        Py_DECREF(qo);
    }
    int64_t taken_bytes = 0;
    for (Py_ssize_t i = 0; i < taken; i++) {
        taken_bytes += picked[2 * i + 1];
    }
    const char *src = (const char *)log.buf;
    if (split) {
        if ((out = PyList_New(taken)) == NULL) {
            goto done;
        }
        for (Py_ssize_t i = 0; i < taken; i++) {
            PyObject *rec = PyBytes_FromStringAndSize(src + picked[2 * i],
                                                      (Py_ssize_t)picked[2 * i + 1]);
            if (rec == NULL) {
                goto done;
            }
            PyList_SET_ITEM(out, i, rec);
        }
    }
    else {
        if (taken_bytes > PY_SSIZE_T_MAX) {
            PyErr_SetString(PyExc_OverflowError, "the records do not fit one bytes object");
            goto done;
        }
        if ((out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)taken_bytes)) == NULL) {
            goto done;
        }
        char *dst = PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < taken; i++) {
            memcpy(dst, src + picked[2 * i], (size_t)picked[2 * i + 1]);
            dst += picked[2 * i + 1];
        }
    }
    result = Py_BuildValue("OOnLOi", out, offsets, consumed, (long long)taken_bytes,
                           removed ? Py_True : Py_False, stop);

done:
    Py_XDECREF(out);
    Py_XDECREF(offsets);
    PyMem_Free(picked);
    PyMem_Free(codes);
    PyBuffer_Release(&units);
    PyBuffer_Release(&log);
    return result;
}

/* -- populate_write (mapped_file.py, MappedFile.prefault) ---------------------------------- */

PyDoc_STRVAR(populate_write_doc,
"populate_write(mm, pos, size, /)\n--\n\n"
"Fault bytes [pos, pos + size) of the shared mapping *mm* in writable, as a\n"
"first store would, without reading or storing a byte (Linux's\n"
"MADV_POPULATE_WRITE), with the GIL released. Returns the bytes populated,\n"
"0 when the range is no longer backed (truncated meanwhile), or -1 where\n"
"the kernel cannot (older than 5.14): the caller falls back to reading.");

static PyObject *
populate_write(PyObject *module, PyObject *args)
{
#ifdef MADV_POPULATE_WRITE
    Py_buffer mm;
    Py_ssize_t pos, size;
    if (!PyArg_ParseTuple(args, "w*nn:populate_write", &mm, &pos, &size)) {
        return NULL;
    }
    long page = sysconf(_SC_PAGESIZE);
    if (pos < 0 || size < 0 || pos > mm.len || size > mm.len - pos || page <= 0) {
        PyBuffer_Release(&mm);
        PyErr_Format(PyExc_ValueError, "%zd bytes at %zd are outside a mapping of %zd bytes",
                     size, pos, mm.len);
        return NULL;
    }
    /* madvise wants a page-aligned start; the mapping itself is page-aligned. */
    Py_ssize_t start = pos - pos % page;
    Py_ssize_t length = pos + size - start;
    int rc, err = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = length > 0 ? madvise((char *)mm.buf + start, (size_t)length, MADV_POPULATE_WRITE) : 0;
    err = rc != 0 ? errno : 0;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&mm);
    if (rc != 0) {
        /* EINVAL: a kernel without it. EFAULT/ENOMEM: the range stopped being
         * backed (a truncation meanwhile): nothing populated, nothing broken. */
        return PyLong_FromLong(err == EINVAL || err == ENOSYS ? -1 : 0);
    }
    return PyLong_FromSsize_t(size);
#else
    return PyLong_FromLong(-1);
#endif
}

/* -- replication (replication.py: py_frame_end, py_frame_columns) --------------------- */

#define END_FILE_MIN_BLANK_LENGTH 8     /* commitlog.py: TOTALSIZE i32 + MAGICCODE u32 */

PyDoc_STRVAR(frame_end_doc,
"frame_end(segment, start, limit, max_bytes, /)\n--\n\n"
"Where a master's replication frame that begins at record boundary *start* of\n"
"a commit-log *segment* (the whole segment's buffer; positions are relative to\n"
"it) ends: whole records, at most *max_bytes* of them (one record at least),\n"
"never past *limit*; the segment's end when its BLANK filler is reached.\n"
"*start* when nothing can be sent.");

static PyObject *
frame_end(PyObject *module, PyObject *args)
{
    PyObject *segment;
    Py_ssize_t start, limit, max_bytes;
    if (!PyArg_ParseTuple(args, "Onnn:frame_end", &segment, &start, &limit, &max_bytes)) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(segment, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len;
    if (start < 0 || start > limit || limit > size) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "frame [%zd, %zd) is not inside a segment of %zd bytes",
                     start, limit, size);
        return NULL;
    }
    Py_ssize_t pos = start;
    while (pos < limit) {
        Py_ssize_t next;
        if (size - pos < END_FILE_MIN_BLANK_LENGTH) {
            next = size;                        /* too little left for a head: all filler */
        }
        else {
            int32_t total = rd_i32(buf + pos);
            if (rd_u32(buf + pos + POS_MAGIC) == BLANK_MAGIC_CODE) {
                next = size;
            }
            else if (total <= 0) {
                break;                          /* the written position, mid-segment */
            }
            else {
                next = pos + total;
            }
        }
        if (next > limit && !(next == size && limit == size)) {
            break;
        }
        if (next - start > max_bytes && pos > start) {
            break;
        }
        pos = next;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos);
}

PyDoc_STRVAR(frame_columns_doc,
"frame_columns(frame, positions, store_ts_positions, base_offset, /)\n--\n\n"
"What a replica's dispatch reads of each record of a checked frame, as lists:\n"
"(phys_offsets, queue_offsets, store_timestamps_ms, cuts). phys_offsets[i] is\n"
"base_offset + positions[i]; queue_offsets and store timestamps are read from\n"
"the records (store_ts_positions are in-record); cuts are the indices i > 0\n"
"whose store timestamp differs from record i - 1's.");

static PyObject *
frame_columns(PyObject *module, PyObject *args)
{
    PyObject *frame, *positions, *ts_positions;
    long long base;
    if (!PyArg_ParseTuple(args, "OO!O!L:frame_columns", &frame, &PyList_Type, &positions,
                          &PyList_Type, &ts_positions, &base)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(positions);
    if (PyList_GET_SIZE(ts_positions) != n) {
        PyErr_Format(PyExc_ValueError, "%zd positions but %zd store timestamp positions", n,
                     PyList_GET_SIZE(ts_positions));
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    PyObject *phys = PyList_New(n), *queue = PyList_New(n), *stamps = PyList_New(n);
    PyObject *cuts = PyList_New(0), *result = NULL;
    if (phys == NULL || queue == NULL || stamps == NULL || cuts == NULL) {
        goto done;
    }
    int64_t previous = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t pos = PyLong_AsSsize_t(PyList_GET_ITEM(positions, i));
        Py_ssize_t ts = PyLong_AsSsize_t(PyList_GET_ITEM(ts_positions, i));
        if ((pos == -1 || ts == -1) && PyErr_Occurred()) {
            goto done;
        }
        if (pos < 0 || ts < 0 || pos > view.len - (POS_QUEUEOFFSET + 8)
                || ts > view.len - 8 - pos) {
            PyErr_Format(PyExc_ValueError, "record %zd at %zd (store timestamp at +%zd) is not "
                         "inside the frame of %zd bytes", i, pos, ts, view.len);
            goto done;
        }
        int64_t stamp = rd_i64(buf + pos + ts);
        PyObject *p = PyLong_FromLongLong(base + (long long)pos);
        PyObject *q = p ? PyLong_FromLongLong(rd_i64(buf + pos + POS_QUEUEOFFSET)) : NULL;
        PyObject *t = q ? PyLong_FromLongLong(stamp) : NULL;
        if (t == NULL) {
            Py_XDECREF(p);
            Py_XDECREF(q);
            goto done;
        }
        PyList_SET_ITEM(phys, i, p);
        PyList_SET_ITEM(queue, i, q);
        PyList_SET_ITEM(stamps, i, t);
        if (i > 0 && stamp != previous) {
            PyObject *cut = PyLong_FromSsize_t(i);
            int rc = cut ? PyList_Append(cuts, cut) : -1;
            Py_XDECREF(cut);
            if (rc < 0) {
                goto done;
            }
        }
        previous = stamp;
    }
    result = PyTuple_Pack(4, phys, queue, stamps, cuts);

done:
    PyBuffer_Release(&view);
    Py_XDECREF(phys);
    Py_XDECREF(queue);
    Py_XDECREF(stamps);
    Py_XDECREF(cuts);
    return result;
}

/* == a replica's frame check (replication.py) ==========================================
 *
 *   crc32_fast   zlib's crc32 (the reference) as common/csrc/pmq_crc32.h computes it
 *   scan_frame   replication.py  py_scan_frame: scan_batch's checks of a master's frame
 *                (no body limit, empty bodies allowed), every PHYSICALOFFSET checked,
 *                and frame_columns' columns, in one pass
 *
 * A replica checks every record it copies (framing, body CRC, topic, properties) as
 * a put does; the body CRC was a fifth of its apply path with zlib's table CRC.
 */


PyDoc_STRVAR(crc32_fast_doc,
"crc32_fast(data, crc=0, /)\n--\n\n"
"zlib.crc32(data, crc), computed as scan_frame computes body CRCs.");

static PyObject *
crc32_fast_py(PyObject *module, PyObject *args)
{
    Py_buffer view;
    unsigned int crc = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32_fast", &view, &crc)) {
        return NULL;
    }
    uint32_t value = crc32_fast(crc, (const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(value);
}

/* The columns frame_columns returns, appended for the record at *pos*; its
 * PHYSICALOFFSET is compared with *phys* (the first mismatch is kept in *bad*). */
static int
frame_record_columns(PyObject **cols, const unsigned char *buf, Py_ssize_t pos,
                     Py_ssize_t store_ts_pos, long long phys, int64_t *previous,
                     Py_ssize_t index, Py_ssize_t *bad_pos, long long *bad_phys)
{
    int64_t stamp = rd_i64(buf + pos + store_ts_pos);
    int64_t said = rd_i64(buf + pos + POS_PHYSICALOFFSET);
    if (said != phys && *bad_pos < 0) {
        *bad_pos = pos;
        *bad_phys = (long long)said;
    }
    if (append_new(cols[0], PyLong_FromLongLong(phys)) < 0
        || append_new(cols[1], PyLong_FromLongLong(rd_i64(buf + pos + POS_QUEUEOFFSET))) < 0
        || append_new(cols[2], PyLong_FromLongLong(stamp)) < 0) {
        return -1;
    }
    if (index > 0 && stamp != *previous && append_new(cols[3], PyLong_FromSsize_t(index)) < 0) {
        return -1;
    }
    *previous = stamp;
    return 0;
}

PyDoc_STRVAR(scan_frame_doc,
"scan_frame(frame, base_offset, store_host_size, /)\n--\n\n"
"Check every record of a master's frame that goes to commit-log offset\n"
"*base_offset*: (batch, phys_offsets, queue_offsets, store_timestamps_ms, cuts),\n"
"batch as scan_batch(frame, max_body_size=2**31 - 1, store_host_size=...)\n"
"makes it and the rest as frame_columns; then BatchError for the first record\n"
"whose PHYSICALOFFSET is not base_offset + its position.\n\n"
"The compiled pocketmq.broker.store.replication.py_scan_frame.");

static PyObject *
scan_frame(PyObject *module, PyObject *args)
{
    PyObject *frame;
    long long base;
    Py_ssize_t store_host_size;
    if (!PyArg_ParseTuple(args, "OLn:scan_frame", &frame, &base, &store_host_size)) {
        return NULL;
    }
    if (scan_ready(store_host_size) < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *result = NULL, *batch = NULL;
    PyObject *lists[N_LISTS] = {NULL};
    PyObject *cols[4] = {NULL};
    seen_topic seen[TOPIC_CACHE];
    int n_seen = 0;
    unsigned markers = 0;
    idem_runs runs = {NULL, 0, 0};
    Py_ssize_t bad_pos = -1;
    long long bad_phys = 0;
    int64_t previous = 0;
    for (int i = 0; i < N_LISTS; i++) {
        if ((lists[i] = PyList_New(0)) == NULL) {
            goto done;
        }
    }
    for (int i = 0; i < 4; i++) {
        if ((cols[i] = PyList_New(0)) == NULL) {
            goto done;
        }
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    if (end == 0) {
        batch_error(str_illegal, "the batch holds no records");
        goto done;
    }
    for (Py_ssize_t pos = 0; pos < end;) {
        /* a master's frame: no body limit (its own check stood), empty bodies allowed */
        Py_ssize_t total = scan_record(lists, seen, &n_seen, buf, pos, end, PY_SSIZE_T_MAX,
                                       store_host_size, 1, &markers);
        if (total < 0) {
            goto done;
        }
        Py_ssize_t index = PyList_GET_SIZE(lists[L_TOPICS]) - 1;
        Py_ssize_t store_ts_pos = POS_BORNHOST + ((rd_i32(buf + pos + POS_SYSFLAG)
                                                   & SYSFLAG_BORNHOST_V6) ? HOST_V6_SIZE
                                                                          : HOST_V4_SIZE);
        if (idem_note(&runs, buf, pos + total, PyList_GET_ITEM(lists[L_TOPICS], index),
                      rd_i32(buf + pos + POS_QUEUEID), index) < 0
            || frame_record_columns(cols, buf, pos, store_ts_pos, base + (long long)pos,
                                    &previous, index, &bad_pos, &bad_phys) < 0) {
            goto done;
        }
        pos += total;
    }
    if (bad_pos >= 0) {
        batch_error(str_illegal, "record at batch offset %zd says PHYSICALOFFSET %lld; it "
                    "lies at commit-log offset %lld", bad_pos, bad_phys,
                    base + (long long)bad_pos);
        goto done;
    }
    batch = new_scanned_batch(lists, frame, markers, &runs);
    if (batch != NULL) {
        result = PyTuple_Pack(5, batch, cols[0], cols[1], cols[2], cols[3]);
    }

done:
    idem_runs_free(&runs);
    for (int i = 0; i < n_seen; i++) {
        Py_DECREF(seen[i].str);
    }
    for (int i = 0; i < N_LISTS; i++) {
        Py_XDECREF(lists[i]);
    }
    for (int i = 0; i < 4; i++) {
        Py_XDECREF(cols[i]);
    }
    Py_XDECREF(batch);
    PyBuffer_Release(&view);
    return result;
}

/* -- a replica's frame, checked and made into dispatch work in one pass ------------------
 *
 *   frame_dispatch   replication.py  py_frame_dispatch: scan_frame's checks, then, instead
 *                    of its per-record lists, what the replica's dispatch writes: the
 *                    consume-queue units of each queue run and the index entries
 *
 * scan_frame builds about ten Python objects per record (positions, sizes, keys
 * lists, UNIQ_KEY strings, offsets, stamps) that queue_units and index_key_hashes
 * then read back; on a replica that was a third of applying a frame. Here a
 * record costs two ints (its index entry), and the common frame (no idempotence
 * stamps, no SCHEDULE_TOPIC_XXXX, each queue's offsets one run) is ready to
 * write. Any other frame, once checked, answers None: the caller takes
 * scan_frame's way. */

typedef struct {
    const unsigned char *raw;   /* the topic's bytes in the frame */
    Py_ssize_t raw_len;
    PyObject *topic;            /* owned */
    int32_t queue_id;
    int64_t first_queue_offset; /* of its first record dispatched to a queue */
    int64_t last_queue_offset;  /* of its last record, dispatched or not */
    Py_ssize_t count;           /* records dispatched to its queue */
    uint32_t prefix;            /* java hash of "topic#" */
    unsigned char *cursor;      /* pass 2: where its next unit goes */
} fd_queue;

typedef struct {
    Py_ssize_t pos;
    int32_t size;
    int32_t queue;              /* index into the fd_queue table */
    int64_t tags_code;
} fd_unit;

typedef struct {
    fd_queue *queues;
    Py_ssize_t n_queues, cap_queues;
    fd_unit *units;
    Py_ssize_t n_units, cap_units;
    Py_ssize_t *order;          /* fd_queue indices by their first record with a queue */
    Py_ssize_t n_order, cap_order;
    int32_t *hashes;            /* index entries: keyHash, phys offset */
    int64_t *entry_phys;
    Py_ssize_t n_entries, cap_hashes, cap_entry_phys;
    Py_ssize_t *run_start;      /* index runs (one store timestamp): first entry, stamp */
    int64_t *run_stamp;
    Py_ssize_t n_runs, cap_run_start, cap_run_stamp;
} fd_state;

static void
fd_free(fd_state *st)
{
    for (Py_ssize_t i = 0; i < st->n_queues; i++) {
        Py_DECREF(st->queues[i].topic);
    }
    PyMem_Free(st->queues);
    PyMem_Free(st->units);
    PyMem_Free(st->order);
    PyMem_Free(st->hashes);
    PyMem_Free(st->entry_phys);
    PyMem_Free(st->run_start);
    PyMem_Free(st->run_stamp);
}

/* Room for item n of *items* (capacity *cap*): 0, or -1 with MemoryError. */
static int
fd_grow(void **items, Py_ssize_t n, Py_ssize_t *cap, size_t size)
{
    if (n < *cap) {
        return 0;
    }
    Py_ssize_t want = *cap ? *cap * 2 : 64;
    void *grown = PyMem_Realloc(*items, (size_t)want * size);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *items = grown;
    *cap = want;
    return 0;
}

#define FD_GROW(items, n, cap) fd_grow((void **)&(items), (n), &(cap), sizeof *(items))

/* The fd_queue index of (topic, queue_id), added when new; -1 with an error set. */
static Py_ssize_t
fd_queue_of(fd_state *st, const unsigned char *raw, Py_ssize_t raw_len, PyObject *topic,
            int32_t queue_id, Py_ssize_t hint)
{
    for (Py_ssize_t k = 0; k < st->n_queues; k++) {
        Py_ssize_t i = (hint + k) % st->n_queues;  /* records cycle through the queues */
        fd_queue *q = &st->queues[i];
        if (q->queue_id == queue_id && q->raw_len == raw_len
            && memcmp(q->raw, raw, (size_t)raw_len) == 0) {
            return i;
        }
    }
    uint32_t prefix = 0;
    if (java_hash_str(topic, &prefix) < 0) {
        return -1;
    }
    if (FD_GROW(st->queues, st->n_queues, st->cap_queues) < 0) {
        return -1;
    }
    st->queues[st->n_queues] = (fd_queue){raw, raw_len, Py_NewRef(topic), queue_id, 0, 0, 0,
                                          31 * prefix + '#', NULL};
    return st->n_queues++;
}

/* One index entry: keyHash of "topic#" + *key* (UTF-8; *ascii* when it is known to be
 * ASCII) at *phys*, stored at *stamp*. Entries go in runs of one store timestamp, as
 * put_many takes them. */
static int
fd_entry(fd_state *st, uint32_t prefix, const unsigned char *key, Py_ssize_t n, int ascii,
         int64_t phys, int64_t stamp)
{
    if (st->n_runs == 0 || st->run_stamp[st->n_runs - 1] != stamp) {
        if (FD_GROW(st->run_start, st->n_runs, st->cap_run_start) < 0
            || FD_GROW(st->run_stamp, st->n_runs, st->cap_run_stamp) < 0) {
            return -1;
        }
        st->run_start[st->n_runs] = st->n_entries;
        st->run_stamp[st->n_runs++] = stamp;
    }
    if (FD_GROW(st->hashes, st->n_entries, st->cap_hashes) < 0
        || FD_GROW(st->entry_phys, st->n_entries, st->cap_entry_phys) < 0) {
        return -1;
    }
    uint32_t h = prefix;
    if (ascii) {
        h = java_hash_bytes(h, key, n);
    }
    else {                              /* UTF-16 code units, as index_key_hashes hashes */
        PyObject *text = str_from(key, n, 0);
        int rc = text ? java_hash_str(text, &h) : -1;
        Py_XDECREF(text);
        if (rc < 0) {
            return -1;
        }
    }
    st->hashes[st->n_entries] = index_key_hash(h);
    st->entry_phys[st->n_entries++] = phys;
    return 0;
}

/* The index entries of a record dispatched to its queue: KEYS split on " " (empty
 * pieces dropped), then UNIQ_KEY, as properties_items lists them. */
static int
fd_keys(fd_state *st, uint32_t prefix, const record_view *rec, int64_t phys, int64_t stamp)
{
    const unsigned char *k = rec->keys.p, *end = rec->keys.n > 0 ? k + rec->keys.n : k;
    while (k < end) {
        const unsigned char *space = memchr(k, ' ', (size_t)(end - k));
        const unsigned char *stop = space ? space : end;
        if (stop > k && fd_entry(st, prefix, k, stop - k, rec->ascii, phys, stamp) < 0) {
            return -1;
        }
        k = stop + 1;
    }
    if (rec->uniq.n > 0) {
        return fd_entry(st, prefix, rec->uniq.p, rec->uniq.n, rec->ascii, phys, stamp);
    }
    return 0;
}

static const char SCHEDULE_TOPIC_NAME[] = "SCHEDULE_TOPIC_XXXX";   /* batch.SCHEDULE_TOPIC */

/* Pass 1 over the records: check each, note its unit and index entries. 1 when
 * the frame suits frame_dispatch, 0 when it needs scan_frame's way, -1 on error. */
static int
fd_scan(fd_state *st, const unsigned char *buf, Py_ssize_t end, long long base,
        Py_ssize_t store_host_size, long long after_phys, int index, int64_t *last_stamp,
        Py_ssize_t *count)
{
    seen_topic seen[TOPIC_CACHE];
    int n_seen = 0, suits = 1;
    Py_ssize_t bad_pos = -1, hint = 0;
    long long bad_phys = 0;
    int rc = -1;
    for (Py_ssize_t pos = 0; pos < end;) {
        record_view rec;
        unsigned markers = 0;
        Py_ssize_t total = check_record(&rec, seen, &n_seen, buf, pos, end, PY_SSIZE_T_MAX,
                                        store_host_size, 1, &markers);
        if (total < 0) {
            goto done;
        }
        int64_t phys = base + (long long)pos;
        int64_t said = rd_i64(buf + pos + POS_PHYSICALOFFSET);
        if (said != phys && bad_pos < 0) {
            bad_pos = pos;
            bad_phys = (long long)said;
        }
        int64_t stamp = rd_i64(buf + pos + rec.store_ts_pos);
        int64_t queue_offset = rd_i64(buf + pos + POS_QUEUEOFFSET);
        int64_t ident[3];
        if (idem_of(buf, pos + total, ident)
            || (rec.topic_len == sizeof SCHEDULE_TOPIC_NAME - 1
                && memcmp(rec.topic_raw, SCHEDULE_TOPIC_NAME, (size_t)rec.topic_len) == 0)) {
            suits = 0;                  /* checked on; scan_frame's way afterwards */
        }
        Py_ssize_t q = suits ? fd_queue_of(st, rec.topic_raw, rec.topic_len, rec.topic,
                                           rec.queue_id, hint) : 0;
        Py_DECREF(rec.topic);
        if (q < 0) {
            goto done;
        }
        if (suits) {
            fd_queue *queue = &st->queues[q];
            hint = q + 1;
            queue->last_queue_offset = queue_offset;
            if (is_dispatched_to_queue(rec.sysflag)) {
                if (queue->count++ == 0) {
                    queue->first_queue_offset = queue_offset;
                    if (FD_GROW(st->order, st->n_order, st->cap_order) < 0) {
                        goto done;
                    }
                    st->order[st->n_order++] = q;
                }
                if (FD_GROW(st->units, st->n_units, st->cap_units) < 0) {
                    goto done;
                }
                uint32_t tags = 0;          /* tags_code: 0 when there is no TAGS */
                if (rec.tags.n > 0 && rec.ascii) {
                    tags = java_hash_bytes(0, rec.tags.p, rec.tags.n);
                }
                else if (rec.tags.n > 0) {
                    PyObject *text = str_from(rec.tags.p, rec.tags.n, 0);
                    int rc_tags = text ? java_hash_str(text, &tags) : -1;
                    Py_XDECREF(text);
                    if (rc_tags < 0) {
                        goto done;
                    }
                }
                st->units[st->n_units++] = (fd_unit){pos, (int32_t)total, (int32_t)q,
                                                     (int64_t)(int32_t)tags};
                if (index && phys > after_phys
                    && fd_keys(st, queue->prefix, &rec, phys, stamp) < 0) {
                    goto done;
                }
            }
        }
        *last_stamp = stamp;
        (*count)++;
        pos += total;
    }
    if (bad_pos >= 0) {
        batch_error(str_illegal, "record at batch offset %zd says PHYSICALOFFSET %lld; it "
                    "lies at commit-log offset %lld", bad_pos, bad_phys,
                    base + (long long)bad_pos);
        goto done;
    }
    for (Py_ssize_t i = 0; suits && i < st->n_queues; i++) {
        fd_queue *queue = &st->queues[i];
        if (queue->count > 0
            && queue->last_queue_offset != queue->first_queue_offset + queue->count - 1) {
            suits = 0;                  /* a queue deleted and created again in the frame */
        }
    }
    rc = suits;

done:
    for (int i = 0; i < n_seen; i++) {
        Py_DECREF(seen[i].str);
    }
    return rc;
}

/* Pass 2: one (topic, queue id, first queue offset, units) per queue with records, in
 * first-seen order, each bytes object filled before anyone sees it. */
static PyObject *
fd_runs(fd_state *st, long long base)
{
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < st->n_order; i++) {
        fd_queue *queue = &st->queues[st->order[i]];
        PyObject *units = PyBytes_FromStringAndSize(NULL, queue->count * CQ_UNIT_SIZE);
        if (units == NULL) {
            goto fail;
        }
        queue->cursor = (unsigned char *)PyBytes_AS_STRING(units);
        PyObject *queue_id = PyLong_FromLong(queue->queue_id);
        PyObject *first = queue_id ? PyLong_FromLongLong(queue->first_queue_offset) : NULL;
        PyObject *run = first ? PyTuple_Pack(4, queue->topic, queue_id, first, units) : NULL;
        Py_XDECREF(queue_id);
        Py_XDECREF(first);
        Py_DECREF(units);                       /* the tuple holds it */
        if (run == NULL || append_new(out, run) < 0) {
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < st->n_units; i++) {
        const fd_unit *unit = &st->units[i];
        fd_queue *queue = &st->queues[unit->queue];
        unsigned char *u = queue->cursor;
        wr_u64(u, (uint64_t)(base + (long long)unit->pos));
        wr_u32(u + 8, (uint32_t)unit->size);
        wr_u64(u + 12, (uint64_t)unit->tags_code);
        queue->cursor = u + CQ_UNIT_SIZE;
    }
    return out;

fail:
    Py_DECREF(out);
    return NULL;
}

/* The index entries as [(store timestamp, hashes, phys offsets)], one per run. */
static PyObject *
fd_index_runs(const fd_state *st)
{
    PyObject *out = PyList_New(st->n_runs);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t r = 0; r < st->n_runs; r++) {
        Py_ssize_t lo = st->run_start[r];
        Py_ssize_t hi = r + 1 < st->n_runs ? st->run_start[r + 1] : st->n_entries;
        PyObject *hashes = PyList_New(hi - lo), *phys = PyList_New(hi - lo), *run = NULL;
        if (hashes != NULL && phys != NULL) {
            Py_ssize_t j = lo;
            for (; j < hi; j++) {
                PyObject *h = PyLong_FromLong(st->hashes[j]);
                PyObject *p = h ? PyLong_FromLongLong(st->entry_phys[j]) : NULL;
                if (p == NULL) {
                    Py_XDECREF(h);
                    break;
                }
                PyList_SET_ITEM(hashes, j - lo, h);
                PyList_SET_ITEM(phys, j - lo, p);
            }
            PyObject *stamp = j == hi ? PyLong_FromLongLong(st->run_stamp[r]) : NULL;
            run = stamp ? PyTuple_Pack(3, stamp, hashes, phys) : NULL;
            Py_XDECREF(stamp);
        }
        Py_XDECREF(hashes);
        Py_XDECREF(phys);
        if (run == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, r, run);
    }
    return out;
}

PyDoc_STRVAR(frame_dispatch_doc,
"frame_dispatch(frame, base_offset, store_host_size, after_phys, index, /)\n--\n\n"
"Check every record of a master's frame bound for commit-log offset *base_offset*\n"
"as scan_frame does (the same BatchError), then return what the replica's\n"
"dispatch writes: (count, runs, index_runs, last_store_timestamp_ms), *runs* as\n"
"queue_units makes them and *index_runs* a list of (store_timestamp_ms, hashes,\n"
"phys_offsets) for the keys of records past *after_phys* (none unless *index*).\n"
"None for a frame that needs scan_frame's way: a record with an idempotence\n"
"stamp or of topic SCHEDULE_TOPIC_XXXX, or a queue whose offsets in the frame\n"
"are not one run.\n\n"
"The compiled pocketmq.broker.store.replication.py_frame_dispatch.");

static PyObject *
frame_dispatch(PyObject *module, PyObject *args)
{
    PyObject *frame;
    long long base, after_phys;
    Py_ssize_t store_host_size;
    int index;
    if (!PyArg_ParseTuple(args, "OLnLp:frame_dispatch", &frame, &base, &store_host_size,
                          &after_phys, &index)) {
        return NULL;
    }
    if (scan_ready(store_host_size) < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    fd_state st = {0};
    PyObject *result = NULL, *runs = NULL, *index_runs = NULL;
    int64_t last_stamp = 0;
    Py_ssize_t count = 0;
    if (view.len == 0) {
        batch_error(str_illegal, "the batch holds no records");
        goto done;
    }
    int suits = fd_scan(&st, (const unsigned char *)view.buf, view.len, base, store_host_size,
                        after_phys, index, &last_stamp, &count);
    if (suits < 0) {
        goto done;
    }
    if (suits == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    runs = fd_runs(&st, base);
    index_runs = runs ? fd_index_runs(&st) : NULL;
    if (index_runs != NULL) {
        result = Py_BuildValue("nOOL", count, runs, index_runs, (long long)last_stamp);
    }

done:
    Py_XDECREF(runs);
    Py_XDECREF(index_runs);
    fd_free(&st);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef speedups_methods[] = {
    {"scan_batch", (PyCFunction)(void (*)(void))scan_batch, METH_VARARGS | METH_KEYWORDS,
     scan_batch_doc},
    {"patch_batch", patch_batch, METH_VARARGS, patch_batch_doc},
    {"queue_units", queue_units, METH_VARARGS, queue_units_doc},
    {"index_key_hashes", index_key_hashes, METH_VARARGS, index_key_hashes_doc},
    {"insert_entries", insert_entries, METH_VARARGS, insert_entries_doc},
    {"java_string_hash", java_string_hash, METH_O, java_string_hash_doc},
    {"gather_records", gather_records, METH_VARARGS, gather_records_doc},
    {"populate_write", populate_write, METH_VARARGS, populate_write_doc},
    {"frame_end", frame_end, METH_VARARGS, frame_end_doc},
    {"frame_columns", frame_columns, METH_VARARGS, frame_columns_doc},
    {"crc32_fast", crc32_fast_py, METH_VARARGS, crc32_fast_doc},
    {"scan_frame", scan_frame, METH_VARARGS, scan_frame_doc},
    {"frame_dispatch", frame_dispatch, METH_VARARGS, frame_dispatch_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc,
"Compiled store write path; see pocketmq.broker.store.speedups for the choice\n"
"between it and the pure-Python references.");

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "pocketmq.broker.store._speedups", module_doc, -1,
    speedups_methods, NULL, NULL, NULL, NULL,
};

/* The numbers this file was written against, as LAYOUT: test_speedups checks
 * them against the Python structs and constants, which are the definitions. */
static const struct {
    const char *name;
    unsigned long value;
} layout_numbers[] = {
    {"HEAD_SIZE", HEAD_SIZE}, {"POS_QUEUEID", POS_QUEUEID},
    {"POS_QUEUEOFFSET", POS_QUEUEOFFSET}, {"POS_SYSFLAG", POS_SYSFLAG},
    {"POS_BORNHOST", POS_BORNHOST}, {"HOST_V4_SIZE", HOST_V4_SIZE},
    {"HOST_V6_SIZE", HOST_V6_SIZE}, {"TAIL_AFTER_STOREHOST", TAIL_AFTER_STOREHOST},
    {"MESSAGE_MAGIC_CODE", MESSAGE_MAGIC_CODE}, {"MESSAGE_MAGIC_CODE_V2", MESSAGE_MAGIC_CODE_V2},
    {"SYSFLAG_BORNHOST_V6", SYSFLAG_BORNHOST_V6}, {"SYSFLAG_STOREHOST_V6", SYSFLAG_STOREHOST_V6},
    {"SYSFLAG_TRANSACTION_MASK", SYSFLAG_TRANSACTION_MASK},
    {"SYSFLAG_TRANSACTION_PREPARED", SYSFLAG_TRANSACTION_PREPARED},
    {"SYSFLAG_TRANSACTION_ROLLBACK", SYSFLAG_TRANSACTION_ROLLBACK},
    {"MAX_PROPERTIES_LENGTH", MAX_PROPERTIES_LENGTH}, {"MAX_TOPIC_LENGTH", MAX_TOPIC_LENGTH},
    {"CQ_UNIT_SIZE", CQ_UNIT_SIZE}, {"INDEX_HEADER_SIZE", INDEX_HEADER_SIZE},
    {"HASH_SLOT_SIZE", HASH_SLOT_SIZE}, {"INDEX_ENTRY_SIZE", INDEX_ENTRY_SIZE},
};

static int
add_layout(PyObject *module)
{
    PyObject *layout = PyDict_New();
    if (layout == NULL) {
        return -1;
    }
    for (size_t i = 0; i < sizeof layout_numbers / sizeof layout_numbers[0]; i++) {
        PyObject *value = PyLong_FromUnsignedLong(layout_numbers[i].value);
        int rc = value ? PyDict_SetItemString(layout, layout_numbers[i].name, value) : -1;
        Py_XDECREF(value);
        if (rc < 0) {
            Py_DECREF(layout);
            return -1;
        }
    }
    if (PyModule_AddObject(module, "LAYOUT", layout) < 0) {  /* steals only on success */
        Py_DECREF(layout);
        return -1;
    }
    return 0;
}

static PyObject *
intern(const char *s)
{
    return PyUnicode_InternFromString(s);
}

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if ((empty_str = PyUnicode_FromStringAndSize("", 0)) == NULL
        || (str_illegal = intern("illegal")) == NULL
        || (str_properties = intern("properties")) == NULL
        || (str_body_too_large = intern("body_too_large")) == NULL
        || (str_empty_body = intern("empty_body")) == NULL
        || (attr_positions = intern("positions")) == NULL
        || (attr_sizes = intern("sizes")) == NULL
        || (attr_topics = intern("topics")) == NULL
        || (attr_queue_ids = intern("queue_ids")) == NULL
        || (attr_sysflags = intern("sysflags")) == NULL
        || (attr_store_ts_positions = intern("store_ts_positions")) == NULL
        || (attr_tags_codes = intern("tags_codes")) == NULL
        || (scanned_fields = PyTuple_New(N_LISTS + 3)) == NULL) {
        return NULL;
    }
    static const char *const after_lists[] = {"blob", "markers", "idem_runs"};
    for (int i = 0; i <= N_LISTS + 2; i++) {
        PyObject *name = intern(i < N_LISTS ? list_names[i] : after_lists[i - N_LISTS]);
        if (name == NULL) {
            return NULL;
        }
        PyTuple_SET_ITEM(scanned_fields, i, name);
    }
    PyObject *validation = PyImport_ImportModule("pocketmq.common.validation");
    if (validation == NULL) {
        return NULL;
    }
    check_topic = PyObject_GetAttrString(validation, "check_topic");
    Py_DECREF(validation);
    if (check_topic == NULL) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "VERSION", SPEEDUPS_VERSION) < 0
        || add_layout(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
