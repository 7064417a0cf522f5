/*
 * pocketmq.client._codec: the client's message codec, compiled.
 *
 * Optional. Each function has a pure-Python reference in
 * client/message_codec.py that defines what it does, byte for byte and error
 * message for error message; message_codec.py picks one or the other, and
 * tests/unit/test_client_codec.py checks that they agree (Hypothesis):
 *
 *   check_batch       py_check_batch       what a send_batch's messages break, if anything
 *   encode_messages   py_encode_messages   a list of Messages -> one blob of records
 *                                          (or a whole SendBatchRequest: frame_records)
 *   decode_messages   py_decode_messages   a pulled blob -> a list of MessageExt
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
 * A pulled blob comes from the network: every length read from it is checked
 * against what is left of the record and of the buffer before anything is read
 * through it. The classes and the rare paths (inflating a compressed body)
 * come from Python through setup(), so that both implementations share them.
 * The GIL is held throughout.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "pmq_record_layout.h"  /* common/csrc: HEAD_SIZE, POS_*, magic codes, sysflags */
#include "pmq_crc32.h"  /* common/csrc: crc32_fast */

/* Bumped whenever a signature or a behaviour changes; message_codec.py refuses
 * a stale build (an editable install keeps the old .so until it is rebuilt). */
#define CODEC_VERSION 7

/* -- record layout ----------------------------------------------------------------
 * The record's fields are in common/csrc/pmq_record_layout.h; what only this codec
 * needs is below. common/record_layout.py is the definition;
 * tests/unit/test_record_layout.py checks every number against it. */

#define STORE_HOST_PLACEHOLDER_SIZE HOST_V4_SIZE  /* message_codec.STORE_HOST_PLACEHOLDER */
#define MAX_TOPIC_LENGTH 127        /* a record's topic, in bytes: record_layout.MAX_TOPIC_LENGTH_V1 */
#define ZLIB_LEVEL 5                /* message_codec.ZLIB_LEVEL */
/* TOTALSIZE .. BODYLEN with IPv4 hosts (record_layout.FIXED_V4) */
#define FIXED_V4_SIZE (POS_BORNHOST + HOST_V4_SIZE + STORE_TIMESTAMP_SIZE + HOST_V4_SIZE \
                       + TAIL_AFTER_STOREHOST + BODYLEN_SIZE)

/* -- big-endian access ------------------------------------------------------------- */

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

static inline int64_t
rd_i64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)rd_u32(p) << 32) | rd_u32(p + 4));
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
wr_i64(unsigned char *p, int64_t v)
{
    wr_u32(p, (uint32_t)((uint64_t)v >> 32));
    wr_u32(p + 4, (uint32_t)v);
}

/* -- CRC-32: crc32_fast of common/csrc/pmq_crc32.h, zlib's crc32 folded with
 * PCLMULQDQ where the CPU has it; tests check it against zlib.crc32 through crc32. */

PyDoc_STRVAR(crc32_doc,
"crc32(data, value=0) -> int\n\n"
"zlib.crc32, computed as the encoder computes a body's (for the tests).");

static PyObject *
py_crc32(PyObject *self, PyObject *args)
{
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32", &view, &value))
        return NULL;
    uint32_t crc = crc32_fast(value, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* -- what setup() hands over -------------------------------------------------------- */

static PyObject *message_ext_cls;      /* pocketmq.client.model.MessageExt */
static Py_ssize_t ext_offsets[17];     /* slot offsets of its fields, in EXT_FIELDS order */
static PyObject *corrupt_record_error; /* pocketmq.common.errors.CorruptRecordError */
static PyObject *invalid_message_error;/* pocketmq.client.errors.InvalidMessageError */
static PyObject *inflate_fn;           /* message_decode.inflate(body, pos) */
static PyObject *message_cls;          /* pocketmq.client.model.Message */
static PyObject *id_block_cls;         /* pocketmq.common.msgid.UniqueIdBlock */
static PyObject *system_properties;    /* model.SYSTEM_PROPERTIES, a frozenset */
static PyObject *check_topic_fn;       /* message_codec.check_topic_of(msg) */
static PyObject *check_batch_fn;       /* message_codec.py_check_batch(msgs, max_body_bytes) */
static PyObject *struct_error;         /* struct.error */

static const char *EXT_FIELDS[17] = {
    "topic", "body", "tags", "keys", "properties", "msg_id", "offset_msg_id",
    "broker_name", "queue_id", "queue_offset", "store_timestamp_ms", "born_timestamp_ms",
    "reconsume_times", "phys_offset", "flag", "sysflag", "store_size_bytes",
};

/* interned names and constants */
static PyObject *s_topic, *s_body, *s_tags, *s_keys, *s_properties, *s_delay_level, *s_flag,
    *s_deliver_at_ms, *s_delay_ms, *s_empty, *s_space, *s_prop_tags, *s_prop_keys,
    *s_prop_uniq_key, *s_prop_retry_topic;

/* Message's fields, read straight from the slots of an exact Message (msg_attr). */
enum { F_TOPIC, F_BODY, F_TAGS, F_KEYS, F_PROPERTIES, F_DELAY_LEVEL, F_FLAG, F_DELIVER_AT_MS,
       F_DELAY_MS, MSG_FIELD_COUNT };
static const char *MSG_FIELDS[MSG_FIELD_COUNT] = {
    "topic", "body", "tags", "keys", "properties", "delay_level", "flag", "deliver_at_ms",
    "delay_ms",
};
static PyObject **msg_names[MSG_FIELD_COUNT] = {
    &s_topic, &s_body, &s_tags, &s_keys, &s_properties, &s_delay_level, &s_flag,
    &s_deliver_at_ms, &s_delay_ms,
};
static Py_ssize_t msg_offsets[MSG_FIELD_COUNT];  /* 0: no slot, getattr only */

/* msg.<field>, a new reference. An exact Message's value is its slot (a frozen, slotted
 * dataclass: getattr reads the very same slot through the member descriptor setup()
 * found); anything else, or an unset slot (getattr's AttributeError), goes through
 * getattr. */
static PyObject *
msg_attr(PyObject *msg, int field)
{
    if (Py_IS_TYPE(msg, (PyTypeObject *)message_cls) && msg_offsets[field]) {
        PyObject *value = *(PyObject **)((char *)msg + msg_offsets[field]);
        if (value != NULL)
            return Py_NewRef(value);
    }
    return PyObject_GetAttr(msg, *msg_names[field]);
}

/* The offset of *cls*'s object slot *name*, or 0 when it has none. */
static Py_ssize_t
slot_offset(PyObject *cls, const char *name)
{
    PyObject *descr = PyDict_GetItemString(((PyTypeObject *)cls)->tp_dict, name);  /* borrowed */
    if (descr == NULL || !PyObject_TypeCheck(descr, &PyMemberDescr_Type))
        return 0;
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    return member->type == T_OBJECT_EX ? member->offset : 0;
}

static int
ready(void)
{
    if (message_ext_cls == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "pocketmq.client._codec.setup() was not called");
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(setup_doc,
"setup(message_ext_cls, corrupt_record_error, invalid_message_error, inflate,\n"
"      message_cls, id_block_cls, system_properties, check_topic_of, py_check_batch)\n\n"
"Hand over the classes, the checks' references and the inflate helper\n"
"(message_codec.py calls it once).");

static PyObject *
setup(PyObject *self, PyObject *args)
{
    PyObject *cls, *corrupt, *invalid, *inflate, *msg_cls, *block_cls, *system, *topic_fn,
        *batch_fn;
    if (!PyArg_ParseTuple(args, "O!OOOO!O!O!OO:setup", &PyType_Type, &cls, &corrupt, &invalid,
                          &inflate, &PyType_Type, &msg_cls, &PyType_Type, &block_cls,
                          &PyFrozenSet_Type, &system, &topic_fn, &batch_fn))
        return NULL;
    PyObject *dict = ((PyTypeObject *)cls)->tp_dict;
    for (int i = 0; i < 17; i++) {
        PyObject *descr = PyDict_GetItemString(dict, EXT_FIELDS[i]);  /* borrowed */
        if (descr == NULL || !PyObject_TypeCheck(descr, &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "%s has no slot %s", ((PyTypeObject *)cls)->tp_name,
                         EXT_FIELDS[i]);
            return NULL;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "slot %s is not an object slot", EXT_FIELDS[i]);
            return NULL;
        }
        ext_offsets[i] = member->offset;
    }
    Py_INCREF(cls);
    Py_INCREF(corrupt);
    Py_INCREF(invalid);
    Py_INCREF(inflate);
    Py_XSETREF(message_ext_cls, cls);
    Py_XSETREF(corrupt_record_error, corrupt);
    Py_XSETREF(invalid_message_error, invalid);
    Py_XSETREF(inflate_fn, inflate);
    Py_INCREF(msg_cls);
    Py_INCREF(block_cls);
    Py_INCREF(system);
    Py_INCREF(topic_fn);
    Py_INCREF(batch_fn);
    Py_XSETREF(message_cls, msg_cls);
    for (int i = 0; i < MSG_FIELD_COUNT; i++)
        msg_offsets[i] = slot_offset(msg_cls, MSG_FIELDS[i]);
    Py_XSETREF(id_block_cls, block_cls);
    Py_XSETREF(system_properties, system);
    Py_XSETREF(check_topic_fn, topic_fn);
    Py_XSETREF(check_batch_fn, batch_fn);
    Py_RETURN_NONE;
}

/* -- encoding ------------------------------------------------------------------------- */

/* A growable byte buffer: the properties of a batch's records, before encode_messages
 * knows the size of its result (which it then writes once, in place: see Planned). */
typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
} Buf;

static int
buf_reserve(Buf *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap)
        return 1;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    unsigned char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    b->data = data;
    b->cap = cap;
    return 1;
}

