/* CPython binding: decoded columns -> per-record Python values (the drop-in loaders' output).
 *
 * The twin of columnar.to_records / to_sequence_records in Python: per record a dict
 * {name: value} where a float / int feature is a new float32 / int64 array of its own (a copy:
 * a kept record pins nothing else), a bytes feature is `bytes` when it holds one value and
 * otherwise an object array of `bytes`, and a missing or kind-less feature an empty array.
 * SequenceExample feature lists give a list with one such value per step. Building these
 * objects here rather than in a Python loop is what makes the per-record loaders fast. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tfr_ARRAY_API
#define NO_IMPORT_ARRAY
#include <numpy/arrayobject.h>

#include "py_rows.h"
#include "tfr_example.h"

#if PY_VERSION_HEX < 0x030D0000
#define NEW_DICT(n) _PyDict_NewPresized(n)
#else
#define NEW_DICT(n) PyDict_New()
#endif

typedef struct {
    PyObject *name; /* dict key */
    int kind;
    const uint8_t *values;
    npy_intp nvalues;      /* items (numbers) or bytes (bytes) */
    const int64_t *voffs;  /* bytes: nv + 1 */
    npy_intp nv;           /* bytes: number of values */
    const int64_t *splits; /* n + 1 (record -> values, or record -> steps) */
    const int64_t *steps;  /* feature lists: step -> values (nsteps + 1) */
    npy_intp nsteps;
    const uint8_t *status; /* n, or NULL */
    int by_ref;            /* bytes: values holds each value's address in the records (see tfr_column) */
} col;

typedef struct {
    col *c;
    size_t n;
    PyObject *keep; /* list of the arrays held */
} cols;

static void cols_free(cols *cs) {
    PyMem_Free(cs->c);
    Py_XDECREF(cs->keep);
}

static int held(cols *cs, PyObject *o, PyArrayObject **out, int type, npy_intp *size) {
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(o, type, 1, 1, NPY_ARRAY_IN_ARRAY);
    if (!a) return -1;
    int rc = PyList_Append(cs->keep, (PyObject *)a);
    Py_DECREF(a); /* the list holds it */
    *out = a;
    *size = PyArray_SIZE(a);
    return rc;
}

