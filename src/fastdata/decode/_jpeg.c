/* JPEG decoding with libjpeg-turbo that sees what cv2.imdecode hides (fastdata.decode._jpeg).
 *
 * cv2.imdecode decodes a JPEG whose entropy-coded data is corrupt (libjpeg "warnings": a
 * premature end of a data segment, a bad Huffman code, a missing end-of-image marker) into an
 * image, printing the warning on stderr without a file name. Here every warning about the scan
 * data stops the decode and is returned, so the caller can raise an error that names the file;
 * the few that leave the pixels intact (metadata notes, junk between header segments: see
 * harmless()) let it go on. Both entry points read the whole file, to its end-of-image
 * marker, so the verdict never depends on how much of the image is decoded.
 *
 * decode_rgb also decodes only a region: a random-resized crop keeps about half of an image
 * on average. libjpeg-turbo skips the inverse DCT, upsampling and colour conversion of the
 * rows above the region (jpeg_skip_scanlines) and of the iMCU columns beside it
 * (jpeg_crop_scanline); the rows below it are entropy-decoded without output. The region
 * extends beyond the requested box by the reach of chroma upsampling (one chroma sample, 2
 * pixels per sampling step: 4 for 4:2:0) on every side where the image allows, so the box's
 * pixels are exactly those of a full decode: upsampling at a region's edge sees no
 * neighbours and differs there. (A whole iMCU of margin converted up to 16 more rows and
 * columns per side.) Two cases where a region would not be the whole decode's
 * pixels are declined: a progressive JPEG whose coefficients are incomplete (libjpeg smooths
 * the missing ones across block edges, which the region's edges change), and a reduced decode
 * that still upsamples a component whose DCT is scaled differently (libjpeg-turbo before 3.0
 * sizes the cropped upsampling from the wrong width).
 *
 * The module declines (returns None) what it does not decode the way OpenCV does: a libjpeg
 * error (no JPEG it supports; OpenCV's decoder then gives the verdict), a colour space other
 * than gray or YCbCr, a region that does not fit. The GIL is released for the whole decode.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

enum outcome { DECLINED, DECODED, CORRUPT };

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char warning[JMSG_LENGTH_MAX]; /* the warning that stopped the decode */
    int in_header;                 /* jpeg_read_header is running: no scan has begun */
} error_manager;

static void on_error(j_common_ptr cinfo) { longjmp(((error_manager *)cinfo->err)->jump, DECLINED + 1); }

/* Whether a libjpeg warning leaves every pixel as the encoder meant it: it is about metadata
 * (an unknown JFIF version, an unknown Adobe colour transform code, which libjpeg takes as
 * YCbCr just as OpenCV's decode does), or about bytes between the marker segments of the
 * header, before any entropy-coded data, which libjpeg skips (extraneous bytes before a
 * marker, while the header is read). Everything else concerns the scan data and is
 * corruption: a premature end of a data segment or of the file, a bad Huffman or arithmetic
 * code, a missing restart marker, invalid scan parameters, an inconsistent progression, and
 * extraneous bytes once a scan has begun: a scan whose data runs past its last MCU, before a
 * restart marker, the next scan or the end of the image, is what a decoder that lost step in
 * corrupt data leaves (hundreds of bytes in fuzzed files), and cannot be told from padding. */
static int harmless(const error_manager *err) {
    switch (err->pub.msg_code) {
    case JWRN_JFIF_MAJOR:
    case JWRN_ADOBE_XFORM:
        return 1;
    case JWRN_EXTRANEOUS_DATA:
        return err->in_header;
    default:
        return 0;
    }
}

static void on_message(j_common_ptr cinfo, int level) {
    /* Warnings (level -1) stop the decode unless harmless; traces (level >= 0) are ignored. */
    error_manager *err = (error_manager *)cinfo->err;
    if (level >= 0 || harmless(err)) return;
    (*err->pub.format_message)(cinfo, err->warning);
    longjmp(err->jump, CORRUPT + 1);
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

/* The first two methods of libjpeg's entropy decoder (struct jpeg_entropy_decoder in
 * jpegint.h, the same since libjpeg 6b; that header is not always installed). */
typedef struct {
    void (*start_pass)(j_decompress_ptr cinfo);
    boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
} entropy_methods;

/* libjpeg's decode_mcu, and the iMCU columns a cropped decode keeps (cinfo->client_data). */
typedef struct {
    boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
    JDIMENSION calls, first, last;
} kept_columns;

/* decode_mcu for a cropped single-scan decode: an MCU outside the kept columns is decoded
 * without keeping its coefficients, as jpeg_skip_scanlines decodes skipped rows. libjpeg
 * would otherwise extend and store every coefficient of the rows it outputs, across the whole
 * width, then transform only the kept columns: that storing costs a quarter of the Huffman
 * decoding. The symbols read, the DC predictions and the warnings are the same either way.
 * MCUs come in raster order, so the count of MCUs decoded gives the column (a suspended
 * call, which a memory source never makes, is repeated for the same MCU). */
static boolean decode_kept_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data) {
    kept_columns *kept = (kept_columns *)cinfo->client_data;
    JDIMENSION col = kept->calls % cinfo->MCUs_per_row;
    boolean done = kept->decode_mcu(cinfo, col < kept->first || col > kept->last ? NULL : MCU_data);
    if (done) kept->calls++;
    return done;
}

