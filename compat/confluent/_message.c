/*
 * trafka.compat.confluent._message: the consumed record as confluent-kafka's
 * Message, in C (optional).
 *
 * The reference is _Fetched in trafka/compat/confluent/_consumer.py: a view of
 * the SDK's record tuple (ConsumerRecord: topic, partition, offset, timestamp,
 * key, value, headers, timestamp_type, leader_epoch), each field read when
 * asked. Rules:
 *
 * - FetchedMessage holds the record tuple and nothing else; its methods are
 *   confluent-kafka's Message's, with the same answers as _Fetched's
 *   (tests/compat/test_confluent_consumer.py holds the two to each other).
 * - wrap(records) is the list of views of a list of record tuples, made in one
 *   call: the consumer's per-record cost of handing a record out.
 * - headers() makes its list once (confluent-kafka answers the same list at
 *   every call) or None when there are none; the setters put a new record in
 *   place (the tuple's own _replace).
 * - The type is registered as a virtual subclass of Message by the Python side.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum {
    R_TOPIC, R_PARTITION, R_OFFSET, R_TIMESTAMP, R_KEY, R_VALUE, R_HEADERS, R_TS_TYPE,
    R_EPOCH, R_FIELDS
};

/* confluent-kafka's timestamp types */
enum { TS_NOT_AVAILABLE = 0, TS_CREATE_TIME = 1, TS_LOG_APPEND_TIME = 2 };

typedef struct {
    PyObject_HEAD
    PyObject *r;     /* the record: a tuple of at least R_FIELDS items */
    PyObject *error; /* NULL, or what set_error() gave */
} Fetched;

static PyTypeObject FetchedType;

static PyObject *
fetched_of(PyObject *record)
{
    if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) < R_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "a consumer record tuple is required");
        return NULL;
    }
    Fetched *self = PyObject_GC_New(Fetched, &FetchedType);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(record);
    self->r = record;
    self->error = NULL;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyObject *
fetched_new(PyTypeObject *Py_UNUSED(type), PyObject *args, PyObject *kwargs)
{
    PyObject *record;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "FetchedMessage takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O:FetchedMessage", &record)) {
        return NULL;
    }
    return fetched_of(record);
}

static int
fetched_traverse(Fetched *self, visitproc visit, void *arg)
{
    Py_VISIT(self->r);
    Py_VISIT(self->error);
    return 0;
}

static int
fetched_clear(Fetched *self)
{
    Py_CLEAR(self->r);
    Py_CLEAR(self->error);
    return 0;
}

static void
fetched_dealloc(Fetched *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->r);
    Py_CLEAR(self->error);
    PyObject_GC_Del(self);
}

static PyObject *
field(Fetched *self, Py_ssize_t i)
{
    if (self->r == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "message cleared");
        return NULL;
    }
    PyObject *v = PyTuple_GET_ITEM(self->r, i);
    Py_INCREF(v);
    return v;
}

static PyObject *
m_topic(Fetched *self, PyObject *Py_UNUSED(ignored))
{
    return field(self, R_TOPIC);
}

static PyObject *
m_partition(Fetched *self, PyObject *Py_UNUSED(ignored))
{
    return field(self, R_PARTITION);
}

static PyObject *
m_offset(Fetched *self, PyObject *Py_UNUSED(ignored))
{
    return field(self, R_OFFSET);
}

static PyObject *
m_key(Fetched *self, PyObject *Py_UNUSED(ignored))
{
    return field(self, R_KEY);
}

static PyObject *
m_value(Fetched *self, PyObject *Py_UNUSED(ignored))
{
    return field(self, R_VALUE);
}

static PyObject *
m_error(Fetched *self, PyObject *Py_UNUSED(ignored))
{
    if (self->error == NULL) {
        Py_RETURN_NONE;
    }
    Py_INCREF(self->error);
    return self->error;
}

static PyObject *
m_set_error(Fetched *self, PyObject *error)
{
    Py_INCREF(error);
    Py_XSETREF(self->error, error);
    Py_RETURN_NONE;
}

static PyObject *
m_none(Fetched *Py_UNUSED(self), PyObject *Py_UNUSED(ignored))
{
    Py_RETURN_NONE;
}