static int
buf_put(Buf *b, const void *src, Py_ssize_t n)
{
    if (!buf_reserve(b, n))
        return 0;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 1;
}

/* str(obj) as an f-string formats it ("{obj}"), UTF-8 encoded (strict), appended. */
static int
buf_put_formatted(Buf *b, PyObject *obj)
{
    Py_ssize_t n;
    const char *utf8;
    if (PyUnicode_CheckExact(obj)) {
        utf8 = PyUnicode_AsUTF8AndSize(obj, &n);
        return utf8 != NULL && buf_put(b, utf8, n);
    }
    PyObject *text = PyObject_Format(obj, s_empty);
    if (text == NULL)
        return 0;
    utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    int ok = utf8 != NULL && buf_put(b, utf8, n);
    Py_DECREF(text);
    return ok;
}

/* "name\x01{value}\x02" */
static int
buf_put_pair(Buf *b, const char *name, PyObject *value)
{
    return buf_put(b, name, (Py_ssize_t)strlen(name)) && buf_put(b, "\x01", 1)
           && buf_put_formatted(b, value) && buf_put(b, "\x02", 1);
}

/* The properties of one message, as message_codec._py_encode_one lays them out,
 * less the UNIQ_KEY value: user pairs, the timer pair, TAGS, KEYS, DELAY, "UNIQ_KEY\x01",
 * appended to *props*. Leaves the topic in *topic_out (a new reference, which keeps its
 * UTF-8 *topic_utf8 / *topic_len alive), checked in the reference's order. */
static int
put_properties(Buf *props, PyObject *msg, PyObject **topic_out, const char **topic_utf8,
               Py_ssize_t *topic_len)
{
    int ok = 0;
    PyObject *user = NULL, *items = NULL, *deliver = NULL, *delay = NULL, *topic = NULL,
             *tags = NULL, *keys = NULL, *delay_level = NULL, *joined = NULL;
    user = msg_attr(msg, F_PROPERTIES);
    if (user == NULL)
        goto done;
    int has_user = PyObject_IsTrue(user);
    if (has_user < 0)
        goto done;
    if (has_user) {
        items = PyMapping_Items(user);
        if (items == NULL)
            goto done;
        Py_ssize_t n = PyList_GET_SIZE(items);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *kv = PyList_GET_ITEM(items, i);
            if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
                PyErr_SetString(PyExc_TypeError, "properties.items() gave a non-pair");
                goto done;
            }
            if (!buf_put_formatted(props, PyTuple_GET_ITEM(kv, 0)) || !buf_put(props, "\x01", 1)
                || !buf_put_formatted(props, PyTuple_GET_ITEM(kv, 1))
                || !buf_put(props, "\x02", 1))
                goto done;
        }
    }
    deliver = msg_attr(msg, F_DELIVER_AT_MS);
    if (deliver == NULL)
        goto done;
    int t = PyObject_IsTrue(deliver);
    if (t < 0)
        goto done;
    if (t) {
        if (!buf_put_pair(props, "TIMER_DELIVER_MS", deliver))
            goto done;
    }
    else {
        delay = msg_attr(msg, F_DELAY_MS);
        if (delay == NULL)
            goto done;
        t = PyObject_IsTrue(delay);
        if (t < 0)
            goto done;
        if (t && !buf_put_pair(props, "TIMER_DELAY_MS", delay))
            goto done;
    }
    topic = msg_attr(msg, F_TOPIC);
    if (topic == NULL)
        goto done;
    if (!PyUnicode_Check(topic)) {
        PyErr_Format(PyExc_TypeError, "topic must be str, not %.100s", Py_TYPE(topic)->tp_name);
        goto done;
    }
    *topic_utf8 = PyUnicode_AsUTF8AndSize(topic, topic_len);  /* cached on the str */
    if (*topic_utf8 == NULL)
        goto done;
    if (*topic_len > MAX_TOPIC_LENGTH) {
        PyErr_Format(invalid_message_error, "topic is %zd bytes; at most %d fit a record",
                     *topic_len, MAX_TOPIC_LENGTH);
        goto done;
    }
    tags = msg_attr(msg, F_TAGS);
    if (tags == NULL)
        goto done;
    keys = msg_attr(msg, F_KEYS);
    if (keys == NULL)
        goto done;
    delay_level = msg_attr(msg, F_DELAY_LEVEL);
    if (delay_level == NULL)
        goto done;
    t = PyObject_IsTrue(tags);
    if (t < 0 || (t && !buf_put_pair(props, "TAGS", tags)))
        goto done;
    if (PyTuple_CheckExact(keys) || PyList_CheckExact(keys))
        t = PySequence_Fast_GET_SIZE(keys) > 0;
    else {
        PyObject *as_tuple = PySequence_Tuple(keys);
        if (as_tuple == NULL)
            goto done;
        Py_SETREF(keys, as_tuple);
        t = PyTuple_GET_SIZE(keys) > 0;
    }
    if (t) {
        joined = PyUnicode_Join(s_space, keys);
        if (joined == NULL || !buf_put_pair(props, "KEYS", joined))
            goto done;
    }
    t = PyObject_IsTrue(delay_level);
    if (t < 0 || (t && !buf_put_pair(props, "DELAY", delay_level)))
        goto done;
    ok = buf_put(props, "UNIQ_KEY\x01", 9);
    if (ok) {
        *topic_out = topic;
        topic = NULL;
    }