/* Read the rows left after output_scanline without keeping them (entropy-decoded, one row
 * transformed), then the markers up to the end of image, where libjpeg reports what is wrong
 * with the rest of the file. */
static void read_to_end(j_decompress_ptr cinfo) {
    JSAMPARRAY spare = (*cinfo->mem->alloc_sarray)(
        (j_common_ptr)cinfo, JPOOL_IMAGE, cinfo->output_width * cinfo->output_components, 1);
    JDIMENSION last = cinfo->output_height - 1;
    /* skipping to the very end would not decode the rows: skip to the last one, read it */
    if (cinfo->output_scanline < last) jpeg_skip_scanlines(cinfo, last - cinfo->output_scanline);
    while (cinfo->output_scanline < cinfo->output_height) jpeg_read_scanlines(cinfo, spare, 1);
    jpeg_finish_decompress(cinfo);
}

/* Decode into out the rows and (after jpeg_crop_scanline's alignment) the columns of the box
 * box[] = (top, left, height, width) of the image scaled by 1/denom, plus the upsampling's
 * reach around it; out's rows are out_cols pixels apart and hold at most out_rows rows. With out == NULL,
 * only read the file (any colour space, at 1/8: the entropy decoding is the same at any
 * scale). Sets found[] = the box's row and column in out, the rows and columns decoded and
 * the scaled image's height and width; warning = libjpeg's message when CORRUPT. */
static enum outcome run(const unsigned char *data, size_t size, int denom, const int box[4],
                        unsigned char *out, int out_rows, int out_cols, int found[6],
                        char warning[JMSG_LENGTH_MAX]) {
    struct jpeg_decompress_struct cinfo;
    error_manager err;
    kept_columns kept;
    JSAMPROW rows[16];
    enum outcome result = DECLINED;
    int jumped;

    memset(&cinfo, 0, sizeof(cinfo)); /* destroying it is safe whenever create fails */
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.in_header = 0;
    err.pub.output_message = silent;
    jumped = setjmp(err.jump); /* before create: an error inside create lands here too */
    if (jumped) {
        jpeg_destroy_decompress(&cinfo);
        if (jumped == CORRUPT + 1) memcpy(warning, err.warning, JMSG_LENGTH_MAX);
        return (enum outcome)(jumped - 1);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    err.in_header = 1;
    if (jpeg_read_header(&cinfo, TRUE) != JPEG_HEADER_OK) goto done;
    err.in_header = 0;
    cinfo.scale_num = 1;
    cinfo.scale_denom = out == NULL ? 8 : (unsigned int)denom;
    if (out == NULL) {
        jpeg_start_decompress(&cinfo);
        read_to_end(&cinfo);
        result = DECODED;
        goto done;
    }
    if (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_GRAYSCALE) goto done;
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo); /* reads every scan of a progressive JPEG */
    /* The box inside the image, in 64 bits: no sum below can overflow after this. */
    if (box[0] < 0 || box[1] < 0 || box[2] < 1 || box[3] < 1 ||
        (long long)box[0] + box[2] > (long long)cinfo.output_height ||
        (long long)box[1] + box[3] > (long long)cinfo.output_width)
        goto done;
    {
        int top = box[0], left = box[1], height = box[2], width = box[3];
        int image_w = (int)cinfo.output_width, image_h = (int)cinfo.output_height;
        int pad_w = 2 * cinfo.max_h_samp_factor, pad_h = 2 * cinfo.max_v_samp_factor;
        int y0 = top - pad_h > 0 ? top - pad_h : 0;
        int y1 = top + height + pad_h < image_h ? top + height + pad_h : image_h;
        int x1 = left + width + pad_w < image_w ? left + width + pad_w : image_w;
        JDIMENSION x0 = left - pad_w > 0 ? (JDIMENSION)(left - pad_w) : 0;
        JDIMENSION cols = (JDIMENSION)x1 - x0;

        if ((y0 > 0 || y1 < image_h || x0 > 0 || x1 < image_w) && !region_is_exact(&cinfo))
            goto done;
        if (x0 > 0 || x1 < image_w) {
            jpeg_crop_scanline(&cinfo, &x0, &cols); /* to iMCUs */
            /* a single scan, not yet begun, whose MCUs are iMCUs: interleaved, or one
             * component at full resolution (a lone component's MCU is one block) */
            if (!jpeg_has_multiple_scans(&cinfo) &&
                (cinfo.comps_in_scan > 1 || cinfo.max_h_samp_factor == 1)) {
                entropy_methods *entropy = (entropy_methods *)cinfo.entropy;
                int imcu = cinfo.max_h_samp_factor * cinfo.min_DCT_scaled_size;
                kept.decode_mcu = entropy->decode_mcu;
                kept.calls = 0;
                kept.first = x0 / (JDIMENSION)imcu;
                kept.last = (x0 + cols - 1) / (JDIMENSION)imcu;
                cinfo.client_data = &kept;
                entropy->decode_mcu = decode_kept_mcu;
            }
        }
        if (y1 - y0 > out_rows || (int)cols > out_cols) goto done;
        if (y0 > 0 && jpeg_skip_scanlines(&cinfo, (JDIMENSION)y0) != (JDIMENSION)y0) goto done;
        while ((int)cinfo.output_scanline < y1) {
            int want = y1 - (int)cinfo.output_scanline, i;
            if (want > 16) want = 16;
            for (i = 0; i < want; i++)
                rows[i] = out + (size_t)((int)cinfo.output_scanline - y0 + i) * out_cols * 3;
            if (jpeg_read_scanlines(&cinfo, rows, (JDIMENSION)want) == 0) goto done;
        }
        read_to_end(&cinfo);
        found[0] = top - y0;
        found[1] = left - (int)x0;
        found[2] = y1 - y0;
        found[3] = (int)cols;
        found[4] = image_h;
        found[5] = image_w;
        result = DECODED;
    }
done:
    jpeg_destroy_decompress(&cinfo);
    return result;
}

