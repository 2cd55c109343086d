/*
 * trafka.sdk._hot_append: the producer's per-record path in C (optional).
 *
 * The reference is trafka/sdk/hot_append.py (PyAppender): this module is the same
 * decision, made without a Python frame per record, and the property tests
 * (tests/sdk/test_sdk_hot_append.py) hold the two to the same batches, handles and
 * answers. Rules:
 *
 * - Three base types give the Python classes their hot fields as C struct members,
 *   so that C reads them without an attribute lookup and Python code reads them as
 *   fast as __slots__: BatchBase (ProducerBatch: records, size, memory, limit,
 *   full, done), HandleBase (RecordHandle: batch, index) and AccumulatorBase
 *   (the accumulator's memory bounds: used_memory, buffer_memory, batch_size,
 *   batch_records, max_records, closing). The pure-Python bases of hot_append.py
 *   have the same names and meaning.
 * - Appender.append(topic, value, key) is ProducerCore.append_hot: it answers the
 *   batch the record joined (as its last record), True (a batch must be opened:
 *   the general path's append_at), or False (the general path must take the
 *   record). It never waits and never runs Python code but the fallbacks named
 *   below.
 * - What C does not decide it hands to Python, whole: a key-less record under a
 *   partitioner that is not KIP-480 sticky, or a key a hash here does not take,
 *   gets its partition from the `pick` callable; a buffer bounded in records
 *   (queue.buffering.max.messages) appends through the accumulator's append_to.
 * - A record is charged `record_overhead + len(key) + len(value)` against
 *   batch.size and that plus `memory_overhead` against buffer.memory, the values
 *   the Python side passes in (one definition, producer_batches.py).
 * - try_send(topic, value=None, key=None) is the async driver's try_send: None
 *   when disabled or when append did not take the record; else the handle,
 *   after calling `limit_reached(batch, size)` once the batch reached its limit.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

#include "_keyhash.h"

/* -- base types -------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *records;
    Py_ssize_t size;
    Py_ssize_t memory;
    Py_ssize_t limit;
    char full;
    char done;
} BatchBase;

static int
batch_traverse(BatchBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->records);
    return 0;
}

static int
batch_clear(BatchBase *self)
{
    Py_CLEAR(self->records);
    return 0;
}

static void
batch_dealloc(BatchBase *self)
{
    PyObject_GC_UnTrack(self);
    batch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef batch_members[] = {
    {"records", T_OBJECT_EX, offsetof(BatchBase, records), 0, NULL},
    {"size", T_PYSSIZET, offsetof(BatchBase, size), 0, NULL},
    {"memory", T_PYSSIZET, offsetof(BatchBase, memory), 0, NULL},
    {"limit", T_PYSSIZET, offsetof(BatchBase, limit), 0, NULL},
    {"full", T_BOOL, offsetof(BatchBase, full), 0, NULL},
    {"done", T_BOOL, offsetof(BatchBase, done), 0, NULL},
    {NULL},
};

static PyTypeObject BatchBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trafka.sdk._hot_append.BatchBase",
    .tp_doc = "The hot fields of a producer batch (trafka.sdk.producer_batches.ProducerBatch).",
    .tp_basicsize = sizeof(BatchBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)batch_traverse,
    .tp_clear = (inquiry)batch_clear,
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_members = batch_members,
};

typedef struct {
    PyObject_HEAD
    PyObject *batch;
    Py_ssize_t index;
    PyObject *state; /* a subclass's, None until it sets one */
} HandleBase;

static int
handle_traverse(HandleBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->batch);
    Py_VISIT(self->state);
    return 0;
}

static int
handle_clear(HandleBase *self)
{
    Py_CLEAR(self->batch);
    Py_CLEAR(self->state);
    return 0;
}

static void
handle_dealloc(HandleBase *self)
{
    PyObject_GC_UnTrack(self);
    handle_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
handle_init(HandleBase *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"batch", "index", NULL};
    PyObject *batch;
    Py_ssize_t index;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On:RecordHandle", names, &batch, &index)) {
        return -1;
    }
    Py_INCREF(batch);
    Py_XSETREF(self->batch, batch);
    self->index = index;
    return 0;
}

static PyMemberDef handle_members[] = {
    {"batch", T_OBJECT_EX, offsetof(HandleBase, batch), 0, NULL},
    {"index", T_PYSSIZET, offsetof(HandleBase, index), 0, NULL},
    {"state", T_OBJECT, offsetof(HandleBase, state), 0, NULL},
    {NULL},
};

static PyTypeObject HandleBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trafka.sdk._hot_append.HandleBase",
    .tp_doc = "A record's place: its batch and its index there (RecordHandle's fields).",
    .tp_basicsize = sizeof(HandleBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)handle_init,
    .tp_traverse = (traverseproc)handle_traverse,
    .tp_clear = (inquiry)handle_clear,
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_members = handle_members,
};

typedef struct {
    PyObject_HEAD
    Py_ssize_t used_memory;
    Py_ssize_t buffer_memory;
    Py_ssize_t batch_size;
    Py_ssize_t batch_records;
    Py_ssize_t max_records;
    char closing;
} AccumulatorBase;

static PyMemberDef acc_members[] = {
    {"used_memory", T_PYSSIZET, offsetof(AccumulatorBase, used_memory), 0, NULL},
    {"buffer_memory", T_PYSSIZET, offsetof(AccumulatorBase, buffer_memory), 0, NULL},
    {"batch_size", T_PYSSIZET, offsetof(AccumulatorBase, batch_size), 0, NULL},
    {"batch_records", T_PYSSIZET, offsetof(AccumulatorBase, batch_records), 0, NULL},
    {"max_records", T_PYSSIZET, offsetof(AccumulatorBase, max_records), 0, NULL},
    {"closing", T_BOOL, offsetof(AccumulatorBase, closing), 0, NULL},
    {NULL},
};

