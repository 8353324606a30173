/* CPython binding of the plain-C core: argument checks, buffers in, numpy arrays out.
 *
 * Outputs are malloc'd by the C layer and handed to numpy without copying (a capsule frees
 * them with the array). Errors of the record data come back as values, not exceptions, so
 * that tfrecord_beam.columnar turns both engines' errors into exceptions in one place. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tfr_ARRAY_API /* shared with py_encode.c */
#include <numpy/arrayobject.h>

#include <errno.h>
#include <unistd.h>

#include "py_encode.h"
#include "py_rows.h"
#include "py_stats.h"
#include "tfr_crc32c.h"
#include "tfr_encode.h"
#include "tfr_example.h"
#include "tfr_framing.h"
#include "tfr_index.h"
#include "tfr_wire.h"

/* ---- numpy out ---------------------------------------------------------------------- */

static void free_capsule(PyObject *cap) { free(PyCapsule_GetPointer(cap, NULL)); }

/* Wrap b's bytes as a 1-D array of `typenum` (taking ownership), or an empty array. */
static PyObject *buf_to_array(tfr_buf *b, int typenum, size_t itemsize) {
    npy_intp count = (npy_intp)(b->len / itemsize);
    if (!b->data || count == 0) {
        tfr_buf_free(b);
        return PyArray_SimpleNew(1, &count, typenum);
    }
    PyObject *arr = PyArray_SimpleNewFromData(1, &count, typenum, b->data);
    if (!arr) return NULL;
    PyObject *cap = PyCapsule_New(b->data, NULL, free_capsule);
    if (!cap) { Py_DECREF(arr); return NULL; }
    b->data = NULL;
    b->len = b->cap = 0;
    if (PyArray_SetBaseObject((PyArrayObject *)arr, cap) < 0) { Py_DECREF(arr); return NULL; }
    return arr;
}

/* Contiguous int64 view of any array-like (a new reference). */
static PyArrayObject *as_i64(PyObject *o) {
    return (PyArrayObject *)PyArray_FROMANY(o, NPY_INT64, 1, 1, NPY_ARRAY_IN_ARRAY);
}

/* ---- crc / framing ------------------------------------------------------------------ */

static PyObject *py_masked_crc32c(PyObject *self, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = tfr_masked_crc32c((const uint8_t *)v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer v;
    int table_only = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &v, &table_only)) return NULL;
    uint32_t c = table_only ? tfr_crc32c_sw(0, (const uint8_t *)v.buf, (size_t)v.len)
                            : tfr_crc32c(0, (const uint8_t *)v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_find_length_crc(PyObject *self, PyObject *args) {
    Py_buffer v;
    Py_ssize_t start = 0;
    if (!PyArg_ParseTuple(args, "y*|n", &v, &start)) return NULL;
    if (start < 0) { PyBuffer_Release(&v); return PyErr_Format(PyExc_ValueError, "start must be >= 0"); }
    int64_t found;
    Py_BEGIN_ALLOW_THREADS
    found = tfr_find_length_crc((const uint8_t *)v.buf, (size_t)v.len, (size_t)start);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    return PyLong_FromLongLong(found);
}

static PyObject *py_find_length_crcs(PyObject *self, PyObject *args) {
    Py_buffer v;
    Py_ssize_t start = 0;
    if (!PyArg_ParseTuple(args, "y*|n", &v, &start)) return NULL;
    if (start < 0) { PyBuffer_Release(&v); return PyErr_Format(PyExc_ValueError, "start must be >= 0"); }
    tfr_buf found = {0};
    size_t pos = (size_t)start, cap = 256;
    int nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        if (tfr_buf_reserve(&found, cap * 8)) { nomem = 1; break; }
        size_t room = (found.cap - found.len) / 8, next;
        size_t got = tfr_find_length_crcs((const uint8_t *)v.buf, (size_t)v.len, pos,
                                          (int64_t *)(void *)(found.data + found.len), room, &next);
        found.len += got * 8;
        pos = next;
        if (got < room) break;
        cap *= 2;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    if (nomem) { tfr_buf_free(&found); return PyErr_NoMemory(); }
    PyObject *a = buf_to_array(&found, NPY_INT64, 8);
    if (!a) tfr_buf_free(&found);
    return a;
}

static PyObject *py_crc32c_hw(PyObject *self, PyObject *noargs) { return PyBool_FromLong(tfr_crc32c_hw()); }

static PyObject *py_scan_frames(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"buf", "verify", "max_records", NULL};
    Py_buffer v;
    int verify = 1;
    long long max_records = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|iL", names, &v, &verify, &max_records)) return NULL;
    if (verify < TFR_VERIFY_NONE || verify > TFR_VERIFY_LENGTHS) {
        PyBuffer_Release(&v);
        return PyErr_Format(PyExc_ValueError, "verify must be 0, 1 (True) or 2 (lengths only), not %d", verify);
    }
    tfr_buf offs = {0}, lens = {0};
    size_t pos = 0, total = 0;
    int status = TFR_SCAN_OK, nomem = 0;
    const uint8_t *base = (const uint8_t *)v.buf;
    size_t size = (size_t)v.len;
    Py_BEGIN_ALLOW_THREADS
    size_t cap = 1024;
    for (;;) {
        if (tfr_buf_reserve(&offs, cap * 8) || tfr_buf_reserve(&lens, cap * 8)) { nomem = 1; break; }
        size_t room = (offs.cap - offs.len) / 8;
        size_t consumed;
        int64_t left = max_records < 0 ? -1 : max_records - (int64_t)total;
        size_t got = tfr_scan_frames(base + pos, size - pos, verify, left,
                                     (int64_t *)(void *)(offs.data + offs.len),
                                     (int64_t *)(void *)(lens.data + lens.len), room, &consumed, &status);
        for (size_t k = 0; k < got; k++) ((int64_t *)(void *)(offs.data + offs.len))[k] += (int64_t)pos;
        offs.len += got * 8;
        lens.len += got * 8;
        total += got;
        pos += consumed;
        if (got < room || status != TFR_SCAN_OK || pos >= size) break;
        if (max_records >= 0 && (int64_t)total >= max_records) break;
        cap *= 2;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    if (nomem) { tfr_buf_free(&offs); tfr_buf_free(&lens); return PyErr_NoMemory(); }
    PyObject *a = buf_to_array(&offs, NPY_INT64, 8), *b = buf_to_array(&lens, NPY_INT64, 8);
    if (!a || !b) { Py_XDECREF(a); Py_XDECREF(b); tfr_buf_free(&offs); tfr_buf_free(&lens); return NULL; }
    return Py_BuildValue("(NNni)", a, b, (Py_ssize_t)pos, status);
}

static PyObject *py_frame_records(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "payloads must be a sequence of bytes-like objects");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_buffer *views = (Py_buffer *)PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    PyObject *out = NULL;
    Py_ssize_t got = 0, total = 0;
    if (!views) { PyErr_NoMemory(); goto done; }
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &views[got], PyBUF_SIMPLE) < 0) goto done;
        total += views[got].len + TFR_FRAME_OVERHEAD;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t len = (size_t)views[i].len;
        tfr_write_header(p, len);
        memcpy(p + TFR_HEADER_SIZE, views[i].buf, len);
        tfr_write_footer(p + TFR_HEADER_SIZE + len, p + TFR_HEADER_SIZE, len);
        p += len + TFR_FRAME_OVERHEAD;
    }
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_DECREF(seq);
    return out;
}

