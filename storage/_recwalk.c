/* storage._recwalk: the compiled fast check of storage/validator.py's record walk.
 *
 * walk(records, count) -> (min_ts_delta, max_ts_delta, any_null_key) or None
 *
 * `records` is a v2 batch's records region (any contiguous buffer, read in place),
 * `count` the header's record count. The answer is a tuple only when validator._walk
 * would accept the region: every record's structure as that walk checks it (lengths,
 * varints of at most 5/10 bytes with Java's truncation, key/value/header lengths,
 * each record ending exactly at its declared length), offset delta i for record i and
 * exactly `count` records. It is then the aggregates the per-record rules need: the
 * smallest and largest timestamp delta and whether any key is null. None means "not
 * proven valid": the caller runs the pure-Python walk, which builds the exact error.
 * Being stricter than the pure walk is allowed (it costs only speed); being more
 * lenient is a bug (tests/storage/test_validator_fast.py checks it differentially).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Decode an unsigned varint of at most `max_bytes` bytes from buf[*pos] before `limit`;
 * 0 when truncated or too long (decode_uvarint's errors), else 1. Bits beyond 64 are
 * dropped, as `raw &= 0xFFFFFFFFFFFFFFFF` does. */
static inline int
read_uvarint(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t limit, int max_bytes,
             uint64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    Py_ssize_t stop = p + max_bytes < limit ? p + max_bytes : limit;
    while (p < stop) {
        unsigned char b = buf[p++];
        if (shift < 64)
            result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *pos = p;
            *out = result;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* decode_varint (max_bytes 5: truncated to 32 bits, as Java's int arithmetic) and
 * decode_varlong (max_bytes 10: 64 bits), then zig-zag. 0 when truncated or too long. */
static inline int
read_zigzag(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t limit, int max_bytes,
            int64_t *out)
{
    uint64_t raw;
    if (!read_uvarint(buf, pos, limit, max_bytes, &raw))
        return 0;
    if (max_bytes == 5)
        raw &= 0xFFFFFFFFu;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 1;
}

#define read_varint(buf, pos, limit, out) read_zigzag(buf, pos, limit, 5, out)
#define read_varlong(buf, pos, limit, out) read_zigzag(buf, pos, limit, 10, out)

/* A length field of a key, value or header value: -1 (null) or >= 0 bytes, which must
 * lie inside the record. 0 when the record is not valid. */
static inline int
skip_field(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t record_end, int nullable,
           int *was_null)
{
    int64_t n;
    Py_ssize_t start = *pos;
    if (!read_varint(buf, pos, record_end, &n))
        return 0;
    if (n == -1 && nullable) {
        /* null in one byte only: the pure walk refuses some longer spellings of -1 */
        if (*pos - start != 1)
            return 0;
        *was_null = 1;
        return 1;
    }
    if (n < 0 || n > record_end - *pos)
        return 0;
    *pos += (Py_ssize_t)n;
    return 1;
}

/* 1 when the region holds exactly `count` valid records; fills the aggregates. */
static int
walk_records(const unsigned char *data, Py_ssize_t end, long long count,
             int64_t *min_ts, int64_t *max_ts, int *null_key)
{
    Py_ssize_t pos = 0;
    long long index = 0;
    int64_t length, ts_delta, offset_delta, headers;
    int was_null;

    while (pos < end) {
        if (!read_varint(data, &pos, end, &length))
            return 0;
        if (length < 6 || length > end - pos)
            return 0;
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        pos += 1;                                       /* attributes */
        if (!read_varlong(data, &pos, record_end, &ts_delta))
            return 0;
        if (!read_varint(data, &pos, record_end, &offset_delta) || offset_delta != index)
            return 0;
        was_null = 0;
        if (!skip_field(data, &pos, record_end, 1, &was_null))     /* key */
            return 0;
        if (was_null)
            *null_key = 1;
        if (!skip_field(data, &pos, record_end, 1, &was_null))     /* value */
            return 0;
        if (!read_varint(data, &pos, record_end, &headers) || headers < 0
                || headers > record_end - pos)
            return 0;
        for (int64_t h = 0; h < headers; h++) {
            if (!skip_field(data, &pos, record_end, 0, &was_null)  /* header key */
                    || !skip_field(data, &pos, record_end, 1, &was_null))
                return 0;
        }
        if (pos != record_end)
            return 0;
        if (index == 0 || ts_delta < *min_ts)
            *min_ts = ts_delta;
        if (index == 0 || ts_delta > *max_ts)
            *max_ts = ts_delta;
        index++;
    }
    return index == count && count > 0;
}

static PyObject *
recwalk_walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count;
    int64_t min_ts = 0, max_ts = 0;
    int null_key = 0, ok;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*L:walk", &view, &count))
        return NULL;
    ok = walk_records((const unsigned char *)view.buf, view.len, count,
                      &min_ts, &max_ts, &null_key);
    PyBuffer_Release(&view);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLO)", (long long)min_ts, (long long)max_ts,
                         null_key ? Py_True : Py_False);
}

static PyMethodDef recwalk_methods[] = {
    {"walk", recwalk_walk, METH_VARARGS,
     "walk(records, count) -> (min_ts_delta, max_ts_delta, any_null_key) when every "
     "record is valid, else None"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef recwalk_module = {
    PyModuleDef_HEAD_INIT, "storage._recwalk",
    "The compiled fast check of storage/validator.py's record walk.", -1, recwalk_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__recwalk(void)
{
    return PyModule_Create(&recwalk_module);
}
