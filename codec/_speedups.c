/*
 * trafka.codec._speedups: optional C inner loops for record batches (magic 2).
 *
 * This module is a fast path, not a second implementation of the format. The
 * rules live in codec/records.py; the functions here only *refuse* (return
 * None) whatever the pure-Python decoder or encoder would reject, and the
 * caller then re-runs the Python code, which raises the precise DecodeError or
 * EncodeError with its field path. Invariants:
 *
 * - Whatever is accepted decodes (encodes) to exactly what the Python code
 *   produces: equal records, byte-identical records sections.
 * - Refusing is always safe, so anything unusual is refused: a value that
 *   would overflow int64 here (Python ints do not), a key or value that is not
 *   exactly bytes/bytearray, an argument shape other than tuple/list.
 * - Every length is checked against the bytes left in the *record* (never the
 *   whole buffer) before anything is read or allocated, so no read goes past
 *   the input and no allocation is sized from bytes not received.
 * - Varints are zig-zag; int32 varints take at most 5 bytes and must fit 32
 *   bits, varlongs at most 10 bytes and 64 bits (as the Python reader).
 * - No Python code runs while a buffer is being read or written (only C-level
 *   object constructors), so inputs cannot change under the loops. The cyclic
 *   GC is paused while records are decoded: a collection could run finalizers
 *   (Python code), and the objects made here are not collectable anyway (see
 *   below), so collecting in the middle of a batch would only re-walk the
 *   young objects once per 700 records. The allocation count it keeps makes
 *   the next allocation after the batch collect as usual.
 * - Exceptions are raised only for misuse (wrong argument types) and
 *   MemoryError; malformed data is never an exception here.
 * - A record is parsed once (parse_record: all the checks, nothing allocated)
 *   and then either made a tuple or appended to column buffers (the
 *   decode_*_columns functions, for trafka.codec.columns): both outputs
 *   accept and refuse exactly the same input.
 * - Decoded records are handed to the cyclic GC untracked whenever every field
 *   is atomic (ints, bytes, str, None, untracked tuples): such a tuple can never
 *   be part of a reference cycle. CPython untracks exact tuples like this at
 *   their first collection, but never tuple subclasses such as NamedTuples, so
 *   without this every consumed record would be traversed by each collection
 *   until it dies, and a million of them trigger several full collections.
 *   (An instance of a tuple subclass also refers to its class; a class that
 *   stored its own decoded records would form a cycle the GC cannot see. No
 *   record class does that, and decode_batch_as documents it.)
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Collections are paused only while no Python code can run (the GIL is held
 * throughout the loop), so no other code can observe the pause. Without a GIL
 * (free-threaded builds) other threads could, so nothing is paused there. */
static int
pause_gc(void)
{
#ifdef Py_GIL_DISABLED
    return 0;
#else
    return PyGC_Disable();
#endif
}

static void
resume_gc(int was_enabled)
{
    if (was_enabled) {
        PyGC_Enable();
    }
}

#include <stdint.h>
#include <string.h>

#include "_keyhash.h"

#define REFUSE 1 /* malformed or unusual input: the Python path decides */
#define FAILED 2 /* a Python exception is set */

/* -- varints ------------------------------------------------------------------------ */

/* Read an unsigned varint of at most max_bytes (5 or 10) from [*pp, end). */
static inline int
read_uvarint(const unsigned char **pp, const unsigned char *end, int max_bytes, uint64_t *out)
{
    const unsigned char *p = *pp;
    if (p < end && *p < 0x80) { /* the common one-byte case */
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    uint64_t result = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end) {
            return REFUSE;
        }
        unsigned char b = *p++;
        if (i == max_bytes - 1) {
            /* The last allowed byte: no continuation, and no bits past 32 / 64. */
            if (b > (max_bytes == 5 ? 0x0F : 0x01)) {
                return REFUSE;
            }
        }
        result |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            *out = result;
            *pp = p;
            return 0;
        }
    }
    return REFUSE; /* unreachable: the last byte either ends or refuses */
}

static inline int
read_varint32(const unsigned char **pp, const unsigned char *end, int32_t *out)
{
    uint64_t raw;
    if (read_uvarint(pp, end, 5, &raw)) {
        return REFUSE;
    }
    uint32_t u = (uint32_t)raw;
    *out = (int32_t)((u >> 1) ^ (0U - (u & 1U)));
    return 0;
}

static inline int
read_varint64(const unsigned char **pp, const unsigned char *end, int64_t *out)
{
    uint64_t raw;
    if (read_uvarint(pp, end, 10, &raw)) {
        return REFUSE;
    }
    *out = (int64_t)((raw >> 1) ^ (0ULL - (raw & 1ULL)));
    return 0;
}

static inline Py_ssize_t
uvarint_size(uint64_t n)
{
    Py_ssize_t size = 1;
    while (n >= 0x80) {
        n >>= 7;
        size++;
    }
    return size;
}

static inline uint64_t
zigzag(int64_t n)
{
    return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
}

static inline unsigned char *
write_uvarint(unsigned char *p, uint64_t n)
{
    while (n >= 0x80) {
        *p++ = (unsigned char)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    *p++ = (unsigned char)n;
    return p;
}

/* -- record objects -------------------------------------------------------------------- */

/*
 * Whether instances of `cls` can be allocated directly and filled like a tuple:
 * tuple itself, or a subclass that adds no per-instance storage (a NamedTuple
 * has __slots__ = ()). Other classes are refused by the caller.
 */
static int
plain_tuple_type(PyTypeObject *cls)
{
    if (cls == &PyTuple_Type) {
        return 1;
    }
    return cls->tp_basicsize == PyTuple_Type.tp_basicsize &&
           cls->tp_itemsize == PyTuple_Type.tp_itemsize && cls->tp_dictoffset == 0 &&
           cls->tp_weaklistoffset == 0 && cls->tp_alloc != NULL;
}

static PyObject *
new_tuple_of(PyTypeObject *cls, Py_ssize_t size)
{
    if (cls == &PyTuple_Type) {
        return PyTuple_New(size);
    }
    /* What tuple.__new__(cls, ...) does, minus the intermediate tuple. */
    PyObject *obj = cls->tp_alloc(cls, size);
#if PY_VERSION_HEX >= 0x030E0000
    /* 3.14+ caches tuple hashes; zeroed memory would read as a cached hash 0. */
    if (obj != NULL) {
        ((PyTupleObject *)obj)->ob_hash = -1;
    }
#endif
    return obj;
}

/* -- decoding ------------------------------------------------------------------------------ */

/*
 * A record is read in two steps, so that one reader serves both outputs:
 * parse_record() checks the whole record and locates its fields in the input
 * (nothing is allocated), then either emit_tuple() makes the record tuple or
 * emit_columns() appends the fields to column buffers (decode_*_columns).
 */

typedef struct {
    PyTypeObject *cls;
    PyObject *prefix; /* tuple */
    PyObject *suffix; /* tuple */
    int untrack;      /* prefix and suffix hold only atomic objects */
    int64_t base_offset;
    int64_t base_timestamp;
    int64_t log_append; /* used when has_log_append */
    int has_log_append;
    int64_t min_offset;
    int32_t timestamp_type; /* the batch's, for the columns */
} decode_args;

/* One record's fields, located in the input. */
typedef struct {
    int64_t offset;
    int64_t timestamp;
    const unsigned char *key; /* NULL: null */
    int32_t key_len;
    const unsigned char *value; /* NULL: null */
    int32_t value_len;
    const unsigned char *headers; /* the first header, after the count */
    int32_t header_count;
    const unsigned char *end; /* the record's end */
} record_fields;

/* A nullable bytes field of a record: -1 is null (*data NULL), else that many bytes. */
static int
read_nullable(const unsigned char **pp, const unsigned char *rend, const unsigned char **data,
              int32_t *n)
{
    if (read_varint32(pp, rend, n)) {
        return REFUSE;
    }
    if (*n == -1) {
        *data = NULL;
        return 0;
    }
    if (*n < 0 || *n > rend - *pp) {
        return REFUSE;
    }
    *data = *pp;
    *pp += *n;
    return 0;
}

/* One header at *pp: its name (UTF-8 checked by parse_record) and value (NULL: null). */
static int
read_header(const unsigned char **pp, const unsigned char *rend, const unsigned char **name,
            int32_t *name_len, const unsigned char **value, int32_t *value_len)
{
    if (read_varint32(pp, rend, name_len) || *name_len < 0 || *name_len > rend - *pp) {
        return REFUSE;
    }
    *name = *pp;
    *pp += *name_len;
    return read_nullable(pp, rend, value, value_len);
}

/* Whether a header name is UTF-8 as Python's strict decoder has it: 0 yes, REFUSE, FAILED. */
static int
check_utf8(const unsigned char *s, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        if (s[i] >= 0x80) {
            /* Not ASCII: Python's own decoder decides (rare; header names are ASCII). */
            PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
            if (text == NULL) {
                if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    return REFUSE;
                }
                return FAILED;
            }
            Py_DECREF(text);
            return 0;
        }
    }
    return 0;
}

/* Check the record at *pp (buffer end `end`) whole and locate its fields; *pp moves past it. */
static int
parse_record(const unsigned char **pp, const unsigned char *end, const decode_args *a,
             record_fields *r)
{
    const unsigned char *p = *pp;
    int32_t length;
    if (read_varint32(&p, end, &length)) {
        return REFUSE;
    }
    if (length < 6 || length > end - p) {
        return REFUSE;
    }
    const unsigned char *rend = p + length;
    p++; /* attributes: no bits defined */
    int64_t ts_delta;
    int32_t offset_delta;
    if (read_varint64(&p, rend, &ts_delta) || read_varint32(&p, rend, &offset_delta)) {
        return REFUSE;
    }
    if (__builtin_add_overflow(a->base_offset, (int64_t)offset_delta, &r->offset)) {
        return REFUSE; /* Python's ints would carry on; let them */
    }
    if (a->has_log_append) {
        r->timestamp = a->log_append;
    } else if (__builtin_add_overflow(a->base_timestamp, ts_delta, &r->timestamp)) {
        return REFUSE;
    }
    if (read_nullable(&p, rend, &r->key, &r->key_len) ||
        read_nullable(&p, rend, &r->value, &r->value_len)) {
        return REFUSE;
    }
    int32_t count;
    if (read_varint32(&p, rend, &count)) {
        return REFUSE;
    }
    /* Each header takes at least two bytes. */
    if (count < 0 || (int64_t)count * 2 > rend - p) {
        return REFUSE;
    }
    r->headers = p;
    r->header_count = count;
    for (int32_t h = 0; h < count; h++) {
        const unsigned char *name = NULL, *value = NULL;
        int32_t name_len = 0, value_len = 0;
        if (read_header(&p, rend, &name, &name_len, &value, &value_len)) {
            return REFUSE;
        }
        int rc = check_utf8(name, name_len);
        if (rc) {
            return rc;
        }
    }
    if (p != rend) {
        return REFUSE;
    }
    r->end = rend;
    *pp = rend;
    return 0;
}

static PyObject *
nullable_bytes(const unsigned char *data, int32_t n)
{
    if (data == NULL) {
        return Py_NewRef(Py_None);
    }
    return PyBytes_FromStringAndSize((const char *)data, n);
}

/* The headers of a parsed record as a tuple of (str, bytes | None) pairs. */
static PyObject *
headers_tuple(const record_fields *r)
{
    PyObject *headers = PyTuple_New(r->header_count);
    if (headers == NULL) {
        return NULL;
    }
    const unsigned char *p = r->headers;
    for (int32_t h = 0; h < r->header_count; h++) {
        const unsigned char *name = NULL, *data = NULL;
        int32_t name_len = 0, data_len = 0;
        read_header(&p, r->end, &name, &name_len, &data, &data_len); /* checked by parse_record */
        PyObject *pair = PyTuple_New(2);
        PyObject *key = PyUnicode_DecodeUTF8((const char *)name, name_len, "strict");
        PyObject *value = nullable_bytes(data, data_len);
        if (pair == NULL || key == NULL || value == NULL) {
            Py_XDECREF(pair);
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_DECREF(headers);
            return NULL;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyObject_GC_UnTrack(pair); /* str and bytes/None: atomic */
        PyTuple_SET_ITEM(headers, h, pair);
    }
    if (r->header_count) {
        PyObject_GC_UnTrack(headers); /* holds only untracked pairs */
    }
    return headers;
}

/* -- column buffers (decode_*_columns) -- */

/* A growable byte buffer (PyMem). */
typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
} growbuf;