/* r._replace(<name>=value): the record with one field changed, put in place. */
static int
replace_field(Fetched *self, const char *name, PyObject *value)
{
    if (self->r == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "message cleared");
        return -1;
    }
    PyObject *method = PyObject_GetAttrString(self->r, "_replace");
    if (method == NULL) {
        return -1;
    }
    PyObject *kwargs = Py_BuildValue("{sO}", name, value);
    if (kwargs == NULL) {
        Py_DECREF(method);
        return -1;
    }
    PyObject *empty = PyTuple_New(0);
    PyObject *record = empty == NULL ? NULL : PyObject_Call(method, empty, kwargs);
    Py_XDECREF(empty);
    Py_DECREF(kwargs);
    Py_DECREF(method);
    if (record == NULL) {
        return -1;
    }
    if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) < R_FIELDS) {
        Py_DECREF(record);
        PyErr_SetString(PyExc_TypeError, "_replace did not give a record tuple");
        return -1;
    }
    Py_SETREF(self->r, record);
    return 0;
}

static PyObject *
m_headers(Fetched *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *headers = field(self, R_HEADERS);
    if (headers == NULL || !PyTuple_CheckExact(headers)) {
        return headers; /* a list (made before, or set) or None */
    }
    /* As decoded: a list once, or None for none. */
    PyObject *made;
    if (PyTuple_GET_SIZE(headers) == 0) {
        made = Py_None;
        Py_INCREF(made);
    }
    else {
        made = PySequence_List(headers);
    }
    Py_DECREF(headers);
    if (made == NULL) {
        return NULL;
    }
    if (replace_field(self, "headers", made) < 0) {
        Py_DECREF(made);
        return NULL;
    }
    return made;
}

static PyObject *
m_timestamp(Fetched *self, PyObject *Py_UNUSED(ignored))
{
    if (self->r == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "message cleared");
        return NULL;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(self->r, R_TS_TYPE));
    if (kind == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (kind == 0) {
        return Py_BuildValue("(iO)", TS_CREATE_TIME, PyTuple_GET_ITEM(self->r, R_TIMESTAMP));
    }
    if (kind == 1) {
        return Py_BuildValue("(iO)", TS_LOG_APPEND_TIME, PyTuple_GET_ITEM(self->r, R_TIMESTAMP));
    }
    return Py_BuildValue("(ii)", TS_NOT_AVAILABLE, -1);
}

static PyObject *
m_leader_epoch(Fetched *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *epoch = field(self, R_EPOCH);
    if (epoch == NULL) {
        return NULL;
    }
    long e = PyLong_AsLong(epoch);
    if (e == -1 && PyErr_Occurred()) {
        Py_DECREF(epoch);
        return NULL;
    }
    if (e < 0) {
        Py_DECREF(epoch);
        Py_RETURN_NONE;
    }
    return epoch;
}