/* slice_payloads(buffer, offsets, lengths) -> [bytes]: buffer[offsets[i]:offsets[i] + lengths[i]]
 * for each i (a chunk's payloads as Beam and the loaders hand them on); ValueError for a
 * slice outside the buffer. */
static PyObject *py_slice_payloads(PyObject *self, PyObject *args) {
    PyObject *buffer, *offsets, *lengths;
    if (!PyArg_ParseTuple(args, "OOO", &buffer, &offsets, &lengths)) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(buffer, &v, PyBUF_SIMPLE) < 0) return NULL;
    PyArrayObject *offs = as_i64(offsets), *lens = offs ? as_i64(lengths) : NULL;
    PyObject *out = NULL;
    if (!offs || !lens) goto done;
    npy_intp n = PyArray_SIZE(offs);
    if (PyArray_SIZE(lens) != n) {
        PyErr_SetString(PyExc_ValueError, "offsets and lengths differ in length");
        goto done;
    }
    const int64_t *o = (const int64_t *)PyArray_DATA(offs), *l = (const int64_t *)PyArray_DATA(lens);
    for (npy_intp i = 0; i < n; i++) {
        if (o[i] < 0 || l[i] < 0 || o[i] > (int64_t)v.len || l[i] > (int64_t)v.len - o[i]) {
            PyErr_Format(PyExc_ValueError, "payload %zd (offset %lld, length %lld) is outside the %zd-byte buffer",
                         (Py_ssize_t)i, (long long)o[i], (long long)l[i], v.len);
            goto done;
        }
    }
    out = PyList_New(n);
    if (!out) goto done;
    const char *base = (const char *)v.buf;
    for (npy_intp i = 0; i < n; i++) {
        PyObject *item = PyBytes_FromStringAndSize(base + o[i], (Py_ssize_t)l[i]);
        if (!item) { Py_CLEAR(out); goto done; }
        PyList_SET_ITEM(out, i, item);
    }
done:
    Py_XDECREF(offs);
    Py_XDECREF(lens);
    PyBuffer_Release(&v);
    return out;
}

/* walk_headers(fd, start, size[, max_records]) -> (header offsets, payload lengths, footers, stop,
 * status): the records of an uncompressed file read by header alone (pread at each header, from
 * the 4 bytes before it so the previous record's footer comes along; a block at a time while
 * records are small), at most max_records of them. footers: each record's stored payload CRC
 * (uint32). status 0: reached `size` or max_records (stop < size: where the next record starts);
 * 1: fewer than 12 bytes left at `stop`; 2: bad length CRC at `stop`; 3: the frame at `stop`
 * runs past `size` (or its footer is missing: the file shrank under the walk). Twin:
 * _framing.walk_headers. */