static PyTypeObject AccumulatorBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trafka.sdk._hot_append.AccumulatorBase",
    .tp_doc = "The accumulator's bounds that every append reads (trafka.sdk.batch_queues).",
    .tp_basicsize = sizeof(AccumulatorBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_members = acc_members,
};

/* -- the appender ------------------------------------------------------------------------ */

#define KEYS_NONE (-1) /* no batches kept per partition: only KIP-480's sticky batch */
#define KEYS_PYTHON 0  /* every key's partition from pick() */
#define KEYS_MURMUR2 1 /* murmur2(key) % n */
#define KEYS_CRC32 2   /* crc32(key) % n; an empty key from pick() (random_if_empty) */
#define KEYS_CRC32_ALL 3 /* crc32(key) % n, an empty key too */
#define KEYS_FNV1A 4   /* fnv1a, a non-null key */

typedef struct {
    PyObject_HEAD
    AccumulatorBase *acc;
    PyObject *sticky;        /* dict: topic -> the batch its sticky partition fills (or NULL) */
    PyObject *keyed;         /* dict: topic -> list of the batches per partition (or NULL) */
    PyObject *pick;          /* (topic, key, n) -> partition or None */
    PyObject *handle_type;   /* the handle try_send returns (a HandleBase subtype) */
    PyObject *limit_reached; /* (batch, size) -> None, or NULL */
    PyObject *wall_ms;       /* () -> int, or NULL: the system clock */
    PyObject *append_to;     /* the accumulator's bound append_to (records-bounded buffers) */
    PyObject *timed;         /* dict: topic -> (partition, until) of a timed sticky pick, or NULL */
    Py_ssize_t record_overhead;
    Py_ssize_t memory_overhead;
    int keys;
    char sticky_nulls; /* KIP-480: key-less records fill the sticky dict's batch */
    char open;         /* takes records (False once closed or failed) */
    char enabled;      /* try_send takes records (the driver's hot path) */
} Appender;

static PyObject *empty_tuple;

static int
appender_traverse(Appender *self, visitproc visit, void *arg)
{
    Py_VISIT(self->acc);
    Py_VISIT(self->sticky);
    Py_VISIT(self->keyed);
    Py_VISIT(self->pick);
    Py_VISIT(self->handle_type);
    Py_VISIT(self->limit_reached);
    Py_VISIT(self->wall_ms);
    Py_VISIT(self->append_to);
    Py_VISIT(self->timed);
    return 0;
}

static int
appender_clear(Appender *self)
{
    Py_CLEAR(self->acc);
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->keyed);
    Py_CLEAR(self->pick);
    Py_CLEAR(self->handle_type);
    Py_CLEAR(self->limit_reached);
    Py_CLEAR(self->wall_ms);
    Py_CLEAR(self->append_to);
    Py_CLEAR(self->timed);
    return 0;
}

static void
appender_dealloc(Appender *self)
{
    PyObject_GC_UnTrack(self);
    appender_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
appender_init(Appender *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"acc",           "sticky",          "keyed",           "pick",
                            "handle_type",   "record_overhead", "memory_overhead", "keys",
                            "sticky_nulls",  "limit_reached",   "wall_ms",         "timed",
                            NULL};
    PyObject *acc, *sticky, *keyed, *pick, *handle_type, *limit_reached = Py_None,
                                                          *wall_ms = Py_None, *timed = Py_None;
    Py_ssize_t record_overhead, memory_overhead;
    int keys, sticky_nulls;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!OOnnip|OOO:Appender", names,
                                     &AccumulatorBase_Type, &acc, &PyDict_Type, &sticky,
                                     &PyDict_Type, &keyed, &pick, &handle_type, &record_overhead,
                                     &memory_overhead, &keys, &sticky_nulls, &limit_reached,
                                     &wall_ms, &timed)) {
        return -1;
    }
    if (timed != Py_None && !PyDict_Check(timed)) {
        PyErr_SetString(PyExc_TypeError, "timed must be a dict or None");
        return -1;
    }
    if (!PyType_Check(handle_type) ||
        !PyType_IsSubtype((PyTypeObject *)handle_type, &HandleBase_Type)) {
        PyErr_SetString(PyExc_TypeError, "handle_type must be a subtype of HandleBase");
        return -1;
    }
    if (keys < KEYS_NONE || keys > KEYS_FNV1A) {
        PyErr_SetString(PyExc_ValueError, "keys must be one of the KEYS_* values");
        return -1;
    }
    PyObject *append_to = PyObject_GetAttrString(acc, "append_to");
    if (append_to == NULL) {
        return -1;
    }
    appender_clear(self);
    self->append_to = append_to;
    Py_INCREF(acc);
    self->acc = (AccumulatorBase *)acc;
    Py_INCREF(sticky);
    self->sticky = sticky;
    Py_INCREF(keyed);
    self->keyed = keyed;
    Py_INCREF(pick);
    self->pick = pick;
    Py_INCREF(handle_type);
    self->handle_type = handle_type;
    if (limit_reached != Py_None) {
        Py_INCREF(limit_reached);
        self->limit_reached = limit_reached;
    }
    if (wall_ms != Py_None) {
        Py_INCREF(wall_ms);
        self->wall_ms = wall_ms;
    }
    if (timed != Py_None) {
        Py_INCREF(timed);
        self->timed = timed;
    }
    self->record_overhead = record_overhead;
    self->memory_overhead = memory_overhead;
    self->keys = keys;
    self->sticky_nulls = (char)sticky_nulls;
    self->open = 1;
    self->enabled = 1;
    return 0;
}

/* The record's timestamp: int(time.time() * 1000), or wall_ms(). */
static PyObject *
timestamp_ms(Appender *self)
{
    if (self->wall_ms != NULL) {
        return PyObject_CallNoArgs(self->wall_ms);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static double
monotonic_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.monotonic()'s clock */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A timed sticky partition kept in `timed` for topic and still valid (0 <= p < n),
 * else -3 (none: ask pick()); -2 with an exception set. */
static Py_ssize_t
timed_partition(Appender *self, PyObject *topic, Py_ssize_t n)
{
    PyObject *entry = PyDict_GetItemWithError(self->timed, topic);
    if (entry == NULL) {
        return PyErr_Occurred() ? -2 : -3;
    }
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
        return -3;
    }
    Py_ssize_t p = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 0));
    double until = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, 1));
    if (PyErr_Occurred()) {
        return -2;
    }
    if (p < 0 || p >= n || monotonic_seconds() >= until) {
        return -3;
    }
    return p;
}