PyDoc_STRVAR(decode_rgb_doc,
             "decode_rgb($module, data, denom, top, left, height, width, out, rows, cols, /)\n"
             "--\n\n"
             "Decode, at 1/denom scale (1, 2, 4 or 8), the region of a JPEG around the box\n"
             "(top, left, height, width) of the scaled image as RGB into out, a writable\n"
             "contiguous buffer of rows x cols x 3 bytes; a box covering the image decodes it\n"
             "whole. Returns (row, col, rows, cols, height, width): the box's offsets in out,\n"
             "the rows and columns decoded and the scaled image's size; a str, libjpeg's\n"
             "warning, when the data is corrupt; None when the image is to be decoded the\n"
             "ordinary way.");

static PyObject *decode_rgb(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    int denom, box[4], rows, cols, found[6] = {0, 0, 0, 0, 0, 0};
    enum outcome result;
    char warning[JMSG_LENGTH_MAX];
    (void)self;

    if (!PyArg_ParseTuple(args, "y*iiiiiw*ii", &data, &denom, &box[0], &box[1], &box[2], &box[3],
                          &out, &rows, &cols))
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
    result = run((const unsigned char *)data.buf, (size_t)data.len, denom, box,
                 (unsigned char *)out.buf, rows, cols, found, warning);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (result == CORRUPT) return PyUnicode_DecodeLatin1(warning, (Py_ssize_t)strlen(warning), NULL);
    if (result == DECLINED) Py_RETURN_NONE;
    return Py_BuildValue("(iiiiii)", found[0], found[1], found[2], found[3], found[4], found[5]);
}

PyDoc_STRVAR(check_doc,
             "check($module, data, /)\n--\n\n"
             "Read a whole JPEG (any colour space) as a decode does, without keeping pixels:\n"
             "True when libjpeg reads it to its end-of-image marker without a warning, a str\n"
             "(the warning) when the data is corrupt, False when libjpeg cannot read it.");

static PyObject *check(PyObject *self, PyObject *args) {
    Py_buffer data;
    enum outcome result;
    int found[6];
    char warning[JMSG_LENGTH_MAX];
    (void)self;

    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    result = run((const unsigned char *)data.buf, (size_t)data.len, 8, NULL, NULL, 0, 0, found,
                 warning);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (result == CORRUPT) return PyUnicode_DecodeLatin1(warning, (Py_ssize_t)strlen(warning), NULL);
    return PyBool_FromLong(result == DECODED);
}

static PyMethodDef methods[] = {
    {"decode_rgb", decode_rgb, METH_VARARGS, decode_rgb_doc},
    {"check", check, METH_VARARGS, check_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastdata.decode._jpeg",
    "JPEG decoding with libjpeg-turbo: whole images or regions, corrupt data reported.",
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