static int
grow(growbuf *b, Py_ssize_t more)
{
    if (more <= b->cap - b->len) {
        return 0;
    }
    Py_ssize_t want = b->cap ? b->cap : 256;
    while (want - b->len < more) {
        if (want > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return FAILED;
        }
        want *= 2;
    }
    unsigned char *data = PyMem_Realloc(b->data, (size_t)want);
    if (data == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    b->data = data;
    b->cap = want;
    return 0;
}

/* Room for exactly `more` bytes past what is held (no doubling: a known size). */
static int
reserve(growbuf *b, Py_ssize_t more)
{
    if (more <= b->cap - b->len) {
        return 0;
    }
    if (more > PY_SSIZE_T_MAX - b->len) {
        PyErr_NoMemory();
        return FAILED;
    }
    unsigned char *data = PyMem_Realloc(b->data, (size_t)(b->len + more));
    if (data == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    b->data = data;
    b->cap = b->len + more;
    return 0;
}

static inline int
put(growbuf *b, const void *src, Py_ssize_t n)
{
    if (n > b->cap - b->len && grow(b, n)) {
        return FAILED;
    }
    if (n) {
        memcpy(b->data + b->len, src, (size_t)n);
    }
    b->len += n;
    return 0;
}

/*
 * An Arrow validity bitmap: bit i set, item i is not null. Bits past the last
 * item are kept clear, so equal columns have equal bytes.
 */
typedef struct {
    growbuf bits;
    Py_ssize_t n, nulls;
} bitmap;

static inline int
bitmap_append(bitmap *m, int valid)
{
    Py_ssize_t byte = m->n >> 3;
    if (byte >= m->bits.len) {
        unsigned char zero = 0;
        if (put(&m->bits, &zero, 1)) {
            return FAILED;
        }
    }
    if (valid) {
        m->bits.data[byte] |= (unsigned char)(1u << (m->n & 7));
    } else {
        m->nulls++;
    }
    m->n++;
    return 0;
}

/* Back to the first n items (nulls among them). */
static void
bitmap_truncate(bitmap *m, Py_ssize_t n, Py_ssize_t nulls)
{
    m->n = n;
    m->nulls = nulls;
    m->bits.len = (n + 7) >> 3;
    if (n & 7) {
        m->bits.data[n >> 3] &= (unsigned char)((1u << (n & 7)) - 1);
    }
}

/*
 * A nullable binary (or string) column in Arrow's layout: int32 offsets (one
 * more than the items, starting at 0), the items' bytes end to end, and a
 * validity bitmap.
 */
typedef struct {
    growbuf offsets, data;
    bitmap valid;
} binary_col;

static int
binary_init(binary_col *c)
{
    int32_t zero = 0;
    return put(&c->offsets, &zero, 4);
}

static int
binary_append(binary_col *c, const unsigned char *src, int32_t n)
{
    if (src != NULL) {
        if (n > INT32_MAX - c->data.len) {
            return REFUSE; /* beyond int32 offsets: the Python path decides */
        }
        if (put(&c->data, src, n)) {
            return FAILED;
        }
    }
    int32_t at = (int32_t)c->data.len;
    if (put(&c->offsets, &at, 4)) {
        return FAILED;
    }
    return bitmap_append(&c->valid, src != NULL);
}

/* Back to the first n items (nulls among them). */
static void
binary_truncate(binary_col *c, Py_ssize_t n, Py_ssize_t nulls)
{
    c->offsets.len = (n + 1) * 4;
    int32_t at;
    memcpy(&at, c->offsets.data + n * 4, 4);
    c->data.len = at;
    bitmap_truncate(&c->valid, n, nulls);
}

static void
binary_free(binary_col *c)
{
    PyMem_Free(c->offsets.data);
    PyMem_Free(c->data.data);
    PyMem_Free(c->valid.bits.data);
}

/* A buffer's bytes (b"" when it is empty, never allocated). */
static PyObject *
buffer_bytes(const growbuf *b)
{
    return PyBytes_FromStringAndSize(b->len ? (const char *)b->data : "", b->len);
}

/* A bitmap's bytes, or None when no item is null (Arrow's "all valid"). */
static PyObject *
bitmap_bytes(const bitmap *m)
{
    return m->nulls ? buffer_bytes(&m->bits) : Py_NewRef(Py_None);
}

/* (validity bytes or None when no item is null, offsets bytes, data bytes, null count) */
static PyObject *
binary_result(const binary_col *c)
{
    PyObject *validity = bitmap_bytes(&c->valid);
    PyObject *offsets = buffer_bytes(&c->offsets);
    PyObject *data = buffer_bytes(&c->data);
    if (validity == NULL || offsets == NULL || data == NULL) {
        Py_XDECREF(validity);
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NNNn)", validity, offsets, data, c->valid.nulls);
}

/*
 * The records decoded so far as columns: int64 offsets; timestamps as Arrow's
 * timestamp("us") (int64 microseconds, what Spark's TimestampType holds, with
 * a validity bitmap: Kafka's "no timestamp", any negative one, is null and
 * stored as 0); int32 timestamp types; keys and values; with headers, an
 * int32 offset per record (one more, from 0) into the header names and
 * values, one entry per header.
 */
typedef struct {
    Py_ssize_t n;
    growbuf offset, timestamp, timestamp_type;
    bitmap timestamp_valid;
    binary_col key, value;
    int with_headers;
    growbuf header_start;
    binary_col header_name, header_value;
} columns;

/* Where a batch started, to go back to when it turns out malformed. */
typedef struct {
    Py_ssize_t n, timestamp_nulls, key_nulls, value_nulls, headers, header_value_nulls;
} columns_mark;

static int
columns_init(columns *c, int with_headers)
{
    memset(c, 0, sizeof(*c));
    c->with_headers = with_headers;
    int32_t zero = 0;
    if (binary_init(&c->key) || binary_init(&c->value)) {
        return FAILED;
    }
    if (with_headers && (put(&c->header_start, &zero, 4) || binary_init(&c->header_name) ||
                         binary_init(&c->header_value))) {
        return FAILED;
    }
    return 0;
}

static void
columns_free(columns *c)
{
    PyMem_Free(c->offset.data);
    PyMem_Free(c->timestamp.data);
    PyMem_Free(c->timestamp_type.data);
    PyMem_Free(c->timestamp_valid.bits.data);
    binary_free(&c->key);
    binary_free(&c->value);
    PyMem_Free(c->header_start.data);
    binary_free(&c->header_name);
    binary_free(&c->header_value);
}

static columns_mark
columns_mark_of(const columns *c)
{
    columns_mark m = {c->n, c->timestamp_valid.nulls, c->key.valid.nulls, c->value.valid.nulls,
                      c->header_name.valid.n, c->header_value.valid.nulls};
    return m;
}

static void
columns_reset(columns *c, const columns_mark *m)
{
    c->n = m->n;
    c->offset.len = m->n * 8;
    c->timestamp.len = m->n * 8;
    c->timestamp_type.len = m->n * 4;
    bitmap_truncate(&c->timestamp_valid, m->n, m->timestamp_nulls);
    binary_truncate(&c->key, m->n, m->key_nulls);
    binary_truncate(&c->value, m->n, m->value_nulls);
    if (c->with_headers) {
        c->header_start.len = (m->n + 1) * 4;
        binary_truncate(&c->header_name, m->headers, 0);
        binary_truncate(&c->header_value, m->headers, m->header_value_nulls);
    }
}

/* The largest timestamp (ms) whose microseconds fit in int64. */
#define MAX_MICROS_MS (INT64_MAX / 1000)

static int
emit_columns(const record_fields *r, const decode_args *a, columns *c)
{
    int rc;
    int valid = r->timestamp >= 0;
    if (r->timestamp > MAX_MICROS_MS) {
        return REFUSE; /* no microseconds for it: the Python path explains */
    }
    int64_t micros = valid ? r->timestamp * 1000 : 0;
    if ((rc = put(&c->offset, &r->offset, 8)) || (rc = put(&c->timestamp, &micros, 8)) ||
        (rc = bitmap_append(&c->timestamp_valid, valid)) ||
        (rc = put(&c->timestamp_type, &a->timestamp_type, 4)) ||
        (rc = binary_append(&c->key, r->key, r->key_len)) ||
        (rc = binary_append(&c->value, r->value, r->value_len))) {
        return rc;
    }
    if (c->with_headers) {
        const unsigned char *p = r->headers;
        for (int32_t h = 0; h < r->header_count; h++) {
            const unsigned char *name, *data;
            int32_t name_len, data_len;
            read_header(&p, r->end, &name, &name_len, &data, &data_len); /* checked */
            if ((rc = binary_append(&c->header_name, name, name_len)) ||
                (rc = binary_append(&c->header_value, data, data_len))) {
                return rc;
            }
        }
        if (c->header_name.valid.n > INT32_MAX) {
            return REFUSE;
        }
        int32_t at = (int32_t)c->header_name.valid.n;
        if ((rc = put(&c->header_start, &at, 4))) {
            return rc;
        }
    }
    c->n++;
    return 0;
}

/*
 * (count, offsets, (timestamps, validity or None, null count), timestamp_types,
 * key, value, headers): the int columns as bytes (native byte order), key and
 * value as binary_result() tuples, headers None or (record starts, names, values).
 */
static PyObject *
columns_result(const columns *c)
{
    PyObject *headers = Py_NewRef(Py_None);
    if (c->with_headers) {
        Py_DECREF(headers);
        headers = Py_BuildValue("(NNN)", buffer_bytes(&c->header_start), binary_result(&c->header_name),
                                binary_result(&c->header_value));
        if (headers == NULL) {
            return NULL;
        }
    }
    PyObject *timestamps =
        Py_BuildValue("(NNn)", buffer_bytes(&c->timestamp), bitmap_bytes(&c->timestamp_valid),
                      c->timestamp_valid.nulls);
    if (timestamps == NULL) {
        Py_DECREF(headers);
        return NULL;
    }
    return Py_BuildValue("(nNNNNNN)", c->n, buffer_bytes(&c->offset), timestamps,
                         buffer_bytes(&c->timestamp_type), binary_result(&c->key),
                         binary_result(&c->value), headers);
}

/*
 * Per-call decoding state: for tuples, the output slots (room for every record
 * of the batch is made before it is decoded; `n` are filled, each a strong
 * reference) and the last timestamp object, which consecutive records usually
 * share (a producer stamps a whole burst with the same millisecond), so one
 * int object serves them all instead of one each; or, for columns, `cols`.
 */
typedef struct {
    PyObject **items;
    Py_ssize_t n;
    int64_t ts_value;
    PyObject *ts_obj; /* strong reference or NULL */
    columns *cols;    /* not NULL: columns instead of tuples */
} decode_state;

static inline Py_ssize_t
decoded(const decode_state *st)
{
    return st->cols ? st->cols->n : st->n;
}

/* The parsed record as a tuple, into the next output slot. */
static int
emit_tuple(const record_fields *r, const decode_args *a, decode_state *st)
{
    if (st->ts_obj == NULL || st->ts_value != r->timestamp) {
        PyObject *ts = PyLong_FromLongLong(r->timestamp);
        if (ts == NULL) {
            return FAILED;
        }
        Py_XSETREF(st->ts_obj, ts);
        st->ts_value = r->timestamp;
    }
    PyObject *key = nullable_bytes(r->key, r->key_len);
    PyObject *value = nullable_bytes(r->value, r->value_len);
    PyObject *headers = headers_tuple(r);
    PyObject *off_obj = PyLong_FromLongLong(r->offset);
    Py_ssize_t npre = PyTuple_GET_SIZE(a->prefix), nsuf = PyTuple_GET_SIZE(a->suffix);
    PyObject *rec = NULL;
    if (key != NULL && value != NULL && headers != NULL && off_obj != NULL) {
        rec = new_tuple_of(a->cls, npre + 5 + nsuf);
    }
    if (rec == NULL) {
        Py_XDECREF(off_obj);
        Py_XDECREF(key);
        Py_XDECREF(value);
        Py_XDECREF(headers);
        return FAILED;
    }
    PyObject **items = ((PyTupleObject *)rec)->ob_item;
    for (Py_ssize_t i = 0; i < npre; i++) {
        items[i] = Py_NewRef(PyTuple_GET_ITEM(a->prefix, i));
    }
    items += npre;
    items[0] = off_obj;
    items[1] = Py_NewRef(st->ts_obj);
    items[2] = key;
    items[3] = value;
    items[4] = headers;
    items += 5;
    for (Py_ssize_t i = 0; i < nsuf; i++) {
        items[i] = Py_NewRef(PyTuple_GET_ITEM(a->suffix, i));
    }
    if (a->untrack) {
        /* Every field is atomic (see the top of the file): no cycle can pass through. */
        PyObject_GC_UnTrack(rec);
    }
    /* Room for every record of the batch was made: this slot is free. */
    st->items[st->n++] = rec;
    return 0;
}

/* Decode one record at *pp (buffer end `end`) into the output, unless skipped. */
static int
decode_one(const unsigned char **pp, const unsigned char *end, const decode_args *a, decode_state *st)
{
    record_fields r;
    int rc = parse_record(pp, end, a, &r);
    if (rc || r.offset < a->min_offset) {
        return rc;
    }
    return st->cols ? emit_columns(&r, a, st->cols) : emit_tuple(&r, a, st);
}

/*
 * Whether `obj` can never take part in a reference cycle, now or later: not a
 * GC object at all (int, str, bytes, None...), or an untracked exact tuple
 * (immutable, so it stays untracked). Untracked dicts do not count: they are
 * tracked again as soon as a container is stored in them.
 */
static int
atomic_object(PyObject *obj)
{
    if (!PyObject_IS_GC(obj)) {
        return 1;
    }
    return PyTuple_CheckExact(obj) && !PyObject_GC_IsTracked(obj);
}

static int
all_atomic(PyObject *tuple)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        if (!atomic_object(PyTuple_GET_ITEM(tuple, i))) {
            return 0;
        }
    }
    return 1;
}