#define WALK_BLOCK (64 * 1024)
#define WALK_SMALL (TFR_FOOTER_SIZE + TFR_HEADER_SIZE) /* a big record's read: the footer before its header, the header */
static PyObject *py_walk_headers(PyObject *self, PyObject *args) {
    int fd;
    long long start, size;
    Py_ssize_t max_records = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, "iLL|n", &fd, &start, &size, &max_records)) return NULL;
    if (start < 0 || size < start) return PyErr_Format(PyExc_ValueError, "bad range %lld..%lld", start, size);
    if (max_records < 1) return PyErr_Format(PyExc_ValueError, "max_records must be at least 1, not %zd", max_records);
    tfr_buf offs = {0}, lens = {0}, foots = {0};
    uint8_t *blk = (uint8_t *)malloc(WALK_BLOCK);
    if (!blk) return PyErr_NoMemory();
    uint64_t pos = (uint64_t)start, end = (uint64_t)size;
    size_t n = 0, limit = (size_t)max_records;
    int status = 0, err = 0, nomem = 0, due = 0;
    Py_BEGIN_ALLOW_THREADS
    size_t want = WALK_BLOCK;
    while ((pos < end && n < limit) || due) {
        uint64_t from = due ? pos - TFR_FOOTER_SIZE : pos;
        size_t ask = pos < end && n < limit ? want : TFR_FOOTER_SIZE; /* only the last footer left */
        if (end - from < ask) ask = (size_t)(end - from);
        ssize_t got;
        do { got = pread(fd, blk, ask, (off_t)from); } while (got < 0 && errno == EINTR);
        if (got < 0) { err = errno; break; }
        if (due && (size_t)got < TFR_FOOTER_SIZE) { /* the file shrank under us: drop the footless record */
            n--;
            pos = (uint64_t)((int64_t *)(void *)offs.data)[n];
            status = TFR_WALK_PAST_END;
            break;
        }
        size_t room = (size_t)got / TFR_FRAME_OVERHEAD + 1, cap = limit - n < room ? limit : n + room, had = n;
        if (tfr_buf_reserve(&offs, room * 8) || tfr_buf_reserve(&lens, room * 8) || tfr_buf_reserve(&foots, room * 4)) {
            nomem = 1;
            break;
        }
        int st;
        tfr_walk_headers(blk, (size_t)got, from, end, &pos, (int64_t *)(void *)offs.data, (int64_t *)(void *)lens.data,
                         (uint32_t *)(void *)foots.data, &n, cap, &due, &st);
        offs.len = lens.len = n * 8;
        foots.len = n * 4;
        if (st != TFR_WALK_MORE) { status = st; break; }
        if (n == had && pos < end && n < limit) { status = 1; break; } /* no header at pos (or the file shrank) */
        /* big records: read just the next footer and header; small ones: a block of them */
        if (n > had) want = ((int64_t *)(void *)lens.data)[n - 1] + TFR_FRAME_OVERHEAD >= WALK_BLOCK / 8 ? WALK_SMALL : WALK_BLOCK;
    }
    Py_END_ALLOW_THREADS
    free(blk);
    if (nomem || err) {
        tfr_buf_free(&offs);
        tfr_buf_free(&lens);
        tfr_buf_free(&foots);
        if (nomem) return PyErr_NoMemory();
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    offs.len = lens.len = n * 8; /* a dropped record */
    foots.len = n * 4;
    PyObject *a = buf_to_array(&offs, NPY_INT64, 8), *b = buf_to_array(&lens, NPY_INT64, 8);
    PyObject *c = buf_to_array(&foots, NPY_UINT32, 4);
    if (!a || !b || !c) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        tfr_buf_free(&offs);
        tfr_buf_free(&lens);
        tfr_buf_free(&foots);
        return NULL;
    }
    return Py_BuildValue("(NNNLi)", a, b, c, (long long)pos, status);
}

/* The winning chain fault as (code, entry, offset, length, previous end), or None. */
static PyObject *chain_fault(const tfr_index_chain *c) {
    const tfr_chain_fault *f = c->overflow.found ? &c->overflow : c->not_at_zero.found ? &c->not_at_zero : c->gap.found ? &c->gap : NULL;
    if (!f) Py_RETURN_NONE;
    int code = f == &c->overflow ? 3 : f == &c->not_at_zero ? 4 : 5; /* _index_text.CHAIN_* */
    return Py_BuildValue("(inLLL)", code, (Py_ssize_t)f->entry, (long long)f->offset, (long long)f->length,
                         (long long)f->previous_end);
}

/* index_starts(buf, start=0) -> (starts int64 (n,), end, None | (code, line, line start), None |
 * chain fault): `.tfindex` text; the entries' offsets (the lengths follow from the chain), where
 * the last ends, the first malformed line (the entries before it are returned) and the first
 * fault of the chain, which must begin at `start` (_index_text.index_starts). */