/* Python's pick(topic, key, n): the partition (0 <= p < n), -1 for "open a batch"
 * (no metadata), -2 with an exception set. A pick of (partition, until) is kept in
 * `timed` for the topic. */
static Py_ssize_t
python_pick(Appender *self, PyObject *topic, PyObject *key, Py_ssize_t n)
{
    PyObject *count = PyLong_FromSsize_t(n);
    if (count == NULL) {
        return -2;
    }
    PyObject *args[3] = {topic, key, count};
    PyObject *got = PyObject_Vectorcall(self->pick, args, 3, NULL);
    Py_DECREF(count);
    if (got == NULL) {
        return -2;
    }
    if (got == Py_None) {
        Py_DECREF(got);
        return -1;
    }
    if (PyTuple_CheckExact(got) && PyTuple_GET_SIZE(got) == 2) {
        if (self->timed != NULL && PyDict_SetItem(self->timed, topic, got) < 0) {
            Py_DECREF(got);
            return -2;
        }
        PyObject *first = PyTuple_GET_ITEM(got, 0);
        Py_INCREF(first);
        Py_SETREF(got, first);
    }
    Py_ssize_t p = PyLong_AsSsize_t(got);
    Py_DECREF(got);
    if (p == -1 && PyErr_Occurred()) {
        return -2;
    }
    if (p < 0 || p >= n) {
        PyErr_Format(PyExc_ValueError, "pick() gave partition %zd of %zd", p, n);
        return -2;
    }
    return p;
}

/* The rest of append() for the batch chosen (a borrowed reference): a new reference
 * to the batch, or to True / False; NULL on an error. */
static PyObject *
append_to_batch(Appender *self, PyObject *batch, PyObject *key, PyObject *value, Py_ssize_t size)
{
    if (batch == Py_None) {
        Py_RETURN_TRUE;
    }
    if (!PyObject_TypeCheck(batch, &BatchBase_Type)) {
        Py_RETURN_FALSE;
    }
    BatchBase *b = (BatchBase *)batch;
    /* In a transaction, a batch kept here was opened in this one, so its partition
     * is already part of it: the moment the transaction takes no more records,
     * the core forgets these batches. */
    if (b->full || b->done) {
        Py_RETURN_TRUE;
    }
    AccumulatorBase *acc = self->acc;
    if (acc->max_records) { /* a buffer bounded in records: the accumulator's own check */
        PyObject *ts = timestamp_ms(self);
        if (ts == NULL) {
            return NULL;
        }
        PyObject *sz = PyLong_FromSsize_t(size);
        if (sz == NULL) {
            Py_DECREF(ts);
            return NULL;
        }
        PyObject *args[5] = {batch, ts, key, value, sz};
        PyObject *got = PyObject_Vectorcall(self->append_to, args, 5, NULL);
        Py_DECREF(ts);
        Py_DECREF(sz);
        if (got == NULL) {
            return NULL;
        }
        if (got == Py_True) {
            Py_DECREF(got);
            Py_INCREF(batch);
            return batch;
        }
        int again = got == Py_False;
        Py_DECREF(got);
        return PyBool_FromLong(again);
    }
    PyObject *records = b->records;
    if (records == NULL || !PyList_CheckExact(records)) {
        Py_RETURN_FALSE;
    }
    Py_ssize_t count = PyList_GET_SIZE(records);
    Py_ssize_t batch_bytes = b->size + size;
    if (batch_bytes > acc->batch_size && count) {
        Py_RETURN_TRUE; /* no room: another batch must be opened */
    }
    Py_ssize_t charge = size + self->memory_overhead;
    if (charge > acc->buffer_memory - acc->used_memory || acc->closing) {
        Py_RETURN_FALSE; /* no memory now: the general path waits for it */
    }
    if (acc->batch_records && count >= acc->batch_records) {
        b->full = 1;
        Py_RETURN_TRUE;
    }
    PyObject *ts = timestamp_ms(self);
    if (ts == NULL) {
        return NULL;
    }
    PyObject *record = PyTuple_New(4);
    if (record == NULL) {
        Py_DECREF(ts);
        return NULL;
    }
    PyTuple_SET_ITEM(record, 0, ts);
    Py_INCREF(key);
    PyTuple_SET_ITEM(record, 1, key);
    Py_INCREF(value);
    PyTuple_SET_ITEM(record, 2, value);
    Py_INCREF(empty_tuple);
    PyTuple_SET_ITEM(record, 3, empty_tuple);
    /* Ints, bytes, None and (): the tuple can be part of no cycle, and it lives
     * until its batch is acknowledged; tracked, every collection meanwhile would
     * walk the buffered records (CPython untracks such a tuple only when a
     * collection first sees it). */
    PyObject_GC_UnTrack(record);
    int rc = PyList_Append(records, record);
    Py_DECREF(record);
    if (rc < 0) {
        return NULL;
    }
    acc->used_memory += charge;
    b->memory += charge;
    b->size = batch_bytes;
    if (batch_bytes >= acc->batch_size) {
        b->full = 1;
    }
    else if (acc->batch_records && count + 1 >= acc->batch_records) {
        b->full = 1;
        b->limit = 0; /* the hot paths look at a batch reaching its limit */
    }
    Py_INCREF(batch);
    return batch;
}

