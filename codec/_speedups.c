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
} decode_args;

/* A nullable bytes field of a record: -1 is None, else that many bytes of the record. */
static int
read_nullable_bytes(const unsigned char **pp, const unsigned char *rend, PyObject **out)
{
    int32_t n;
    if (read_varint32(pp, rend, &n)) {
        return REFUSE;
    }
    if (n == -1) {
        *out = Py_NewRef(Py_None);
        return 0;
    }
    if (n < 0 || n > rend - *pp) {
        return REFUSE;
    }
    *out = PyBytes_FromStringAndSize((const char *)*pp, n);
    if (*out == NULL) {
        return FAILED;
    }
    *pp += n;
    return 0;
}

static int
read_headers(const unsigned char **pp, const unsigned char *rend, PyObject **out)
{
    int32_t count;
    if (read_varint32(pp, rend, &count)) {
        return REFUSE;
    }
    /* Each header takes at least two bytes: checked before sizing the tuple. */
    if (count < 0 || (int64_t)count * 2 > rend - *pp) {
        return REFUSE;
    }
    PyObject *headers = PyTuple_New(count);
    if (headers == NULL) {
        return FAILED;
    }
    for (int32_t h = 0; h < count; h++) {
        int32_t n;
        if (read_varint32(pp, rend, &n) || n < 0 || n > rend - *pp) {
            Py_DECREF(headers);
            return REFUSE;
        }
        PyObject *name = PyUnicode_DecodeUTF8((const char *)*pp, n, "strict");
        if (name == NULL) {
            Py_DECREF(headers);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                return REFUSE;
            }
            return FAILED;
        }
        *pp += n;
        PyObject *value;
        int rc = read_nullable_bytes(pp, rend, &value);
        if (rc) {
            Py_DECREF(name);
            Py_DECREF(headers);
            return rc;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(name);
            Py_DECREF(value);
            Py_DECREF(headers);
            return FAILED;
        }
        PyTuple_SET_ITEM(pair, 0, name);
        PyTuple_SET_ITEM(pair, 1, value);
        PyObject_GC_UnTrack(pair); /* str and bytes/None: atomic */
        PyTuple_SET_ITEM(headers, h, pair);
    }
    if (count) {
        PyObject_GC_UnTrack(headers); /* holds only untracked pairs */
    }
    *out = headers;
    return 0;
}

/*
 * Per-call decoding state: the output slots (room for every record of the
 * batch is made before it is decoded; `n` are filled, each a strong
 * reference) and the last timestamp object, which consecutive records usually
 * share (a producer stamps a whole burst with the same millisecond), so one
 * int object serves them all instead of one each.
 */
typedef struct {
    PyObject **items;
    Py_ssize_t n;
    int64_t ts_value;
    PyObject *ts_obj; /* strong reference or NULL */
} decode_state;

