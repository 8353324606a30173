/* Decoded columns -> per-record Python values (py_rows.c), registered by _core.c. */
#ifndef TFR_PY_ROWS_H
#define TFR_PY_ROWS_H
#include <Python.h>

PyObject *tfr_py_example_rows(PyObject *self, PyObject *args);
PyObject *tfr_py_sequence_rows(PyObject *self, PyObject *args);
/* example_rows over columns whose bytes values are addresses inside `source` (decoded with
 * tfr_column.bytes_by_ref from that buffer): only for columns the decoder just made. */
PyObject *tfr_rows_by_reference(PyObject *names, PyObject *kinds, PyObject *columns, Py_ssize_t n, PyObject *rows,
                                PyObject *source);
int tfr_py_rows_init(void); /* at module init: readies the iterator type */

#endif