done:
    Py_XDECREF(user);
    Py_XDECREF(items);
    Py_XDECREF(deliver);
    Py_XDECREF(delay);
    Py_XDECREF(topic);
    Py_XDECREF(tags);
    Py_XDECREF(keys);
    Py_XDECREF(delay_level);
    Py_XDECREF(joined);
    return ok;
}

/* An int field packed as struct's ">i" would: struct.error past 32 bits. */
static int
as_i32(PyObject *obj, int32_t *out)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError))
            goto range;
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_SetString(struct_error, "required argument is not an integer");
        }
        return 0;
    }
    if (v < INT32_MIN || v > INT32_MAX)
        goto range;
    *out = (int32_t)v;
    return 1;
range:
    PyErr_Clear();
    PyErr_SetString(struct_error, "'i' format requires -2147483648 <= number <= 2147483647");
    return 0;
}

/* An idempotent producer's stamp, written after the record's UNIQ_KEY value:
 * "\x02PMQ_IDEM\x01<pid>.<epoch>.<seq>" (client/idempotence.py, stamp()). */
typedef struct {
    long long pid, epoch, seq;  /* seq: the first record's; the i-th gets seq + i */
    int on;
    char head[64];              /* "\x02PMQ_IDEM\x01<pid>.<epoch>.", the same in every record */
    Py_ssize_t head_len;
} Stamp;

/* *v* in decimal (as "%lld" writes it) at *p* (room for 20 characters); its length. */
static Py_ssize_t
put_decimal(char *p, long long v)
{
    char digits[20];
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    int n = 0;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    Py_ssize_t len = 0;
    if (v < 0)
        p[len++] = '-';
    while (n)
        p[len++] = digits[--n];
    return len;
}

/* One record, planned: everything but its bytes, every check passed (encode_messages
 * sizes the whole output from the plans, then writes each record once, in place). */
typedef struct {
    PyObject *body;                 /* a bytes (owned): the message's body, or bytes(body) */
    PyObject *topic;                /* owned: keeps topic_utf8 alive */
    const unsigned char *body_ptr;  /* the body, or its deflated copy in *packed* */
    unsigned char *packed;          /* PyMem, or NULL */
    const char *topic_utf8;
    Py_ssize_t body_len, topic_len;
    Py_ssize_t props_at, props_len; /* PROPERTIES in the side buffer, all of it */
    Py_ssize_t total;               /* TOTALSIZE */
    int32_t sysflag, flag;
} Planned;

static void
plan_clear(Planned *plan)
{
    Py_CLEAR(plan->body);
    Py_CLEAR(plan->topic);
    PyMem_Free(plan->packed);
    plan->packed = NULL;
}

