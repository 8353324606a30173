/* Decoded columns -> per-record Python values (py_rows.c), registered by _core.c. */
#ifndef TFR_PY_ROWS_H
#define TFR_PY_ROWS_H
#include <Python.h>

PyObject *tfr_py_example_rows(PyObject *self, PyObject *args);
PyObject *tfr_py_sequence_rows(PyObject *self, PyObject *args);
int tfr_py_rows_init(void); /* at module init: readies the iterator type */

#endif
