/* Reading many local files into one buffer with the GIL released for all of them.
 *
 * Read file by file from Python, every open, stat and read gives the GIL up and takes it back
 * within microseconds; a thread that wants the GIL meanwhile (a decode thread done with an
 * image, the training loop taking a batch from a thread worker) is woken each time but finds
 * it taken again, and gets it only when its wait times out (sys.getswitchinterval(), 5 ms).
 * One call for all the files of a part lets those threads run while the files are read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

/* err: 0 read whole; > 0 errno; SIZE_CHANGED (got: the size now); ENDED_EARLY (got: bytes) */
#define SIZE_CHANGED (-1)
#define ENDED_EARLY (-2)

static void read_one(const char *path, char *into, int64_t size, int *err, int64_t *got) {
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *got = 0;
    if (fd < 0) {
        *err = errno;
        return;
    }
    if (fstat(fd, &st) != 0) {
        *err = errno;
    } else if (S_ISDIR(st.st_mode)) {
        *err = EISDIR;
    } else if ((int64_t)st.st_size != size) {
        *err = SIZE_CHANGED;
        *got = (int64_t)st.st_size;
    } else {
        *err = 0;
        while (*got < size) {
            ssize_t n = read(fd, into + *got, (size_t)(size - *got));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                *err = errno;
                break;
            }
            if (n == 0) {
                *err = ENDED_EARLY;
                break;
            }
            *got += n;
        }
    }
    close(fd);
}

PyDoc_STRVAR(read_into_doc,
             "read_into(paths, offsets, out, /)\n--\n\n"
             "Read the local file paths[i] (bytes) into out[offsets[i]:offsets[i + 1]] (offsets: "
             "len(paths) + 1 non-decreasing int64 within out), with the GIL released. Returns "
             "the failures as [(i, err, got)]: err an errno, -1 (the file's size is now got) or "
             "-2 (it ended after got bytes).");

static PyObject *read_into(PyObject *self, PyObject *args) {
    PyObject *listed, *paths = NULL, *failures = NULL;
    Py_buffer offs = {0}, out = {0};
    const char **names = NULL;
    int *errs = NULL;
    int64_t *gots = NULL;
    const int64_t *offsets;
    Py_ssize_t n, i;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy*w*", &listed, &offs, &out)) return NULL;
    /* a tuple of its own: no other thread can drop a name while the GIL is released */
    paths = PySequence_Tuple(listed);
    if (paths == NULL) goto done;
    n = PyTuple_GET_SIZE(paths);
    offsets = (const int64_t *)offs.buf;
    if (offs.len != (Py_ssize_t)((n + 1) * sizeof(int64_t)) || offsets[0] < 0 ||
        offsets[n] > (int64_t)out.len) {
        PyErr_SetString(PyExc_ValueError,
                        "read_into takes len(paths) + 1 int64 offsets within out");
        goto done;
    }
    names = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(char *));
    errs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    gots = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int64_t));
    if (names == NULL || errs == NULL || gots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(paths, i);
        if (!PyBytes_Check(name) || offsets[i + 1] < offsets[i]) {
            PyErr_SetString(PyExc_ValueError,
                            "read_into takes paths as bytes and non-decreasing offsets");
            goto done;
        }
        names[i] = PyBytes_AS_STRING(name);
    }
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < n; i++)
        read_one(names[i], (char *)out.buf + offsets[i], offsets[i + 1] - offsets[i], &errs[i],
                 &gots[i]);
    Py_END_ALLOW_THREADS
    failures = PyList_New(0);
    for (i = 0; failures != NULL && i < n; i++) {
        if (errs[i] == 0) continue;
        PyObject *failure = Py_BuildValue("(niL)", i, errs[i], (long long)gots[i]);
        if (failure == NULL || PyList_Append(failures, failure) < 0) Py_CLEAR(failures);
        Py_XDECREF(failure);
    }
done:
    PyMem_Free(names);
    PyMem_Free(errs);
    PyMem_Free(gots);
    Py_XDECREF(paths);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&out);
    return failures;
}

static PyMethodDef methods[] = {
    {"read_into", read_into, METH_VARARGS, read_into_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastdata.sources.readers._readfiles",
    "Local files read into one buffer, the GIL released for all of them.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__readfiles(void) { return PyModule_Create(&module); }