/* append(): a new reference to the batch, or to True / False; NULL on an error. */
static PyObject *
do_append(Appender *self, PyObject *topic, PyObject *value, PyObject *key)
{
    if (!PyBytes_CheckExact(value) || !PyUnicode_CheckExact(topic) || !self->open) {
        Py_RETURN_FALSE;
    }
    PyObject *batch = NULL; /* a new reference, once found */
    Py_ssize_t size = self->record_overhead + PyBytes_GET_SIZE(value);
    if (key == Py_None && self->sticky_nulls) {
        batch = PyDict_GetItemWithError(self->sticky, topic);
        if (batch == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_TRUE;
        }
        Py_INCREF(batch);
    }
    else if (self->keys != KEYS_NONE && (key == Py_None || PyBytes_CheckExact(key))) {
        PyObject *slots = PyDict_GetItemWithError(self->keyed, topic);
        if (slots == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_TRUE;
        }
        if (!PyList_CheckExact(slots)) {
            Py_RETURN_FALSE;
        }
        Py_ssize_t n = PyList_GET_SIZE(slots);
        if (n == 0) {
            Py_RETURN_TRUE;
        }
        Py_ssize_t p = -3;
        if (key != Py_None) {
            const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(key);
            Py_ssize_t klen = PyBytes_GET_SIZE(key);
            size += klen;
            if (klen <= INT32_MAX) {
                switch (self->keys) {
                case KEYS_MURMUR2:
                    p = (Py_ssize_t)key_partition(HASH_MURMUR2, k, (int32_t)klen, n);
                    break;
                case KEYS_CRC32:
                    if (klen > 0) {
                        p = (Py_ssize_t)key_partition(HASH_CRC32, k, (int32_t)klen, n);
                    }
                    break;
                case KEYS_CRC32_ALL:
                    p = (Py_ssize_t)key_partition(HASH_CRC32, k, (int32_t)klen, n);
                    break;
                case KEYS_FNV1A:
                    p = (Py_ssize_t)key_partition(HASH_FNV1A, k, (int32_t)klen, n);
                    break;
                }
            }
        }
        if (p == -3 && self->timed != NULL && (key == Py_None || PyBytes_GET_SIZE(key) == 0)) {
            p = timed_partition(self, topic, n);
            if (p == -2) {
                return NULL;
            }
            if (p >= 0) {
                batch = PyList_GET_ITEM(slots, p);
                Py_INCREF(batch);
            }
        }
        if (p == -3) {
            Py_INCREF(slots); /* Python code runs: the dict may drop the list */
            p = python_pick(self, topic, key, n);
            if (p >= 0 && PyList_GET_SIZE(slots) != n) {
                p = -1; /* the list changed under the pick: open a batch */
            }
            batch = p >= 0 ? PyList_GET_ITEM(slots, p) : NULL;
            Py_XINCREF(batch);
            Py_DECREF(slots);
            if (p == -2) {
                return NULL;
            }
            if (p == -1) {
                Py_RETURN_TRUE;
            }
        }
        else if (batch == NULL) {
            batch = PyList_GET_ITEM(slots, p);
            Py_INCREF(batch);
        }
    }
    else {
        Py_RETURN_FALSE;
    }
    PyObject *got = append_to_batch(self, batch, key, value, size);
    Py_DECREF(batch);
    return got;
}

/* try_send(topic, value=None, key=None)'s arguments, positional or by name. */
static int
unpack3(const char *name, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
        PyObject **topic, PyObject **value, PyObject **key)
{
    static const char *const names[3] = {"topic", "value", "key"};
    PyObject *got[3] = {NULL, NULL, NULL};
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most 3 arguments (%zd given)", name, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        got[i] = args[i];
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        int j = 0;
        while (j < 3 && PyUnicode_CompareWithASCIIString(kw, names[j]) != 0) {
            j++;
        }
        if (j == 3) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", name, kw);
            return -1;
        }
        if (got[j] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", name,
                         names[j]);
            return -1;
        }
        got[j] = args[nargs + i];
    }
    if (got[0] == NULL) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'topic'", name);
        return -1;
    }
    *topic = got[0];
    *value = got[1] == NULL ? Py_None : got[1];
    *key = got[2] == NULL ? Py_None : got[2];
    return 0;
}

PyDoc_STRVAR(append_doc,
"append(topic, value, key, /) -> batch | bool\n\n"
"ProducerCore.append_hot: the batch the record joined (as its last record), True\n"
"when a batch must be opened for it, False when the general path must take it.");

static PyObject *
appender_append(Appender *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "append() takes a topic, a value and a key");
        return NULL;
    }
    return do_append(self, args[0], args[1], args[2]);
}

/* The handle of the record do_append() put last in `got` (whose reference it takes),
 * after limit_reached(batch, size) once the batch reached its limit. */
static PyObject *
handle_of(Appender *self, PyObject *got)
{
    BatchBase *b = (BatchBase *)got;
    Py_ssize_t index = PyList_GET_SIZE(b->records) - 1;
    if (b->size >= b->limit && self->limit_reached != NULL) { /* full, or a poll is due */
        PyObject *size = PyLong_FromSsize_t(b->size);
        if (size == NULL) {
            Py_DECREF(got);
            return NULL;
        }
        PyObject *cargs[2] = {got, size};
        PyObject *r = PyObject_Vectorcall(self->limit_reached, cargs, 2, NULL);
        Py_DECREF(size);
        if (r == NULL) {
            Py_DECREF(got);
            return NULL;
        }
        Py_DECREF(r);
    }
    PyTypeObject *type = (PyTypeObject *)self->handle_type;
    HandleBase *handle = (HandleBase *)type->tp_alloc(type, 0);
    if (handle == NULL) {
        Py_DECREF(got);
        return NULL;
    }
    handle->batch = got; /* the reference do_append gave */
    handle->index = index;
    return (PyObject *)handle;
}

PyDoc_STRVAR(take_doc,
"take(topic, value, key, /) -> handle | bool\n\n"
"append(), answering the record's handle (after limit_reached(batch, size) once the\n"
"batch reached its limit) instead of its batch.");

