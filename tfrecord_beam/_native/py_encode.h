/* The per-record encoders' CPython entry points (py_encode.c), registered by _core.c. */
#ifndef TFR_PY_ENCODE_H
#define TFR_PY_ENCODE_H
#include <Python.h>

PyObject *tfr_py_encode_example(PyObject *self, PyObject *args, PyObject *kw);
PyObject *tfr_py_encode_sequence_example(PyObject *self, PyObject *args, PyObject *kw);
PyObject *tfr_py_append_example(PyObject *self, PyObject *args);
PyObject *tfr_py_append_sequence_example(PyObject *self, PyObject *args);
PyObject *tfr_py_append_frame(PyObject *self, PyObject *args);

#endif