static PyObject *py_index_starts(PyObject *self, PyObject *args) {
    Py_buffer v;
    long long first_offset = 0;
    if (!PyArg_ParseTuple(args, "y*|L", &v, &first_offset)) return NULL;
    const uint8_t *buf = (const uint8_t *)v.buf;
    size_t size = (size_t)v.len, n = 0, cap;
    tfr_index_error err;
    tfr_index_chain chain;
    memset(&chain, 0, sizeof(chain));
    tfr_buf out = {0};
    int nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    cap = tfr_index_max_pairs(buf, size);
    if (tfr_buf_reserve(&out, cap * 8)) nomem = 1;
    else {
        n = tfr_parse_index(buf, size, (int64_t *)(void *)out.data, cap, &err, &chain, (int64_t)first_offset);
        out.len = n * 8;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    if (nomem) { tfr_buf_free(&out); return PyErr_NoMemory(); }
    if (out.len && out.len < out.cap) { /* the buffer grew in powers of 2: give the spare back */
        uint8_t *smaller = (uint8_t *)realloc(out.data, out.len);
        if (smaller) { out.data = smaller; out.cap = out.len; }
    }
    PyObject *starts = buf_to_array(&out, NPY_INT64, 8);
    if (!starts) { tfr_buf_free(&out); return NULL; }
    PyObject *fault = chain_fault(&chain);
    if (!fault) { Py_DECREF(starts); return NULL; }
    if (err.code == TFR_INDEX_OK) return Py_BuildValue("(NLON)", starts, (long long)chain.end, Py_None, fault);
    return Py_BuildValue("(NL(inn)N)", starts, (long long)chain.end, err.code, (Py_ssize_t)err.line,
                         (Py_ssize_t)err.line_start, fault);
}

/* ---- record input: (buffer, offsets, lengths) or a sequence of bytes-likes --------------- */

typedef struct {
    const uint8_t **ptrs;
    int64_t *lens;
    size_t n;
    Py_buffer whole; /* buffer form */
    int has_whole;
    Py_buffer *views; /* sequence form */
    Py_ssize_t nviews;
    PyObject *keep; /* tuple of the records (sequence form) */
    PyArrayObject *offs, *lns;
} records_in;

static void records_release(records_in *r) {
    if (r->has_whole) PyBuffer_Release(&r->whole);
    for (Py_ssize_t i = 0; i < r->nviews; i++) PyBuffer_Release(&r->views[i]);
    PyMem_Free(r->views);
    PyMem_Free(r->ptrs);
    PyMem_Free(r->lens);
    Py_XDECREF(r->keep);
    Py_XDECREF(r->offs);
    Py_XDECREF(r->lns);
}

static int records_get(PyObject *records, PyObject *offsets, PyObject *lengths, records_in *r) {
    memset(r, 0, sizeof *r);
    if (offsets != Py_None || lengths != Py_None) {
        if (offsets == Py_None || lengths == Py_None) {
            PyErr_SetString(PyExc_TypeError, "give both offsets and lengths, or neither");
            return -1;
        }
        if (PyObject_GetBuffer(records, &r->whole, PyBUF_SIMPLE) < 0) return -1;
        r->has_whole = 1;
        if (!(r->offs = as_i64(offsets)) || !(r->lns = as_i64(lengths))) return -1;
        npy_intp n = PyArray_SIZE(r->offs);
        if (PyArray_SIZE(r->lns) != n) {
            PyErr_SetString(PyExc_ValueError, "offsets and lengths differ in length");
            return -1;
        }
        r->n = (size_t)n;
        r->ptrs = (const uint8_t **)PyMem_Malloc((r->n ? r->n : 1) * sizeof(*r->ptrs));
        if (!r->ptrs) { PyErr_NoMemory(); return -1; }
        const int64_t *o = (const int64_t *)PyArray_DATA(r->offs), *l = (const int64_t *)PyArray_DATA(r->lns);
        for (size_t i = 0; i < r->n; i++) {
            if (o[i] < 0 || l[i] < 0 || o[i] > r->whole.len || l[i] > r->whole.len - o[i]) {
                PyErr_Format(PyExc_ValueError, "record %zd: offset %lld length %lld outside the buffer",
                             (Py_ssize_t)i, (long long)o[i], (long long)l[i]);
                return -1;
            }
            r->ptrs[i] = (const uint8_t *)r->whole.buf + o[i];
        }
        r->lens = NULL;
        r->lens = (int64_t *)PyMem_Malloc((r->n ? r->n : 1) * sizeof(int64_t));
        if (!r->lens) { PyErr_NoMemory(); return -1; }
        memcpy(r->lens, l, r->n * sizeof(int64_t));
        return 0;
    }
    if (!(r->keep = PySequence_Tuple(records))) return -1;
    r->n = (size_t)PyTuple_GET_SIZE(r->keep);
    r->ptrs = (const uint8_t **)PyMem_Malloc((r->n ? r->n : 1) * sizeof(*r->ptrs));
    r->lens = (int64_t *)PyMem_Malloc((r->n ? r->n : 1) * sizeof(int64_t));
    r->views = (Py_buffer *)PyMem_Calloc(r->n ? r->n : 1, sizeof(Py_buffer));
    if (!r->ptrs || !r->lens || !r->views) { PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < r->n; i++) {
        PyObject *item = PyTuple_GET_ITEM(r->keep, i);
        if (PyBytes_CheckExact(item)) {
            r->ptrs[i] = (const uint8_t *)PyBytes_AS_STRING(item);
            r->lens[i] = PyBytes_GET_SIZE(item);
            continue;
        }
        if (PyObject_GetBuffer(item, &r->views[r->nviews], PyBUF_SIMPLE) < 0) return -1;
        r->ptrs[i] = (const uint8_t *)r->views[r->nviews].buf;
        r->lens[i] = r->views[r->nviews].len;
        r->nviews++;
    }
    return 0;
}

/* ---- descriptions ------------------------------------------------------------------- */

/* names: sequence of bytes; kinds: sequence of ints (1 bytes, 2 float, 3 int64). The returned
 * descs point into the bytes objects held by *keep. */
static tfr_desc *desc_get(PyObject *names, PyObject *kinds, size_t *n, PyObject **keep) {
    *keep = PySequence_Tuple(names);
    if (!*keep) return NULL;
    PyObject *ks = PySequence_Tuple(kinds);
    if (!ks) return NULL;
    Py_ssize_t m = PyTuple_GET_SIZE(*keep);
    tfr_desc *d = NULL;
    if (PyTuple_GET_SIZE(ks) != m) {
        PyErr_SetString(PyExc_ValueError, "names and kinds differ in length");
        goto out;
    }
    d = (tfr_desc *)PyMem_Calloc(m ? (size_t)m : 1, sizeof(tfr_desc));
    if (!d) { PyErr_NoMemory(); goto out; }
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *nm = PyTuple_GET_ITEM(*keep, j);
        long k = PyLong_AsLong(PyTuple_GET_ITEM(ks, j));
        if (!PyBytes_Check(nm) || k < 1 || k > 3) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "names must be bytes, kinds 1, 2 or 3");
            PyMem_Free(d);
            d = NULL;
            goto out;
        }
        d[j].name = (const uint8_t *)PyBytes_AS_STRING(nm);
        d[j].name_len = (size_t)PyBytes_GET_SIZE(nm);
        d[j].kind = (int)k;
    }
    *n = (size_t)m;