/* The planned body deflated (zlib, SYSFLAG COMPRESSED) when that makes it smaller. */
static int
deflate_body(Planned *plan)
{
    uLongf packed_len = compressBound((uLong)plan->body_len);
    plan->packed = PyMem_Malloc(packed_len);
    if (plan->packed == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    int rc = compress2(plan->packed, &packed_len, plan->body_ptr, (uLong)plan->body_len,
                       ZLIB_LEVEL);
    if (rc != Z_OK) {
        PyErr_Format(PyExc_RuntimeError, "zlib compress2 failed: %d", rc);
        return 0;
    }
    if ((Py_ssize_t)packed_len < plan->body_len) {
        plan->body_ptr = plan->packed;
        plan->body_len = (Py_ssize_t)packed_len;
        plan->sysflag = SYSFLAG_COMPRESSED;
    }
    return 1;
}

/* Plan *msg*'s record, its whole PROPERTIES appended to *props*: the reference's checks,
 * in its order (body, compression, properties and topic, their length, flag, size). */
static int
plan_one(Planned *plan, Buf *props, PyObject *msg, const char *uniq, Py_ssize_t uniq_len,
         Py_ssize_t born_size, Py_ssize_t compress_over, const Stamp *stamp, Py_ssize_t index)
{
    PyObject *flag_obj = NULL;
    int ok = 0;
    PyObject *body = msg_attr(msg, F_BODY);
    if (body == NULL)
        return 0;
    if (!PyBytes_CheckExact(body)) {
        PyObject *as_bytes = PyObject_CallOneArg((PyObject *)&PyBytes_Type, body);
        Py_SETREF(body, as_bytes);
        if (body == NULL)
            return 0;
    }
    plan->body = body;
    plan->body_ptr = (const unsigned char *)PyBytes_AS_STRING(body);
    plan->body_len = PyBytes_GET_SIZE(body);
    plan->sysflag = 0;
    if (plan->body_len > compress_over && !deflate_body(plan))
        return 0;
    plan->props_at = props->len;
    if (!put_properties(props, msg, &plan->topic, &plan->topic_utf8, &plan->topic_len))
        return 0;
    char stamped[84];           /* the stamp's head and a 20-digit number */
    Py_ssize_t stamp_len = 0;
    if (stamp->on) {
        memcpy(stamped, stamp->head, (size_t)stamp->head_len);
        stamp_len = stamp->head_len;
        stamp_len += put_decimal(stamped + stamp_len, stamp->seq + (long long)index);
    }
    if (!buf_put(props, uniq, uniq_len) || !buf_put(props, stamped, stamp_len)
        || !buf_put(props, "\x02", 1))
        return 0;
    plan->props_len = props->len - plan->props_at;
    if (plan->props_len > MAX_PROPERTIES_LENGTH) {
        PyErr_Format(invalid_message_error, "properties are %zd bytes; at most %d fit a record",
                     plan->props_len, MAX_PROPERTIES_LENGTH);
        return 0;
    }
    if (born_size == HOST_V6_SIZE)
        plan->sysflag |= SYSFLAG_BORNHOST_V6;
    flag_obj = msg_attr(msg, F_FLAG);
    if (flag_obj == NULL || !as_i32(flag_obj, &plan->flag))
        goto done;
    Py_ssize_t fixed = HEAD_SIZE + born_size + STORE_TIMESTAMP_SIZE + STORE_HOST_PLACEHOLDER_SIZE
                       + TAIL_AFTER_STOREHOST + BODYLEN_SIZE;
    plan->total = fixed + plan->body_len + 1 + plan->topic_len + 2 + plan->props_len;
    if (plan->total > INT32_MAX) {
        PyErr_SetString(struct_error, "'i' format requires -2147483648 <= number <= 2147483647");
        goto done;
    }
    ok = 1;
done:
    Py_XDECREF(flag_obj);
    return ok;
}

/* Write the planned record at *p* (plan->total bytes). */
static void
write_one(unsigned char *p, const Planned *plan, const unsigned char *props, int32_t queue_id,
          const unsigned char *born_host, Py_ssize_t born_size, int64_t born_ts,
          int32_t reconsume)
{
    wr_u32(p, (uint32_t)plan->total);
    wr_u32(p + POS_MAGIC, MESSAGE_MAGIC_CODE);
    wr_u32(p + POS_BODYCRC,
           crc32_fast(0, plan->body_ptr, (size_t)plan->body_len) & 0x7FFFFFFF);
    wr_u32(p + POS_QUEUEID, (uint32_t)queue_id);
    wr_u32(p + POS_FLAG, (uint32_t)plan->flag);
    wr_i64(p + POS_QUEUEOFFSET, 0);         /* patched by the broker */
    wr_i64(p + POS_PHYSICALOFFSET, 0);      /* patched by the broker */
    wr_u32(p + POS_SYSFLAG, (uint32_t)plan->sysflag);
    wr_i64(p + POS_BORNTIMESTAMP, born_ts);
    p += HEAD_SIZE;
    memcpy(p, born_host, (size_t)born_size);
    p += born_size;
    wr_i64(p, 0);                           /* STORETIMESTAMP */
    memset(p + STORE_TIMESTAMP_SIZE, 0, STORE_HOST_PLACEHOLDER_SIZE);
    p += STORE_TIMESTAMP_SIZE + STORE_HOST_PLACEHOLDER_SIZE;
    wr_u32(p, (uint32_t)reconsume);         /* RECONSUMETIMES i32, */
    wr_i64(p + 4, 0);                       /* then PREPAREDTRANSACTIONOFFSET i64 */
    wr_u32(p + TAIL_AFTER_STOREHOST, (uint32_t)plan->body_len);
    p += TAIL_AFTER_STOREHOST + BODYLEN_SIZE;
    memcpy(p, plan->body_ptr, (size_t)plan->body_len);
    p += plan->body_len;
    *p++ = (unsigned char)plan->topic_len;
    memcpy(p, plan->topic_utf8, (size_t)plan->topic_len);
    p += plan->topic_len;
    p[0] = (unsigned char)(plan->props_len >> 8);
    p[1] = (unsigned char)plan->props_len;
    memcpy(p + 2, props + plan->props_at, (size_t)plan->props_len);
}

/* -- ids made at once ------------------------------------------------------------------
 * msgid.UniqueIdBlock: id i is prefix + the 4 upper-case hex digits of (first + i) & 0xFFFF. */

#define ID_BLOCK_MAX_PREFIX 64      /* msgid makes 28 ASCII characters */

typedef struct {
    const char *prefix;         /* NULL: the keys are a sequence of str */
    Py_ssize_t prefix_len;
    long long first;
    Py_ssize_t count;
} IdBlock;

static int
id_block_read(PyObject *obj, IdBlock *block)
{
    int ok = 0;
    PyObject *prefix = PyObject_GetAttrString(obj, "prefix");
    PyObject *first = prefix ? PyObject_GetAttrString(obj, "first") : NULL;
    PyObject *size = first ? PyObject_GetAttrString(obj, "size") : NULL;
    if (size == NULL)
        goto done;
    if (!PyUnicode_Check(prefix)) {
        PyErr_SetString(PyExc_TypeError, "UniqueIdBlock.prefix must be str");
        goto done;
    }
    block->prefix = PyUnicode_AsUTF8AndSize(prefix, &block->prefix_len);
    if (block->prefix == NULL)
        goto done;
    if (block->prefix_len > ID_BLOCK_MAX_PREFIX) {
        PyErr_Format(PyExc_ValueError, "UniqueIdBlock.prefix is %zd bytes; at most %d",
                     block->prefix_len, ID_BLOCK_MAX_PREFIX);
        goto done;
    }
    block->first = PyLong_AsLongLong(first);
    block->count = PyLong_AsSsize_t(size);
    ok = !PyErr_Occurred();
done:
    /* the prefix's UTF-8 stays valid: the block (alive for the call) holds the str */
    Py_XDECREF(prefix);
    Py_XDECREF(first);
    Py_XDECREF(size);
    return ok;
}

static Py_ssize_t
id_block_key(const IdBlock *block, Py_ssize_t i, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    unsigned v = (unsigned)((unsigned long long)(block->first + (long long)i) & 0xFFFFu);
    memcpy(out, block->prefix, (size_t)block->prefix_len);
    char *p = out + block->prefix_len;
    p[0] = hex[(v >> 12) & 0xF];
    p[1] = hex[(v >> 8) & 0xF];
    p[2] = hex[(v >> 4) & 0xF];
    p[3] = hex[v & 0xF];
    return block->prefix_len + 4;
}

/* -- checking a batch -------------------------------------------------------------------
 * check_batch looks at each message for the plain case only: a Message of the batch's
 * topic with a bytes body within the limit, int delay fields of which at most one is
 * set (and no delay level), keys a tuple or list of non-empty str without spaces,
 * properties a dict of non-empty str without separators and no system names. Anything
 * else, a fault or merely an unusual type, hands the whole batch to the reference
 * (message_codec.py_check_batch), which raises what it finds: the errors are the
 * reference's by construction, and a batch is never let through that it would refuse. */

/* 1: *obj* is an exact int in [lo, hi]; 0: it is not (no exception set). */
static int
plain_int_in(PyObject *obj, long long lo, long long hi, long long *value)
{
    if (!PyLong_CheckExact(obj))
        return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *value = v;
    return lo <= v && v <= hi;
}

/* 1: a non-empty str without any of *bad* (a NUL-terminated set of ASCII characters). */
static int
plain_text(PyObject *obj, const char *bad)
{
    if (!PyUnicode_CheckExact(obj) || PyUnicode_GET_LENGTH(obj) == 0)
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(obj);
    for (; *bad; bad++) {
        if (PyUnicode_FindChar(obj, (Py_UCS4)(unsigned char)*bad, 0, n, 1) != -1)
            return 0;   /* -2 (an error) cannot happen for an exact str in range */
    }
    return 1;
}

/* 1: plain; 0: not plain; -1: an error (set). */
static int
plain_message(PyObject *msg, PyObject *topic, Py_ssize_t max_body)
{
    int plain = 0;
    PyObject *t = NULL, *body = NULL, *dl = NULL, *at = NULL, *in = NULL, *keys = NULL,
             *props = NULL;
    if (!Py_IS_TYPE(msg, (PyTypeObject *)message_cls))
        return 0;
#define GET(var, field)                        \
    if ((var = msg_attr(msg, field)) == NULL) \
        goto error;
    GET(t, F_TOPIC);
    if (t != topic
        && !(PyUnicode_CheckExact(t) && PyUnicode_CheckExact(topic)
             && PyUnicode_Compare(t, topic) == 0))
        goto done;
    GET(body, F_BODY);
    if (!PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) == 0
        || PyBytes_GET_SIZE(body) > max_body)
        goto done;
    long long delay_level, deliver_at, delay_ms;
    GET(dl, F_DELAY_LEVEL);
    GET(at, F_DELIVER_AT_MS);
    GET(in, F_DELAY_MS);
    if (!plain_int_in(dl, 0, 0, &delay_level) || !plain_int_in(at, 0, LLONG_MAX, &deliver_at)
        || !plain_int_in(in, 0, LLONG_MAX, &delay_ms) || (deliver_at && delay_ms))
        goto done;
    GET(keys, F_KEYS);
    if (!PyTuple_CheckExact(keys) && !PyList_CheckExact(keys))
        goto done;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(keys); i++) {
        if (!plain_text(PySequence_Fast_GET_ITEM(keys, i), " "))
            goto done;
    }
    GET(props, F_PROPERTIES);
    if (!PyDict_CheckExact(props))
        goto done;
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(props, &pos, &name, &value)) {
        if (!plain_text(name, "\x01\x02") || !plain_text(value, "\x01\x02"))
            goto done;
        int system = PySet_Contains(system_properties, name);
        if (system < 0)
            goto error;
        if (system)
            goto done;
    }
#undef GET
    plain = 1;
    goto done;
error:
    plain = -1;
done:
    Py_XDECREF(t);
    Py_XDECREF(body);
    Py_XDECREF(dl);
    Py_XDECREF(at);
    Py_XDECREF(in);
    Py_XDECREF(keys);
    Py_XDECREF(props);
    return plain;
}

