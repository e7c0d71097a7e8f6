/* The kernel type name index of slimheader, built in C.
 *
 * A cold start (nothing cached) must read every record of the kernel's BTF once to learn
 * which type ids the names a program spells stand for. In Python that walk is 30-50 ms on an
 * idle CPU and 60-90 ms beside the clangs of a cold compile; here it is 5-10 ms.
 * slimheader._walk is the same walk in Python, used where this module was not built (no C
 * compiler at install time); a test checks both give the same index on the running kernel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* BTF kinds (include/uapi/linux/btf.h) whose records are not three words, and the named ones */
enum {
    KIND_INT = 1, KIND_ARRAY = 3, KIND_STRUCT = 4, KIND_UNION = 5, KIND_ENUM = 6, KIND_TYPEDEF = 8,
    KIND_FUNC_PROTO = 13, KIND_VAR = 14, KIND_DATASEC = 15, KIND_DECL_TAG = 17, KIND_ENUM64 = 19,
};

/* Words in a record: the three of struct btf_type, then what its kind appends. */
static size_t record_words(unsigned kind, unsigned vlen)
{
    switch (kind) {
    case KIND_INT: case KIND_VAR: case KIND_DECL_TAG: return 4;
    case KIND_ARRAY: return 6;
    case KIND_ENUM: case KIND_FUNC_PROTO: return 3 + 2 * (size_t)vlen;
    case KIND_STRUCT: case KIND_UNION: case KIND_DATASEC: case KIND_ENUM64: return 3 + 3 * (size_t)vlen;
    default: return 3;
    }
}

struct strings {
    const char *at;
    size_t len;
};

/* index[name] = type_id, or a list of ids once a second one has that name; 0 or -1 */
static int add(PyObject *index, const struct strings *strs, uint32_t off, long type_id)
{
    if (off == 0)
        return 0; /* anonymous */
    if (off >= strs->len) {
        PyErr_Format(PyExc_ValueError, "BTF name offset %u is past the string section", off);
        return -1;
    }
    size_t n = strnlen(strs->at + off, strs->len - off);
    if (n == strs->len - off) {
        PyErr_Format(PyExc_ValueError, "BTF string at offset %u is not terminated", off);
        return -1;
    }
    PyObject *name = PyBytes_FromStringAndSize(strs->at + off, (Py_ssize_t)n);
    PyObject *id = PyLong_FromLong(type_id);
    int rc = -1;
    if (!name || !id)
        goto out;
    PyObject *old = PyDict_GetItemWithError(index, name); /* borrowed */
    if (old == NULL) {
        if (!PyErr_Occurred())
            rc = PyDict_SetItem(index, name, id);
    } else if (PyList_Check(old)) {
        rc = PyList_Append(old, id);
    } else {
        PyObject *ids = PyList_New(2);
        if (ids) {
            Py_INCREF(old);
            PyList_SET_ITEM(ids, 0, old);
            Py_INCREF(id);
            PyList_SET_ITEM(ids, 1, id);
            rc = PyDict_SetItem(index, name, ids);
            Py_DECREF(ids);
        }
    }
out:
    Py_XDECREF(name);
    Py_XDECREF(id);
    return rc;
}

/* lists of ids become tuples: the index's values are an id or a tuple of ids */
static int freeze(PyObject *index)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(index, &pos, &key, &value)) {
        if (!PyList_Check(value))
            continue;
        PyObject *ids = PyList_AsTuple(value);
        if (!ids || PyDict_SetItem(index, key, ids) < 0) { /* same key: iteration stays valid */
            Py_XDECREF(ids);
            return -1;
        }
        Py_DECREF(ids);
    }
    return 0;
}

static int walk(PyObject *index, const uint32_t *w, size_t nwords, const struct strings *strs)
{
    long type_id = 0;
    for (size_t i = 0; i + 3 <= nwords;) {
        uint32_t info = w[i + 1];
        unsigned kind = (info >> 24) & 0x1f, vlen = info & 0xffff;
        size_t len = record_words(kind, vlen);
        type_id++;
        if (i + len > nwords) {
            PyErr_Format(PyExc_ValueError, "BTF type %ld runs past the type section", type_id);
            return -1;
        }
        switch (kind) {
        case KIND_ENUM: /* the enumerators stand for their enum too */
            for (size_t m = 0; m < vlen; m++)
                if (add(index, strs, w[i + 3 + 2 * m], type_id) < 0)
                    return -1;
            /* fall through */
        case KIND_STRUCT: case KIND_UNION: case KIND_TYPEDEF:
            if (add(index, strs, w[i], type_id) < 0)
                return -1;
            break;
        case KIND_ENUM64:
            for (size_t m = 0; m < vlen; m++)
                if (add(index, strs, w[i + 3 + 3 * m], type_id) < 0)
                    return -1;
            if (add(index, strs, w[i], type_id) < 0)
                return -1;
            break;
        }
        i += len;
    }
    return 0;
}

static PyObject *btfnames_index(PyObject *self, PyObject *args)
{
    Py_buffer types, strings;
    if (!PyArg_ParseTuple(args, "y*y*:index", &types, &strings))
        return NULL;
    PyObject *index = NULL;
    if (types.len % 4 != 0 || (uintptr_t)types.buf % 4 != 0) {
        PyErr_SetString(PyExc_ValueError, "the BTF type section is not whole, aligned words");
        goto out;
    }
    index = PyDict_New();
    struct strings strs = {strings.buf, (size_t)strings.len};
    if (index && (walk(index, types.buf, (size_t)types.len / 4, &strs) < 0 || freeze(index) < 0))
        Py_CLEAR(index);
out:
    PyBuffer_Release(&types);
    PyBuffer_Release(&strings);
    return index;
}

static PyMethodDef methods[] = {
    {"index", btfnames_index, METH_VARARGS,
     "index(types, strings) -> {name: type id or tuple of ids}\n\n"
     "Names of the structs, unions, enums, enumerators and typedefs of a raw BTF type section\n"
     "(native byte order) whose names are in the given string section."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_btfnames", NULL, -1, methods};

PyMODINIT_FUNC PyInit__btfnames(void)
{
    return PyModule_Create(&module);
}