out:
    Py_DECREF(ks);
    return d;
}

static const int KIND_TYPE[4] = {0, NPY_UINT8, NPY_FLOAT32, NPY_INT64};
static const size_t KIND_SIZE[4] = {1, 1, 4, 8};

/* (values, row_splits, value_offsets|None, status) or, with steps,
 * (values, row_splits, step_splits, value_offsets|None, status). */
static PyObject *column_tuple(tfr_column *c, int steps) {
    PyObject *values = buf_to_array(&c->values, KIND_TYPE[c->kind], KIND_SIZE[c->kind]);
    PyObject *rs = buf_to_array(&c->row_splits, NPY_INT64, 8);
    PyObject *ss = steps ? buf_to_array(&c->step_splits, NPY_INT64, 8) : NULL;
    PyObject *vo = c->kind == TFR_KIND_BYTES ? buf_to_array(&c->value_offsets, NPY_INT64, 8) : (Py_INCREF(Py_None), Py_None);
    PyObject *st = buf_to_array(&c->status, NPY_UINT8, 1);
    if (!values || !rs || (steps && !ss) || !vo || !st) {
        Py_XDECREF(values); Py_XDECREF(rs); Py_XDECREF(ss); Py_XDECREF(vo); Py_XDECREF(st);
        return NULL;
    }
    return steps ? Py_BuildValue("(NNNNN)", values, rs, ss, vo, st) : Py_BuildValue("(NNNN)", values, rs, vo, st);
}

static PyObject *columns_list(tfr_column *cols, size_t n, int steps) {
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (size_t j = 0; j < n; j++) {
        PyObject *t = column_tuple(&cols[j], steps);
        if (!t) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, (Py_ssize_t)j, t);
    }
    return list;
}

static PyObject *error_value(const tfr_error *e) {
    if (e->code == TFR_OK) Py_RETURN_NONE;
    return Py_BuildValue("(iLii)", e->code, (long long)e->record, e->feature, e->found_kind);
}

static void free_columns(tfr_column *cols, size_t n) {
    if (!cols) return;
    for (size_t j = 0; j < n; j++) tfr_column_free(&cols[j]);
    PyMem_Free(cols);
}

static PyObject *py_decode_examples(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwn[] = {"records", "names", "kinds", "offsets", "lengths", NULL};
    PyObject *records, *names, *kinds, *offsets = Py_None, *lengths = Py_None, *keep = NULL, *result = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OO", kwn, &records, &names, &kinds, &offsets, &lengths)) return NULL;
    records_in r;
    size_t nf = 0;
    tfr_desc *d = NULL;
    tfr_column *cols = NULL;
    if (records_get(records, offsets, lengths, &r) < 0) goto out;
    if (!(d = desc_get(names, kinds, &nf, &keep))) goto out;
    if (!(cols = (tfr_column *)PyMem_Calloc(nf ? nf : 1, sizeof(tfr_column)))) { PyErr_NoMemory(); goto out; }
    tfr_error err;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfr_decode_examples(r.ptrs, r.lens, r.n, d, nf, cols, &err);
    Py_END_ALLOW_THREADS
    if (rc == TFR_ERR_NOMEM) { PyErr_NoMemory(); goto out; }
    if (rc != TFR_OK) { result = Py_BuildValue("(ON)", Py_None, error_value(&err)); goto out; }
    PyObject *lst = columns_list(cols, nf, 0);
    if (lst) result = Py_BuildValue("(NO)", lst, Py_None);
out:
    records_release(&r);
    free_columns(cols, nf);
    PyMem_Free(d);
    Py_XDECREF(keep);
    return result;
}

/* decode_example_rows(buffer, names, kinds, offsets, lengths, keys, rows) -> (iterator | None,
 * error | None): decode_examples + example_rows in one, the bytes values cut straight out of
 * `buffer` (one copy, into each `bytes`) instead of out of a column copy of them. */