static PyObject *
appender_take(Appender *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "take() takes a topic, a value and a key");
        return NULL;
    }
    PyObject *got = do_append(self, args[0], args[1], args[2]);
    if (got == NULL || PyBool_Check(got)) {
        return got;
    }
    return handle_of(self, got);
}

PyDoc_STRVAR(try_send_doc,
"try_send(topic, value=None, key=None) -> handle | None\n\n"
"The async producer's try_send: take() when enabled, None for a record it did not take.");

static PyObject *
appender_try_send(Appender *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *topic, *value, *key;
    if (unpack3("try_send", args, nargs, kwnames, &topic, &value, &key) < 0) {
        return NULL;
    }
    if (!self->enabled) {
        Py_RETURN_NONE;
    }
    PyObject *got = do_append(self, topic, value, key);
    if (got == NULL) {
        return NULL;
    }
    if (PyBool_Check(got)) {
        Py_DECREF(got);
        Py_RETURN_NONE;
    }
    return handle_of(self, got);
}

static PyMethodDef appender_methods[] = {
    {"append", (PyCFunction)(void (*)(void))appender_append, METH_FASTCALL, append_doc},
    {"take", (PyCFunction)(void (*)(void))appender_take, METH_FASTCALL, take_doc},
    {"try_send", (PyCFunction)(void (*)(void))appender_try_send, METH_FASTCALL | METH_KEYWORDS,
     try_send_doc},
    {NULL},
};

static PyMemberDef appender_members[] = {
    {"open", T_BOOL, offsetof(Appender, open), 0, "takes records (False once closed or failed)"},
    {"enabled", T_BOOL, offsetof(Appender, enabled), 0, "try_send takes records"},
    {NULL},
};

static PyTypeObject Appender_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trafka.sdk._hot_append.Appender",
    .tp_doc = "The producer's per-record path (see trafka.sdk.hot_append.PyAppender).",
    .tp_basicsize = sizeof(Appender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)appender_init,
    .tp_traverse = (traverseproc)appender_traverse,
    .tp_clear = (inquiry)appender_clear,
    .tp_dealloc = (destructor)appender_dealloc,
    .tp_methods = appender_methods,
    .tp_members = appender_members,
};

/* -- the blocking front ------------------------------------------------------------------- */

/*
 * Front.send(topic, value=None, key=None) is trafka.sdk.blocking.Producer.send for a
 * record given nothing else, in one call: the loop's lock taken without waiting,
 * the appender's take() while the loop waits for I/O, the loop's turn given when it
 * asks, the sender woken once a batch is full. Whatever it does not finish goes to
 * the producer's Python code, which is the reference: a call with any other
 * argument, a lock the loop holds, records queued or a close begun (all to `slow`,
 * the Python send), and a record take() did not take (to `general`).
 */
typedef struct {
    PyObject_HEAD
    Appender *appender;
    PyObject *acquire;   /* the loop lock's lock.acquire */
    PyObject *release;   /* its release */
    PyObject *loop_lock; /* .wanted: the loop waits for the lock */
    PyObject *owner;     /* ._draining: records are queued for the loop */
    PyObject *portal;    /* .closing */
    PyObject *slow;      /* the Python send */
    PyObject *general;   /* (topic, value, key, None, None, None, taken) */
    PyObject *wake;      /* () : a batch is full */
    PyObject *give_turn; /* () -> event, with the lock held: the loop's turn */
    PyObject *wait_turn; /* (event) */
} Front;

static PyObject *s_draining, *s_closing, *s_wanted;

static int
front_traverse(Front *self, visitproc visit, void *arg)
{
    Py_VISIT(self->appender);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->loop_lock);
    Py_VISIT(self->owner);
    Py_VISIT(self->portal);
    Py_VISIT(self->slow);
    Py_VISIT(self->general);
    Py_VISIT(self->wake);
    Py_VISIT(self->give_turn);
    Py_VISIT(self->wait_turn);
    return 0;
}

static int
front_clear(Front *self)
{
    Py_CLEAR(self->appender);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->loop_lock);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->portal);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->general);
    Py_CLEAR(self->wake);
    Py_CLEAR(self->give_turn);
    Py_CLEAR(self->wait_turn);
    return 0;
}

static void
front_dealloc(Front *self)
{
    PyObject_GC_UnTrack(self);
    front_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
front_init(Front *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"appender", "lock", "loop_lock", "owner", "portal", "slow",
                            "general", "wake", "give_turn", "wait_turn", NULL};
    PyObject *appender, *lock, *loop_lock, *owner, *portal, *slow, *general, *wake, *give_turn,
        *wait_turn;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOOOOOOOO:Front", names, &Appender_Type,
                                     &appender, &lock, &loop_lock, &owner, &portal, &slow,
                                     &general, &wake, &give_turn, &wait_turn)) {
        return -1;
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    if (acquire == NULL) {
        return -1;
    }
    PyObject *release = PyObject_GetAttrString(lock, "release");
    if (release == NULL) {
        Py_DECREF(acquire);
        return -1;
    }
    front_clear(self);
    self->acquire = acquire;
    self->release = release;
    Py_INCREF(appender);
    self->appender = (Appender *)appender;
    PyObject **slots[] = {&self->loop_lock, &self->owner,   &self->portal,    &self->slow,
                          &self->general,   &self->wake,    &self->give_turn, &self->wait_turn};
    PyObject *given[] = {loop_lock, owner, portal, slow, general, wake, give_turn, wait_turn};
    for (int i = 0; i < 8; i++) {
        Py_INCREF(given[i]);
        *slots[i] = given[i];
    }
    return 0;
}

/* Whether obj.name is true: 1, 0, or -1 with an exception set. */
static int
attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        return -1;
    }
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