PyDoc_STRVAR(check_batch_doc,
"check_batch(msgs, max_body_bytes) -> None\n\n"
"Raise InvalidMessageError naming the first thing of a send_batch the broker\n"
"would refuse, as message_codec.py_check_batch does.");

static PyObject *
check_batch(PyObject *self, PyObject *args)
{
    PyObject *msgs, *max_body_obj;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTuple(args, "OO:check_batch", &msgs, &max_body_obj))
        return NULL;
    Py_ssize_t max_body = PyLong_Check(max_body_obj) ? PyLong_AsSsize_t(max_body_obj) : -1;
    if (max_body == -1 && PyErr_Occurred())
        PyErr_Clear();
    PyObject *fast = PySequence_Fast(msgs, "msgs must be a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int plain = n > 0 && max_body >= 0;
    PyObject *topic = NULL;
    if (plain) {
        PyObject *first = PySequence_Fast_GET_ITEM(fast, 0);
        PyObject *checked = PyObject_CallOneArg(check_topic_fn, first);
        if (checked == NULL)
            goto fail;
        Py_DECREF(checked);
        topic = msg_attr(first, F_TOPIC);
        if (topic == NULL)
            goto fail;
    }
    for (Py_ssize_t i = 0; plain && i < n; i++) {
        plain = plain_message(PySequence_Fast_GET_ITEM(fast, i), topic, max_body);
        if (plain < 0)
            goto fail;
    }
    Py_XDECREF(topic);
    Py_DECREF(fast);
    if (plain)
        Py_RETURN_NONE;
    return PyObject_CallFunctionObjArgs(check_batch_fn, msgs, max_body_obj, NULL);
fail:
    Py_XDECREF(topic);
    Py_DECREF(fast);
    return NULL;
}

PyDoc_STRVAR(encode_messages_doc,
"encode_messages(msgs, uniq_keys, queue_id, born_host, born_timestamp_ms,\n"
"                compress_over_bytes, reconsume_times, stamp=None, tail=None) -> bytes\n\n"
"The records of *msgs* back to back, each with its unique key (and, with\n"
"stamp=(producer id, epoch, first seq), its PMQ_IDEM stamp), as\n"
"message_codec.py_encode_messages builds them; with tail=bytes, framed as a\n"
"protobuf field 1 (the records) followed by *tail*.");

/* A protobuf varint of *v* at *p* (room for 10 bytes); its length. */
static Py_ssize_t
put_varint(unsigned char *p, uint64_t v)
{
    Py_ssize_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}

/* *seq* as a tuple (PySequence_Fast's errors): one that no Python code run meanwhile
 * can change. */
static PyObject *
frozen_sequence(PyObject *seq, const char *message)
{
    PyObject *fast = PySequence_Fast(seq, message);
    if (fast == NULL || PyTuple_CheckExact(fast))
        return fast;
    Py_SETREF(fast, PyList_AsTuple(fast));
    return fast;
}

/* One field of a stamp as PyLong_AsLongLong reads it, without its slow path: a
 * producer id takes 62 bits, three of CPython's digits, and PyLong_AsLongLong converts
 * such an int through a byte array (~230 instructions); the overflow variant walks the
 * digits. */
static int
stamp_field(PyObject *obj, long long *value)
{
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "stamp field does not fit in 64 bits");
        return 0;
    }
    if (v == -1 && PyErr_Occurred())
        return 0;
    *value = v;
    return 1;
}

/* *stamp_obj* (None or (producer id, epoch, first seq)) read into *stamp*, its head
 * formatted. */
static int
read_stamp(PyObject *stamp_obj, Stamp *stamp)
{
    if (stamp_obj == Py_None)
        return 1;
    if (!PyTuple_Check(stamp_obj) || PyTuple_GET_SIZE(stamp_obj) != 3) {
        PyErr_SetString(PyExc_TypeError, "stamp must be (producer id, epoch, seq) or None");
        return 0;
    }
    if (!stamp_field(PyTuple_GET_ITEM(stamp_obj, 0), &stamp->pid)
        || !stamp_field(PyTuple_GET_ITEM(stamp_obj, 1), &stamp->epoch)
        || !stamp_field(PyTuple_GET_ITEM(stamp_obj, 2), &stamp->seq))
        return 0;
    stamp->on = 1;
    memcpy(stamp->head, "\x02PMQ_IDEM\x01", 10);   /* 10 + 2 x (20 digits and a dot) */
    stamp->head_len = 10;
    stamp->head_len += put_decimal(stamp->head + stamp->head_len, stamp->pid);
    stamp->head[stamp->head_len++] = '.';
    stamp->head_len += put_decimal(stamp->head + stamp->head_len, stamp->epoch);
    stamp->head[stamp->head_len++] = '.';
    return 1;
}

/* The unique keys of *n* messages: a UniqueIdBlock read into *block*, or any sequence
 * of str, then frozen into *keys_tuple (block->prefix NULL). */
static int
read_keys(PyObject *keys, Py_ssize_t n, IdBlock *block, PyObject **keys_tuple)
{
    if (Py_IS_TYPE(keys, (PyTypeObject *)id_block_cls)) {
        /* ids made at once (msgid.UniqueIdBlock): each formatted here, no str per id */
        if (!id_block_read(keys, block))
            return 0;
        if (block->count != n) {
            PyErr_Format(PyExc_ValueError, "%zd messages but %zd unique keys", n, block->count);
            return 0;
        }
        return 1;
    }
    block->prefix = NULL;
    *keys_tuple = frozen_sequence(keys, "uniq_keys must be a sequence");
    if (*keys_tuple == NULL)
        return 0;
    if (PyTuple_GET_SIZE(*keys_tuple) != n) {
        PyErr_Format(PyExc_ValueError, "%zd messages but %zd unique keys", n,
                     PyTuple_GET_SIZE(*keys_tuple));
        return 0;
    }
    return 1;
}

/* Plan the record of every message of *msgs* (a tuple) into *plans*, counting in
 * *planned the plans that hold references (to clear); their sum in *records_len. */
static int
plan_all(Planned *plans, Py_ssize_t *planned, Buf *props, PyObject *msgs,
         const IdBlock *block, PyObject *keys_tuple, Py_ssize_t born_size,
         Py_ssize_t compress_over, const Stamp *stamp, Py_ssize_t *records_len)
{
    Py_ssize_t n = PyTuple_GET_SIZE(msgs);
    *records_len = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *uniq;
        Py_ssize_t uniq_len;
        char made[ID_BLOCK_MAX_PREFIX + 4];
        if (block->prefix != NULL) {
            uniq_len = id_block_key(block, i, made);
            uniq = made;
        }
        else {
            PyObject *key = PyTuple_GET_ITEM(keys_tuple, i);
            if (!PyUnicode_Check(key)) {
                PyErr_Format(PyExc_TypeError, "unique key must be str, not %.100s",
                             Py_TYPE(key)->tp_name);
                return 0;
            }
            uniq = PyUnicode_AsUTF8AndSize(key, &uniq_len);  /* the tuple keeps the key */
            if (uniq == NULL)
                return 0;
        }
        *planned = i + 1;  /* plans[i] holds what it got to, even if it fails */
        if (!plan_one(&plans[i], props, PyTuple_GET_ITEM(msgs, i), uniq, uniq_len, born_size,
                      compress_over, stamp, i))
            return 0;
        if (*records_len > PY_SSIZE_T_MAX - plans[i].total) {
            PyErr_NoMemory();
            return 0;
        }
        *records_len += plans[i].total;
    }
    return 1;
}