static PyObject *py_decode_example_rows(PyObject *self, PyObject *args) {
    PyObject *records, *names, *kinds, *offsets, *lengths, *keys, *rows, *keep = NULL, *result = NULL, *lst = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &records, &names, &kinds, &offsets, &lengths, &keys, &rows)) return NULL;
    if (offsets == Py_None || lengths == Py_None) {
        PyErr_SetString(PyExc_TypeError, "decode_example_rows needs one buffer with offsets and lengths");
        return NULL;
    }
    records_in r;
    size_t nf = 0;
    tfr_desc *d = NULL;
    tfr_column *cols = NULL;
    if (records_get(records, offsets, lengths, &r) < 0) goto out;
    if (!(d = desc_get(names, kinds, &nf, &keep))) goto out;
    if (!(cols = (tfr_column *)PyMem_Calloc(nf ? nf : 1, sizeof(tfr_column)))) { PyErr_NoMemory(); goto out; }
    for (size_t j = 0; j < nf; j++) cols[j].bytes_by_ref = d[j].kind == TFR_KIND_BYTES;
    tfr_error err;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfr_decode_examples(r.ptrs, r.lens, r.n, d, nf, cols, &err);
    Py_END_ALLOW_THREADS
    if (rc == TFR_ERR_NOMEM) { PyErr_NoMemory(); goto out; }
    if (rc != TFR_OK) { result = Py_BuildValue("(ON)", Py_None, error_value(&err)); goto out; }
    if (!(lst = PyList_New((Py_ssize_t)nf))) goto out;
    for (size_t j = 0; j < nf; j++) { /* bytes values: their addresses, one uint64 each */
        tfr_column *c = &cols[j];
        int bytes = c->kind == TFR_KIND_BYTES;
        PyObject *values = buf_to_array(&c->values, bytes ? NPY_UINT64 : KIND_TYPE[c->kind], bytes ? 8 : KIND_SIZE[c->kind]);
        PyObject *rs = buf_to_array(&c->row_splits, NPY_INT64, 8);
        PyObject *vo = bytes ? buf_to_array(&c->value_offsets, NPY_INT64, 8) : (Py_INCREF(Py_None), Py_None);
        PyObject *st = buf_to_array(&c->status, NPY_UINT8, 1);
        PyObject *t = values && rs && vo && st ? Py_BuildValue("(NNNN)", values, rs, vo, st) : NULL;
        if (!t) {
            if (!values || !rs || !vo || !st) { Py_XDECREF(values); Py_XDECREF(rs); Py_XDECREF(vo); Py_XDECREF(st); }
            goto out;
        }
        PyList_SET_ITEM(lst, (Py_ssize_t)j, t);
    }
    PyObject *it = tfr_rows_by_reference(keys, kinds, lst, (Py_ssize_t)r.n, rows, records);
    if (it) result = Py_BuildValue("(NO)", it, Py_None);
out:
    Py_XDECREF(lst);
    records_release(&r);
    free_columns(cols, nf);
    PyMem_Free(d);
    Py_XDECREF(keep);
    return result;
}

static PyObject *py_decode_sequence_examples(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwn[] = {"records", "context_names", "context_kinds", "names", "kinds", "offsets", "lengths", NULL};
    PyObject *records, *cn, *ck, *sn, *sk, *offsets = Py_None, *lengths = Py_None;
    PyObject *ckeep = NULL, *skeep = NULL, *result = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|OO", kwn, &records, &cn, &ck, &sn, &sk, &offsets, &lengths)) return NULL;
    records_in r;
    size_t ncf = 0, nsf = 0;
    tfr_desc *cd = NULL, *sd = NULL;
    tfr_column *ccols = NULL, *scols = NULL;
    if (records_get(records, offsets, lengths, &r) < 0) goto out;
    if (!(cd = desc_get(cn, ck, &ncf, &ckeep)) || !(sd = desc_get(sn, sk, &nsf, &skeep))) goto out;
    ccols = (tfr_column *)PyMem_Calloc(ncf ? ncf : 1, sizeof(tfr_column));
    scols = (tfr_column *)PyMem_Calloc(nsf ? nsf : 1, sizeof(tfr_column));
    if (!ccols || !scols) { PyErr_NoMemory(); goto out; }
    tfr_error err;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tfr_decode_sequence_examples(r.ptrs, r.lens, r.n, cd, ncf, ccols, sd, nsf, scols, &err);
    Py_END_ALLOW_THREADS
    if (rc == TFR_ERR_NOMEM) { PyErr_NoMemory(); goto out; }
    if (rc != TFR_OK) { result = Py_BuildValue("(OON)", Py_None, Py_None, error_value(&err)); goto out; }
    PyObject *a = columns_list(ccols, ncf, 0);
    PyObject *b = a ? columns_list(scols, nsf, 1) : NULL;
    if (a && b) result = Py_BuildValue("(NNO)", a, b, Py_None);
    else Py_XDECREF(a);
out:
    records_release(&r);
    free_columns(ccols, ncf);
    free_columns(scols, nsf);
    PyMem_Free(cd);
    PyMem_Free(sd);
    Py_XDECREF(ckeep);
    Py_XDECREF(skeep);
    return result;
}

/* ---- encode ------------------------------------------------------------------------- */

/* Move a new reference into the list that keeps the inputs alive; -1 on failure. */
static int keep(PyObject *hold, PyObject *o) {
    int rc = PyList_Append(hold, o);
    Py_DECREF(o);
    return rc;
}

/* Fill ec[0..m) from columns, a tuple of (name bytes, kind int, values, row_splits,
 * value_offsets|None, status|None) for n records; the arrays made go to `hold`, which keeps
 * them alive. -1 with an exception set on bad input. */