static PyObject *
set_field(Fetched *self, const char *name, PyObject *value)
{
    if (replace_field(self, name, value) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
m_set_key(Fetched *self, PyObject *value)
{
    return set_field(self, "key", value);
}

static PyObject *
m_set_value(Fetched *self, PyObject *value)
{
    return set_field(self, "value", value);
}

static PyObject *
m_set_headers(Fetched *self, PyObject *value)
{
    return set_field(self, "headers", value);
}

static PyObject *
m_set_topic(Fetched *self, PyObject *value)
{
    return set_field(self, "topic", value);
}

static Py_ssize_t
fetched_len(Fetched *self)
{
    if (self->r == NULL) {
        return 0;
    }
    PyObject *value = PyTuple_GET_ITEM(self->r, R_VALUE);
    if (PyBytes_Check(value)) {
        return PyBytes_GET_SIZE(value);
    }
    if (PyUnicode_Check(value)) {
        return PyUnicode_GET_LENGTH(value);
    }
    return 0;
}

static PyObject *
fetched_repr(Fetched *self)
{
    if (self->r == NULL) {
        return PyUnicode_FromString("Message(cleared)");
    }
    PyObject *r = self->r;
    return PyUnicode_FromFormat(
        "Message(topic=%R, partition=%S, offset=%S, error=%R)",
        PyTuple_GET_ITEM(r, R_TOPIC), PyTuple_GET_ITEM(r, R_PARTITION),
        PyTuple_GET_ITEM(r, R_OFFSET), self->error == NULL ? Py_None : self->error);
}

static PyObject *
fetched_record(Fetched *self, void *Py_UNUSED(closure))
{
    if (self->r == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "message cleared");
        return NULL;
    }
    Py_INCREF(self->r);
    return self->r;
}

static PyMethodDef fetched_methods[] = {
    {"topic", (PyCFunction)m_topic, METH_NOARGS, "The record's topic."},
    {"partition", (PyCFunction)m_partition, METH_NOARGS, "The record's partition."},
    {"offset", (PyCFunction)m_offset, METH_NOARGS, "The record's offset."},
    {"key", (PyCFunction)m_key, METH_NOARGS, "The record's key."},
    {"value", (PyCFunction)m_value, METH_NOARGS, "The record's value."},
    {"headers", (PyCFunction)m_headers, METH_NOARGS,
     "The record's headers as a list of (name, value), or None when it has none."},
    {"deserialized_key", (PyCFunction)m_key, METH_NOARGS,
     "The key (a DeserializingConsumer's message holds it deserialized)."},
    {"deserialized_value", (PyCFunction)m_value, METH_NOARGS,
     "The value (a DeserializingConsumer's message holds it deserialized)."},
    {"error", (PyCFunction)m_error, METH_NOARGS,
     "None for a record (or what set_error() gave)."},
    {"delivery_count", (PyCFunction)m_none, METH_NOARGS,
     "None: a share group's delivery count, which a consumer's record has not."},
    {"timestamp", (PyCFunction)m_timestamp, METH_NOARGS,
     "(timestamp type, timestamp in ms), as confluent-kafka's."},
    {"latency", (PyCFunction)m_none, METH_NOARGS, "None: a consumed record has no latency."},
    {"leader_epoch", (PyCFunction)m_leader_epoch, METH_NOARGS,
     "The leader epoch of the record's batch, or None when unknown."},
    {"set_key", (PyCFunction)m_set_key, METH_O, "Replace the key."},
    {"set_value", (PyCFunction)m_set_value, METH_O, "Replace the value."},
    {"set_headers", (PyCFunction)m_set_headers, METH_O, "Replace the headers."},
    {"set_topic", (PyCFunction)m_set_topic, METH_O, "Replace the topic."},
    {"set_error", (PyCFunction)m_set_error, METH_O, "Set the error error() answers."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef fetched_getset[] = {
    {"_r", (getter)fetched_record, NULL, "The record tuple viewed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods fetched_as_sequence = {
    .sq_length = (lenfunc)fetched_len,
};

static PyTypeObject FetchedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trafka.compat.confluent._message.FetchedMessage",
    .tp_doc = "A consumed record as confluent-kafka's Message: a view of the record tuple.",
    .tp_basicsize = sizeof(Fetched),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = fetched_new,
    .tp_dealloc = (destructor)fetched_dealloc,
    .tp_traverse = (traverseproc)fetched_traverse,
    .tp_clear = (inquiry)fetched_clear,
    .tp_repr = (reprfunc)fetched_repr,
    .tp_methods = fetched_methods,
    .tp_getset = fetched_getset,
    .tp_as_sequence = &fetched_as_sequence,
};

static PyObject *
wrap(PyObject *Py_UNUSED(module), PyObject *records)
{
    if (!PyList_Check(records)) {
        PyErr_SetString(PyExc_TypeError, "wrap() takes a list of records");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = fetched_of(PyList_GET_ITEM(records, i));
        if (m == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, m);
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"wrap", (PyCFunction)wrap, METH_O,
     "wrap(records) -> list: a FetchedMessage over each record tuple of the list."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef message_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "trafka.compat.confluent._message",
    .m_doc = "The consumed record as confluent-kafka's Message, in C (optional).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__message(void)
{
    if (PyType_Ready(&FetchedType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&message_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&FetchedType);
    if (PyModule_AddObject(module, "FetchedMessage", (PyObject *)&FetchedType) < 0) {
        Py_DECREF(&FetchedType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