/* The result: the planned records, each written once in place (framed as protobuf's
 * field 1 then *tail*, when *framed*). */
static PyObject *
write_all(const Planned *plans, Py_ssize_t n, const Buf *props, Py_ssize_t records_len,
          int framed, const Py_buffer *tail, int32_t queue_id, const Py_buffer *born,
          int64_t born_ts, int32_t reconsume)
{
    unsigned char head[11];
    Py_ssize_t head_len = 0;
    if (framed && records_len > 0) {                /* proto3 leaves an empty field out */
        head[0] = 0x0A;                             /* field 1, length-delimited */
        head_len = 1 + put_varint(head + 1, (uint64_t)records_len);
    }
    if (records_len > PY_SSIZE_T_MAX - head_len - tail->len)
        return PyErr_NoMemory();
    PyObject *result = PyBytes_FromStringAndSize(NULL, head_len + records_len + tail->len);
    if (result == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(result);
    memcpy(p, head, (size_t)head_len);
    p += head_len;
    for (Py_ssize_t i = 0; i < n; i++) {
        write_one(p, &plans[i], props->data, queue_id, born->buf, born->len, born_ts,
                  reconsume);
        p += plans[i].total;
    }
    if (tail->len)
        memcpy(p, tail->buf, (size_t)tail->len);
    return result;
}

static PyObject *
encode_messages(PyObject *self, PyObject *args)
{
    PyObject *msgs, *keys, *queue_id_obj, *reconsume_obj;
    PyObject *stamp_obj = Py_None, *tail_obj = Py_None;
    Py_buffer born = {0}, tail = {0};
    long long born_ts;
    Py_ssize_t compress_over;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTuple(args, "OOOy*LnO|OO:encode_messages", &msgs, &keys, &queue_id_obj,
                          &born, &born_ts, &compress_over, &reconsume_obj, &stamp_obj,
                          &tail_obj))
        return NULL;
    PyObject *result = NULL, *msgs_tuple = NULL, *keys_tuple = NULL;
    Planned *plans = NULL;
    Py_ssize_t planned = 0, records_len;
    Buf props = {0};
    Stamp stamp = {0, 0, 0, 0, {0}, 0};
    int32_t queue_id, reconsume;
    IdBlock block;
    if ((tail_obj != Py_None && PyObject_GetBuffer(tail_obj, &tail, PyBUF_SIMPLE) < 0)
        || !read_stamp(stamp_obj, &stamp) || !as_i32(queue_id_obj, &queue_id)
        || !as_i32(reconsume_obj, &reconsume))
        goto done;
    /* A tuple: a list could change under us while Python code (a property value's
     * __format__) runs between two messages. */
    msgs_tuple = frozen_sequence(msgs, "msgs must be a sequence");
    if (msgs_tuple == NULL)
        goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(msgs_tuple);
    if (!read_keys(keys, n, &block, &keys_tuple))
        goto done;
    plans = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Planned));
    if (plans == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* First every check and every size (the properties in a side buffer), then the bytes. */
    if (plan_all(plans, &planned, &props, msgs_tuple, &block, keys_tuple, born.len,
                 compress_over, &stamp, &records_len))
        result = write_all(plans, n, &props, records_len, tail_obj != Py_None, &tail,
                           queue_id, &born, (int64_t)born_ts, reconsume);
done:
    for (Py_ssize_t i = 0; i < planned; i++)
        plan_clear(&plans[i]);
    PyMem_Free(plans);
    Py_XDECREF(msgs_tuple);
    Py_XDECREF(keys_tuple);
    PyMem_Free(props.data);
    PyBuffer_Release(&born);
    if (tail.obj != NULL)
        PyBuffer_Release(&tail);
    return result;
}

/* -- decoding ------------------------------------------------------------------------- */

static PyObject *
corrupt(Py_ssize_t pos, PyObject *reason)   /* steals reason */
{
    if (reason == NULL)
        return NULL;
    PyObject *exc = PyObject_CallFunction(corrupt_record_error, "nO", pos, reason);
    Py_DECREF(reason);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* A property name: the interned str for the names the SDK sets on every message
 * (no decoding, and a hash computed once), else decoded with "replace". */
static PyObject *
known_key(const unsigned char *p, Py_ssize_t n)
{
    PyObject *known = NULL;
    if (n == 8 && memcmp(p, "UNIQ_KEY", 8) == 0)
        known = s_prop_uniq_key;
    else if (n == 4 && memcmp(p, "TAGS", 4) == 0)
        known = s_prop_tags;
    else if (n == 4 && memcmp(p, "KEYS", 4) == 0)
        known = s_prop_keys;
    if (known != NULL) {
        Py_INCREF(known);
        return known;
    }
    return PyUnicode_DecodeUTF8((const char *)p, n, "replace");
}

/* {k: v} from "k\x01v\x02" pairs but PMQ_IDEM (common.message.decode_properties of the text
 * decoded with "replace"; \x01 and \x02 never occur inside a UTF-8 sequence, so
 * splitting the bytes first gives the same strings). */
static PyObject *
decode_props(const unsigned char *p, Py_ssize_t n)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    const unsigned char *end = p + n;
    while (p <= end) {
        const unsigned char *pair_end = memchr(p, 0x02, (size_t)(end - p));
        if (pair_end == NULL)
            pair_end = end;
        const unsigned char *sep = memchr(p, 0x01, (size_t)(pair_end - p));
        /* PMQ_IDEM (an idempotent producer's stamp) is the broker's, never shown */
        if (sep != NULL && sep > p && pair_end - sep > 1
            && !(sep - p == 8 && memcmp(p, "PMQ_IDEM", 8) == 0)) {
            PyObject *key = known_key(p, sep - p);
            PyObject *value = key == NULL ? NULL :
                PyUnicode_DecodeUTF8((const char *)sep + 1, pair_end - sep - 1, "replace");
            if (value == NULL || PyDict_SetItem(out, key, value) < 0) {
                Py_XDECREF(key);
                Py_XDECREF(value);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(key);
            Py_DECREF(value);
        }
        p = pair_end + 1;
    }
    return out;
}

static const char HEX[] = "0123456789ABCDEF";

/* "magic code is 0x%08X" (PyUnicode_FromFormat has no width for %X) */
static PyObject *
magic_text(uint32_t magic)
{
    char text[40];
    snprintf(text, sizeof text, "magic code is 0x%08X", (unsigned int)magic);
    return PyUnicode_FromString(text);
}

/* Store host hex (cached per reply) followed by PHYSICALOFFSET as 16 hex digits
 * (two's complement: the bytes of the i64, as the reference's to_bytes(signed)). */
static PyObject *
offset_msg_id(const unsigned char *host, Py_ssize_t host_size, int64_t phys)
{
    char text[2 * HOST_V6_SIZE + 16];
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < host_size; i++) {
        text[k++] = HEX[host[i] >> 4];
        text[k++] = HEX[host[i] & 0xF];
    }
    uint64_t u = (uint64_t)phys;
    for (int shift = 60; shift >= 0; shift -= 4)
        text[k++] = HEX[(u >> shift) & 0xF];
    return PyUnicode_DecodeASCII(text, k, NULL);
}

typedef struct {
    PyObject *last_entry;   /* (str, is_retry) of the previous record's topic, borrowed */
    const unsigned char *last_topic;   /* its bytes in the buffer */
    Py_ssize_t last_topic_len;
    PyObject *topics;       /* raw topic bytes -> (str, is_retry) */
    PyObject *broker_name;
    int check_crc;
} Reply;