/* Decode one record at *pp (buffer end `end`) into the output, unless skipped. */
static int
decode_one(const unsigned char **pp, const unsigned char *end, const decode_args *a, decode_state *st)
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
    int64_t offset, timestamp;
    if (__builtin_add_overflow(a->base_offset, (int64_t)offset_delta, &offset)) {
        return REFUSE; /* Python's ints would carry on; let them */
    }
    if (a->has_log_append) {
        timestamp = a->log_append;
    } else if (__builtin_add_overflow(a->base_timestamp, ts_delta, &timestamp)) {
        return REFUSE;
    }
    PyObject *key = NULL, *value = NULL, *headers = NULL;
    int rc = read_nullable_bytes(&p, rend, &key);
    if (!rc) {
        rc = read_nullable_bytes(&p, rend, &value);
    }
    if (!rc) {
        rc = read_headers(&p, rend, &headers);
    }
    if (!rc && p != rend) {
        rc = REFUSE;
    }
    if (rc || offset < a->min_offset) {
        Py_XDECREF(key);
        Py_XDECREF(value);
        Py_XDECREF(headers);
        *pp = rend;
        return rc;
    }
    if (st->ts_obj == NULL || st->ts_value != timestamp) {
        PyObject *ts = PyLong_FromLongLong(timestamp);
        if (ts == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            return FAILED;
        }
        Py_XSETREF(st->ts_obj, ts);
        st->ts_value = timestamp;
    }
    PyObject *off_obj = PyLong_FromLongLong(offset);
    Py_ssize_t npre = PyTuple_GET_SIZE(a->prefix), nsuf = PyTuple_GET_SIZE(a->suffix);
    PyObject *rec = NULL;
    if (off_obj != NULL) {
        rec = new_tuple_of(a->cls, npre + 5 + nsuf);
    }
    if (rec == NULL) {
        Py_XDECREF(off_obj);
        Py_DECREF(key);
        Py_DECREF(value);
        Py_DECREF(headers);
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
    *pp = rend;
    return 0;
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
    rc = 0;
    int gc_was_enabled = pause_gc();
    for (int64_t i = 0; i < count && !rc; i++) {
        rc = decode_one(&p, end, &a, &st);
    }
    resume_gc(gc_was_enabled);
    if (!rc && p != end) {
        rc = REFUSE;
    }
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
 * usually allocated once.
 */
static Py_ssize_t
records_bound(const unsigned char *data, Py_ssize_t len, Py_ssize_t pos, Py_ssize_t max_records)
{
    Py_ssize_t total = 0;
    while (len - pos >= LOG_OVERHEAD && total < max_records) {
        const unsigned char *b = data + pos;
        int32_t length = be32(b + 8);
        if (length < MIN_BATCH_LENGTH || length > len - pos - LOG_OVERHEAD || b[16] != 2) {
            break;
        }
        int32_t count = be32(b + 57);
        Py_ssize_t room = (LOG_OVERHEAD + (Py_ssize_t)length - BATCH_HEADER) / 7;
        total += count < 0 ? 0 : (count < room ? count : room);
        pos += LOG_OVERHEAD + (Py_ssize_t)length;
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
    if (count > *capacity - st->n) {
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
    /* This batch's two per-record attributes: timestamp type and leader epoch. */
    PyObject *suffix = Py_BuildValue("(ii)", (attributes >> 3) & 1, (int)be32(b + 12));
    if (suffix == NULL) {
        return FAILED;
    }
    a->suffix = suffix;
    int rc = 0;
    Py_ssize_t start = st->n;
    for (int32_t i = 0; i < count && !rc; i++) {
        rc = decode_one(&p, end, a, st);
    }
    if (!rc && p != end) {
        rc = REFUSE;
    }
    if (rc) {
        drop_from(st, start);
    }
    a->suffix = NULL;
    Py_DECREF(suffix);
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

static PyObject *
decode_batch_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "decode_batch_run takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "blob must be bytes");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) {
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
    if (args[5] != Py_None && !PyCallable_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "crc must be callable or None");
        return NULL;
    }
    int stop_transactional = PyObject_IsTrue(args[6]);
    if (stop_transactional < 0) {
        return NULL;
    }
    Py_ssize_t max_records = PyLong_AsSsize_t(args[7]);
    if (max_records == -1 && PyErr_Occurred()) {
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

    Py_ssize_t capacity = usable ? records_bound(data, len, pos, max_records) : 0;
    decode_state st = {.items = PyMem_Malloc(sizeof(PyObject *) * (size_t)(capacity ? capacity : 1)),
                       .n = 0,
                       .ts_value = 0,
                       .ts_obj = NULL};
    if (st.items == NULL) {
        return PyErr_NoMemory();
    }
    int64_t run_next = 0;
    int has_next = 0;
    rc = 0;
    /*
     * No Python code runs below (see the top), and the blob is immutable bytes:
     * other threads that run while a CRC is computed cannot change it either.
     */
    int gc_was_enabled = pause_gc();
    while (usable && len - pos >= LOG_OVERHEAD && st.n < max_records) {
        const unsigned char *b = data + pos;
        int32_t length = be32(b + 8);
        if (length < MIN_LEGACY_LENGTH || length > len - pos - LOG_OVERHEAD || b[16] != 2) {
            break; /* malformed, partial or legacy: the Python walk decides */
        }
        Py_ssize_t size = LOG_OVERHEAD + (Py_ssize_t)length;
        int64_t next_offset;
        rc = decode_plain_batch(b, size, &a, &st, &capacity, args[5], stop_transactional, &next_offset);
        if (rc) {
            break;
        }
        if (next_offset > a.min_offset) { /* decoded, not skipped */
            run_next = next_offset;
            has_next = 1;
        }
        pos += size;
    }
    resume_gc(gc_was_enabled);
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
    PyObject *next = has_next ? PyLong_FromLongLong(run_next) : Py_NewRef(Py_None);
    if (next == NULL) {
        Py_DECREF(records);
        return NULL;
    }
    PyObject *result = Py_BuildValue("(NnN)", records, pos, next);
    return result;
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
    unsigned char *b = (unsigned char *)PyBytes_AS_STRING(batch);
    /* What the CRC covers: attributes .. records_count, then the records. */
    unsigned char *p = b + 21;
    p = put_be(p, (uint64_t)v[3], 2);
    p = put_be(p, (uint64_t)(count - 1), 4);
    p = put_be(p, (uint64_t)v[0], 8);
    p = put_be(p, (uint64_t)max_ts, 8);
    p = put_be(p, (uint64_t)v[4], 8);
    p = put_be(p, (uint64_t)v[5], 2);
    p = put_be(p, (uint64_t)v[6], 4);
    put_be(p, (uint64_t)count, 4);
    /* The checksum reads a view of the object (which keeps it alive), before
     * any other code can see it; the bytes it covers are final. */
    PyObject *whole = PyMemoryView_FromObject(batch);
    PyObject *view = whole == NULL ? NULL : PySequence_GetSlice(whole, 21, size);
    Py_XDECREF(whole);
    PyObject *crc = view == NULL ? NULL : PyObject_CallOneArg(args[8], view);
    Py_XDECREF(view);
    if (crc == NULL) {
        Py_DECREF(batch);
        return NULL;
    }
    int64_t c;
    rc = int64_arg(crc, &c);
    Py_DECREF(crc);
    if (rc || c < 0 || c > 0xFFFFFFFFll) {
        Py_DECREF(batch);
        if (rc == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    p = put_be(b, (uint64_t)v[1], 8);
    p = put_be(p, (uint64_t)(size - LOG_OVERHEAD), 4);
    p = put_be(p, (uint64_t)v[2], 4);
    *p++ = 2; /* magic */
    put_be(p, (uint64_t)c, 4);
    return with_max_ts(batch, max_ts);
}

/* -- murmur2 (the Java client's key hash) ------------------------------------------------ */

PyDoc_STRVAR(murmur2_doc,
"murmur2(data, /) -> int\n\n"
"Java's Utils.murmur2 of a bytes-like object, as a signed 32-bit int.");

static uint32_t
murmur2_hash(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t n4 = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < n4; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[n4 + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[n4 + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[n4];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

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

PyDoc_STRVAR(murmur2_pick_doc,
"murmur2_pick(items, key, /) -> object\n\n"
"items[(murmur2(key) & 0x7FFFFFFF) % len(items)] for a non-empty list and a bytes key:\n"
"the Java client's partition for key, as an index into a list of len(items) partitions.");

static PyObject *
murmur2_pick(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "murmur2_pick() takes a list and a bytes key");
        return NULL;
    }
    PyObject *items = args[0];
    PyObject *key = args[1];
    if (!PyList_Check(items) || !PyBytes_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "murmur2_pick() takes a list and a bytes key");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "murmur2_pick() needs a non-empty list");
        return NULL;
    }
    uint32_t h = murmur2_hash((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
    PyObject *item = PyList_GET_ITEM(items, (Py_ssize_t)((h & 0x7FFFFFFFu) % (uint32_t)n));
    Py_INCREF(item);
    return item;
}

/* -- module ---------------------------------------------------------------------------------- */

static PyMethodDef speedups_methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL, decode_records_doc},
    {"decode_batch_run", (PyCFunction)(void (*)(void))decode_batch_run, METH_FASTCALL, decode_batch_run_doc},
    {"encode_record", (PyCFunction)(void (*)(void))encode_record, METH_FASTCALL, encode_record_doc},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL, encode_records_doc},
    {"encode_batch", (PyCFunction)(void (*)(void))encode_batch, METH_FASTCALL, encode_batch_doc},
    {"murmur2", (PyCFunction)murmur2, METH_O, murmur2_doc},
    {"murmur2_pick", (PyCFunction)(void (*)(void))murmur2_pick, METH_FASTCALL, murmur2_pick_doc},
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