static int
unlock(Front *self)
{
    PyObject *r = PyObject_CallNoArgs(self->release);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

PyDoc_STRVAR(front_send_doc,
"send(topic, value=None, key=None, **kwargs) -> SendFuture\n\n"
"The blocking producer's send (see the Front type's comment).");

static PyObject *
front_send(Front *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || nargs < 1 || nargs > 3) {
        return PyObject_Vectorcall(self->slow, args, nargs, kwnames);
    }
    PyObject *topic = args[0];
    PyObject *value = nargs > 1 ? args[1] : Py_None;
    PyObject *key = nargs > 2 ? args[2] : Py_None;
    PyObject *no = Py_False;
    PyObject *got = PyObject_Vectorcall(self->acquire, &no, 1, NULL);
    if (got == NULL) {
        return NULL;
    }
    int locked = got == Py_True;
    Py_DECREF(got);
    if (!locked) { /* the loop runs (or this is its thread): the Python send waits */
        return PyObject_Vectorcall(self->slow, args, nargs, NULL);
    }
    int queued = attr_true(self->owner, s_draining);
    int closing = queued ? queued : attr_true(self->portal, s_closing);
    PyObject *taken = NULL;
    if (queued == 0 && closing == 0) {
        taken = do_append(self->appender, topic, value, key);
        if (taken != NULL && !PyBool_Check(taken)) {
            taken = handle_of(self->appender, taken);
        }
    }
    else if (queued >= 0 && closing >= 0) {
        taken = Py_False; /* records go behind the queued ones: the general path */
        Py_INCREF(taken);
    }
    PyObject *turn = NULL;
    if (taken != NULL) {
        int wanted = attr_true(self->loop_lock, s_wanted);
        if (wanted > 0) {
            turn = PyObject_CallNoArgs(self->give_turn);
        }
        if (wanted < 0 || (wanted > 0 && turn == NULL)) {
            Py_CLEAR(taken);
        }
    }
    if (taken == NULL) { /* an error is set: the lock is released all the same */
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        if (unlock(self) < 0) {
            PyErr_Clear(); /* the first error is the one to tell */
        }
        PyErr_Restore(type, exc, tb);
        Py_XDECREF(turn);
        return NULL;
    }
    if (unlock(self) < 0) {
        Py_DECREF(taken);
        Py_XDECREF(turn);
        return NULL;
    }
    if (turn != NULL) {
        PyObject *r = PyObject_CallOneArg(self->wait_turn, turn);
        Py_DECREF(turn);
        if (r == NULL) {
            Py_XDECREF(taken);
            return NULL;
        }
        Py_DECREF(r);
    }
    if (taken == NULL) {
        return NULL;
    }
    if (PyBool_Check(taken)) {
        PyObject *gargs[7] = {topic, value, key, Py_None, Py_None, Py_None, taken};
        PyObject *future = PyObject_Vectorcall(self->general, gargs, 7, NULL);
        Py_DECREF(taken);
        return future;
    }
    if (((BatchBase *)((HandleBase *)taken)->batch)->full) { /* once per batch */
        PyObject *r = PyObject_CallNoArgs(self->wake);
        if (r == NULL) {
            Py_DECREF(taken);
            return NULL;
        }
        Py_DECREF(r);
    }
    return taken;
}

static PyMethodDef front_methods[] = {
    {"send", (PyCFunction)(void (*)(void))front_send, METH_FASTCALL | METH_KEYWORDS,
     front_send_doc},
    {NULL},
};

static PyTypeObject Front_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trafka.sdk._hot_append.Front",
    .tp_doc = "The blocking producer's send for a record given nothing else, in one call.",
    .tp_basicsize = sizeof(Front),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)front_init,
    .tp_traverse = (traverseproc)front_traverse,
    .tp_clear = (inquiry)front_clear,
    .tp_dealloc = (destructor)front_dealloc,
    .tp_methods = front_methods,
};

/* -- confluent-kafka's produce ------------------------------------------------------------ */

/*
 * GroupedSend.produce(topic, value=None, key=None, partition=-1, on_delivery=None,
 * timestamp=0, headers=None, callback=None) is confluent-kafka's Producer.produce over
 * a send (the blocking producer's): a record is counted until the delivery reports of
 * its batch are served (len() = produced - served, bounded by `max`:
 * queue.buffering.max.messages), and joins its batch's group in `groups` (batch ->
 * [batch, records, reports], join_group: the records counted, and what a record's report
 * needs kept only for a record with one); the first record of a group hands it to
 * first(future, group), which has it served once the batch is done. A call with a partition, a timestamp, headers, or a key or value other than
 * bytes or None, a full buffer and a failed send go to the Python produce (`slow`,
 * the reference), `failed` (which raises the error as the drop-in's).
 *
 * The counts and groups are changed only here, without a lock: with the GIL held and
 * no Python code run between reading and writing them, each change is atomic for the
 * Python code that shares them (the delivery removes a group from `groups` before it
 * reads its count, so no record joins it after). reserve(), unreserve() and join()
 * are the same changes for the Python produce. Builds without a GIL are
 * not supported (this module declares no free-threading support).
 */
typedef struct {
    PyObject_HEAD
    PyObject *send;       /* (topic, value, key) -> future (a HandleBase) */
    PyObject *groups;     /* dict: batch -> group */
    PyObject *first;      /* (future, group) */
    PyObject *slow;       /* the Python produce */
    PyObject *failed;     /* (exception): raises the drop-in's error */
    PyObject *report;     /* the configuration's delivery report, or NULL */
    Py_ssize_t produced;
    Py_ssize_t served;
    Py_ssize_t max;
} GroupedSend;

static PyObject *minus_one;

static int
grouped_traverse(GroupedSend *self, visitproc visit, void *arg)
{
    Py_VISIT(self->send);
    Py_VISIT(self->groups);
    Py_VISIT(self->first);
    Py_VISIT(self->slow);
    Py_VISIT(self->failed);
    Py_VISIT(self->report);
    return 0;
}

static int
grouped_clear(GroupedSend *self)
{
    Py_CLEAR(self->send);
    Py_CLEAR(self->groups);
    Py_CLEAR(self->first);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->report);
    return 0;
}