/* One MessageExt from the record at pos whose fixed part is parsed; p is where BODY
 * starts. Every length is checked against TOTALSIZE. */
static PyObject *
build_ext(Reply *r, const unsigned char *raw, Py_ssize_t pos, Py_ssize_t p, int32_t total,
          uint32_t magic, int32_t crc, int32_t queue_id, int32_t flag, int64_t queue_offset,
          int64_t phys_offset, int32_t sysflag, int64_t born_ts, int64_t store_ts,
          const unsigned char *store_host, Py_ssize_t store_size, int32_t reconsume,
          int32_t body_len)
{
    Py_ssize_t record_end = pos + total;
    PyObject *body = NULL, *topic = NULL, *props = NULL, *ext = NULL, *keys = NULL,
             *msg_id = NULL;
    if (body_len < 0 || p + body_len > record_end) {
        corrupt(pos, PyUnicode_FromFormat("BODYLEN %d does not fit TOTALSIZE %d", body_len,
                                          total));
        goto fail;
    }
    if (r->check_crc
        && (int32_t)(crc32_fast(0, raw + p, (size_t)body_len) & 0x7FFFFFFF) != crc) {
        corrupt(pos, PyUnicode_FromString("body CRC mismatch"));
        goto fail;
    }
    body = PyBytes_FromStringAndSize((const char *)raw + p, body_len);
    if (body == NULL)
        goto fail;
    p += body_len;
    if (sysflag & SYSFLAG_COMPRESSED) {
        Py_SETREF(body, PyObject_CallFunction(inflate_fn, "On", body, pos));
        if (body == NULL)
            goto fail;
    }
    Py_ssize_t topic_len;
    if (magic == MESSAGE_MAGIC_CODE) {
        if (p + 1 > record_end)
            goto topic_past;
        topic_len = raw[p];
        p += 1;
    }
    else {
        if (p + 2 > record_end)
            goto topic_past;
        topic_len = ((Py_ssize_t)raw[p] << 8) | raw[p + 1];
        p += 2;
    }
    if (p + topic_len + 2 > record_end) {
        corrupt(pos, PyUnicode_FromFormat("properties length lies past TOTALSIZE %d", total));
        goto fail;
    }
    PyObject *entry;
    if (r->last_entry != NULL && r->last_topic_len == topic_len
        && memcmp(r->last_topic, raw + p, (size_t)topic_len) == 0) {
        entry = r->last_entry;   /* a reply is mostly one topic: no lookup */
        goto have_entry;
    }
    PyObject *raw_topic = PyBytes_FromStringAndSize((const char *)raw + p, topic_len);
    if (raw_topic == NULL)
        goto fail;
    entry = PyDict_GetItemWithError(r->topics, raw_topic);  /* borrowed */
    if (entry == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(raw_topic);
            goto fail;
        }
        PyObject *name = PyUnicode_DecodeUTF8((const char *)raw + p, topic_len, "replace");
        if (name == NULL) {
            Py_DECREF(raw_topic);
            goto fail;
        }
        PyObject *prefix = PyUnicode_FromString("%RETRY%");
        Py_ssize_t starts = prefix ? PyUnicode_Tailmatch(name, prefix, 0, PY_SSIZE_T_MAX, -1)
                                   : -1;
        Py_XDECREF(prefix);
        entry = starts < 0 ? NULL : Py_BuildValue("(NO)", name, starts ? Py_True : Py_False);
        if (entry == NULL || PyDict_SetItem(r->topics, raw_topic, entry) < 0) {
            if (entry == NULL && starts < 0)
                Py_DECREF(name);
            Py_XDECREF(entry);
            Py_DECREF(raw_topic);
            goto fail;
        }
        Py_DECREF(entry);   /* the dict holds it */
    }
    Py_DECREF(raw_topic);
    r->last_entry = entry;       /* the dict keeps it alive for the call */
    r->last_topic = raw + p;
    r->last_topic_len = topic_len;
have_entry:
    topic = PyTuple_GET_ITEM(entry, 0);
    Py_INCREF(topic);
    int is_retry = PyTuple_GET_ITEM(entry, 1) == Py_True;
    p += topic_len;
    Py_ssize_t props_len = ((Py_ssize_t)raw[p] << 8) | raw[p + 1];
    p += 2;
    if (p + props_len != record_end) {
        corrupt(pos, PyUnicode_FromFormat("TOTALSIZE is %d but the parts add up to %zd", total,
                                          p + props_len - pos));
        goto fail;
    }
    props = props_len ? decode_props(raw + p, props_len) : PyDict_New();
    if (props == NULL)
        goto fail;
    if (is_retry) {
        PyObject *origin = PyDict_GetItemWithError(props, s_prop_retry_topic);
        if (origin != NULL) {
            Py_INCREF(origin);
            Py_SETREF(topic, origin);
        }
        else if (PyErr_Occurred())
            goto fail;
    }
    PyObject *tags = PyDict_GetItemWithError(props, s_prop_tags);
    if (tags == NULL && PyErr_Occurred())
        goto fail;
    PyObject *raw_keys = PyDict_GetItemWithError(props, s_prop_keys);
    if (raw_keys == NULL && PyErr_Occurred())
        goto fail;
    if (raw_keys != NULL && PyUnicode_GET_LENGTH(raw_keys) > 0)
        keys = PyUnicode_Split(raw_keys, s_space, -1);
    else
        keys = PyList_New(0);
    if (keys == NULL)
        goto fail;
    msg_id = PyDict_GetItemWithError(props, s_prop_uniq_key);
    if (msg_id == NULL && PyErr_Occurred())
        goto fail;
    ext = ((PyTypeObject *)message_ext_cls)->tp_alloc((PyTypeObject *)message_ext_cls, 0);
    if (ext == NULL)
        goto fail;
    PyObject *values[17];
    values[0] = topic;
    values[1] = body;
    values[2] = tags ? tags : s_empty;
    Py_INCREF(values[2]);
    values[3] = keys;
    values[4] = props;
    values[5] = msg_id ? msg_id : s_empty;
    Py_INCREF(values[5]);
    values[6] = offset_msg_id(store_host, store_size, phys_offset);
    values[7] = r->broker_name;
    Py_INCREF(values[7]);
    values[8] = PyLong_FromLong(queue_id);
    values[9] = PyLong_FromLongLong(queue_offset);
    values[10] = PyLong_FromLongLong(store_ts);
    values[11] = PyLong_FromLongLong(born_ts);
    values[12] = PyLong_FromLong(reconsume);
    values[13] = PyLong_FromLongLong(phys_offset);
    values[14] = PyLong_FromLong(flag);
    values[15] = PyLong_FromLong(sysflag);
    values[16] = PyLong_FromLong(total);
    topic = body = keys = props = NULL;   /* now owned by values[] */
    int failed = 0;
    for (int i = 0; i < 17; i++) {
        if (values[i] == NULL)
            failed = 1;
        /* the slot owns the reference; tp_dealloc of a slotted object clears it */
        *(PyObject **)((char *)ext + ext_offsets[i]) = values[i];
    }
    if (failed) {
        Py_DECREF(ext);
        return NULL;
    }
    return ext;
topic_past:
    corrupt(pos, PyUnicode_FromFormat("topic length lies past TOTALSIZE %d", total));
fail:
    Py_XDECREF(body);
    Py_XDECREF(topic);
    Py_XDECREF(props);
    Py_XDECREF(keys);
    return NULL;
}

/* A record of any host size, a BLANK or a damaged tail: appends it (unless BLANK)
 * and returns the next position, or -1 with an exception set. */
