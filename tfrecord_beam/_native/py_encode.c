/* CPython binding of the per-record encoders: `{name: (value, kind)}` dicts -> Example /
 * SequenceExample bytes without protobuf message objects, and framing straight into a write
 * buffer.
 *
 * The conversion takes only the value types whose meaning is unambiguous (bytes, str, Python
 * floats and ints, lists and tuples of them, numeric numpy arrays and scalars, uint8 arrays as
 * one bytes value) and DECLINES everything else by returning None: the caller then runs the
 * general Python path (`example.encode_example`), which either handles the value or raises
 * the error users know. So results and errors are the Python path's, only faster; the bytes
 * are upb's deterministic serialization (tests compare them on random input).
 *
 * No Python code may run while converting (the record's values are referenced, not copied,
 * until it is written): exact ndarrays only, no __index__ / __float__ / __array__ calls. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tfr_ARRAY_API
#define NO_IMPORT_ARRAY
#include <numpy/arrayobject.h>
#include <numpy/arrayscalars.h>

#include <math.h>

#include "py_encode.h"
#include "tfr_encode.h"
#include "tfr_example.h"
#include "tfr_framing.h"

enum { CONV_OK = 0, CONV_DECLINE = 1, CONV_ERROR = -1 };

/* One feature while converting: values live in the arena (offset), not yet as pointers. */
typedef struct {
    const uint8_t *name;
    size_t name_len;
    int kind;
    size_t count;
    size_t off; /* into nums (bytes) or refs (items) */
} pfeat;

typedef struct {
    const uint8_t *name;
    size_t name_len;
    size_t first, nsteps; /* steps: feats[first .. first + nsteps) */
} plist;

typedef struct {
    tfr_buf feats, lists, nums, refs, views, objs, out, order;
} arena;

/* Reused between calls (the GIL is held throughout, nothing here is released). */
static arena A;

static void arena_reset(void) {
    Py_buffer *v = (Py_buffer *)(void *)A.views.data;
    for (size_t i = 0; i < A.views.len / sizeof(Py_buffer); i++) PyBuffer_Release(&v[i]);
    PyObject **o = (PyObject **)(void *)A.objs.data;
    for (size_t i = 0; i < A.objs.len / sizeof(PyObject *); i++) Py_DECREF(o[i]);
    tfr_buf *all[] = {&A.feats, &A.lists, &A.nums, &A.refs, &A.views, &A.objs, &A.out, &A.order};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        if (all[i]->cap > ((size_t)4 << 20)) tfr_buf_free(all[i]); /* one huge record: give it back */
        all[i]->len = 0;
    }
}

static int nomem(void) {
    PyErr_NoMemory();
    return CONV_ERROR;
}

/* ---- kinds ------------------------------------------------------------------------------- */

/* The kind of an exact alias spelling ("byte", "int64", ...), 0 for any other string. Odd
 * spellings ("Int ", "BYTES") are left to the Python path, which normalizes them. */
static int kind_alias(PyObject *s) {
    Py_ssize_t n;
    const char *c = PyUnicode_AsUTF8AndSize(s, &n);
    if (!c) { PyErr_Clear(); return 0; }
    static const struct { const char *name; int kind; } T[] = {
        {"byte", TFR_KIND_BYTES}, {"bytes", TFR_KIND_BYTES}, {"bytes_list", TFR_KIND_BYTES},
        {"str", TFR_KIND_BYTES}, {"string", TFR_KIND_BYTES}, {"binary", TFR_KIND_BYTES},
        {"float", TFR_KIND_FLOAT}, {"float32", TFR_KIND_FLOAT}, {"float_list", TFR_KIND_FLOAT},
        {"int", TFR_KIND_INT64}, {"int64", TFR_KIND_INT64}, {"int64_list", TFR_KIND_INT64},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        if ((size_t)n == strlen(T[i].name) && !memcmp(c, T[i].name, (size_t)n)) return T[i].kind;
    return 0;
}

/* Split `(value, "kind")` from a bare value as example._split_spec does. *kind = 0: bare.
 * Declines a 2-tuple whose second item is a string that is not an exact alias. */
static int split_spec(PyObject *spec, PyObject **value, int *kind) {
    *value = spec;
    *kind = 0;
    if (PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(spec, 1))) {
        int k = kind_alias(PyTuple_GET_ITEM(spec, 1));
        if (!k) return CONV_DECLINE;
        *value = PyTuple_GET_ITEM(spec, 0);
        *kind = k;
    }
    return CONV_OK;
}