static int as_int64(PyObject *obj, const char *what, int64_t *out);

/*
 * The min_offset argument: None (no limit) or an int. 0 when usable, 1 when
 * it is above every int64 offset (refused: Python filters), -1 on error.
 */
static int
min_offset_arg(PyObject *obj, int64_t *out)
{
    *out = INT64_MIN;
    if (obj == Py_None) {
        return 0;
    }
    int rc = as_int64(obj, "min_offset", out);
    if (rc <= 0) {
        return rc;
    }
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) {
        return -1;
    }
    int negative = PyObject_RichCompareBool(obj, zero, Py_LT);
    Py_DECREF(zero);
    if (negative < 0) {
        return -1;
    }
    *out = INT64_MIN; /* below every int64: no limit */
    return negative ? 0 : 1;
}

static int
as_int64(PyObject *obj, const char *what, int64_t *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        return 1; /* not an error: the caller refuses */
    }
    *out = (int64_t)v;
    return 0;
}

/* Decode the `count` records of [p, end) into `st`, which must then all be used. */
static int
decode_section(const unsigned char *p, const unsigned char *end, int64_t count, const decode_args *a,
               decode_state *st)
{
    int rc = 0;
    int gc_was_enabled = pause_gc();
    for (int64_t i = 0; i < count && !rc; i++) {
        rc = decode_one(&p, end, a, st);
    }
    resume_gc(gc_was_enabled);
    if (!rc && p != end) {
        rc = REFUSE;
    }
    return rc;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, count, base_offset, base_timestamp, log_append, record_type,\n"
"               prefix, suffix, min_offset, /)\n"
"--\n\n"
"Decode the (decompressed) records section of a magic 2 batch.\n\n"
"Each record becomes ``record_type(prefix + (offset, timestamp, key, value, headers)\n"
"+ suffix)``, built without calling the class (``record_type`` is tuple or a\n"
"tuple subclass; other than tuple, only classes adding no storage, such as\n"
"NamedTuples, are filled here and the rest refused); records whose offset\n"
"is below ``min_offset`` (None: no limit) are left out. ``log_append`` (an int\n"
"or None) replaces every timestamp when given.\n\n"
"Returns the list, or None when the data is malformed or beyond what this\n"
"fast path handles: the caller then decodes in Python, which explains the\n"
"error. Raises TypeError for arguments of the wrong type.");