static void
grouped_dealloc(GroupedSend *self)
{
    PyObject_GC_UnTrack(self);
    grouped_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
grouped_init(GroupedSend *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"send", "groups", "first", "slow", "failed", "report", "max", NULL};
    PyObject *send, *groups, *first, *slow, *failed, *report;
    Py_ssize_t max;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OOOOn:GroupedSend", names, &send,
                                     &PyDict_Type, &groups, &first, &slow, &failed, &report,
                                     &max)) {
        return -1;
    }
    grouped_clear(self);
    PyObject **slots[] = {&self->send, &self->groups, &self->first, &self->slow, &self->failed};
    PyObject *given[] = {send, groups, first, slow, failed};
    for (int i = 0; i < 5; i++) {
        Py_INCREF(given[i]);
        *slots[i] = given[i];
    }
    if (report != Py_None) {
        Py_INCREF(report);
        self->report = report;
    }
    self->max = max;
    return 0;
}

/* produce()'s arguments by position or name, NULL where not given; -1 on misuse. */
static int
produce_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **got)
{
    static const char *const names[8] = {"topic",       "value",     "key",     "partition",
                                         "on_delivery", "timestamp", "headers", "callback"};
    for (int i = 0; i < 8; i++) {
        got[i] = NULL;
    }
    if (nargs > 8) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        got[i] = args[i];
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        int j = 0;
        while (j < 8 && PyUnicode_CompareWithASCIIString(kw, names[j]) != 0) {
            j++;
        }
        if (j == 8 || got[j] != NULL) {
            return -1;
        }
        got[j] = args[nargs + i];
    }
    return got[0] == NULL ? -1 : 0;
}

static int
is_bytes_or_none(PyObject *v)
{
    return v == NULL || v == Py_None || PyBytes_CheckExact(v);
}