/* names: sequence of str; kinds: ints; columns: (values, row_splits[, step_splits], value_offsets, status). */
static int cols_get(PyObject *names, PyObject *kinds, PyObject *columns, int steps, npy_intp n_expected, int by_ref,
                    cols *cs) {
    memset(cs, 0, sizeof *cs);
    PyObject *nm = PySequence_Fast(names, "names"), *ks = NULL, *cl = NULL;
    int rc = -1;
    if (!nm) return -1;
    if (!(ks = PySequence_Fast(kinds, "kinds")) || !(cl = PySequence_Fast(columns, "columns"))) goto out;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(nm);
    if (PySequence_Fast_GET_SIZE(ks) != m || PySequence_Fast_GET_SIZE(cl) != m) {
        PyErr_SetString(PyExc_ValueError, "names, kinds and columns differ in length");
        goto out;
    }
    cs->n = (size_t)m;
    cs->c = (col *)PyMem_Calloc(m ? (size_t)m : 1, sizeof(col));
    cs->keep = PyList_New(0);
    if (!cs->c || !cs->keep) { PyErr_NoMemory(); goto out; }
    for (Py_ssize_t j = 0; j < m; j++) {
        col *c = &cs->c[j];
        c->name = PySequence_Fast_GET_ITEM(nm, j);
        c->kind = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(ks, j));
        if (c->kind < 1 || c->kind > 3) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "kinds must be 1, 2 or 3");
            goto out;
        }
        PyObject *t = PySequence_Fast_GET_ITEM(cl, j);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != (steps ? 5 : 4)) {
            PyErr_SetString(PyExc_TypeError, "each column is (values, row_splits, [step_splits,] value_offsets, status)");
            goto out;
        }
        static const int type[4] = {0, NPY_UINT8, NPY_FLOAT32, NPY_INT64};
        PyArrayObject *a;
        npy_intp size;
        c->by_ref = by_ref && c->kind == TFR_KIND_BYTES;
        if (held(cs, PyTuple_GET_ITEM(t, 0), &a, c->by_ref ? NPY_UINT64 : type[c->kind], &size)) goto out;
        c->values = (const uint8_t *)PyArray_DATA(a);
        c->nvalues = size;
        if (held(cs, PyTuple_GET_ITEM(t, 1), &a, NPY_INT64, &size)) goto out;
        if (size != n_expected + 1) { PyErr_SetString(PyExc_ValueError, "row_splits must have n + 1 items"); goto out; }
        c->splits = (const int64_t *)PyArray_DATA(a);
        npy_intp inner = c->nvalues; /* what the value-level splits may index */
        if (c->kind == TFR_KIND_BYTES) {
            PyObject *vo = PyTuple_GET_ITEM(t, steps ? 3 : 2);
            if (held(cs, vo, &a, NPY_INT64, &size)) goto out;
            if (size < 1) { PyErr_SetString(PyExc_ValueError, "value_offsets is empty"); goto out; }
            c->voffs = (const int64_t *)PyArray_DATA(a);
            c->nv = size - 1;
            if (c->by_ref && c->nvalues != c->nv) {
                PyErr_SetString(PyExc_ValueError, "one address per bytes value");
                goto out;
            }
            for (npy_intp k = 0; k <= c->nv; k++)
                if (c->voffs[k] < 0 || (!c->by_ref && c->voffs[k] > c->nvalues) || (k && c->voffs[k] < c->voffs[k - 1])) {
                    PyErr_SetString(PyExc_ValueError, "value_offsets outside the values");
                    goto out;
                }
            inner = c->nv;
        }
        if (steps) {
            if (held(cs, PyTuple_GET_ITEM(t, 2), &a, NPY_INT64, &size)) goto out;
            if (size < 1) { PyErr_SetString(PyExc_ValueError, "step_splits is empty"); goto out; }
            c->steps = (const int64_t *)PyArray_DATA(a);
            c->nsteps = size - 1;
            for (npy_intp k = 0; k <= c->nsteps; k++)
                if (c->steps[k] < 0 || c->steps[k] > inner || (k && c->steps[k] < c->steps[k - 1])) {
                    PyErr_SetString(PyExc_ValueError, "step_splits outside the values");
                    goto out;
                }
            inner = c->nsteps;
        }
        for (npy_intp k = 0; k <= n_expected; k++)
            if (c->splits[k] < 0 || c->splits[k] > inner || (k && c->splits[k] < c->splits[k - 1])) {
                PyErr_SetString(PyExc_ValueError, "row_splits outside the values");
                goto out;
            }
        PyObject *st = PyTuple_GET_ITEM(t, steps ? 4 : 3);
        if (st != Py_None) {
            if (held(cs, st, &a, NPY_UINT8, &size)) goto out;
            if (size != n_expected) { PyErr_SetString(PyExc_ValueError, "status must have n items"); goto out; }
            c->status = (const uint8_t *)PyArray_DATA(a);
        }
    }
    rc = 0;
out:
    Py_DECREF(nm);
    Py_XDECREF(ks);
    Py_XDECREF(cl);
    return rc;
}

static PyObject *empty_of(int kind) {
    npy_intp zero = 0;
    static const int type[4] = {0, NPY_OBJECT, NPY_FLOAT32, NPY_INT64};
    return PyArray_SimpleNew(1, &zero, type[kind]);
}

/* Bytes value k of a bytes column: from the values buffer, or from the records it lies in. */
static PyObject *bytes_value(const col *c, int64_t k) {
    Py_ssize_t len = (Py_ssize_t)(c->voffs[k + 1] - c->voffs[k]);
    const char *at = c->by_ref ? (const char *)(uintptr_t)((const uint64_t *)(const void *)c->values)[k]
                               : (const char *)c->values + c->voffs[k];
    return PyBytes_FromStringAndSize(at, len);
}