static int enc_columns(PyObject *cols, Py_ssize_t n, tfr_enc_col *ec, PyObject *hold) {
    Py_ssize_t m = PyTuple_GET_SIZE(cols);
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *name, *values, *splits, *voffs, *status;
        int kind;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(cols, j), "SiOOOO", &name, &kind, &values, &splits, &voffs, &status)) return -1;
        if (kind < 1 || kind > 3) { PyErr_SetString(PyExc_ValueError, "kind must be 1, 2 or 3"); return -1; }
        PyArrayObject *v = (PyArrayObject *)PyArray_FROMANY(values, KIND_TYPE[kind], 1, 1, NPY_ARRAY_IN_ARRAY);
        if (!v || keep(hold, (PyObject *)v) < 0) return -1;
        PyArrayObject *s = as_i64(splits);
        if (!s || keep(hold, (PyObject *)s) < 0) return -1;
        if (PyArray_SIZE(s) != n + 1) {
            PyErr_Format(PyExc_ValueError, "column %zd: row_splits must have n+1 = %zd items", j, n + 1);
            return -1;
        }
        PyObject *text = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name), NULL);
        if (!text) return -1; /* map keys are proto3 strings: UTF-8 only, as upb insists */
        Py_DECREF(text);
        ec[j].name = (const uint8_t *)PyBytes_AS_STRING(name);
        ec[j].name_len = (size_t)PyBytes_GET_SIZE(name);
        ec[j].kind = kind;
        ec[j].values = PyArray_DATA(v);
        ec[j].values_len = (size_t)PyArray_SIZE(v);
        ec[j].row_splits = (const int64_t *)PyArray_DATA(s);
        if (kind == TFR_KIND_BYTES) {
            PyArrayObject *o = voffs == Py_None ? NULL : as_i64(voffs);
            if (!o) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bytes columns need value_offsets"); return -1; }
            if (keep(hold, (PyObject *)o) < 0) return -1;
            if (PyArray_SIZE(o) < 1) { PyErr_SetString(PyExc_ValueError, "value_offsets is empty"); return -1; }
            ec[j].value_offsets = (const int64_t *)PyArray_DATA(o);
            ec[j].nvalues = (size_t)PyArray_SIZE(o) - 1;
        }
        if (status != Py_None) {
            PyArrayObject *st = (PyArrayObject *)PyArray_FROMANY(status, NPY_UINT8, 1, 1, NPY_ARRAY_IN_ARRAY);
            if (!st || keep(hold, (PyObject *)st) < 0) return -1;
            if (PyArray_SIZE(st) != n) { PyErr_SetString(PyExc_ValueError, "status must have n items"); return -1; }
            ec[j].status = (const uint8_t *)PyArray_DATA(st);
        }
    }
    return 0;
}

/* The exception of a tfr_encode_* return code other than OK; NULL. */
static PyObject *enc_error(int rc, int bad) {
    if (rc == TFR_ENC_NOMEM) return PyErr_NoMemory();
    return PyErr_Format(PyExc_ValueError, "column %d: row_splits or value_offsets are not consistent with the values", bad);
}

/* columns (see enc_columns), n records. Returns (payload buffer as uint8 array, offsets int64
 * n+1), or bytes when framed; with lengths_only, the int64 length of each payload instead
 * (nothing is written: what `inspect` compares with the records it decoded). */
static PyObject *encode_call(PyObject *columns, Py_ssize_t n, int framed, int lengths_only) {
    if (n < 0) { PyErr_SetString(PyExc_ValueError, "n < 0"); return NULL; }
    PyObject *cols = PySequence_Tuple(columns), *result = NULL;
    if (!cols) return NULL;
    Py_ssize_t m = PyTuple_GET_SIZE(cols);
    tfr_enc_col *ec = (tfr_enc_col *)PyMem_Calloc(m ? (size_t)m : 1, sizeof(tfr_enc_col));
    PyObject *hold = PyList_New(0);
    tfr_buf out = {0}, offs = {0};
    if (!ec || !hold) { PyErr_NoMemory(); goto done; }
    if (enc_columns(cols, n, ec, hold) < 0) goto done;
    int bad, rc;
    if (lengths_only) {
        npy_intp dims[1] = {n};
        PyArrayObject *lengths = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_INT64);
        if (!lengths) goto done;
        int64_t *into = (int64_t *)PyArray_DATA(lengths);
        Py_BEGIN_ALLOW_THREADS /* the arrays are held by `hold`; the encoder has no global state */
        rc = tfr_example_lengths(ec, (size_t)m, (size_t)n, into, &bad);
        Py_END_ALLOW_THREADS
        if (rc == TFR_ENC_OK) result = (PyObject *)lengths;
        else { Py_DECREF(lengths); enc_error(rc, bad); }
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = tfr_encode_examples(ec, (size_t)m, (size_t)n, framed, &out, &offs, &bad);
    Py_END_ALLOW_THREADS
    if (rc != TFR_ENC_OK) { enc_error(rc, bad); goto done; }
    if (framed) {
        result = PyBytes_FromStringAndSize((const char *)out.data, (Py_ssize_t)out.len);
    } else {
        PyObject *a = buf_to_array(&out, NPY_UINT8, 1), *b = a ? buf_to_array(&offs, NPY_INT64, 8) : NULL;
        if (a && b) result = Py_BuildValue("(NN)", a, b);
        else Py_XDECREF(a);
    }
done:
    tfr_buf_free(&out);
    tfr_buf_free(&offs);
    PyMem_Free(ec);
    Py_XDECREF(hold);
    Py_DECREF(cols);
    return result;
}

