/* Per-feature statistics of Example batches (py_stats.c over tfr_stats.c), registered by _core.c. */
#ifndef TFR_PY_STATS_H
#define TFR_PY_STATS_H
#include <Python.h>

PyObject *tfr_py_example_stats(PyObject *self, PyObject *args);

#endif