/* Values [a, b) of a column (value-level indices) in the decoded convention. */
static PyObject *value_of(const col *c, int64_t a, int64_t b) {
    npy_intp len = (npy_intp)(b - a);
    if (c->kind == TFR_KIND_BYTES) {
        if (len == 1) return bytes_value(c, a);
        PyArrayObject *arr = (PyArrayObject *)PyArray_SimpleNew(1, &len, NPY_OBJECT);
        if (!arr) return NULL;
        for (npy_intp k = 0; k < len; k++) {
            PyObject *v = bytes_value(c, a + k);
            if (!v || PyArray_SETITEM(arr, PyArray_GETPTR1(arr, k), v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(arr);
                return NULL;
            }
            Py_DECREF(v);
        }
        return (PyObject *)arr;
    }
    size_t width = c->kind == TFR_KIND_FLOAT ? 4 : 8;
    PyObject *arr = PyArray_SimpleNew(1, &len, c->kind == TFR_KIND_FLOAT ? NPY_FLOAT32 : NPY_INT64);
    if (arr && len) memcpy(PyArray_DATA((PyArrayObject *)arr), c->values + (size_t)a * width, (size_t)len * width);
    return arr;
}

/* The context / Example dict of record i. */
static PyObject *record_dict(const cols *cs, npy_intp i) {
    PyObject *d = NEW_DICT((Py_ssize_t)cs->n);
    if (!d) return NULL;
    for (size_t j = 0; j < cs->n; j++) {
        const col *c = &cs->c[j];
        PyObject *v = c->status && c->status[i] != TFR_PRESENT ? empty_of(c->kind) : value_of(c, c->splits[i], c->splits[i + 1]);
        if (!v || PyDict_SetItem(d, c->name, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

/* {name: [value per step]} of record i. */
static PyObject *lists_dict(const cols *cs, npy_intp i) {
    PyObject *d = NEW_DICT((Py_ssize_t)cs->n);
    if (!d) return NULL;
    for (size_t j = 0; j < cs->n; j++) {
        const col *c = &cs->c[j];
        int64_t s0 = c->splits[i], s1 = c->splits[i + 1];
        PyObject *l = PyList_New((Py_ssize_t)(s1 - s0));
        if (!l) { Py_DECREF(d); return NULL; }
        for (int64_t s = s0; s < s1; s++) {
            PyObject *v = value_of(c, c->steps[s], c->steps[s + 1]);
            if (!v) { Py_DECREF(l); Py_DECREF(d); return NULL; }
            PyList_SET_ITEM(l, (Py_ssize_t)(s - s0), v);
        }
        if (PyDict_SetItem(d, c->name, l) < 0) { Py_DECREF(l); Py_DECREF(d); return NULL; }
        Py_DECREF(l);
    }
    return d;
}

/* rows: None (all n records) or a sequence of record indices. */
static PyArrayObject *rows_get(PyObject *rows, npy_intp n, npy_intp *count) {
    if (rows == Py_None) { *count = n; return NULL; }
    PyArrayObject *r = (PyArrayObject *)PyArray_FROMANY(rows, NPY_INT64, 1, 1, NPY_ARRAY_IN_ARRAY);
    if (!r) return NULL;
    const int64_t *p = (const int64_t *)PyArray_DATA(r);
    for (npy_intp k = 0; k < PyArray_SIZE(r); k++)
        if (p[k] < 0 || p[k] >= n) {
            PyErr_Format(PyExc_IndexError, "row %lld outside the %lld records", (long long)p[k], (long long)n);
            Py_DECREF(r);
            return NULL;
        }
    *count = PyArray_SIZE(r);
    return r;
}

/* An iterator building one record per next(): what it yields dies young (a list of a whole
 * chunk's records would outlive the young GC generations and make the collector walk the
 * caller's long-lived objects again and again). */
typedef struct {
    PyObject_HEAD
    cols ctx, lists;
    int sequence;
    PyArrayObject *rows; /* or NULL: 0 .. count */
    npy_intp count, next;
    Py_buffer source; /* the records that by-reference bytes values lie in */
    int has_source;
} rowiter;

static void rowiter_dealloc(rowiter *it) {
    cols_free(&it->ctx);
    cols_free(&it->lists);
    Py_XDECREF(it->rows);
    if (it->has_source) PyBuffer_Release(&it->source);
    PyObject_Free(it);
}

static PyObject *rowiter_next(rowiter *it) {
    if (it->next >= it->count) return NULL;
    npy_intp k = it->next++;
    npy_intp i = it->rows ? (npy_intp)((const int64_t *)PyArray_DATA(it->rows))[k] : k;
    PyObject *a = record_dict(&it->ctx, i);
    if (!it->sequence || !a) return a;
    PyObject *b = lists_dict(&it->lists, i);
    PyObject *t = b ? PyTuple_Pack(2, a, b) : NULL;
    Py_DECREF(a);
    Py_XDECREF(b);
    return t;
}

static PyObject *rowiter_length_hint(rowiter *it, PyObject *unused) { return PyLong_FromSsize_t(it->count - it->next); }

static PyMethodDef rowiter_methods[] = {
    {"__length_hint__", (PyCFunction)rowiter_length_hint, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RowIterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tfrecord_beam._native._core.RowIterator",
    .tp_basicsize = sizeof(rowiter),
    .tp_dealloc = (destructor)rowiter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Per-record values of decoded columns, one record per next().",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)rowiter_next,
    .tp_methods = rowiter_methods,
};

static PyObject *make_iter(PyObject *cn, PyObject *ck, PyObject *cc, PyObject *sn, PyObject *sk, PyObject *sc,
                           Py_ssize_t n, PyObject *rows, PyObject *source) {
    if (n < 0) return PyErr_Format(PyExc_ValueError, "n < 0");
    rowiter *it = PyObject_New(rowiter, &RowIterType);
    if (!it) return NULL;
    memset(&it->ctx, 0, sizeof it->ctx);
    memset(&it->lists, 0, sizeof it->lists);
    it->rows = NULL;
    it->sequence = sn != NULL;
    it->next = 0;
    it->has_source = 0;
    if (source) {
        if (PyObject_GetBuffer(source, &it->source, PyBUF_SIMPLE) < 0) goto fail;
        it->has_source = 1;
    }
    if (cols_get(cn, ck, cc, 0, n, source != NULL, &it->ctx) || (sn && cols_get(sn, sk, sc, 1, n, 0, &it->lists)))
        goto fail;
    it->rows = rows_get(rows, n, &it->count);
    if (!it->rows && PyErr_Occurred()) goto fail;
    return (PyObject *)it;
fail:
    Py_DECREF(it);
    return NULL;
}

PyObject *tfr_py_example_rows(PyObject *self, PyObject *args) {
    PyObject *names, *kinds, *columns, *rows;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOOnO", &names, &kinds, &columns, &n, &rows)) return NULL;
    return make_iter(names, kinds, columns, NULL, NULL, NULL, n, rows, NULL);
}

PyObject *tfr_rows_by_reference(PyObject *names, PyObject *kinds, PyObject *columns, Py_ssize_t n, PyObject *rows,
                                PyObject *source) {
    return make_iter(names, kinds, columns, NULL, NULL, NULL, n, rows, source);
}

PyObject *tfr_py_sequence_rows(PyObject *self, PyObject *args) {
    PyObject *cn, *ck, *cc, *sn, *sk, *sc, *rows;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOOOOOnO", &cn, &ck, &cc, &sn, &sk, &sc, &n, &rows)) return NULL;
    return make_iter(cn, ck, cc, sn, sk, sc, n, rows, NULL);
}

int tfr_py_rows_init(void) { return PyType_Ready(&RowIterType); }