static PyObject *py_encode_examples(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwn[] = {"columns", "n", "framed", NULL};
    PyObject *columns;
    Py_ssize_t n;
    int framed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On|p", kwn, &columns, &n, &framed)) return NULL;
    return encode_call(columns, n, framed, 0);
}

static PyObject *py_example_lengths(PyObject *self, PyObject *args) {
    PyObject *columns;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "On", &columns, &n)) return NULL;
    return encode_call(columns, n, 0, 1);
}

static PyMethodDef methods[] = {
    {"masked_crc32c", py_masked_crc32c, METH_O, "TFRecord's masked CRC32C of a bytes-like object."},
    {"find_length_crc", py_find_length_crc, METH_VARARGS,
     "find_length_crc(buf, start=0): first position >= start holding a header with a valid length CRC, or -1."},
    {"find_length_crcs", py_find_length_crcs, METH_VARARGS,
     "find_length_crcs(buf, start=0): every such position >= start, as an int64 array."},
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, table_only=False): plain CRC32C (tests)."},
    {"crc32c_hw", py_crc32c_hw, METH_NOARGS, "True when the SSE4.2 instruction is in use."},
    {"scan_frames", (PyCFunction)(void (*)(void))py_scan_frames, METH_VARARGS | METH_KEYWORDS,
     "scan_frames(buf, verify=True, max_records=-1) -> (offsets, lengths, consumed, status)."},
    {"walk_headers", py_walk_headers, METH_VARARGS,
     "walk_headers(fd, start, size[, max_records]) -> (header offsets, payload lengths, footers, stop, status): "
     "index by header walk."},
    {"index_starts", py_index_starts, METH_VARARGS,
     "index_starts(buf, start=0) -> (int64 starts (n,), end, None | (code, line, line start), None | (code, entry, "
     "offset, length, previous end)): `.tfindex` text."},
    {"slice_payloads", py_slice_payloads, METH_VARARGS,
     "slice_payloads(buffer, offsets, lengths) -> list of bytes: each payload of a chunk."},
    {"frame_records", py_frame_records, METH_O, "Frame many payloads into one bytes object."},
    {"decode_examples", (PyCFunction)(void (*)(void))py_decode_examples, METH_VARARGS | METH_KEYWORDS,
     "decode_examples(records, names, kinds, offsets=None, lengths=None) -> (columns|None, error|None)."},
    {"decode_example_rows", py_decode_example_rows, METH_VARARGS,
     "decode_example_rows(buffer, names, kinds, offsets, lengths, keys, rows) -> (iterator of dicts | None, error | None)."},
    {"decode_sequence_examples", (PyCFunction)(void (*)(void))py_decode_sequence_examples, METH_VARARGS | METH_KEYWORDS,
     "decode_sequence_examples(records, context_names, context_kinds, names, kinds, offsets=None, lengths=None)."},
    {"encode_examples", (PyCFunction)(void (*)(void))py_encode_examples, METH_VARARGS | METH_KEYWORDS,
     "encode_examples(columns, n, framed=False) -> (payloads uint8, offsets int64) or bytes."},
    {"example_stats", tfr_py_example_stats, METH_VARARGS,
     "example_stats(buffer, offsets, lengths, start=0) -> (taken, features): per-feature statistics of Examples."},
    {"example_lengths", py_example_lengths, METH_VARARGS,
     "example_lengths(columns, n) -> int64 length of each payload encode_examples would write."},
    {"encode_example", (PyCFunction)(void (*)(void))tfr_py_encode_example, METH_VARARGS | METH_KEYWORDS,
     "encode_example(datum, framed=False) -> bytes, or None when a value needs the Python path."},
    {"encode_sequence_example", (PyCFunction)(void (*)(void))tfr_py_encode_sequence_example,
     METH_VARARGS | METH_KEYWORDS,
     "encode_sequence_example(context, feature_lists, framed=False) -> bytes, or None (Python path)."},
    {"append_example", tfr_py_append_example, METH_VARARGS,
     "append_example(buf, pos, datum) -> end of the frame written at buf[pos:], -1 when it does not fit, "
     "None when a value needs the Python path."},
    {"append_sequence_example", tfr_py_append_sequence_example, METH_VARARGS,
     "append_sequence_example(buf, pos, context, feature_lists): as append_example."},
    {"example_rows", tfr_py_example_rows, METH_VARARGS,
     "example_rows(names, kinds, columns, n, rows) -> iterator of a dict per record: decoded columns as the loaders yield them."},
    {"sequence_rows", tfr_py_sequence_rows, METH_VARARGS,
     "sequence_rows(context_names, context_kinds, context_columns, names, kinds, columns, n, rows) -> "
     "iterator of (context, {name: [value per step]}) per record."},
    {"append_frame", tfr_py_append_frame, METH_VARARGS,
     "append_frame(buf, pos, payload) -> end of the frame written at buf[pos:], or -1 when it does not fit."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", "tfrecord_beam's compiled core.", -1, methods};

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    tfr_crc32c_init(); /* tables built before any thread releases the GIL */
    tfr_wire_init();
    if (tfr_py_rows_init() < 0) return NULL;
    return PyModule_Create(&module);
}