/* Whether v is absent or the int 0 / None (timestamp), or a negative int (partition). */
static int
no_timestamp(PyObject *v)
{
    if (v == NULL || v == Py_None) {
        return 1;
    }
    if (!PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow = 0;
    long t = PyLong_AsLongAndOverflow(v, &overflow);
    return overflow == 0 && t == 0;
}

static int
no_partition(PyObject *v)
{
    if (v == NULL) {
        return 1;
    }
    if (!PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow = 0;
    long p = PyLong_AsLongAndOverflow(v, &overflow);
    return overflow == 0 && p < 0;
}

/* The first truthy of on_delivery, callback and the configuration's report: a new
 * reference, NULL for none (-1 on an error). */
static int
report_of(GroupedSend *self, PyObject *on_delivery, PyObject *callback, PyObject **out)
{
    PyObject *given[2] = {on_delivery, callback};
    for (int i = 0; i < 2; i++) {
        if (given[i] != NULL) {
            int t = PyObject_IsTrue(given[i]);
            if (t < 0) {
                return -1;
            }
            if (t) {
                Py_INCREF(given[i]);
                *out = given[i];
                return 0;
            }
        }
    }
    *out = self->report;
    Py_XINCREF(*out);
    return 0;
}

/* The record of `future` joins its batch's group ([batch, records, reports]: a list
 * made and changed only here, so that each change is atomic), with `entry` (its
 * report's, or NULL) in reports: the group, new, when the record is its first (the
 * caller has it served once the batch is done), else None (new references); NULL
 * with an exception set. */
static PyObject *
join_group(GroupedSend *self, PyObject *future, PyObject *entry)
{
    PyObject *batch = PyObject_TypeCheck(future, &HandleBase_Type) ? ((HandleBase *)future)->batch
                                                                   : NULL;
    if (batch == NULL) {
        batch = Py_None; /* queued for the loop: a group of its own */
    }
    PyObject *group = NULL;
    if (batch != Py_None) {
        group = PyDict_GetItemWithError(self->groups, batch);
        if (group == NULL && PyErr_Occurred()) {
            return NULL;
        }
    }
    int first = group == NULL;
    if (first) {
        PyObject *reports = PyList_New(0);
        if (reports == NULL) {
            return NULL;
        }
        group = PyList_New(3);
        if (group == NULL) {
            Py_DECREF(reports);
            return NULL;
        }
        Py_INCREF(batch);
        PyList_SET_ITEM(group, 0, batch);
        PyList_SET_ITEM(group, 1, PyLong_FromLong(0));
        PyList_SET_ITEM(group, 2, reports);
        if (PyList_GET_ITEM(group, 1) == NULL ||
            (batch != Py_None && PyDict_SetItem(self->groups, batch, group) < 0)) {
            Py_DECREF(group);
            return NULL;
        }
    }
    else {
        Py_INCREF(group);
    }
    if (!PyList_CheckExact(group) || PyList_GET_SIZE(group) != 3) {
        Py_DECREF(group);
        PyErr_SetString(PyExc_TypeError, "a group is a list [batch, records, reports]");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(PyList_GET_ITEM(group, 1));
    PyObject *count = n == -1 && PyErr_Occurred() ? NULL : PyLong_FromSsize_t(n + 1);
    if (count == NULL) {
        Py_DECREF(group);
        return NULL;
    }
    PyList_SetItem(group, 1, count); /* steals count */
    if (entry != NULL && PyList_Append(PyList_GET_ITEM(group, 2), entry) < 0) {
        /* (MemoryError) counted without its report: take the count back */
        PyList_SetItem(group, 1, PyLong_FromSsize_t(n));
        Py_DECREF(group);
        return NULL;
    }
    if (first) {
        return group;
    }
    Py_DECREF(group);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(join_doc,
"join(future, entry, /) -> group | None\n\n"
"The record of future joins its batch's group [batch, records, reports] (entry, its\n"
"report's or None, appended to reports): the group when the record is its first.");

static PyObject *
grouped_join(GroupedSend *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "join() takes a future and an entry");
        return NULL;
    }
    return join_group(self, args[0], args[1] == Py_None ? NULL : args[1]);
}

PyDoc_STRVAR(produce_doc,
"produce(topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0,\n"
"        headers=None, callback=None) -> None\n\n"
"confluent-kafka's Producer.produce (see the GroupedSend type's comment).");

static PyObject *
grouped_produce(GroupedSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *a[8];
    if (produce_args(args, nargs, kwnames, a) < 0 || !is_bytes_or_none(a[1]) ||
        !is_bytes_or_none(a[2]) || !no_partition(a[3]) || !no_timestamp(a[5]) ||
        !(a[6] == NULL || a[6] == Py_None) ||
        (self->max && self->produced - self->served >= self->max)) {
        return PyObject_Vectorcall(self->slow, args, nargs, kwnames);
    }
    PyObject *topic = a[0];
    PyObject *value = a[1] == NULL ? Py_None : a[1];
    PyObject *key = a[2] == NULL ? Py_None : a[2];
    PyObject *report;
    if (report_of(self, a[4], a[7], &report) < 0) {
        return NULL;
    }
    self->produced++;
    PyObject *sargs[3] = {topic, value, key};
    PyObject *future = PyObject_Vectorcall(self->send, sargs, 3, NULL);
    if (future == NULL) {
        Py_XDECREF(report);
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        PyErr_NormalizeException(&type, &exc, &tb);
        if (tb != NULL && exc != NULL) {
            PyException_SetTraceback(exc, tb);
        }
        PyObject *r = exc == NULL ? NULL : PyObject_CallOneArg(self->failed, exc);
        Py_XDECREF(type);
        Py_XDECREF(exc);
        Py_XDECREF(tb);
        if (r != NULL) { /* failed() must raise */
            Py_DECREF(r);
            PyErr_SetString(PyExc_SystemError, "failed() returned");
        }
        return NULL;
    }
    PyObject *entry = NULL;
    if (report != NULL) { /* what the report needs, kept only for a report */
        PyObject *partition = a[3] == NULL ? minus_one : a[3];
        PyObject *headers = a[6] == NULL ? Py_None : a[6];
        entry = PyTuple_Pack(7, future, report, topic, partition, key, value, headers);
        Py_DECREF(report);
        if (entry == NULL) {
            self->produced--; /* (MemoryError) in no group: not counted */
            Py_DECREF(future);
            return NULL;
        }
    }
    PyObject *group = join_group(self, future, entry);
    Py_XDECREF(entry);
    if (group == NULL) {
        self->produced--;
        Py_DECREF(future);
        return NULL;
    }
    if (group != Py_None) { /* the group's first record */
        PyObject *fargs[2] = {future, group};
        PyObject *r = PyObject_Vectorcall(self->first, fargs, 2, NULL);
        Py_DECREF(group);
        Py_DECREF(future);
        if (r == NULL) {
            return NULL;
        }
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    Py_DECREF(group);
    Py_DECREF(future);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(reserve_doc,
"reserve() -> bool\n\nCount one more record produced, unless max are awaiting their report.");

static PyObject *
grouped_reserve(GroupedSend *self, PyObject *unused)
{
    if (self->max && self->produced - self->served >= self->max) {
        Py_RETURN_FALSE;
    }
    self->produced++;
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(unreserve_doc, "unreserve() -> None\n\nA record reserve() counted was not produced.");

static PyObject *
grouped_unreserve(GroupedSend *self, PyObject *unused)
{
    self->produced--;
    Py_RETURN_NONE;
}

static PyMethodDef grouped_methods[] = {
    {"produce", (PyCFunction)(void (*)(void))grouped_produce, METH_FASTCALL | METH_KEYWORDS,
     produce_doc},
    {"reserve", (PyCFunction)grouped_reserve, METH_NOARGS, reserve_doc},
    {"join", (PyCFunction)(void (*)(void))grouped_join, METH_FASTCALL, join_doc},
    {"unreserve", (PyCFunction)grouped_unreserve, METH_NOARGS, unreserve_doc},
    {NULL},
};

static PyMemberDef grouped_members[] = {
    {"produced", T_PYSSIZET, offsetof(GroupedSend, produced), 0, "records counted so far"},
    {"served", T_PYSSIZET, offsetof(GroupedSend, served), 0, "records whose report was served"},
    {"max", T_PYSSIZET, offsetof(GroupedSend, max), READONLY, "the bound (0: none)"},
    {NULL},
};

static PyTypeObject GroupedSend_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trafka.sdk._hot_append.GroupedSend",
    .tp_doc = "confluent-kafka's produce() over a blocking send, in one call.",
    .tp_basicsize = sizeof(GroupedSend),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)grouped_init,
    .tp_traverse = (traverseproc)grouped_traverse,
    .tp_clear = (inquiry)grouped_clear,
    .tp_dealloc = (destructor)grouped_dealloc,
    .tp_methods = grouped_methods,
    .tp_members = grouped_members,
};

/* -- module ------------------------------------------------------------------------------- */

static struct PyModuleDef hot_append_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "trafka.sdk._hot_append",
    .m_doc = "The producer's per-record path in C (reference: trafka.sdk.hot_append).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__hot_append(void)
{
    PyTypeObject *types[] = {&BatchBase_Type, &HandleBase_Type, &AccumulatorBase_Type,
                             &Appender_Type, &Front_Type, &GroupedSend_Type};
    const char *names[] = {"BatchBase", "HandleBase", "AccumulatorBase",
                           "Appender",  "Front",      "GroupedSend"};
    minus_one = PyLong_FromLong(-1);
    if (minus_one == NULL) {
        return NULL;
    }
    s_draining = PyUnicode_InternFromString("_draining");
    s_closing = PyUnicode_InternFromString("closing");
    s_wanted = PyUnicode_InternFromString("wanted");
    if (s_draining == NULL || s_closing == NULL || s_wanted == NULL) {
        return NULL;
    }
    for (int i = 0; i < 6; i++) {
        if (PyType_Ready(types[i]) < 0) {
            return NULL;
        }
    }
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&hot_append_module);
    if (m == NULL) {
        return NULL;
    }
    for (int i = 0; i < 6; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
