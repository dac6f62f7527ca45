/* Region-of-interest JPEG decoding with libjpeg-turbo (fastdata._jpeg).
 *
 * A random-resized crop keeps on average about half of an image, yet cv2.imdecode decodes all
 * of it. libjpeg-turbo can skip the rows above a region (jpeg_skip_scanlines), stop below it
 * and decode only the iMCU columns across it (jpeg_crop_scanline), which saves the inverse
 * DCT, upsampling and colour conversion outside the region. The region decoded here extends
 * one iMCU beyond the requested box on every side (where the image allows), so the box's
 * pixels are exactly those of a full decode: chroma upsampling at a region's edge sees no
 * neighbours and differs there.
 *
 * The module never judges data: anything unusual (an error, a warning, a colour space other
 * than gray or YCbCr, a region that does not fit) returns None and the caller decodes the
 * image the ordinary way, which raises or not exactly as it always did. So do two cases where
 * a region would not be the whole decode's pixels: a progressive JPEG whose coefficients are
 * incomplete (libjpeg smooths the missing ones across block edges, which the region's edges
 * change), and a reduced decode that still upsamples a component whose DCT is scaled
 * differently (libjpeg-turbo before 3.0 sizes the cropped upsampling from the wrong width).
 * The GIL is released for the whole decode.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <stdio.h>
#include <jpeglib.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
} error_manager;

static void on_error(j_common_ptr cinfo) {
    longjmp(((error_manager *)cinfo->err)->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
    /* Warnings (level -1: corrupt data, a premature end) count; traces are ignored. */
    if (level < 0) cinfo->err->num_warnings++;
}

static void silent(j_common_ptr cinfo) { (void)cinfo; }

/* Whether a region of this (started) decompression has exactly the whole decode's pixels. */
static int region_is_exact(j_decompress_ptr cinfo) {
    int ci, k, unit = cinfo->min_DCT_scaled_size;
    for (ci = 0; ci < cinfo->num_components; ci++) {
        jpeg_component_info *comp = &cinfo->comp_info[ci];
        int size = comp->DCT_scaled_size;
        if (size != unit && (comp->h_samp_factor * size != cinfo->max_h_samp_factor * unit ||
                             comp->v_samp_factor * size != cinfo->max_v_samp_factor * unit))
            return 0; /* scaled DCT and still upsampled */
        if (cinfo->progressive_mode && cinfo->coef_bits != NULL)
            for (k = 0; k < DCTSIZE2; k++)
                if (cinfo->coef_bits[ci][k] != 0) return 0; /* incomplete: block smoothing */
    }
    return 1;
}

/* Decode, at 1/denom scale, the rows and (after jpeg_crop_scanline's alignment) the columns
 * of the box (top, left, height, width) plus one iMCU around it into out, whose rows are
 * out_cols pixels apart; at most out_rows x out_cols pixels. Returns 1 on success with
 * found[] = the box's row and column in out, the rows and columns decoded, and the scaled
 * image's height and width, else 0. */