static PyObject *
decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "decode_records takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    decode_args a;
    int64_t count;
    int rc;
    if ((rc = as_int64(args[1], "count", &count)) || (rc = as_int64(args[2], "base_offset", &a.base_offset)) ||
        (rc = as_int64(args[3], "base_timestamp", &a.base_timestamp))) {
        if (rc < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    a.has_log_append = args[4] != Py_None;
    if (a.has_log_append && (rc = as_int64(args[4], "log_append", &a.log_append))) {
        if (rc < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (!PyType_Check(args[5]) || !PyType_IsSubtype((PyTypeObject *)args[5], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be tuple or a tuple subclass");
        return NULL;
    }
    a.cls = (PyTypeObject *)args[5];
    if (!plain_tuple_type(a.cls)) {
        Py_RETURN_NONE; /* instances with a __dict__ or slots: tuple.__new__ in Python */
    }
    if (!PyTuple_CheckExact(args[6]) || !PyTuple_CheckExact(args[7])) {
        PyErr_SetString(PyExc_TypeError, "prefix and suffix must be tuples");
        return NULL;
    }
    a.prefix = args[6];
    a.suffix = args[7];
    a.untrack = all_atomic(a.prefix) && all_atomic(a.suffix);
    if ((rc = min_offset_arg(args[8], &a.min_offset))) {
        if (rc < 0) {
            return NULL;
        }
        Py_RETURN_NONE; /* above every int64 offset: let Python filter */
    }

    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    const unsigned char *end = p + view.len;
    /* Every record takes at least 7 bytes: no list is sized from a lying count. */
    if (count < 0 || count > view.len / 7) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    /* Sized for every record; records below min_offset leave the tail unused. */
    PyObject *out = PyList_New((Py_ssize_t)count);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    decode_state st = {.items = ((PyListObject *)out)->ob_item, .n = 0, .ts_value = 0, .ts_obj = NULL};
    rc = decode_section(p, end, count, &a, &st);
    PyBuffer_Release(&view);
    Py_XDECREF(st.ts_obj);
    if (rc) {
        Py_DECREF(out); /* unfilled slots are NULL, which a list's dealloc skips */
        if (rc == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    /* Drop the unused tail (all NULL); the allocation may stay larger. */
    Py_SET_SIZE(out, st.n);
    return out;
}


PyDoc_STRVAR(decode_records_columns_doc,
"decode_records_columns(data, count, base_offset, base_timestamp, log_append,\n"
"                       timestamp_type, min_offset, headers, /)\n"
"--\n\n"
"Decode the (decompressed) records section of a magic 2 batch into columns.\n\n"
"As decode_records, but the records (those at or above ``min_offset``) become\n"
"column buffers in Arrow's layout: ``(count, offsets, timestamps,\n"
"timestamp_types, key, value, headers)``, int64/int32 bytes in native byte\n"
"order (every record's timestamp type is ``timestamp_type``), timestamps\n"
"``(int64 microseconds, validity or None, null count)`` (a negative\n"
"timestamp is null), key and\n"
"value each ``(validity or None, int32 offsets, data, null count)``, headers\n"
"None unless ``headers`` is true, else ``(int32 record starts, names,\n"
"values)`` with names and values laid out as key and value.\n\n"
"Returns None when the data is malformed or beyond what this fast path\n"
"handles (the caller decodes in Python). Raises TypeError for arguments of the\n"
"wrong type.");

static PyObject *
decode_records_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "decode_records_columns takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    decode_args a = {0};
    int64_t count, timestamp_type;
    int rc;
    if ((rc = as_int64(args[1], "count", &count)) || (rc = as_int64(args[2], "base_offset", &a.base_offset)) ||
        (rc = as_int64(args[3], "base_timestamp", &a.base_timestamp)) ||
        (rc = as_int64(args[5], "timestamp_type", &timestamp_type))) {
        if (rc < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (timestamp_type < INT32_MIN || timestamp_type > INT32_MAX) {
        Py_RETURN_NONE;
    }
    a.timestamp_type = (int32_t)timestamp_type;
    a.has_log_append = args[4] != Py_None;
    if (a.has_log_append && (rc = as_int64(args[4], "log_append", &a.log_append))) {
        if (rc < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if ((rc = min_offset_arg(args[6], &a.min_offset))) {
        if (rc < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    int with_headers = PyObject_IsTrue(args[7]);
    if (with_headers < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    if (count < 0 || count > view.len / 7) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    columns cols;
    decode_state st = {.cols = &cols};
    rc = columns_init(&cols, with_headers) ? FAILED : decode_section(p, p + view.len, count, &a, &st);
    PyBuffer_Release(&view);
    PyObject *out = rc ? NULL : columns_result(&cols);
    columns_free(&cols);
    if (rc == REFUSE) {
        Py_RETURN_NONE;
    }
    return out;
}

/* -- runs of batches ------------------------------------------------------------------------ */

static inline int64_t
be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return (int64_t)v;
}

static inline int32_t
be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* Layout of a magic 2 batch (see codec/records.py). */
#define BATCH_HEADER 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH 49
#define MIN_LEGACY_LENGTH 14

/*
 * The records of a run from `pos`, as far as can be told cheaply (each
 * batch's count, capped by what its bytes can hold, over the magic 2 entries
 * up to the one that reaches max_records), so that the slots for the run are
 * usually allocated once; with `bytes`, the batches' bytes there too.
 */
static Py_ssize_t
records_bound(const unsigned char *data, Py_ssize_t len, Py_ssize_t pos, Py_ssize_t max_records,
              Py_ssize_t *bytes)
{
    Py_ssize_t total = 0, size = 0;
    while (len - pos >= LOG_OVERHEAD && total < max_records) {
        const unsigned char *b = data + pos;
        int32_t length = be32(b + 8);
        if (length < MIN_BATCH_LENGTH || length > len - pos - LOG_OVERHEAD || b[16] != 2) {
            break;
        }
        int32_t count = be32(b + 57);
        Py_ssize_t room = (LOG_OVERHEAD + (Py_ssize_t)length - BATCH_HEADER) / 7;
        total += count < 0 ? 0 : (count < room ? count : room);
        size += (Py_ssize_t)length;
        pos += LOG_OVERHEAD + (Py_ssize_t)length;
    }
    if (bytes != NULL) {
        *bytes = size;
    }
    return total;
}

/* Forget the records from index `keep` on (a batch that turned out malformed). */
static void
drop_from(decode_state *st, Py_ssize_t keep)
{
    while (st->n > keep) {
        st->n--;
        Py_CLEAR(st->items[st->n]);
    }
}

/*
 * Whether the CRC-32C stored in the batch at `batch` (whole, `size` bytes)
 * matches: 1 yes, 0 no, -1 error. `crc` is the crc32c function of
 * trafka.codec.crc (a C function: no Python code runs; it may let other
 * threads run while it checksums a large batch, which cannot change bytes).
 */
static int
crc_matches(PyObject *crc, const unsigned char *batch, Py_ssize_t size)
{
    PyObject *view = PyMemoryView_FromMemory((char *)(batch + 21), size - 21, PyBUF_READ);
    if (view == NULL) {
        return -1;
    }
    PyObject *got = PyObject_CallOneArg(crc, view);
    Py_DECREF(view);
    if (got == NULL) {
        return -1;
    }
    unsigned long long value = PyLong_AsUnsignedLongLong(got);
    Py_DECREF(got);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    uint32_t stored = (uint32_t)be32(batch + 17);
    return value == stored;
}

/*
 * Decode the batch at `b` (`size` bytes, framing already checked) into `st`.
 * 0: decoded (or skipped whole: every record is below min_offset), REFUSE:
 * not a batch this path handles or malformed (nothing added), FAILED.
 */
static int
decode_plain_batch(const unsigned char *b, Py_ssize_t size, decode_args *a, decode_state *st,
                   Py_ssize_t *capacity, PyObject *crc, int stop_transactional, int64_t *next_offset)
{
    int32_t batch_length = be32(b + 8);
    int attributes = (int)(int16_t)(((unsigned)b[21] << 8) | b[22]);
    if (batch_length < MIN_BATCH_LENGTH || (attributes & 0x07) != 0 || (attributes & 0x20) ||
        (stop_transactional && (attributes & 0x10))) {
        return REFUSE; /* malformed, compressed, control, or transactional when asked */
    }
    int64_t base_offset = be64(b);
    int32_t last_offset_delta = be32(b + 23);
    int64_t last;
    if (__builtin_add_overflow(base_offset, (int64_t)last_offset_delta, &last) || last == INT64_MAX) {
        return REFUSE;
    }
    *next_offset = last + 1;
    if (*next_offset <= a->min_offset) {
        return 0; /* entirely below the position: skipped unread, as the Python walk does */
    }
    if (crc != Py_None) {
        int ok = crc_matches(crc, b, size);
        if (ok <= 0) {
            return ok < 0 ? FAILED : REFUSE;
        }
    }
    int32_t count = be32(b + 57);
    const unsigned char *p = b + BATCH_HEADER, *end = b + size;
    if (count < 0 || (int64_t)count * 7 > end - p) {
        return REFUSE;
    }
    if (st->cols == NULL && count > *capacity - st->n) {
        /* The bound counted batches that turned out to be below min_offset. */
        Py_ssize_t want = st->n + count;
        if (want < 2 * *capacity) {
            want = 2 * *capacity;
        }
        PyObject **items = PyMem_Realloc(st->items, sizeof(PyObject *) * (size_t)want);
        if (items == NULL) {
            PyErr_NoMemory();
            return FAILED;
        }
        st->items = items;
        *capacity = want;
    }
    a->base_offset = base_offset;
    a->base_timestamp = be64(b + 27);
    a->has_log_append = (attributes & 0x08) != 0;
    a->log_append = be64(b + 35);
    a->timestamp_type = (attributes >> 3) & 1;
    PyObject *suffix = NULL;
    columns_mark mark = {0};
    if (st->cols != NULL) {
        mark = columns_mark_of(st->cols);
    } else {
        /* This batch's two per-record attributes: timestamp type and leader epoch. */
        suffix = Py_BuildValue("(ii)", (attributes >> 3) & 1, (int)be32(b + 12));
        if (suffix == NULL) {
            return FAILED;
        }
        a->suffix = suffix;
    }
    int rc = 0;
    Py_ssize_t start = st->n;
    for (int32_t i = 0; i < count && !rc; i++) {
        rc = decode_one(&p, end, a, st);
    }
    if (!rc && p != end) {
        rc = REFUSE;
    }
    if (rc) {
        if (st->cols != NULL) {
            columns_reset(st->cols, &mark);
        } else {
            drop_from(st, start);
        }
    }
    a->suffix = NULL;
    Py_XDECREF(suffix);
    return rc;
}

PyDoc_STRVAR(decode_batch_run_doc,
"decode_batch_run(blob, pos, record_type, prefix, min_offset, crc, stop_transactional,\n"
"                 max_records, /)\n"
"--\n\n"
"Decode the run of plain batches of a records blob (bytes) starting at ``pos``.\n\n"
"A plain batch is magic 2, uncompressed and not a control batch (nor\n"
"transactional when ``stop_transactional``). Each of its records becomes\n"
"``record_type(prefix + (offset, timestamp, key, value, headers,\n"
"timestamp_type, partition_leader_epoch))`` (as for decode_records, with the\n"
"batch's timestamp type and leader epoch as the suffix); batches that end at or\n"
"below ``min_offset`` are skipped unread, and records below it left out.\n"
"``crc`` is the crc32c function to verify batches with, or None.\n\n"
"The run also stops after the batch that brings it to ``max_records`` records.\n"
"The run stops at the end of the blob, at a partial or any other entry, and\n"
"at anything malformed or unusual: the caller decodes the entry there the\n"
"ordinary way (which raises the located error). Returns ``(records, pos,\n"
"next_offset)``: the records as a tuple, the position of that entry and the\n"
"next_offset of the run's last batch (None if it has none). Raises TypeError\n"
"for wrong argument types.");

/*
 * The walk over a run of plain batches from *pos (see decode_batch_run), into
 * `st`; *pos ends at the entry that stopped it. Returns 0 or FAILED.
 */
static int
walk_run(const unsigned char *data, Py_ssize_t len, Py_ssize_t *pos, decode_args *a, decode_state *st,
         Py_ssize_t *capacity, PyObject *crc, int stop_transactional, Py_ssize_t max_records,
         int64_t *run_next, int *has_next)
{
    int rc = 0;
    /*
     * No Python code runs below (see the top), and the blob is immutable bytes:
     * other threads that run while a CRC is computed cannot change it either.
     */
    int gc_was_enabled = pause_gc();
    while (len - *pos >= LOG_OVERHEAD && decoded(st) < max_records) {
        const unsigned char *b = data + *pos;
        int32_t length = be32(b + 8);
        if (length < MIN_LEGACY_LENGTH || length > len - *pos - LOG_OVERHEAD || b[16] != 2) {
            break; /* malformed, partial or legacy: the Python walk decides */
        }
        Py_ssize_t size = LOG_OVERHEAD + (Py_ssize_t)length;
        int64_t next_offset;
        rc = decode_plain_batch(b, size, a, st, capacity, crc, stop_transactional, &next_offset);
        if (rc) {
            break;
        }
        if (next_offset > a->min_offset) { /* decoded, not skipped */
            *run_next = next_offset;
            *has_next = 1;
        }
        *pos += size;
    }
    resume_gc(gc_was_enabled);
    return rc == FAILED ? FAILED : 0;
}

/* The arguments both run functions share: blob, pos, crc, stop_transactional, max_records. */
static int
run_args(PyObject *const *args, int blob, int pos, int crc, int stop, int max, Py_ssize_t *pos_out,
         int *stop_out, Py_ssize_t *max_out)
{
    if (!PyBytes_CheckExact(args[blob])) {
        PyErr_SetString(PyExc_TypeError, "blob must be bytes");
        return -1;
    }
    *pos_out = PyLong_AsSsize_t(args[pos]);
    if (*pos_out == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (args[crc] != Py_None && !PyCallable_Check(args[crc])) {
        PyErr_SetString(PyExc_TypeError, "crc must be callable or None");
        return -1;
    }
    *stop_out = PyObject_IsTrue(args[stop]);
    if (*stop_out < 0) {
        return -1;
    }
    *max_out = PyLong_AsSsize_t(args[max]);
    if (*max_out == -1 && PyErr_Occurred()) {
        return -1;
    }
    return 0;
}

static PyObject *
run_result(PyObject *records, Py_ssize_t pos, int has_next, int64_t run_next)
{
    PyObject *next = has_next ? PyLong_FromLongLong(run_next) : Py_NewRef(Py_None);
    if (next == NULL) {
        Py_DECREF(records);
        return NULL;
    }
    return Py_BuildValue("(NnN)", records, pos, next);
}

static PyObject *
decode_batch_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "decode_batch_run takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t pos, max_records;
    int stop_transactional;
    if (run_args(args, 0, 1, 5, 6, 7, &pos, &stop_transactional, &max_records)) {
        return NULL;
    }
    if (!PyType_Check(args[2]) || !PyType_IsSubtype((PyTypeObject *)args[2], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be tuple or a tuple subclass");
        return NULL;
    }
    if (!PyTuple_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "prefix must be a tuple");
        return NULL;
    }
    decode_args a = {.cls = (PyTypeObject *)args[2], .prefix = args[3]};
    int rc = min_offset_arg(args[4], &a.min_offset);
    if (rc < 0) {
        return NULL;
    }
    PyObject *blob = args[0];
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(blob);
    Py_ssize_t len = PyBytes_GET_SIZE(blob);
    int usable = rc == 0 && plain_tuple_type(a.cls) && pos >= 0 && pos <= len;
    /* The suffix (two ints) is atomic: only the prefix decides. */
    a.untrack = all_atomic(a.prefix);

    Py_ssize_t capacity = usable ? records_bound(data, len, pos, max_records, NULL) : 0;
    decode_state st = {.items = PyMem_Malloc(sizeof(PyObject *) * (size_t)(capacity ? capacity : 1)),
                       .n = 0,
                       .ts_value = 0,
                       .ts_obj = NULL};
    if (st.items == NULL) {
        return PyErr_NoMemory();
    }
    int64_t run_next = 0;
    int has_next = 0;
    rc = usable ? walk_run(data, len, &pos, &a, &st, &capacity, args[5], stop_transactional,
                           max_records, &run_next, &has_next)
                : 0;
    Py_XDECREF(st.ts_obj);
    PyObject *records = rc == FAILED ? NULL : PyTuple_New(st.n);
    if (records == NULL) {
        drop_from(&st, 0);
        PyMem_Free(st.items);
        return NULL;
    }
    if (st.n) {
        memcpy(&PyTuple_GET_ITEM(records, 0), st.items, (size_t)st.n * sizeof(PyObject *));
    }
    PyMem_Free(st.items);
    if (a.untrack) {
        /*
         * Immutable and holding only untracked records: never part of a cycle.
         * Untracked now, the collection after the run does not walk every
         * record (CPython would untrack it only after walking it once).
         */
        PyObject_GC_UnTrack(records);
    }
    return run_result(records, pos, has_next, run_next);
}

/*
 * Room for the run from `pos` (as records_bound() sees it, over the bytes of
 * its batches), made at once: the columns of a large run then grow by no
 * doubling and copying (250,000 records of 100 bytes, in runs of 50,000:
 * 26 ms against 30). The value bytes get the run's bytes, the most they can
 * be; keys, usually short, grow as they come. The bound comes from bytes received, never from a
 * count alone: a record takes at least 7 of them, and its key and value are
 * within its batch's bytes.
 */
static int
columns_reserve(columns *c, const unsigned char *data, Py_ssize_t len, Py_ssize_t pos,
                Py_ssize_t max_records)
{
    Py_ssize_t bytes;
    Py_ssize_t records = records_bound(data, len, pos, max_records, &bytes);
    if (records == 0) {
        return 0;
    }
    if (reserve(&c->offset, records * 8) || reserve(&c->timestamp, records * 8) ||
        reserve(&c->timestamp_type, records * 4) || reserve(&c->key.offsets, records * 4) ||
        reserve(&c->value.offsets, records * 4) || reserve(&c->value.data, bytes)) {
        return FAILED;
    }
    return 0;
}

PyDoc_STRVAR(decode_batch_run_columns_doc,
"decode_batch_run_columns(blob, pos, min_offset, crc, stop_transactional, max_records,\n"
"                         headers, /)\n"
"--\n\n"
"decode_batch_run, into columns: the run's records (each with its batch's\n"
"timestamp type) as decode_records_columns lays them out. Returns ``(columns,\n"
"pos, next_offset)``; the columns hold no record when the run is empty.");

static PyObject *
decode_batch_run_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "decode_batch_run_columns takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t pos, max_records;
    int stop_transactional;
    if (run_args(args, 0, 1, 3, 4, 5, &pos, &stop_transactional, &max_records)) {
        return NULL;
    }
    int with_headers = PyObject_IsTrue(args[6]);
    if (with_headers < 0) {
        return NULL;
    }
    decode_args a = {0};
    int rc = min_offset_arg(args[2], &a.min_offset);
    if (rc < 0) {
        return NULL;
    }
    PyObject *blob = args[0];
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(blob);
    Py_ssize_t len = PyBytes_GET_SIZE(blob);
    int usable = rc == 0 && pos >= 0 && pos <= len;
    columns cols;
    decode_state st = {.cols = &cols};
    Py_ssize_t capacity = 0;
    int64_t run_next = 0;
    int has_next = 0;
    rc = columns_init(&cols, with_headers);
    if (!rc && usable) {
        rc = columns_reserve(&cols, data, len, pos, max_records);
    }
    if (!rc && usable) {
        rc = walk_run(data, len, &pos, &a, &st, &capacity, args[3], stop_transactional, max_records,
                      &run_next, &has_next);
    }
    PyObject *out = rc ? NULL : columns_result(&cols);
    columns_free(&cols);
    if (out == NULL) {
        return NULL;
    }
    return run_result(out, pos, has_next, run_next);
}

/* -- encoding ------------------------------------------------------------------------------ */

/* A nullable bytes argument: exactly bytes, bytearray or None (else refused). */
static inline int
bytes_of(PyObject *obj, const char **data, Py_ssize_t *size)
{
    if (obj == Py_None) {
        *data = NULL;
        *size = -1;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        *data = PyBytes_AS_STRING(obj);
        *size = PyBytes_GET_SIZE(obj);
    } else if (PyByteArray_CheckExact(obj)) {
        *data = PyByteArray_AS_STRING(obj);
        *size = PyByteArray_GET_SIZE(obj);
    } else {
        return REFUSE;
    }
    return *size > INT32_MAX ? REFUSE : 0;
}

static inline Py_ssize_t
nullable_size(Py_ssize_t n)
{
    return n < 0 ? 1 : uvarint_size(zigzag(n)) + n;
}

static inline unsigned char *
write_nullable(unsigned char *p, const char *data, Py_ssize_t n)
{
    if (n < 0) {
        *p++ = 0x01; /* zig-zag -1: null */
        return p;
    }
    p = write_uvarint(p, zigzag(n));
    if (n) {
        memcpy(p, data, (size_t)n);
    }
    return p + n;
}

/* The headers argument as a borrowed item array; None counts as no headers. */
static inline int
headers_of(PyObject *headers, PyObject *const **items, Py_ssize_t *count)
{
    if (headers == Py_None) {
        *count = 0;
        return 0;
    }
    if (PyTuple_CheckExact(headers)) {
        *items = &PyTuple_GET_ITEM(headers, 0);
        *count = PyTuple_GET_SIZE(headers);
    } else if (PyList_CheckExact(headers)) {
        *items = ((PyListObject *)headers)->ob_item;
        *count = PyList_GET_SIZE(headers);
    } else {
        return REFUSE;
    }
    return *count > INT32_MAX ? REFUSE : 0;
}

static inline int
header_pair(PyObject *pair, PyObject **name, PyObject **value)
{
    if (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2) {
        *name = PyTuple_GET_ITEM(pair, 0);
        *value = PyTuple_GET_ITEM(pair, 1);
    } else if (PyList_CheckExact(pair) && PyList_GET_SIZE(pair) == 2) {
        *name = PyList_GET_ITEM(pair, 0);
        *value = PyList_GET_ITEM(pair, 1);
    } else {
        return REFUSE;
    }
    return PyUnicode_CheckExact(*name) ? 0 : REFUSE;
}

typedef struct {
    int64_t ts_delta;
    int32_t offset_delta;
    const char *key, *value;
    Py_ssize_t key_size, value_size; /* -1: null */
    PyObject *headers;
    Py_ssize_t body; /* bytes after the length varint */
} record_plan;

/* Check one record's fields and compute its size; REFUSE for anything unusual. */
static int
plan_fields(record_plan *r, PyObject *key, PyObject *value, PyObject *headers)
{
    if (bytes_of(key, &r->key, &r->key_size) || bytes_of(value, &r->value, &r->value_size)) {
        return REFUSE;
    }
    PyObject *const *items = NULL;
    Py_ssize_t count;
    if (headers_of(headers, &items, &count)) {
        return REFUSE;
    }
    r->headers = headers;
    int64_t size = 1 + uvarint_size(zigzag(r->ts_delta)) + uvarint_size(zigzag(r->offset_delta)) +
                   nullable_size(r->key_size) + nullable_size(r->value_size) + uvarint_size(zigzag(count));
    for (Py_ssize_t h = 0; h < count; h++) {
        PyObject *name, *hvalue;
        if (header_pair(items[h], &name, &hvalue)) {
            return REFUSE;
        }
        Py_ssize_t name_size;
        const char *name_data = PyUnicode_AsUTF8AndSize(name, &name_size);
        if (name_data == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                PyErr_Clear();
                return REFUSE; /* lone surrogates: Python's encoder explains */
            }
            return FAILED;
        }
        const char *vdata;
        Py_ssize_t vsize;
        if (name_size > INT32_MAX || bytes_of(hvalue, &vdata, &vsize)) {
            return REFUSE;
        }
        size += uvarint_size(zigzag(name_size)) + name_size + nullable_size(vsize);
        if (size > INT32_MAX) {
            return REFUSE;
        }
    }
    if (size > INT32_MAX) {
        return REFUSE;
    }
    r->body = (Py_ssize_t)size;
    return 0;
}

/* Write a planned record (length varint first); `limit` guards against a changed plan. */
static unsigned char *
write_record(unsigned char *p, const unsigned char *limit, const record_plan *r)
{
    if (uvarint_size(zigzag(r->body)) + r->body > limit - p) {
        return NULL;
    }
    unsigned char *start;
    p = write_uvarint(p, zigzag(r->body));
    start = p;
    *p++ = 0x00; /* attributes */
    p = write_uvarint(p, zigzag(r->ts_delta));
    p = write_uvarint(p, zigzag(r->offset_delta));
    p = write_nullable(p, r->key, r->key_size);
    p = write_nullable(p, r->value, r->value_size);
    PyObject *const *items = NULL;
    Py_ssize_t count;
    if (headers_of(r->headers, &items, &count)) {
        return NULL;
    }
    p = write_uvarint(p, zigzag(count));
    for (Py_ssize_t h = 0; h < count; h++) {
        PyObject *name, *hvalue;
        Py_ssize_t name_size, vsize;
        const char *vdata;
        if (header_pair(items[h], &name, &hvalue)) {
            return NULL;
        }
        /* Cached by the planning pass: cannot fail now. */
        const char *name_data = PyUnicode_AsUTF8AndSize(name, &name_size);
        if (name_data == NULL || bytes_of(hvalue, &vdata, &vsize)) {
            PyErr_Clear();
            return NULL;
        }
        if (p - start + uvarint_size(zigzag(name_size)) + name_size + nullable_size(vsize) > r->body) {
            return NULL;
        }
        p = write_nullable(p, name_data, name_size);
        p = write_nullable(p, vdata, vsize);
    }
    return p - start == r->body ? p : NULL;
}

static int
int64_arg(PyObject *obj, int64_t *out)
{
    if (!PyLong_CheckExact(obj)) {
        return REFUSE;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return FAILED;
    }
    if (overflow) {
        return REFUSE;
    }
    *out = (int64_t)v;
    return 0;
}

PyDoc_STRVAR(encode_record_doc,
"encode_record(offset_delta, timestamp_delta, key, value, headers, /)\n"
"--\n\n"
"One record of a magic 2 batch, its length varint included.\n\n"
"Returns bytes, or None for anything this fast path does not handle (the\n"
"caller then encodes in Python, which raises the located EncodeError).");

static PyObject *
encode_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "encode_record takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    record_plan r;
    int64_t od;
    int rc = int64_arg(args[0], &od);
    if (!rc) {
        rc = int64_arg(args[1], &r.ts_delta);
    }
    if (!rc && (od < 0 || od > INT32_MAX)) {
        rc = REFUSE;
    }
    if (!rc) {
        r.offset_delta = (int32_t)od;
        rc = plan_fields(&r, args[2], args[3], args[4]);
    }
    if (rc) {
        if (rc == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Py_ssize_t size = uvarint_size(zigzag(r.body)) + r.body;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    if (write_record(p, p + size, &r) != p + size) {
        Py_DECREF(out);
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return out;
}

/* Unpack records[i] = (timestamp, key, value, headers) into a plan. */
static int
plan_item(PyObject *item, int64_t base_ts, Py_ssize_t i, record_plan *r, int64_t *ts)
{
    PyObject *const *f;
    if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 4) {
        f = &PyTuple_GET_ITEM(item, 0);
    } else if (PyList_CheckExact(item) && PyList_GET_SIZE(item) == 4) {
        f = ((PyListObject *)item)->ob_item;
    } else {
        return REFUSE;
    }
    int rc = int64_arg(f[0], ts);
    if (rc) {
        return rc;
    }
    if (__builtin_sub_overflow(*ts, base_ts, &r->ts_delta)) {
        return REFUSE;
    }
    r->offset_delta = (int32_t)i;
    return plan_fields(r, f[1], f[2], f[3]);
}

/*
 * The records section of a batch, written after `headroom` bytes left for the
 * caller (uninitialized), in one allocation. Returns 0 (with *out, *max_ts,
 * *count set), REFUSE or FAILED.
 */
static int
encode_payload(PyObject *records, int64_t base_ts, Py_ssize_t headroom, PyObject **out,
               int64_t *max_ts_out, Py_ssize_t *count_out)
{
    if (!PyList_CheckExact(records) && !PyTuple_CheckExact(records)) {
        return REFUSE;
    }
    /* Borrowed: no Python code runs below, so the sequence cannot change. */
    PyObject *const *items = PyList_CheckExact(records) ? ((PyListObject *)records)->ob_item
                                                        : &PyTuple_GET_ITEM(records, 0);
    Py_ssize_t count = Py_SIZE(records);
    if (count == 0 || count > INT32_MAX) {
        return REFUSE;
    }
    /* Pass 1: validate and size everything, so the output is allocated once. */
    int64_t total = 0, max_ts = 0, ts;
    record_plan r;
    int rc;
    for (Py_ssize_t i = 0; i < count; i++) {
        if ((rc = plan_item(items[i], base_ts, i, &r, &ts))) {
            return rc;
        }
        if (i == 0 || ts > max_ts) {
            max_ts = ts;
        }
        total += uvarint_size(zigzag(r.body)) + r.body;
        if (total > PY_SSIZE_T_MAX / 2) {
            return REFUSE;
        }
    }
    PyObject *payload = PyBytes_FromStringAndSize(NULL, headroom + (Py_ssize_t)total);
    if (payload == NULL) {
        return FAILED;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(payload) + headroom;
    const unsigned char *limit = p + total;
    /* Pass 2: the same plans again (cheap), written. */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (plan_item(items[i], base_ts, i, &r, &ts) || (p = write_record(p, limit, &r)) == NULL) {
            Py_DECREF(payload);
            return PyErr_Occurred() ? FAILED : REFUSE;
        }
    }
    if (p != limit) {
        Py_DECREF(payload);
        return REFUSE;
    }
    *out = payload;
    *max_ts_out = max_ts;
    *count_out = count;
    return 0;
}

/* (bytes, max_timestamp) as a new tuple; steals `data`. */
static PyObject *
with_max_ts(PyObject *data, int64_t max_ts)
{
    PyObject *mx = PyLong_FromLongLong(max_ts);
    if (mx == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(data);
        Py_DECREF(mx);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, data);
    PyTuple_SET_ITEM(result, 1, mx);
    return result;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(records, base_timestamp, /)\n"
"--\n\n"
"The records section of a magic 2 batch from ``(timestamp, key, value, headers)``\n"
"items (a list or tuple), offset deltas 0, 1, 2...\n\n"
"Returns ``(payload, max_timestamp)``, or None for anything this fast path does\n"
"not handle (the caller then encodes in Python).");

static PyObject *
encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "encode_records takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int64_t base_ts, max_ts;
    Py_ssize_t count;
    PyObject *payload;
    int rc = int64_arg(args[1], &base_ts);
    if (!rc) {
        rc = encode_payload(args[0], base_ts, 0, &payload, &max_ts, &count);
    }
    if (rc) {
        if (rc == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return with_max_ts(payload, max_ts);
}

static inline unsigned char *
put_be(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
    return p + bytes;
}

/* The header of a magic 2 batch written in place into ``batch`` (``size`` bytes,
 * its records already after the header), ``count`` records, with ``fields``:
 * base offset, partition leader epoch, attributes, first timestamp, max
 * timestamp, producer id, producer epoch, base sequence; its CRC-32C by
 * ``crc32c`` (a callable of a buffer). 0, REFUSE (a checksum out of range) or
 * FAILED. The checksum reads a view of the object (which keeps it alive)
 * before any other code can see it; the bytes it covers are final then. */
static int
seal_batch(PyObject *batch, Py_ssize_t size, Py_ssize_t count, const int64_t fields[8],
           PyObject *crc32c)
{
    unsigned char *b = (unsigned char *)PyBytes_AS_STRING(batch);
    /* What the CRC covers: attributes .. records_count, then the records. */
    unsigned char *p = b + 21;
    p = put_be(p, (uint64_t)fields[2], 2);
    p = put_be(p, (uint64_t)(count - 1), 4);
    p = put_be(p, (uint64_t)fields[3], 8);
    p = put_be(p, (uint64_t)fields[4], 8);
    p = put_be(p, (uint64_t)fields[5], 8);
    p = put_be(p, (uint64_t)fields[6], 2);
    p = put_be(p, (uint64_t)fields[7], 4);
    put_be(p, (uint64_t)count, 4);
    PyObject *whole = PyMemoryView_FromObject(batch);
    PyObject *view = whole == NULL ? NULL : PySequence_GetSlice(whole, 21, size);
    Py_XDECREF(whole);
    PyObject *crc = view == NULL ? NULL : PyObject_CallOneArg(crc32c, view);
    Py_XDECREF(view);
    int64_t c = -1;
    int rc = crc == NULL ? FAILED : int64_arg(crc, &c);
    Py_XDECREF(crc);
    if (rc || c < 0 || c > 0xFFFFFFFFll) {
        return rc ? rc : REFUSE;
    }
    p = put_be(b, (uint64_t)fields[0], 8);
    p = put_be(p, (uint64_t)(size - LOG_OVERHEAD), 4);
    p = put_be(p, (uint64_t)fields[1], 4);
    *p++ = 2; /* magic */
    put_be(p, (uint64_t)c, 4);
    return 0;
}

PyDoc_STRVAR(encode_batch_doc,
"encode_batch(records, base_timestamp, base_offset, partition_leader_epoch,\n"
"             attributes, producer_id, producer_epoch, base_sequence, crc32c, /)\n"
"--\n\n"
"A whole uncompressed magic 2 batch, header and records in one allocation (no\n"
"copy of the records section to put the header before it). ``crc32c(view)``\n"
"computes the checksum over the batch from its attributes on.\n\n"
"Returns ``(batch, max_timestamp)``, or None for anything this fast path does\n"
"not handle, a header field out of its range included (the caller then encodes\n"
"in Python).");

static PyObject *
encode_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "encode_batch takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    /* base_timestamp, base_offset, partition_leader_epoch, attributes, producer_id,
     * producer_epoch, base_sequence */
    int64_t v[7];
    for (int i = 0; i < 7; i++) {
        int rc = int64_arg(args[i + 1], &v[i]);
        if (rc) {
            if (rc == FAILED) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
    }
    if (v[2] < INT32_MIN || v[2] > INT32_MAX || v[3] < 0 || v[3] > INT16_MAX ||
        v[5] < INT16_MIN || v[5] > INT16_MAX || v[6] < INT32_MIN || v[6] > INT32_MAX) {
        Py_RETURN_NONE;
    }
    PyObject *batch;
    int64_t max_ts;
    Py_ssize_t count;
    int rc = encode_payload(args[0], v[0], BATCH_HEADER, &batch, &max_ts, &count);
    if (rc) {
        if (rc == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(batch);
    if (size - LOG_OVERHEAD > INT32_MAX) {
        Py_DECREF(batch);
        Py_RETURN_NONE;
    }
    const int64_t fields[] = {v[1], v[2], v[3], v[0], max_ts, v[4], v[5], v[6]};
    rc = seal_batch(batch, size, count, fields, args[8]);
    if (rc) {
        Py_DECREF(batch);
        if (rc == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return with_max_ts(batch, max_ts);
}

/* -- murmur2 (the Java client's key hash) ------------------------------------------------ */

PyDoc_STRVAR(murmur2_doc,
"murmur2(data, /) -> int\n\n"
"Java's Utils.murmur2 of a bytes-like object, as a signed 32-bit int.");

static PyObject *
murmur2(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t h = murmur2_hash((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

/* -- splitting a batch by key (the proxy's key routing) ------------------------------------ */

/*
 * The proxy moves each keyed record of a client's batch to the partition its key
 * hashes to. Two passes, no Python object per record:
 *
 * - index_records() walks a decompressed records section once (parse_record: the
 *   checks of the decoder), hashes each key and lists, per target partition in the
 *   order first seen, a span per record: its absolute timestamp and where its key,
 *   value and headers lie. A record whose key/value/header varints are not in
 *   their shortest form is refused: the spans are copied as they are, and only
 *   shortest forms give the bytes the Python encoder writes.
 * - build_records() writes the records of some spans (of one or more sections) as
 *   one new records section: each record's length, attributes (0), timestamp delta
 *   (from the first record's timestamp) and offset delta (0, 1, 2...) written
 *   afresh, the rest copied. It also gives the base and max timestamps, as
 *   codec/records.py's encoder computes them.
 * - place_sections() runs index_records() over the batches of one topic of a
 *   Produce request and groups their pieces (a batch's records bound for one
 *   target) by target partition as the proxy's plain plan does, so that the
 *   proxy runs no Python code per piece (a request of 12 batches spread over 12
 *   partitions has 144).
 *
 * The batch header, the CRC and any (de)compression stay in Python
 * (trafka/codec/batch_split.py), which also keeps the pure-Python reference.
 */

typedef struct {
    int64_t timestamp;
    uint32_t start; /* the key's length varint */
    uint32_t length; /* through the record's end */
} record_span;

/* Whether the key, value and headers of a parsed record take exactly their shortest form. */
static int
shortest_form(const record_fields *r, const unsigned char *rest)
{
    Py_ssize_t size = nullable_size(r->key == NULL ? -1 : r->key_len) +
                      nullable_size(r->value == NULL ? -1 : r->value_len) +
                      uvarint_size(zigzag(r->header_count));
    const unsigned char *p = r->headers;
    for (int32_t h = 0; h < r->header_count; h++) {
        const unsigned char *name = NULL, *value = NULL;
        int32_t name_len = 0, value_len = 0;
        read_header(&p, r->end, &name, &name_len, &value, &value_len); /* checked by parse_record */
        size += uvarint_size(zigzag(name_len)) + name_len + nullable_size(value == NULL ? -1 : value_len);
    }
    return size == r->end - rest;
}

PyDoc_STRVAR(index_records_doc,
"index_records(data, count, base_timestamp, log_append, partitions, hash, own, /) -> tuple | None\n\n"
"Group the `count` records of a decompressed records section by target partition:\n"
"a keyed record's is hash(key) % partitions (hash 0 murmur2, 1 crc32, 2 fnv1a, as\n"
"trafka.sdk.partitioners.KEY_HASHES), a record without a key stays in `own`.\n"
"Returns ((target, spans), ...) in the order targets are first seen, `spans` the\n"
"records' spans for build_records(); None when the Python decoder must judge the\n"
"section (anything malformed or unusual). `log_append`: None, or the timestamp of\n"
"every record (a log-append-time batch's max timestamp).");

static PyObject *
index_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "index_records() takes 7 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_ts = PyLong_AsLongLong(args[2]);
    long long log_append = args[3] == Py_None ? 0 : PyLong_AsLongLong(args[3]);
    long long partitions = PyLong_AsLongLong(args[4]);
    long hash = PyLong_AsLong(args[5]);
    long long own = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            Py_RETURN_NONE; /* beyond int64: Python's ints decide */
        }
        return NULL;
    }
    if (partitions <= 0 || hash < 0 || hash > 2 || own < 0) {
        PyErr_SetString(PyExc_ValueError, "index_records(): bad partitions, hash or own partition");
        return NULL;
    }
    if (partitions > (1 << 20)) {
        Py_RETURN_NONE; /* a table per call that large: the Python path decides */
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    int32_t *slot = NULL;
    int32_t *target_of = NULL;
    record_span *spans = NULL;
    int64_t *order = NULL;
    Py_ssize_t *counts = NULL;
    /* Every record takes at least 7 bytes: nothing is sized from a count the data cannot hold. */
    if (count < 0 || count > view.len / 7 || view.len > (Py_ssize_t)UINT32_MAX) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    slot = PyMem_Malloc((size_t)partitions * sizeof(int32_t));
    target_of = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(int32_t));
    spans = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(record_span));
    order = PyMem_Malloc((size_t)(count < partitions ? count + 1 : partitions + 1) * sizeof(int64_t));
    counts = PyMem_Calloc((size_t)(count < partitions ? count + 1 : partitions + 1), sizeof(Py_ssize_t));
    if (slot == NULL || target_of == NULL || spans == NULL || order == NULL || counts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(slot, 0xFF, (size_t)partitions * sizeof(int32_t)); /* -1: not seen */
    decode_args a = {0};
    a.base_timestamp = base_ts;
    a.has_log_append = args[3] != Py_None;
    a.log_append = log_append;
    a.min_offset = INT64_MIN;
    const unsigned char *start = (const unsigned char *)view.buf;
    const unsigned char *p = start, *end = start + view.len;
    int32_t targets = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* Where the key begins: past the length, attributes and the two deltas. */
        const unsigned char *rest = p;
        int32_t skip32;
        int64_t skip64;
        if (read_varint32(&rest, end, &skip32) || rest >= end) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        rest++;
        if (read_varint64(&rest, end, &skip64) || read_varint32(&rest, end, &skip32)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        record_fields r;
        int rc = parse_record(&p, end, &a, &r);
        if (rc == FAILED) {
            goto done;
        }
        if (rc || rest > r.end || !shortest_form(&r, rest)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        int64_t target = r.key == NULL ? own : key_partition((int)hash, r.key, r.key_len, partitions);
        if (target >= partitions) { /* only `own` can be: a partition beyond the count */
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (slot[target] < 0) {
            slot[target] = targets;
            order[targets++] = target;
        }
        target_of[i] = slot[target];
        counts[slot[target]]++;
        spans[i].timestamp = r.timestamp;
        spans[i].start = (uint32_t)(rest - start);
        spans[i].length = (uint32_t)(r.end - rest);
    }
    if (p != end) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *out = PyTuple_New(targets);
    if (out == NULL) {
        goto done;
    }
    char **fill = PyMem_Malloc((size_t)(targets ? targets : 1) * sizeof(char *));
    if (fill == NULL) {
        Py_DECREF(out);
        PyErr_NoMemory();
        goto done;
    }
    for (int32_t t = 0; t < targets; t++) {
        PyObject *blob = PyBytes_FromStringAndSize(NULL, counts[t] * (Py_ssize_t)sizeof(record_span));
        PyObject *pair = blob == NULL ? NULL : Py_BuildValue("(LN)", (long long)order[t], blob);
        if (pair == NULL) {
            PyMem_Free(fill);
            Py_DECREF(out);
            goto done;
        }
        fill[t] = PyBytes_AS_STRING(blob);
        PyTuple_SET_ITEM(out, t, pair);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        memcpy(fill[target_of[i]], &spans[i], sizeof(record_span));
        fill[target_of[i]] += sizeof(record_span);
    }
    PyMem_Free(fill);
    result = out;
done:
    PyMem_Free(slot);
    PyMem_Free(target_of);
    PyMem_Free(spans);
    PyMem_Free(order);
    PyMem_Free(counts);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(build_records_doc,
"build_records(pieces, /) -> (payload, count, base_timestamp, max_timestamp) | None\n\n"
"One records section of the spans of `pieces`, a list of (data, spans) pairs\n"
"(`spans` from index_records() over that `data`), in order: offset deltas 0, 1,\n"
"2..., timestamps relative to the first record's, byte for byte what\n"
"trafka.codec.records.encode_batch writes for the same records. None when a\n"
"value does not fit (the Python encoder then decides).");

/* The buffers of a list of (data, spans) pairs, two per pair, every span
 * checked against its data: 0, or FAILED (an exception set; none held then). */
static int
pieces_open(PyObject *pieces, const char *who, Py_buffer **out, Py_ssize_t *pairs)
{
    if (!PyList_Check(pieces) || PyList_GET_SIZE(pieces) == 0) {
        PyErr_Format(PyExc_TypeError, "%s takes a non-empty list of (data, spans)", who);
        return FAILED;
    }
    Py_ssize_t n = PyList_GET_SIZE(pieces);
    Py_buffer *views = PyMem_Calloc((size_t)n * 2, sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    Py_ssize_t held = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(pieces, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "%s takes a non-empty list of (data, spans)", who);
            goto fail;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(pair, 0), &views[2 * i], PyBUF_SIMPLE) < 0) {
            goto fail;
        }
        held++;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(pair, 1), &views[2 * i + 1], PyBUF_SIMPLE) < 0) {
            goto fail;
        }
        held++;
        if (views[2 * i + 1].len % (Py_ssize_t)sizeof(record_span)) {
            PyErr_Format(PyExc_ValueError, "%s: spans of a wrong size", who);
            goto fail;
        }
        const record_span *sp = (const record_span *)views[2 * i + 1].buf;
        Py_ssize_t k = views[2 * i + 1].len / (Py_ssize_t)sizeof(record_span);
        for (Py_ssize_t j = 0; j < k; j++) {
            record_span s;
            memcpy(&s, &sp[j], sizeof s);
            if ((Py_ssize_t)s.start + (Py_ssize_t)s.length > views[2 * i].len) {
                PyErr_Format(PyExc_ValueError, "%s: a span beyond its data", who);
                goto fail;
            }
        }
    }
    *out = views;
    *pairs = n;
    return 0;
fail:
    for (Py_ssize_t i = 0; i < held; i++) {
        PyBuffer_Release(&views[i]);
    }
    PyMem_Free(views);
    return FAILED;
}

static void
pieces_close(Py_buffer *views, Py_ssize_t pairs)
{
    for (Py_ssize_t i = 0; i < 2 * pairs; i++) {
        PyBuffer_Release(&views[i]);
    }
    PyMem_Free(views);
}

/* The records section of the pieces' spans: its size, record count, base and
 * max timestamps. 0, or REFUSE (a value does not fit; the Python encoder decides). */
static int
pieces_measure(const Py_buffer *views, Py_ssize_t pairs, Py_ssize_t *total_out,
               Py_ssize_t *records_out, int64_t *base_out, int64_t *max_out)
{
    int64_t base = 0, max_ts = 0;
    Py_ssize_t total = 0, records = 0;
    for (Py_ssize_t i = 0; i < pairs; i++) {
        const record_span *sp = (const record_span *)views[2 * i + 1].buf;
        Py_ssize_t k = views[2 * i + 1].len / (Py_ssize_t)sizeof(record_span);
        for (Py_ssize_t j = 0; j < k; j++, records++) {
            record_span s;
            memcpy(&s, &sp[j], sizeof s);
            if (records == 0) {
                base = max_ts = s.timestamp;
            } else if (s.timestamp > max_ts) {
                max_ts = s.timestamp;
            }
            int64_t delta;
            if (__builtin_sub_overflow(s.timestamp, base, &delta) || records >= INT32_MAX) {
                return REFUSE;
            }
            Py_ssize_t body = 1 + uvarint_size(zigzag(delta)) + uvarint_size(zigzag(records)) + s.length;
            if (body > INT32_MAX || total > PY_SSIZE_T_MAX / 2 - 1024 - body) {
                return REFUSE;
            }
            total += uvarint_size(zigzag(body)) + body;
        }
    }
    if (records == 0) {
        return REFUSE;
    }
    *total_out = total;
    *records_out = records;
    *base_out = base;
    *max_out = max_ts;
    return 0;
}

/* Writes the records section pieces_measure() measured into `w`. */
static void
pieces_write(const Py_buffer *views, Py_ssize_t pairs, int64_t base, unsigned char *w)
{
    Py_ssize_t index = 0;
    for (Py_ssize_t i = 0; i < pairs; i++) {
        const unsigned char *data = (const unsigned char *)views[2 * i].buf;
        const record_span *sp = (const record_span *)views[2 * i + 1].buf;
        Py_ssize_t k = views[2 * i + 1].len / (Py_ssize_t)sizeof(record_span);
        for (Py_ssize_t j = 0; j < k; j++, index++) {
            record_span s;
            memcpy(&s, &sp[j], sizeof s);
            uint64_t delta = zigzag(s.timestamp - base);
            uint64_t offset = zigzag(index);
            Py_ssize_t body = 1 + uvarint_size(delta) + uvarint_size(offset) + s.length;
            w = write_uvarint(w, zigzag(body));
            *w++ = 0;
            w = write_uvarint(w, delta);
            w = write_uvarint(w, offset);
            memcpy(w, data + s.start, s.length);
            w += s.length;
        }
    }
}

static PyObject *
build_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "build_records() takes a non-empty list of (data, spans)");
        return NULL;
    }
    Py_buffer *views;
    Py_ssize_t pairs;
    if (pieces_open(args[0], "build_records()", &views, &pairs)) {
        return NULL;
    }
    int64_t base, max_ts;
    Py_ssize_t total, records;
    PyObject *result = NULL;
    if (pieces_measure(views, pairs, &total, &records, &base, &max_ts)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *payload = PyBytes_FromStringAndSize(NULL, total);
    if (payload == NULL) {
        goto done;
    }
    pieces_write(views, pairs, base, (unsigned char *)PyBytes_AS_STRING(payload));
    result = Py_BuildValue("(NnLL)", payload, records, (long long)base, (long long)max_ts);
done:
    pieces_close(views, pairs);
    return result;
}

PyDoc_STRVAR(place_sections_doc,
"place_sections(batches, partitions, hash, known, /) -> (order, slots, placed) | None\n\n"
"index_records() over the batches of one topic of a Produce request, and their\n"
"pieces grouped by target partition, as the proxy's plain plan places them.\n"
"`batches`: a list of (data, count, base_timestamp, log_append, own, size, whole,\n"
"owner, header), the first five as index_records() takes them, `size` the batch's\n"
"bytes on the wire, `whole` its bytes, `owner` and `header` passed through.\n"
"`known`: bytes, one per partition, non-zero where the target's leader is known.\n"
"Returns the targets in the order first seen; per partition None or (own, moved),\n"
"two lists of pieces (owner, estimated size, whole or None, (data, spans),\n"
"header), a batch whose records all stay being one piece with its `whole`\n"
"bytes and size; and per batch (records moved, records kept, whether it was\n"
"split). None when index_records() declines a batch or a split batch has a\n"
"target whose leader is not known.\n\n"
"With `crc32c` and `max_size` given, a batch's `data` may be None: its section is\n"
"then read here from `whole`, an lz4 batch of `size` bytes (its CRC checked with\n"
"`crc32c(view)`, its frame read as lz4_unframe() reads it); None when that\n"
"fails (the caller then reads the section in Python).");

typedef int (*lz4_decompress_fn)(const char *, char *, int, int);
static lz4_decompress_fn lz4_library(void);
static PyObject *lz4_content(const unsigned char *data, Py_ssize_t end, Py_ssize_t max_size);

/* The records section of the lz4 batch `whole` of `size` bytes (a new
 * reference), None (new reference: declined) or NULL (an exception set). */
static PyObject *
lz4_section(PyObject *whole, long long size, PyObject *crc32c, Py_ssize_t max_size)
{
    Py_buffer view;
    if (PyObject_GetBuffer(whole, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *b = view.buf;
    PyObject *out = NULL;
    if (size < BATCH_HEADER || view.len < size || (b[22] & 0x07) != 3 || lz4_library() == NULL) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *all = PyMemoryView_FromObject(whole);
    PyObject *covered = all == NULL ? NULL : PySequence_GetSlice(all, 21, (Py_ssize_t)size);
    Py_XDECREF(all);
    PyObject *crc = covered == NULL ? NULL : PyObject_CallOneArg(crc32c, covered);
    Py_XDECREF(covered);
    if (crc == NULL) {
        goto done;
    }
    int64_t c = -1;
    int rc = int64_arg(crc, &c);
    Py_DECREF(crc);
    if (rc == FAILED) {
        goto done;
    }
    if (rc || c != (int64_t)(uint32_t)be32(b + 17)) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    out = lz4_content(b + BATCH_HEADER, (Py_ssize_t)size - BATCH_HEADER, max_size);
done:
    PyBuffer_Release(&view);
    return out;
}

/* slots[target], made (and its target noted in `order`) at its first use. */
static PyObject *
placed_slot(PyObject *slots, PyObject *order, Py_ssize_t target)
{
    PyObject *slot = PyList_GET_ITEM(slots, target);
    if (slot != Py_None) {
        return slot;
    }
    PyObject *index = PyLong_FromSsize_t(target);
    if (index == NULL || PyList_Append(order, index) < 0) {
        Py_XDECREF(index);
        return NULL;
    }
    Py_DECREF(index);
    slot = Py_BuildValue("(NN)", PyList_New(0), PyList_New(0));
    if (slot == NULL) {
        return NULL;
    }
    PyList_SetItem(slots, target, slot); /* steals; the None it replaces is released */
    return slot;
}

static PyObject *
place_sections(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if ((nargs != 4 && nargs != 6) || !PyList_Check(args[0]) || !PyBytes_Check(args[3]) ||
        (nargs == 6 && !PyCallable_Check(args[4]))) {
        PyErr_SetString(PyExc_TypeError,
                        "place_sections() takes (list, partitions, hash, bytes[, crc32c, max_size])");
        return NULL;
    }
    Py_ssize_t max_size = nargs == 6 ? PyLong_AsSsize_t(args[5]) : 0;
    if (max_size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t partitions = PyLong_AsSsize_t(args[1]);
    if (partitions == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (partitions <= 0 || PyBytes_GET_SIZE(args[3]) != partitions) {
        PyErr_SetString(PyExc_ValueError, "place_sections(): bad partitions or known leaders");
        return NULL;
    }
    const char *known = PyBytes_AS_STRING(args[3]);
    PyObject *batches = args[0];
    PyObject *order = PyList_New(0);
    PyObject *slots = PyList_New(partitions);
    PyObject *placed = PyList_New(0);
    PyObject *result = NULL;
    if (order == NULL || slots == NULL || placed == NULL) {
        goto done;
    }
    for (Py_ssize_t t = 0; t < partitions; t++) {
        PyList_SET_ITEM(slots, t, Py_NewRef(Py_None));
    }
    for (Py_ssize_t b = 0; b < PyList_GET_SIZE(batches); b++) {
        PyObject *batch = PyList_GET_ITEM(batches, b);
        if (!PyTuple_Check(batch) || PyTuple_GET_SIZE(batch) != 9) {
            PyErr_SetString(PyExc_TypeError, "place_sections(): a batch is a tuple of 9");
            goto done;
        }
        PyObject *data = PyTuple_GET_ITEM(batch, 0);
        PyObject *read = NULL; /* the section read here, when `data` is None */
        if (data == Py_None) {
            long long wire = nargs == 6 ? PyLong_AsLongLong(PyTuple_GET_ITEM(batch, 5)) : -1;
            if (wire == -1 && PyErr_Occurred()) {
                goto done;
            }
            read = wire < 0 ? Py_NewRef(Py_None)
                            : lz4_section(PyTuple_GET_ITEM(batch, 6), wire, args[4], max_size);
            if (read == NULL) {
                goto done;
            }
            if (read == Py_None) {
                Py_DECREF(read);
                result = Py_NewRef(Py_None);
                goto done;
            }
            data = read;
        }
        PyObject *index_args[7] = {
            data,
            PyTuple_GET_ITEM(batch, 1),
            PyTuple_GET_ITEM(batch, 2),
            PyTuple_GET_ITEM(batch, 3),
            args[1],
            args[2],
            PyTuple_GET_ITEM(batch, 4),
        };
        PyObject *found = index_records(module, index_args, 7);
        if (found == NULL || found == Py_None) {
            Py_XDECREF(read);
            if (found != NULL) {
                Py_DECREF(found);
                result = Py_NewRef(Py_None);
            }
            goto done;
        }
        Py_ssize_t own = PyLong_AsSsize_t(PyTuple_GET_ITEM(batch, 4));
        long long total = PyLong_AsLongLong(PyTuple_GET_ITEM(batch, 1));
        long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(batch, 5));
        if (PyErr_Occurred()) {
            Py_DECREF(found);
            Py_XDECREF(read);
            goto done;
        }
        PyObject *whole = PyTuple_GET_ITEM(batch, 6);
        PyObject *owner = PyTuple_GET_ITEM(batch, 7);
        PyObject *header = PyTuple_GET_ITEM(batch, 8);
        Py_ssize_t targets = PyTuple_GET_SIZE(found);
        int stays = targets == 1 && PyLong_AsSsize_t(PyTuple_GET_ITEM(PyTuple_GET_ITEM(found, 0), 0)) == own;
        long long kept = 0;
        for (Py_ssize_t i = 0; i < targets; i++) {
            PyObject *pair = PyTuple_GET_ITEM(found, i);
            Py_ssize_t target = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0));
            PyObject *spans = PyTuple_GET_ITEM(pair, 1);
            long long n = PyBytes_GET_SIZE(spans) / (Py_ssize_t)sizeof(record_span);
            if (!stays && !known[target]) {
                Py_DECREF(found);
                Py_XDECREF(read);
                result = Py_NewRef(Py_None);
                goto done;
            }
            PyObject *slot = placed_slot(slots, order, target);
            if (slot == NULL) {
                Py_DECREF(found);
                Py_XDECREF(read);
                goto done;
            }
            PyObject *piece;
            if (stays) {
                piece = Py_BuildValue("(OLO(OO)O)", owner, size, whole, data, spans, header);
            } else {
                long long estimate = size * n / (total > 1 ? total : 1) + 64;
                piece = Py_BuildValue("(OLO(OO)O)", owner, estimate, Py_None, data, spans, header);
            }
            if (target == own) {
                kept = n;
            }
            if (piece == NULL || PyList_Append(PyTuple_GET_ITEM(slot, target == own ? 0 : 1), piece) < 0) {
                Py_XDECREF(piece);
                Py_DECREF(found);
                Py_XDECREF(read);
                goto done;
            }
            Py_DECREF(piece);
        }
        Py_DECREF(found);
        Py_XDECREF(read);
        PyObject *counted = stays ? Py_BuildValue("(iLO)", 0, total, Py_False)
                                  : Py_BuildValue("(LLO)", total - kept, kept, Py_True);
        if (counted == NULL || PyList_Append(placed, counted) < 0) {
            Py_XDECREF(counted);
            goto done;
        }
        Py_DECREF(counted);
    }
    result = Py_BuildValue("(OOO)", order, slots, placed);
done:
    Py_XDECREF(order);
    Py_XDECREF(slots);
    Py_XDECREF(placed);
    return result;
}

/* -- lz4 frames ------------------------------------------------------------------------------ */

/* Kafka's lz4 batches are lz4 frames, most of one block. The Python path walks
 * the frame's headers and hands each block to cramjam's block decoder; here the
 * whole frame is read in one call, its blocks decoded by the system's liblz4
 * (LZ4_decompress_safe, found at run time: the module is built without lz4's
 * headers, and a system without liblz4 keeps the Python path). Only the common
 * frame is read here: version 1, no checksums besides the header's, no content
 * size, no dictionary, independent blocks (or one), the header checksum that of
 * the descriptor (not the pre-0.10 one over the magic too). Anything else, and
 * anything malformed or over the bound, returns None and the Python path
 * decides (with its error messages): this only ever returns the bytes that path
 * would. lz4_frame writes the frame as the Python path does (LZ4_compress_default,
 * the compressor cramjam's block API runs), or returns None without liblz4. */

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#define TRAFKA_HAVE_DLOPEN 1
#endif

typedef int (*lz4_decompress_fn)(const char *, char *, int, int);
typedef int (*lz4_compress_fn)(const char *, char *, int, int);

static lz4_decompress_fn lz4_decompress_safe;
static lz4_compress_fn lz4_compress_default;
static int lz4_looked_up;

static lz4_decompress_fn
lz4_library(void)
{
    if (!lz4_looked_up) {
#ifdef TRAFKA_HAVE_DLOPEN
        static const char *const names[] = {"liblz4.so.1", "liblz4.1.dylib", "liblz4.dylib", NULL};
        for (int i = 0; names[i] != NULL && lz4_decompress_safe == NULL; i++) {
            void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
            if (lib != NULL) {
                lz4_compress_default = (lz4_compress_fn)dlsym(lib, "LZ4_compress_default");
                lz4_decompress_safe = (lz4_decompress_fn)dlsym(lib, "LZ4_decompress_safe");
            }
        }
#endif
        lz4_looked_up = 1;
    }
    return lz4_decompress_safe;
}

/* XXH32 of fewer than 16 bytes (a frame descriptor), seed 0. */
static uint32_t
xxh32_short(const unsigned char *p, size_t n)
{
    const uint32_t p1 = 0x9E3779B1U, p2 = 0x85EBCA77U, p3 = 0xC2B2AE3DU, p4 = 0x27D4EB2FU,
                   p5 = 0x165667B1U;
    uint32_t acc = p5 + (uint32_t)n;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t lane = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                        (uint32_t)p[i + 3] << 24;
        acc += lane * p3;
        acc = ((acc << 17) | (acc >> 15)) * p4;
    }
    for (; i < n; i++) {
        acc += p[i] * p5;
        acc = ((acc << 11) | (acc >> 21)) * p1;
    }
    acc ^= acc >> 15;
    acc *= p2;
    acc ^= acc >> 13;
    acc *= p3;
    acc ^= acc >> 16;
    return acc;
}

static inline uint32_t
read_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

PyDoc_STRVAR(lz4_unframe_doc,
             "lz4_unframe(data, max_size) -> bytes | None\n\n"
             "One common lz4 frame's content (see codec/_speedups.c), or None: the\n"
             "Python path decides (an unusual or malformed frame, over max_size, no liblz4).");

/* The content of the lz4 frame of `end` bytes at `data` (see lz4_unframe): a new
 * bytes object, None (new reference: the Python path decides) or NULL (an
 * exception set). liblz4 must have been looked up (lz4_library()). */
static PyObject *
lz4_content(const unsigned char *data, Py_ssize_t end, Py_ssize_t max_size)
{
    lz4_decompress_fn decode = lz4_decompress_safe;
    if (decode == NULL) {
        Py_RETURN_NONE;
    }
    PyObject *out = NULL;
    /* magic, FLG (version 1, independent blocks, nothing else), BD, HC */
    if (end < 11 || read_le32(data) != 0x184D2204U || (data[4] & ~0x20) != 0x40 ||
        (data[5] & 0x8F) != 0 || ((data[5] >> 4) & 7) < 4) {
        goto refuse;
    }
    int independent = data[4] & 0x20;
    Py_ssize_t block_max = (Py_ssize_t)1 << (2 * ((data[5] >> 4) & 7) + 8);
    if (data[6] != ((xxh32_short(data + 4, 2) >> 8) & 0xFF)) {
        goto refuse;
    }
    /* The blocks' bound first, as the Python path does: refuse before decoding. */
    Py_ssize_t pos = 7, bound = 0, blocks = 0;
    for (;;) {
        if (end - pos < 4) {
            goto refuse;
        }
        uint32_t word = read_le32(data + pos);
        pos += 4;
        if (word == 0) {
            break;
        }
        Py_ssize_t size = (Py_ssize_t)(word & 0x7FFFFFFFU);
        if (size > block_max || size > end - pos) {
            goto refuse;
        }
        bound += (word & 0x80000000U) ? size : block_max;
        pos += size;
        blocks++;
    }
    if (pos != end || bound > max_size || (blocks > 1 && !independent)) {
        goto refuse;
    }
    out = PyBytes_FromStringAndSize(NULL, bound);
    if (out == NULL) {
        return NULL;
    }
    char *into = PyBytes_AS_STRING(out);
    Py_ssize_t made = 0;
    pos = 7;
    for (;;) {
        uint32_t word = read_le32(data + pos);
        pos += 4;
        if (word == 0) {
            break;
        }
        int size = (int)(word & 0x7FFFFFFFU);
        if (word & 0x80000000U) {
            memcpy(into + made, data + pos, (size_t)size);
            made += size;
        }
        else {
            int got = decode((const char *)data + pos, into + made, size, (int)block_max);
            if (got < 0) {
                Py_CLEAR(out);
                goto refuse;
            }
            made += got;
        }
        pos += size;
    }
    if (made != bound && _PyBytes_Resize(&out, made) < 0) {
        return NULL;
    }
    return out;
refuse:
    Py_RETURN_NONE;
}

static PyObject *
lz4_unframe(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "lz4_unframe(data, max_size)");
        return NULL;
    }
    Py_ssize_t max_size = PyLong_AsSsize_t(args[1]);
    if (max_size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (lz4_library() == NULL) {
        Py_RETURN_NONE;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *out = lz4_content(view.buf, view.len, max_size);
    PyBuffer_Release(&view);
    return out;
}

/* The blocks of an lz4 frame as Java writes them (64 KiB independent blocks,
 * each stored when compressing does not shrink it) and its end mark, of the
 * `n` bytes at `data`, written at `into` (room for lz4_blocks_bound(n) bytes);
 * how many bytes were written. liblz4 must have been found. */
static Py_ssize_t
lz4_blocks_into(const char *data, Py_ssize_t n, char *into)
{
    const Py_ssize_t block = 64 * 1024;
    Py_ssize_t made = 0;
    for (Py_ssize_t start = 0; start < n; start += block) {
        int size = (int)(n - start < block ? n - start : block);
        /* Compressed straight into the frame, given less room than the block:
         * liblz4 gives up (0) when it does not shrink, and the block is stored. */
        int packed = lz4_compress_default(data + start, into + made + 4, size, size - 1);
        uint32_t word = (uint32_t)packed;
        if (packed <= 0) {
            word = (uint32_t)size | 0x80000000U;
            packed = size;
            memcpy(into + made + 4, data + start, (size_t)size);
        }
        unsigned char *w = (unsigned char *)into + made;
        w[0] = word & 0xFF;
        w[1] = (word >> 8) & 0xFF;
        w[2] = (word >> 16) & 0xFF;
        w[3] = word >> 24;
        made += 4 + packed;
    }
    memset(into + made, 0, 4);
    return made + 4;
}

/* The most lz4_blocks_into() writes for `n` bytes (every block stored). */
static inline Py_ssize_t
lz4_blocks_bound(Py_ssize_t n)
{
    return n + 4 * ((n + 64 * 1024 - 1) / (64 * 1024)) + 4;
}

PyDoc_STRVAR(lz4_frame_doc,
             "lz4_frame(data, header) -> bytes | None\n\n"
             "data as the lz4 frame Java writes (64 KiB independent blocks, each stored\n"
             "when compressing does not shrink it), after the frame's 7-byte header;\n"
             "None when no liblz4 was found (the Python path writes it).");

static PyObject *
lz4_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyBytes_Check(args[1]) || PyBytes_GET_SIZE(args[1]) != 7) {
        PyErr_SetString(PyExc_TypeError, "lz4_frame(data, header of 7 bytes)");
        return NULL;
    }
    lz4_library();
    if (lz4_compress_default == NULL) {
        Py_RETURN_NONE;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const char *data = view.buf;
    Py_ssize_t n = view.len;
    /* At most every block stored: its header word and its bytes. */
    if (n > PY_SSIZE_T_MAX / 2 - 64) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    Py_ssize_t capacity = 7 + lz4_blocks_bound(n);
    PyObject *out = PyBytes_FromStringAndSize(NULL, capacity);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *into = PyBytes_AS_STRING(out);
    memcpy(into, PyBytes_AS_STRING(args[1]), 7);
    Py_ssize_t made = 7 + lz4_blocks_into(data, n, into + 7);
    PyBuffer_Release(&view);
    if (made != capacity && _PyBytes_Resize(&out, made) < 0) {
        return NULL;
    }
    return out;
}

PyDoc_STRVAR(build_batches_doc,
"build_batches(jobs, crc32c, lz4_header, /) -> [(batch, count), ...] | None\n\n"
"Whole magic 2 batches of records placed by index_records(), one per job, in one\n"
"call: a job is (pieces, attributes, producer_id, producer_epoch, base_sequence),\n"
"`pieces` as build_records() takes them.\n"
"Each batch is byte for byte what trafka.codec.batch_split.build_batch writes:\n"
"base offset 0, partition leader epoch -1, the codec, timestamp type and\n"
"transactional bit of `attributes`, lz4 frames as Java writes them after the\n"
"7-byte `lz4_header`; `crc32c(view)` checksums each batch from its attributes on.\n"
"None when any job is not for this fast path (a codec other than none or lz4, no\n"
"liblz4, a header field out of its range, a value that does not fit): the caller\n"
"then builds each batch in Python.");

/* One job's batch (a new reference), or NULL with *rc REFUSE or FAILED. */
static PyObject *
build_one(PyObject *job, PyObject *crc32c, PyObject *lz4_header, Py_ssize_t *count_out, int *rc)
{
    *rc = REFUSE;
    if (!PyTuple_Check(job) || PyTuple_GET_SIZE(job) != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "build_batches(): a job is (pieces, attributes, producer_id, producer_epoch, "
                        "base_sequence)");
        *rc = FAILED;
        return NULL;
    }
    int64_t v[4]; /* attributes, producer_id, producer_epoch, base_sequence */
    for (int i = 0; i < 4; i++) {
        int r = int64_arg(PyTuple_GET_ITEM(job, i + 1), &v[i]);
        if (r) {
            *rc = r;
            return NULL;
        }
    }
    int codec = (int)(v[0] & 0x07);
    if ((codec != 0 && codec != 3) || (codec == 3 && lz4_compress_default == NULL) ||
        v[2] < INT16_MIN || v[2] > INT16_MAX || v[3] < INT32_MIN || v[3] > INT32_MAX) {
        return NULL;
    }
    Py_buffer *views;
    Py_ssize_t pairs;
    if (pieces_open(PyTuple_GET_ITEM(job, 0), "build_batches()", &views, &pairs)) {
        *rc = FAILED;
        return NULL;
    }
    int64_t base, max_ts;
    Py_ssize_t total, records;
    PyObject *batch = NULL;
    unsigned char *plain = NULL;
    if (pieces_measure(views, pairs, &total, &records, &base, &max_ts)) {
        goto done;
    }
    Py_ssize_t room = codec ? 7 + lz4_blocks_bound(total) : total;
    batch = PyBytes_FromStringAndSize(NULL, BATCH_HEADER + room);
    if (batch == NULL) {
        *rc = FAILED;
        goto done;
    }
    unsigned char *b = (unsigned char *)PyBytes_AS_STRING(batch);
    Py_ssize_t size = BATCH_HEADER + room;
    if (codec) {
        plain = PyMem_Malloc((size_t)(total ? total : 1));
        if (plain == NULL) {
            PyErr_NoMemory();
            *rc = FAILED;
            Py_CLEAR(batch);
            goto done;
        }
        pieces_write(views, pairs, base, plain);
        memcpy(b + BATCH_HEADER, PyBytes_AS_STRING(lz4_header), 7);
        size = BATCH_HEADER + 7 + lz4_blocks_into((const char *)plain, total, (char *)b + BATCH_HEADER + 7);
    } else {
        pieces_write(views, pairs, base, b + BATCH_HEADER);
    }
    if (size - LOG_OVERHEAD > INT32_MAX) {
        Py_CLEAR(batch);
        goto done;
    }
    if (size != BATCH_HEADER + room) {
        if (_PyBytes_Resize(&batch, size) < 0) {
            *rc = FAILED;
            goto done; /* (batch is NULL then) */
        }
        b = (unsigned char *)PyBytes_AS_STRING(batch);
    }
    /* Base offset 0, partition leader epoch -1; codec, timestamp type, transactional. */
    const int64_t fields[] = {0, -1, v[0] & 0x1F, base, max_ts, v[1], v[2], v[3]};
    int r = seal_batch(batch, size, records, fields, crc32c);
    if (r) {
        *rc = r;
        Py_CLEAR(batch);
        goto done;
    }
    *count_out = records;
done:
    PyMem_Free(plain);
    pieces_close(views, pairs);
    return batch;
}

static PyObject *
build_batches(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyCallable_Check(args[1]) ||
        !PyBytes_Check(args[2]) || PyBytes_GET_SIZE(args[2]) != 7) {
        PyErr_SetString(PyExc_TypeError, "build_batches(jobs, crc32c, lz4 header of 7 bytes)");
        return NULL;
    }
    lz4_library();
    PyObject *jobs = args[0];
    Py_ssize_t n = PyList_GET_SIZE(jobs);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t count = 0;
        int rc;
        PyObject *batch = build_one(PyList_GET_ITEM(jobs, i), args[1], args[2], &count, &rc);
        if (batch == NULL) {
            Py_DECREF(out);
            if (rc == FAILED) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        PyObject *pair = Py_BuildValue("(Nn)", batch, count);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, pair);
    }
    return out;
}

/* -- module ---------------------------------------------------------------------------------- */

static PyMethodDef speedups_methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL, decode_records_doc},
    {"decode_batch_run", (PyCFunction)(void (*)(void))decode_batch_run, METH_FASTCALL, decode_batch_run_doc},
    {"decode_records_columns", (PyCFunction)(void (*)(void))decode_records_columns, METH_FASTCALL,
     decode_records_columns_doc},
    {"decode_batch_run_columns", (PyCFunction)(void (*)(void))decode_batch_run_columns, METH_FASTCALL,
     decode_batch_run_columns_doc},
    {"encode_record", (PyCFunction)(void (*)(void))encode_record, METH_FASTCALL, encode_record_doc},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL, encode_records_doc},
    {"encode_batch", (PyCFunction)(void (*)(void))encode_batch, METH_FASTCALL, encode_batch_doc},
    {"murmur2", (PyCFunction)murmur2, METH_O, murmur2_doc},
    {"index_records", (PyCFunction)(void (*)(void))index_records, METH_FASTCALL, index_records_doc},
    {"build_records", (PyCFunction)(void (*)(void))build_records, METH_FASTCALL, build_records_doc},
    {"place_sections", (PyCFunction)(void (*)(void))place_sections, METH_FASTCALL, place_sections_doc},
    {"lz4_unframe", (PyCFunction)(void (*)(void))lz4_unframe, METH_FASTCALL, lz4_unframe_doc},
    {"lz4_frame", (PyCFunction)(void (*)(void))lz4_frame, METH_FASTCALL, lz4_frame_doc},
    {"build_batches", (PyCFunction)(void (*)(void))build_batches, METH_FASTCALL, build_batches_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot speedups_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "trafka.codec._speedups",
    .m_doc = "Optional C fast paths for trafka.codec.records (magic 2 record batches).",
    .m_size = 0,
    .m_methods = speedups_methods,
    .m_slots = speedups_slots,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