static int dtype_kind(PyArrayObject *a) { return PyArray_DESCR(a)->kind; }

/* example.infer_kind for the types taken here; 0: decline. */
static int infer_kind(PyObject *v, int depth) {
    if (PyBytes_Check(v) || PyUnicode_Check(v) || PyByteArray_Check(v) || PyMemoryView_Check(v)) return TFR_KIND_BYTES;
    if (PyLong_Check(v)) return TFR_KIND_INT64; /* bool too */
    if (PyFloat_Check(v)) return TFR_KIND_FLOAT;
    if (PyArray_Check(v)) {
        if (!PyArray_CheckExact(v)) return 0; /* subclasses may run Python code: the Python path */
        int k = dtype_kind((PyArrayObject *)v);
        if (k == 'f') return TFR_KIND_FLOAT;
        if (k == 'i' || k == 'u' || k == 'b') return TFR_KIND_INT64;
        return 0; /* bytes/str/object arrays: the Python path */
    }
    if (PyArray_IsScalar(v, Bool) || PyArray_IsScalar(v, Integer)) return TFR_KIND_INT64;
    if (PyArray_IsScalar(v, Floating)) return TFR_KIND_FLOAT;
    if ((PyList_Check(v) || PyTuple_Check(v)) && PySequence_Fast_GET_SIZE(v) > 0 && depth < 4)
        return infer_kind(PySequence_Fast_GET_ITEM(v, 0), depth + 1);
    return 0;
}

/* ---- values ------------------------------------------------------------------------------ */

static inline uint32_t quiet_nan(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) u |= 0x00400000u; /* as through a Python float */
    return u;
}

static int push_float(double d) {
    float f = (float)d;
    if (isinf(f) && !isinf(d)) return CONV_DECLINE; /* overflow: numpy's rules, the Python path */
    uint32_t u = quiet_nan(f);
    return tfr_buf_append(&A.nums, &u, 4) ? nomem() : CONV_OK;
}

static int push_int(int64_t v) { return tfr_buf_append(&A.nums, &v, 8) ? nomem() : CONV_OK; }

/* One Python scalar as a number of `kind` (floats: Python float or int; ints: int or bool). */
static int push_scalar(PyObject *o, int kind) {
    if (PyLong_Check(o)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); return CONV_DECLINE; }
        if (kind == TFR_KIND_INT64) return push_int(v);
        if (v > (1LL << 53) || v < -(1LL << 53)) return CONV_DECLINE; /* exact in a double, so one rounding */
        return push_float((double)v);
    }
    if (kind == TFR_KIND_FLOAT && PyFloat_Check(o)) return push_float(PyFloat_AS_DOUBLE(o));
    return CONV_DECLINE;
}