static Py_ssize_t
decode_general(Reply *r, const unsigned char *raw, Py_ssize_t pos, Py_ssize_t end,
               PyObject *out)
{
    if (end - pos < HEAD_SIZE) {
        corrupt(pos, PyUnicode_FromFormat("%zd bytes left; a record head is %d", end - pos,
                                          HEAD_SIZE));
        return -1;
    }
    const unsigned char *h = raw + pos;
    int32_t total = rd_i32(h);
    uint32_t magic = rd_u32(h + POS_MAGIC);
    if (magic == BLANK_MAGIC_CODE && total > 0)
        return pos + total;
    if (magic != MESSAGE_MAGIC_CODE && magic != MESSAGE_MAGIC_CODE_V2) {
        corrupt(pos, magic_text(magic));
        return -1;
    }
    if (total < HEAD_SIZE || pos + total > end) {
        corrupt(pos, PyUnicode_FromFormat("TOTALSIZE is %d; %zd bytes are left", total,
                                          end - pos));
        return -1;
    }
    int32_t sysflag = rd_i32(h + POS_SYSFLAG);
    Py_ssize_t born_size = sysflag & SYSFLAG_BORNHOST_V6 ? HOST_V6_SIZE : HOST_V4_SIZE;
    Py_ssize_t store_size = sysflag & SYSFLAG_STOREHOST_V6 ? HOST_V6_SIZE : HOST_V4_SIZE;
    Py_ssize_t p = pos + HEAD_SIZE + born_size;
    Py_ssize_t body_pos =
        p + STORE_TIMESTAMP_SIZE + store_size + TAIL_AFTER_STOREHOST + BODYLEN_SIZE;
    if (body_pos > pos + total) {
        corrupt(pos, PyUnicode_FromFormat("TOTALSIZE is %d; the fields before BODY need %zd",
                                          total, body_pos - pos));
        return -1;
    }
    int64_t store_ts = rd_i64(raw + p);
    const unsigned char *store_host = raw + p + STORE_TIMESTAMP_SIZE;
    p += STORE_TIMESTAMP_SIZE + store_size;     /* RECONSUMETIMES */
    PyObject *ext = build_ext(
        r, raw, pos, body_pos, total, magic, rd_i32(h + POS_BODYCRC), rd_i32(h + POS_QUEUEID),
        rd_i32(h + POS_FLAG), rd_i64(h + POS_QUEUEOFFSET), rd_i64(h + POS_PHYSICALOFFSET),
        sysflag, rd_i64(h + POS_BORNTIMESTAMP), store_ts, store_host, store_size,
        rd_i32(raw + p), rd_i32(raw + p + TAIL_AFTER_STOREHOST));
    if (ext == NULL)
        return -1;
    int rc = PyList_Append(out, ext);
    Py_DECREF(ext);
    return rc < 0 ? -1 : pos + total;
}

PyDoc_STRVAR(decode_messages_doc,
"decode_messages(buf, broker_name, check_crc) -> list[MessageExt]\n\n"
"The records of a pull reply as messages, BLANK records skipped, as\n"
"message_codec.py_decode_messages decodes them.");

static PyObject *
decode_messages(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *broker_name;
    int check_crc;
    if (!ready())
        return NULL;
    if (!PyArg_ParseTuple(args, "y*Up:decode_messages", &view, &broker_name, &check_crc))
        return NULL;
    Reply r = {NULL, NULL, 0, PyDict_New(), broker_name, check_crc};
    PyObject *out = PyList_New(0);
    if (out == NULL || r.topics == NULL)
        goto fail;
    const unsigned char *raw = view.buf;
    Py_ssize_t pos = 0, end = view.len;
    while (pos < end) {
        if (end - pos < FIXED_V4_SIZE) {
            pos = decode_general(&r, raw, pos, end, out);
            if (pos < 0)
                goto fail;
            continue;
        }
        const unsigned char *h = raw + pos;
        int32_t total = rd_i32(h);
        uint32_t magic = rd_u32(h + POS_MAGIC);
        int32_t sysflag = rd_i32(h + POS_SYSFLAG);
        if ((sysflag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)) || magic == BLANK_MAGIC_CODE
            || total < FIXED_V4_SIZE) {
            pos = decode_general(&r, raw, pos, end, out);
            if (pos < 0)
                goto fail;
            continue;
        }
        if (magic != MESSAGE_MAGIC_CODE && magic != MESSAGE_MAGIC_CODE_V2) {
            corrupt(pos, magic_text(magic));
            goto fail;
        }
        if (pos + total > end) {
            corrupt(pos, PyUnicode_FromFormat("TOTALSIZE is %d; %zd bytes are left", total,
                                              end - pos));
            goto fail;
        }
        const unsigned char *t = h + HEAD_SIZE + HOST_V4_SIZE;   /* STORETIMESTAMP */
        PyObject *ext = build_ext(
            &r, raw, pos, pos + FIXED_V4_SIZE, total, magic, rd_i32(h + POS_BODYCRC),
            rd_i32(h + POS_QUEUEID), rd_i32(h + POS_FLAG), rd_i64(h + POS_QUEUEOFFSET),
            rd_i64(h + POS_PHYSICALOFFSET), sysflag, rd_i64(h + POS_BORNTIMESTAMP), rd_i64(t),
            t + STORE_TIMESTAMP_SIZE, HOST_V4_SIZE, rd_i32(t + STORE_TIMESTAMP_SIZE + HOST_V4_SIZE),
            rd_i32(t + STORE_TIMESTAMP_SIZE + HOST_V4_SIZE + TAIL_AFTER_STOREHOST));
        if (ext == NULL)
            goto fail;
        int rc = PyList_Append(out, ext);
        Py_DECREF(ext);
        if (rc < 0)
            goto fail;
        pos += total;
    }
    Py_DECREF(r.topics);
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(r.topics);
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* -- module --------------------------------------------------------------------------- */

static PyMethodDef codec_methods[] = {
    {"setup", setup, METH_VARARGS, setup_doc},
    {"check_batch", check_batch, METH_VARARGS, check_batch_doc},
    {"crc32", py_crc32, METH_VARARGS, crc32_doc},
    {"encode_messages", encode_messages, METH_VARARGS, encode_messages_doc},
    {"decode_messages", decode_messages, METH_VARARGS, decode_messages_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc,
"The client's message codec, compiled (client/message_codec.py has the references).");

static struct PyModuleDef codec_module = {
    PyModuleDef_HEAD_INIT, "pocketmq.client._codec", module_doc, -1, codec_methods,
};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC
PyInit__codec(void)
{
    INTERN(s_topic, "topic");
    INTERN(s_body, "body");
    INTERN(s_tags, "tags");
    INTERN(s_keys, "keys");
    INTERN(s_properties, "properties");
    INTERN(s_delay_level, "delay_level");
    INTERN(s_flag, "flag");
    INTERN(s_deliver_at_ms, "deliver_at_ms");
    INTERN(s_delay_ms, "delay_ms");
    INTERN(s_empty, "");
    INTERN(s_space, " ");
    INTERN(s_prop_tags, "TAGS");
    INTERN(s_prop_keys, "KEYS");
    INTERN(s_prop_uniq_key, "UNIQ_KEY");
    INTERN(s_prop_retry_topic, "RETRY_TOPIC");
    PyObject *struct_mod = PyImport_ImportModule("struct");
    if (struct_mod == NULL)
        return NULL;
    struct_error = PyObject_GetAttrString(struct_mod, "error");
    Py_DECREF(struct_mod);
    if (struct_error == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&codec_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "VERSION", CODEC_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