static int decode_region(const unsigned char *data, size_t size, int denom, int top, int left,
                         int height, int width, unsigned char *out, int out_rows, int out_cols,
                         int found[6]) {
    struct jpeg_decompress_struct cinfo;
    error_manager err;
    JSAMPROW rows[16];
    int ok = 0;

    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.pub.output_message = silent;
    jpeg_create_decompress(&cinfo);
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return 0;
    }
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    if (jpeg_read_header(&cinfo, TRUE) != JPEG_HEADER_OK) goto done;
    if (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_GRAYSCALE) goto done;
    cinfo.out_color_space = JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)denom;
    jpeg_start_decompress(&cinfo); /* reads every scan of a progressive JPEG */
    if (!region_is_exact(&cinfo)) goto done;
    /* The box inside the image, in 64 bits: no sum below can overflow after this. */
    if (top < 0 || left < 0 || height < 1 || width < 1 ||
        (long long)top + height > (long long)cinfo.output_height ||
        (long long)left + width > (long long)cinfo.output_width)
        goto done;
    {
        int image_w = (int)cinfo.output_width, image_h = (int)cinfo.output_height;
        int mcu_w = cinfo.max_h_samp_factor * cinfo.min_DCT_scaled_size;
        int mcu_h = cinfo.max_v_samp_factor * cinfo.min_DCT_scaled_size;
        int y0 = top - mcu_h > 0 ? top - mcu_h : 0;
        int y1 = top + height + mcu_h < image_h ? top + height + mcu_h : image_h;
        int x1 = left + width + mcu_w < image_w ? left + width + mcu_w : image_w;
        JDIMENSION x0 = left - mcu_w > 0 ? (JDIMENSION)(left - mcu_w) : 0;
        JDIMENSION cols = (JDIMENSION)x1 - x0;

        jpeg_crop_scanline(&cinfo, &x0, &cols); /* widens to iMCU boundaries */
        if (y1 - y0 > out_rows || (int)cols > out_cols) goto done;
        if (y0 > 0 && jpeg_skip_scanlines(&cinfo, (JDIMENSION)y0) != (JDIMENSION)y0) goto done;
        while ((int)cinfo.output_scanline < y1) {
            int want = y1 - (int)cinfo.output_scanline, i;
            if (want > 16) want = 16;
            for (i = 0; i < want; i++)
                rows[i] = out + (size_t)((int)cinfo.output_scanline - y0 + i) * out_cols * 3;
            if (jpeg_read_scanlines(&cinfo, rows, (JDIMENSION)want) == 0) goto done;
        }
        found[0] = top - y0;
        found[1] = left - (int)x0;
        found[2] = y1 - y0;
        found[3] = (int)cols;
        found[4] = image_h;
        found[5] = image_w;
        ok = err.pub.num_warnings == 0;
    }
done:
    jpeg_destroy_decompress(&cinfo); /* also aborts: the rows below the region stay unread */
    return ok;
}

PyDoc_STRVAR(decode_rgb_region_doc,
             "decode_rgb_region(data, denom, top, left, height, width, out, rows, cols)\n\n"
             "Decode, at 1/denom scale (1, 2, 4 or 8), the region of a JPEG around the box\n"
             "(top, left, height, width) of the scaled image as RGB into out, a writable\n"
             "contiguous buffer of rows x cols x 3 bytes. Returns (row, col, rows, cols,\n"
             "height, width): the box's offsets in out, the rows and columns decoded and the\n"
             "scaled image's size, or None when the image is to be decoded the ordinary way.");

static PyObject *decode_rgb_region(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    int denom, top, left, height, width, rows, cols, ok, found[6] = {0, 0, 0, 0, 0, 0};
    (void)self;

    if (!PyArg_ParseTuple(args, "y*iiiiiw*ii", &data, &denom, &top, &left, &height, &width, &out,
                          &rows, &cols))
        return NULL;
    if (rows < 0 || cols < 0 || out.len != (Py_ssize_t)rows * cols * 3 ||
        (denom != 1 && denom != 2 && denom != 4 && denom != 8)) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError,
                        "denom must be 1, 2, 4 or 8 and out hold exactly rows x cols x 3 bytes");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    ok = decode_region((const unsigned char *)data.buf, (size_t)data.len, denom, top, left, height,
                       width, (unsigned char *)out.buf, rows, cols, found);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (!ok) Py_RETURN_NONE;
    return Py_BuildValue("(iiiiii)", found[0], found[1], found[2], found[3], found[4], found[5]);
}

static PyMethodDef methods[] = {
    {"decode_rgb_region", decode_rgb_region, METH_VARARGS, decode_rgb_region_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastdata._jpeg", "Region-of-interest JPEG decoding (libjpeg-turbo).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jpeg(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER",
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
                                             LIBJPEG_TURBO_VERSION_NUMBER
#else
                                             0
#endif
                                             ) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