/* A numeric numpy array (or scalar) as `kind`: np.asarray(x, float32) / .astype(int64), raveled. */
static int push_array(PyObject *o, int kind) {
    PyObject *arr = PyArray_Check(o) ? (Py_INCREF(o), o) : PyArray_FromScalar(o, NULL);
    if (!arr) { PyErr_Clear(); return CONV_DECLINE; }
    int k = dtype_kind((PyArrayObject *)arr), rc = CONV_DECLINE;
    PyObject *c = NULL;
    if (kind == TFR_KIND_FLOAT && (k == 'f' || k == 'i' || k == 'u' || k == 'b')) {
        c = PyArray_FROMANY(arr, NPY_FLOAT32, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
        if (!c) goto done;
        npy_intp n = PyArray_SIZE((PyArrayObject *)c);
        const float *src = (const float *)PyArray_DATA((PyArrayObject *)c);
        if (tfr_buf_reserve(&A.nums, (size_t)n * 4)) { rc = nomem(); goto done; }
        uint32_t *dst = (uint32_t *)(void *)(A.nums.data + A.nums.len);
        for (npy_intp i = 0; i < n; i++) dst[i] = quiet_nan(src[i]);
        A.nums.len += (size_t)n * 4;
        rc = CONV_OK;
    } else if (kind == TFR_KIND_INT64 && (k == 'i' || k == 'u' || k == 'b')) {
        PyArrayObject *a = (PyArrayObject *)arr;
        if (k == 'u' && PyArray_ITEMSIZE(a) >= 8) { /* values past int64 are the Python path's error */
            c = PyArray_FROMANY(arr, NPY_UINT64, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
            if (!c) goto done;
            const uint64_t *u = (const uint64_t *)PyArray_DATA((PyArrayObject *)c);
            for (npy_intp i = 0; i < PyArray_SIZE((PyArrayObject *)c); i++)
                if (u[i] > (uint64_t)INT64_MAX) goto done;
            Py_CLEAR(c);
        }
        c = PyArray_FROMANY(arr, NPY_INT64, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
        if (!c) goto done;
        size_t bytes = (size_t)PyArray_SIZE((PyArrayObject *)c) * 8;
        rc = tfr_buf_append(&A.nums, PyArray_DATA((PyArrayObject *)c), bytes) ? nomem() : CONV_OK;
    }
done:
    if (rc == CONV_DECLINE && PyErr_Occurred()) PyErr_Clear();
    Py_XDECREF(c);
    Py_DECREF(arr);
    return rc;
}

static int hold(PyObject *o) { /* keep a new reference until the record is written */
    if (tfr_buf_append(&A.objs, &o, sizeof o)) { Py_DECREF(o); return nomem(); }
    return CONV_OK;
}

/* One bytes value: bytes (as is), str (UTF-8), bytearray / memoryview (their bytes). */
static int push_bytes(PyObject *o) {
    tfr_bytes_ref r;
    if (PyBytes_Check(o)) {
        r.data = (const uint8_t *)PyBytes_AS_STRING(o);
        r.len = (size_t)PyBytes_GET_SIZE(o);
    } else if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *c = PyUnicode_AsUTF8AndSize(o, &n); /* cached in the str, which the caller holds */
        if (!c) { PyErr_Clear(); return CONV_DECLINE; }
        r.data = (const uint8_t *)c;
        r.len = (size_t)n;
    } else if (PyByteArray_Check(o) || PyMemoryView_Check(o)) {
        Py_buffer view;
        if (PyObject_GetBuffer(o, &view, PyBUF_SIMPLE) < 0) { PyErr_Clear(); return CONV_DECLINE; }
        if (tfr_buf_append(&A.views, &view, sizeof view)) { PyBuffer_Release(&view); return nomem(); }
        r.data = (const uint8_t *)view.buf;
        r.len = (size_t)view.len;
    } else {
        return CONV_DECLINE;
    }
    return tfr_buf_append(&A.refs, &r, sizeof r) ? nomem() : CONV_OK;
}

/* `value` as the values of one feature of `kind` (example.make_feature's rules). */
static int convert_values(PyObject *value, int kind, size_t *count, size_t *off) {
    int rc = CONV_OK;
    if (kind == TFR_KIND_BYTES) {
        size_t before = A.refs.len;
        *off = before / sizeof(tfr_bytes_ref);
        if (PyArray_Check(value)) {
            if (!PyArray_CheckExact(value) || PyArray_TYPE((PyArrayObject *)value) != NPY_UINT8) return CONV_DECLINE;
            /* an encoded image as a uint8 array is one bytes value (its C-order bytes) */
            PyObject *c = PyArray_FROMANY(value, NPY_UINT8, 0, 0, NPY_ARRAY_C_CONTIGUOUS);
            if (!c) { PyErr_Clear(); return CONV_DECLINE; }
            if (hold(c)) return CONV_ERROR;
            tfr_bytes_ref r = {(const uint8_t *)PyArray_DATA((PyArrayObject *)c), (size_t)PyArray_NBYTES((PyArrayObject *)c)};
            if (tfr_buf_append(&A.refs, &r, sizeof r)) return nomem();
        } else if (PyList_Check(value) || PyTuple_Check(value)) {
            Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
            for (Py_ssize_t i = 0; i < n && rc == CONV_OK; i++) rc = push_bytes(PySequence_Fast_GET_ITEM(value, i));
        } else {
            rc = push_bytes(value);
        }
        *count = (A.refs.len - before) / sizeof(tfr_bytes_ref);
        return rc;
    }
    size_t width = kind == TFR_KIND_FLOAT ? 4 : 8;
    if (tfr_buf_reserve(&A.nums, 8)) return nomem();
    A.nums.len = (A.nums.len + 7) & ~(size_t)7; /* 8-byte aligned runs */
    size_t before = A.nums.len;
    *off = before;
    if (PyList_Check(value) || PyTuple_Check(value)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
        if (tfr_buf_reserve(&A.nums, (size_t)n * width)) return nomem();
        for (Py_ssize_t i = 0; i < n && rc == CONV_OK; i++) rc = push_scalar(PySequence_Fast_GET_ITEM(value, i), kind);
    } else if (PyArray_CheckExact(value) || PyArray_IsScalar(value, Generic)) {
        rc = push_array(value, kind);
    } else if (PyArray_Check(value)) {
        rc = CONV_DECLINE; /* an ndarray subclass may run Python code while converted */
    } else {
        rc = push_scalar(value, kind);
    }
    *count = (A.nums.len - before) / width;
    return rc;
}

static int push_feature(const uint8_t *name, size_t name_len, PyObject *value, int kind) {
    pfeat f = {name, name_len, kind, 0, 0};
    int rc = convert_values(value, kind, &f.count, &f.off);
    if (rc != CONV_OK) return rc;
    return tfr_buf_append(&A.feats, &f, sizeof f) ? nomem() : CONV_OK;
}

static int key_utf8(PyObject *key, const uint8_t **name, size_t *len) {
    if (!PyUnicode_Check(key)) return CONV_DECLINE;
    Py_ssize_t n;
    const char *c = PyUnicode_AsUTF8AndSize(key, &n);
    if (!c) { PyErr_Clear(); return CONV_DECLINE; }
    *name = (const uint8_t *)c;
    *len = (size_t)n;
    return CONV_OK;
}

/* Every feature of a {name: spec} dict; None counts as an empty dict. */
static int convert_features(PyObject *datum) {
    if (datum == Py_None) return CONV_OK;
    if (!PyDict_Check(datum)) return CONV_DECLINE;
    Py_ssize_t pos = 0;
    PyObject *key, *spec;
    while (PyDict_Next(datum, &pos, &key, &spec)) {
        const uint8_t *name;
        size_t len;
        PyObject *value;
        int kind, rc;
        if ((rc = key_utf8(key, &name, &len)) || (rc = split_spec(spec, &value, &kind))) return rc;
        if (!kind && !(kind = infer_kind(value, 0))) return CONV_DECLINE;
        if ((rc = push_feature(name, len, value, kind))) return rc;
    }
    return CONV_OK;
}

static int is_empty_seq(PyObject *s, int *empty) {
    if (PyList_Check(s) || PyTuple_Check(s)) { *empty = PySequence_Fast_GET_SIZE(s) == 0; return CONV_OK; }
    if (PyArray_Check(s)) {
        if (PyArray_NDIM((PyArrayObject *)s) == 0) return CONV_DECLINE; /* len() raises there */
        *empty = PyArray_DIM((PyArrayObject *)s, 0) == 0;
        return CONV_OK;
    }
    *empty = 0;
    return CONV_OK;
}

/* Every feature list of a {name: (steps, kind)} dict (example.encode_sequence_example). */
static int convert_lists(PyObject *lists) {
    if (lists == Py_None) return CONV_OK;
    if (!PyDict_Check(lists)) return CONV_DECLINE;
    Py_ssize_t pos = 0;
    PyObject *key, *spec;
    while (PyDict_Next(lists, &pos, &key, &spec)) {
        plist l;
        PyObject *steps_obj;
        int kind, rc;
        if ((rc = key_utf8(key, &l.name, &l.name_len)) || (rc = split_spec(spec, &steps_obj, &kind))) return rc;
        if (!PyList_Check(steps_obj) && !PyTuple_Check(steps_obj) && !PyArray_CheckExact(steps_obj)) return CONV_DECLINE;
        if (PyArray_Check(steps_obj) && PyArray_NDIM((PyArrayObject *)steps_obj) == 0) return CONV_DECLINE;
        PyObject *steps = PySequence_Fast(steps_obj, "steps");
        if (!steps) { PyErr_Clear(); return CONV_DECLINE; }
        rc = hold(steps);
        if (rc) return rc;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(steps);
        if (!kind) {
            for (Py_ssize_t i = 0; i < n && !kind; i++) {
                PyObject *s = PySequence_Fast_GET_ITEM(steps, i);
                int empty;
                if ((rc = is_empty_seq(s, &empty))) return rc;
                if (!empty && !(kind = infer_kind(s, 0))) return CONV_DECLINE;
            }
            if (!kind) return CONV_DECLINE; /* no step to infer from: the Python path's TypeError */
        }
        l.first = A.feats.len / sizeof(pfeat);
        l.nsteps = (size_t)n;
        for (Py_ssize_t i = 0; i < n; i++)
            if ((rc = push_feature(NULL, 0, PySequence_Fast_GET_ITEM(steps, i), kind))) return rc;
        if (tfr_buf_append(&A.lists, &l, sizeof l)) return nomem();
    }
    return CONV_OK;
}

/* pfeat -> tfr_feature with real pointers (the arenas no longer move). */
static tfr_feature *resolve(size_t *n) {
    size_t count = A.feats.len / sizeof(pfeat);
    *n = count;
    tfr_feature *out = (tfr_feature *)PyMem_Malloc((count ? count : 1) * sizeof(tfr_feature));
    if (!out) return NULL;
    const pfeat *p = (const pfeat *)(void *)A.feats.data;
    for (size_t i = 0; i < count; i++) {
        out[i].name = p[i].name;
        out[i].name_len = p[i].name_len;
        out[i].kind = p[i].kind;
        out[i].count = p[i].count;
        out[i].values = p[i].kind == TFR_KIND_BYTES ? (const void *)(A.refs.data + p[i].off * sizeof(tfr_bytes_ref))
                                                    : (const void *)(A.nums.data + p[i].off);
        out[i].size = out[i].list_size = out[i].run_size = 0;
    }
    return out;
}

/* Serialize what the arena holds (an Example when `sequence` is 0) into `dst` (at most `room`
 * bytes, framed when `framed`): returns the bytes written, or (size_t)-1 with *need set when
 * it does not fit, or (size_t)-2 on no memory. dst NULL: a new bytes object in *result. */
static size_t emit(int sequence, size_t nctx, int has_lists, int framed, uint8_t *dst, size_t room,
                   PyObject **result, size_t *need) {
    size_t nf;
    tfr_feature *f = resolve(&nf);
    if (!f) return (size_t)-2;
    size_t nl = A.lists.len / sizeof(plist);
    tfr_feature_list *lists = nl ? (tfr_feature_list *)PyMem_Malloc(nl * sizeof(tfr_feature_list)) : NULL;
    size_t norder = (sequence ? nctx + nl : nf) * 2 + 2;
    size_t ret = (size_t)-2;
    if ((nl && !lists) || tfr_buf_reserve(&A.order, norder * sizeof(size_t))) goto out;
    const plist *pl = (const plist *)(void *)A.lists.data;
    for (size_t j = 0; j < nl; j++) {
        lists[j].name = pl[j].name;
        lists[j].name_len = pl[j].name_len;
        lists[j].steps = f + pl[j].first;
        lists[j].nsteps = pl[j].nsteps;
    }
    size_t *order = (size_t *)(void *)A.order.data, *scratch = order + norder / 2;
    size_t ncf = sequence ? nctx : nf;
    size_t payload = sequence ? tfr_sequence_example_size(f, ncf, lists, nl, has_lists) : tfr_example_size(f, nf);
    size_t total = payload + (framed ? TFR_FRAME_OVERHEAD : 0);
    if (dst && total > room) { *need = total; ret = (size_t)-1; goto out; }
    if (!dst) {
        *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
        if (!*result) goto out;
        dst = (uint8_t *)PyBytes_AS_STRING(*result);
    }
    uint8_t *pay = dst + (framed ? TFR_HEADER_SIZE : 0), *end;
    tfr_key_order(f, sizeof(tfr_feature), ncf, order, scratch);
    if (sequence) {
        size_t *lorder = order + ncf;
        tfr_key_order(lists, sizeof(tfr_feature_list), nl, lorder, scratch);
        end = tfr_write_sequence_example(pay, f, ncf, order, lists, nl, lorder, has_lists);
    } else {
        end = tfr_write_example(pay, f, nf, order);
    }
    /* The writer and the size functions share their arithmetic; a difference would mean the
     * bytes already ran past what was sized: nothing safe is left to do. */
    if ((size_t)(end - pay) != payload) Py_FatalError("tfrecord_beam: encoder size mismatch");
    if (framed) {
        tfr_write_header(dst, payload);
        tfr_write_footer(pay + payload, pay, payload);
    }
    ret = total;
out:
    PyMem_Free(f);
    PyMem_Free(lists);
    return ret;
}

/* Convert, then either return bytes (buf NULL) or write a frame into buf at pos. */
static PyObject *encode_common(int sequence, PyObject *ctx, PyObject *lists, PyObject *buf, Py_ssize_t pos,
                               int framed) {
    arena_reset();
    int rc = convert_features(ctx);
    size_t nctx = A.feats.len / sizeof(pfeat);
    int has_lists = 0;
    if (rc == CONV_OK && sequence) {
        rc = convert_lists(lists);
        has_lists = lists != Py_None && PyDict_Size(lists) > 0;
    }
    PyObject *result = NULL;
    if (rc == CONV_ERROR) goto done;
    if (rc == CONV_DECLINE) { result = Py_None; Py_INCREF(result); goto done; }
    size_t need = 0, wrote;
    if (buf) {
        Py_ssize_t cap = PyByteArray_GET_SIZE(buf);
        uint8_t *base = (uint8_t *)PyByteArray_AS_STRING(buf);
        wrote = emit(sequence, nctx, has_lists, 1, base + pos, (size_t)(cap - pos), NULL, &need);
        if (wrote == (size_t)-2) { PyErr_NoMemory(); goto done; }
        result = PyLong_FromSsize_t(wrote == (size_t)-1 ? -1 : pos + (Py_ssize_t)wrote);
    } else {
        wrote = emit(sequence, nctx, has_lists, framed, NULL, 0, &result, &need);
        if (wrote == (size_t)-2 && !PyErr_Occurred()) PyErr_NoMemory();
    }
done:
    arena_reset();
    return result;
}

static int buffer_args(PyObject *buf, Py_ssize_t pos) {
    if (!PyByteArray_Check(buf)) { PyErr_SetString(PyExc_TypeError, "buffer must be a bytearray"); return -1; }
    if (pos < 0 || pos > PyByteArray_GET_SIZE(buf)) { PyErr_SetString(PyExc_ValueError, "position outside the buffer"); return -1; }
    return 0;
}

PyObject *tfr_py_encode_example(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwn[] = {"datum", "framed", NULL};
    PyObject *datum;
    int framed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p", kwn, &datum, &framed)) return NULL;
    if (datum == Py_None) Py_RETURN_NONE;
    return encode_common(0, datum, Py_None, NULL, 0, framed);
}

PyObject *tfr_py_encode_sequence_example(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwn[] = {"context", "feature_lists", "framed", NULL};
    PyObject *ctx, *lists;
    int framed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|p", kwn, &ctx, &lists, &framed)) return NULL;
    return encode_common(1, ctx, lists, NULL, 0, framed);
}

PyObject *tfr_py_append_example(PyObject *self, PyObject *args) {
    PyObject *buf, *datum;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "OnO", &buf, &pos, &datum) || buffer_args(buf, pos)) return NULL;
    if (datum == Py_None) Py_RETURN_NONE;
    return encode_common(0, datum, Py_None, buf, pos, 1);
}

