/* CPython binding of tfr_stats: example_stats(buffer, offsets, lengths, start=0) ->
 * (taken, features), the walk run without the GIL (inspect decodes ahead in threads).
 *
 * Each feature seen in a taken record is one tuple: (name, records, (kinds: none, bytes,
 * float, int64), (values per record: min, max, total), (int min, max) | None, (float min,
 * max) | None, NaN count, (bytes values, length min, max) | None, (k, 2) int64 array of
 * the (offset, length) of bytes values that are not UTF-8 | None, (offset, length) of the
 * first non-empty bytes value | None). Offsets are into `buffer`. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tfr_ARRAY_API
#define NO_IMPORT_ARRAY
#include <numpy/arrayobject.h>

#include "py_stats.h"
#include "tfr_example.h"
#include "tfr_stats.h"

static PyObject *pair_or_none(int64_t count, PyObject *(*make)(const tfr_feature_stats *), const tfr_feature_stats *f) {
    if (!count) Py_RETURN_NONE;
    return make(f);
}

static PyObject *int_range(const tfr_feature_stats *f) { return Py_BuildValue("(LL)", (long long)f->int_min, (long long)f->int_max); }
static PyObject *float_range(const tfr_feature_stats *f) { return Py_BuildValue("(dd)", (double)f->float_min, (double)f->float_max); }
static PyObject *bytes_lengths(const tfr_feature_stats *f) {
    return Py_BuildValue("(LLL)", (long long)f->bytes_count, (long long)f->bytes_len_min, (long long)f->bytes_len_max);
}
static PyObject *sample(const tfr_feature_stats *f) { return Py_BuildValue("(LL)", (long long)f->sample_at, (long long)f->sample_len); }

/* The (k, 2) int64 array of a feature's values that are not UTF-8 (a copy), or None. */
static PyObject *not_utf8(const tfr_feature_stats *f) {
    if (!f->not_utf8.len) Py_RETURN_NONE;
    npy_intp dims[2] = {(npy_intp)(f->not_utf8.len / 16), 2};
    PyObject *arr = PyArray_SimpleNew(2, dims, NPY_INT64);
    if (arr) memcpy(PyArray_DATA((PyArrayObject *)arr), f->not_utf8.data, f->not_utf8.len);
    return arr;
}

static PyObject *feature_tuple(const tfr_feature_stats *f) {
    PyObject *name = PyUnicode_DecodeUTF8((const char *)f->name, (Py_ssize_t)f->name_len, "strict");
    PyObject *ints = pair_or_none(f->int_count, int_range, f);
    PyObject *floats = pair_or_none(f->float_count, float_range, f);
    PyObject *bytes = pair_or_none(f->bytes_count, bytes_lengths, f);
    PyObject *odd = not_utf8(f);
    PyObject *first = pair_or_none(f->sample_at >= 0, sample, f);
    PyObject *out = NULL;
    if (name && ints && floats && bytes && odd && first) {
        out = Py_BuildValue("(OL(LLLL)(LLL)OOLOOO)", name, (long long)f->records, (long long)f->kinds[TFR_KIND_NONE],
                            (long long)f->kinds[TFR_KIND_BYTES], (long long)f->kinds[TFR_KIND_FLOAT],
                            (long long)f->kinds[TFR_KIND_INT64], (long long)f->values_min, (long long)f->values_max,
                            (long long)f->values_total, ints, floats, (long long)f->nan_count, bytes, odd, first);
    }
    Py_XDECREF(name);
    Py_XDECREF(ints);
    Py_XDECREF(floats);
    Py_XDECREF(bytes);
    Py_XDECREF(odd);
    Py_XDECREF(first);
    return out;
}

PyObject *tfr_py_example_stats(PyObject *self, PyObject *args) {
    PyObject *buffer, *offsets, *lengths, *result = NULL, *features = NULL;
    Py_ssize_t start = 0;
    if (!PyArg_ParseTuple(args, "OOO|n", &buffer, &offsets, &lengths, &start)) return NULL;
    Py_buffer whole;
    if (PyObject_GetBuffer(buffer, &whole, PyBUF_SIMPLE) < 0) return NULL;
    PyArrayObject *offs = (PyArrayObject *)PyArray_FROMANY(offsets, NPY_INT64, 1, 1, NPY_ARRAY_IN_ARRAY);
    PyArrayObject *lens = offs ? (PyArrayObject *)PyArray_FROMANY(lengths, NPY_INT64, 1, 1, NPY_ARRAY_IN_ARRAY) : NULL;
    tfr_stats st;
    memset(&st, 0, sizeof st);
    if (!offs || !lens) goto out;
    npy_intp n = PyArray_SIZE(offs);
    if (PyArray_SIZE(lens) != n) {
        PyErr_SetString(PyExc_ValueError, "offsets and lengths differ in length");
        goto out;
    }
    if (start < 0 || start > n) {
        PyErr_Format(PyExc_ValueError, "start %zd outside 0..%zd", start, (Py_ssize_t)n);
        goto out;
    }
    const int64_t *o = (const int64_t *)PyArray_DATA(offs), *l = (const int64_t *)PyArray_DATA(lens);
    size_t taken = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfr_stats_examples(&st, (const uint8_t *)whole.buf, (size_t)whole.len, o, l, (size_t)start, (size_t)n, &taken);
    Py_END_ALLOW_THREADS
    if (rc == TFR_ERR_NOMEM) {
        PyErr_NoMemory();
        goto out;
    }
    if (rc == TFR_STATS_BOUNDS) {
        size_t i = (size_t)start + taken;
        PyErr_Format(PyExc_ValueError, "record %zd: offset %lld length %lld outside the buffer", (Py_ssize_t)i,
                     (long long)o[i], (long long)l[i]);
        goto out;
    }
    if (!(features = PyList_New(0))) goto out;
    for (size_t j = 0; j < st.count; j++) {
        if (!st.features[j].records) continue; /* only in a record the walk stopped at */
        PyObject *t = feature_tuple(&st.features[j]);
        if (!t || PyList_Append(features, t) < 0) {
            Py_XDECREF(t);
            goto out;
        }
        Py_DECREF(t);
    }
    result = Py_BuildValue("(nO)", (Py_ssize_t)taken, features);
out:
    Py_XDECREF(features);
    tfr_stats_free(&st);
    Py_XDECREF(offs);
    Py_XDECREF(lens);
    PyBuffer_Release(&whole);
    return result;
}