PyObject *tfr_py_append_sequence_example(PyObject *self, PyObject *args) {
    PyObject *buf, *ctx, *lists;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "OnOO", &buf, &pos, &ctx, &lists) || buffer_args(buf, pos)) return NULL;
    return encode_common(1, ctx, lists, buf, pos, 1);
}

PyObject *tfr_py_append_frame(PyObject *self, PyObject *args) {
    PyObject *buf, *payload;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "OnO", &buf, &pos, &payload) || buffer_args(buf, pos)) return NULL;
    const uint8_t *data;
    Py_ssize_t len;
    Py_buffer view;
    int has_view = 0;
    if (PyBytes_Check(payload)) {
        data = (const uint8_t *)PyBytes_AS_STRING(payload);
        len = PyBytes_GET_SIZE(payload);
    } else {
        if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0) return NULL;
        has_view = 1;
        data = (const uint8_t *)view.buf;
        len = view.len;
    }
    Py_ssize_t end = -1;
    if (len <= PyByteArray_GET_SIZE(buf) - pos - TFR_FRAME_OVERHEAD) {
        uint8_t *p = (uint8_t *)PyByteArray_AS_STRING(buf) + pos;
        tfr_write_header(p, (uint64_t)len);
        memcpy(p + TFR_HEADER_SIZE, data, (size_t)len);
        tfr_write_footer(p + TFR_HEADER_SIZE + len, p + TFR_HEADER_SIZE, (size_t)len);
        end = pos + len + TFR_FRAME_OVERHEAD;
    }
    if (has_view) PyBuffer_Release(&view);
    return PyLong_FromSsize_t(end);
}
