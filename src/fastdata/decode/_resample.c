/* Antialiased bilinear resizing of uint8 images with torch's pixels (fastdata.decode._resample).
 *
 * torch's uint8 kernel behind F.interpolate(mode="bilinear", antialias=True) - what
 * torchvision's Resize and RandomResizedCrop compute on tensors - is the image path's largest
 * cost after decoding: on a random-resized crop of a photo it takes a seventh of the time
 * the decode does, and it needs a contiguous copy of the crop first. This module computes the
 * same pixels: the weights in double exactly as torch does (PIL's bounds, the triangle filter
 * widened by the scale when shrinking, normalised), rounded to int16 with the same precision,
 * the same integer sums with the same rounding, the horizontal pass first and its rows
 * rounded to uint8 before the vertical pass. Integer sums do not depend on their order, so
 * the result is bit-identical to torch's (tests compare the two on random sizes). It reads
 * the crop through its strides (no copy), mirrors the columns when asked (a flip costs
 * nothing) and, on CPUs with AVX2, runs both passes in 256-bit registers.
 *
 * The GIL is released while it computes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) /* SSE doubles: no x87 extra precision */
#include <immintrin.h>
#define RESAMPLE_AVX2 1
#define AVX2 __attribute__((target("avx2")))
#endif

/* The longest side taken: the taps of a shrink by up to this factor fit an int. */
#define MAX_SIDE (1 << 24)

/* One axis: for each output index, the first input index, the weights' count and the
 * weights as int16 (taps per output, padded with zeros to a multiple of 4). */
typedef struct {
    int size, taps, precision;
    int *start, *count;
    int16_t *weights;
} axis;

static void axis_free(axis *a) {
    PyMem_RawFree(a->start);
    PyMem_RawFree(a->count);
    PyMem_RawFree(a->weights);
}

/* torch's weights for in_size -> out_size (UpSampleKernel.cpp,
 * _compute_indices_min_size_weights_aa and _compute_index_ranges_int16_weights), in the same
 * double arithmetic; returns 0 when out of memory. */
static int axis_init_at(axis *a, int in_size, double scale, double shift, int out_size) {
    double support = scale >= 1.0 ? 1.0 * scale : 1.0; /* bilinear: interp_size * 0.5 = 1 */
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    int max_taps = (int)ceil(support) * 2 + 1;
    double wt_max = 0.0, *w;
    int i, j, precision;

    a->size = out_size;
    a->taps = (max_taps + 3) / 4 * 4;
    a->start = PyMem_RawMalloc(sizeof(int) * (size_t)out_size);
    a->count = PyMem_RawMalloc(sizeof(int) * (size_t)out_size);
    a->weights = PyMem_RawCalloc((size_t)out_size * a->taps, sizeof(int16_t));
    w = PyMem_RawCalloc((size_t)out_size * max_taps, sizeof(double));
    if (a->start == NULL || a->count == NULL || a->weights == NULL || w == NULL) {
        PyMem_RawFree(w);
        axis_free(a);
        return 0;
    }
    for (i = 0; i < out_size; i++) {
        double center = scale * (i + 0.5) + shift, total = 0.0, *wi = w + (size_t)i * max_taps;
        int64_t xmin = (int64_t)(center - support + 0.5), xsize;
        if (xmin < 0) xmin = 0;
        xsize = (int64_t)(center + support + 0.5);
        if (xsize > in_size) xsize = in_size;
        xsize -= xmin;
        if (xsize < 0) xsize = 0;
        if (xsize > max_taps) xsize = max_taps;
        for (j = 0; j < xsize; j++) {
            double x = fabs(((double)(j + xmin) - center + 0.5) * invscale);
            wi[j] = x < 1.0 ? 1.0 - x : 0.0;
            total += wi[j];
        }
        if (total != 0.0)
            for (j = 0; j < xsize; j++) {
                wi[j] /= total;
                if (wi[j] > wt_max) wt_max = wi[j];
            }
        a->start[i] = (int)xmin;
        a->count[i] = (int)xsize;
    }
    for (precision = 0; precision < 22; precision++)
        if ((int)(0.5 + wt_max * (1 << (precision + 1))) >= (1 << 15)) break;
    a->precision = precision;
    for (i = 0; i < out_size; i++)
        for (j = 0; j < max_taps; j++) {
            double v = w[(size_t)i * max_taps + j] * (1 << precision);
            a->weights[(size_t)i * a->taps + j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
        }
    PyMem_RawFree(w);
    return 1;
}

static int axis_init(axis *a, int in_size, int out_size) {
    return axis_init_at(a, in_size, (double)in_size / out_size, 0.0, out_size);
}

/* One axis of a window (a centre crop): outputs [start, start + length) of the image of
 * `whole` pixels resized to `total` with the scale given (its centres moved by shift), their
 * taps counted from pixel `origin` of that image, where the source passed begins. With shift
 * 0 and scale whole / total these are outputs start ... of torch's resize of the whole image,
 * weights and precision included (the precision is torch's, from all `total` outputs). */
typedef struct {
    int whole, total, start, origin;
    double scale, shift;
} window_axis;

/* Returns 1, 0 when out of memory, -1 when the window's taps leave the `source` pixels. */
static int axis_window(axis *a, const window_axis *wa, int length, int source) {
    int i;
    if (wa->whole < 1 || wa->total < 1 || wa->start < 0 || wa->start + length > wa->total ||
        !(wa->scale > 0.0))
        return -1;
    if (!axis_init_at(a, wa->whole, wa->scale, wa->shift, wa->total)) return 0;
    for (i = 0; i < length; i++) {
        int k = wa->start + i, first = a->start[k] - wa->origin;
        if (a->count[k] > 0 && (first < 0 || first + a->count[k] > source)) {
            axis_free(a);
            return -1;
        }
        a->start[i] = a->count[k] > 0 ? first : 0;
        a->count[i] = a->count[k];
        memmove(a->weights + (size_t)i * a->taps, a->weights + (size_t)k * a->taps,
                sizeof(int16_t) * (size_t)a->taps);
    }
    a->size = length;
    return 1;
}

static inline uint8_t clip8(int32_t v) { return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v; }

/* A strided image: rows `pitch` bytes apart, pixels `channels` bytes wide. */
typedef struct {
    const uint8_t *data;
    Py_ssize_t pitch;
    int height, width, channels;
} image;

/* Horizontal pass of one row into out (out_w pixels; mirrored when flip). */
static void horizontal_row(const uint8_t *in, uint8_t *out, int channels, const axis *h, int flip) {
    int x, c, j;
    int32_t bias = 1 << (h->precision - 1);
    for (x = 0; x < h->size; x++) {
        const int16_t *k = h->weights + (size_t)x * h->taps;
        const uint8_t *p = in + (size_t)h->start[x] * channels;
        uint8_t *dst = out + (size_t)(flip ? h->size - 1 - x : x) * channels;
        for (c = 0; c < channels; c++) {
            int32_t acc = bias;
            for (j = 0; j < h->count[x]; j++) acc += (int32_t)p[j * channels + c] * k[j];
            dst[c] = clip8(acc >> h->precision);
        }
    }
}

/* Vertical pass of output row y from rows (rows[start] .. ) of bytes bytes each. */
static void vertical_row(const uint8_t *const *rows, uint8_t *out, size_t bytes, const axis *v, int y) {
    const int16_t *k = v->weights + (size_t)y * v->taps;
    int32_t bias = 1 << (v->precision - 1);
    size_t b;
    int j;
    for (b = 0; b < bytes; b++) {
        int32_t acc = bias;
        for (j = 0; j < v->count[y]; j++) acc += (int32_t)rows[j][b] * k[j];
        out[b] = clip8(acc >> v->precision);
    }
}

#ifdef RESAMPLE_AVX2
static inline int32_t pair(const int16_t *k) {
    return (int32_t)((uint32_t)(uint16_t)k[0] | ((uint32_t)(uint16_t)k[1] << 16));
}

/* The sums of output pixel x for four rows (two per register), 3 or 4 channels: each 16-byte
 * load holds four pixels, shuffled into (pixel j, pixel j+1) int16 pairs per channel, so
 * that one madd takes two taps of all channels. Reads up to 16 bytes from the start of the
 * last group of four taps, which the caller keeps inside the image. */
AVX2 static inline void sums4(const uint8_t *const in[4], const int16_t *k, int start, int count,
                              int channels, __m256i lo, __m256i hi, __m256i *acc01, __m256i *acc23) {
    size_t base = (size_t)start * channels;
    int j;
    for (j = 0; j < count; j += 4) {
        size_t off = base + (size_t)j * channels;
        __m256i w01 = _mm256_set1_epi32(pair(k + j)), w23 = _mm256_set1_epi32(pair(k + j + 2));
        __m256i s01 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(in[0] + off))),
            _mm_loadu_si128((const __m128i *)(in[1] + off)), 1);
        __m256i s23 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(in[2] + off))),
            _mm_loadu_si128((const __m128i *)(in[3] + off)), 1);
        *acc01 = _mm256_add_epi32(*acc01, _mm256_madd_epi16(_mm256_shuffle_epi8(s01, lo), w01));
        *acc01 = _mm256_add_epi32(*acc01, _mm256_madd_epi16(_mm256_shuffle_epi8(s01, hi), w23));
        *acc23 = _mm256_add_epi32(*acc23, _mm256_madd_epi16(_mm256_shuffle_epi8(s23, lo), w01));
        *acc23 = _mm256_add_epi32(*acc23, _mm256_madd_epi16(_mm256_shuffle_epi8(s23, hi), w23));
    }
}

/* Store one row's bytes from a 128-bit register: 12 (four RGB pixels) or 16. */
AVX2 static inline void store_row(uint8_t *dst, __m128i v, int channels) {
    if (channels == 3) {
        _mm_storel_epi64((__m128i *)dst, v);
        int32_t last = _mm_cvtsi128_si32(_mm_srli_si128(v, 8));
        memcpy(dst + 8, &last, 4);
    } else {
        _mm_storeu_si128((__m128i *)dst, v);
    }
}

/* Horizontal pass of four rows at once, four output pixels at a time: their sums are
 * narrowed to bytes together, put in output order (mirrored when flip) by one shuffle, and
 * stored as one run per row. */
AVX2 static inline void horizontal_rows4(const uint8_t *const in[4], uint8_t *const out[4],
                                         const int channels, const axis *h, const int flip) {
    const int16_t *weights = h->weights;
    const int *start = h->start, *count = h->count, taps = h->taps, size = h->size;
    const __m256i lo = channels == 3
        ? _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                           0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1)
        : _mm256_setr_epi8(0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1,
                           0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1);
    const __m256i hi = channels == 3
        ? _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1,
                           6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1)
        : _mm256_setr_epi8(8, -1, 12, -1, 9, -1, 13, -1, 10, -1, 14, -1, 11, -1, 15, -1,
                           8, -1, 12, -1, 9, -1, 13, -1, 10, -1, 14, -1, 11, -1, 15, -1);
    /* four pixels' RGBx bytes into output order: RGB only for 3 channels, reversed for flip */
    const __m128i order = channels == 3
        ? (flip ? _mm_setr_epi8(12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2, -1, -1, -1, -1)
                : _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1))
        : (flip ? _mm_setr_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3)
                : _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m256i order2 = _mm256_broadcastsi128_si256(order);
    const __m256i bias = _mm256_set1_epi32(1 << (h->precision - 1));
    const __m128i shift = _mm_cvtsi32_si128(h->precision);
    int x, i, r;
    for (x = 0; x + 4 <= size; x += 4) {
        __m256i a01[4], a23[4], p01, p23;
        size_t at = (size_t)(flip ? size - 4 - x : x) * channels;
#pragma GCC unroll 4
        for (i = 0; i < 4; i++) {
            a01[i] = a23[i] = bias;
            sums4(in, weights + (size_t)(x + i) * taps, start[x + i], count[x + i], channels, lo, hi,
                  &a01[i], &a23[i]);
            a01[i] = _mm256_sra_epi32(a01[i], shift);
            a23[i] = _mm256_sra_epi32(a23[i], shift);
        }
        /* per 128-bit lane (one row): pixels x .. x+3, 4 bytes each */
        p01 = _mm256_packus_epi16(_mm256_packs_epi32(a01[0], a01[1]), _mm256_packs_epi32(a01[2], a01[3]));
        p23 = _mm256_packus_epi16(_mm256_packs_epi32(a23[0], a23[1]), _mm256_packs_epi32(a23[2], a23[3]));
        p01 = _mm256_shuffle_epi8(p01, order2);
        p23 = _mm256_shuffle_epi8(p23, order2);
        store_row(out[0] + at, _mm256_castsi256_si128(p01), channels);
        store_row(out[1] + at, _mm256_extracti128_si256(p01, 1), channels);
        store_row(out[2] + at, _mm256_castsi256_si128(p23), channels);
        store_row(out[3] + at, _mm256_extracti128_si256(p23, 1), channels);
    }
    for (; x < size; x++) { /* the last pixels, one at a time */
        __m256i a01 = bias, a23 = bias;
        size_t at = (size_t)(flip ? size - 1 - x : x) * channels;
        uint32_t px[4];
        sums4(in, weights + (size_t)x * taps, start[x], count[x], channels, lo, hi, &a01, &a23);
        a01 = _mm256_sra_epi32(a01, shift);
        a23 = _mm256_sra_epi32(a23, shift);
        a01 = _mm256_packus_epi16(_mm256_packs_epi32(a01, a01), a01);
        a23 = _mm256_packus_epi16(_mm256_packs_epi32(a23, a23), a23);
        px[0] = (uint32_t)_mm256_extract_epi32(a01, 0);
        px[1] = (uint32_t)_mm256_extract_epi32(a01, 4);
        px[2] = (uint32_t)_mm256_extract_epi32(a23, 0);
        px[3] = (uint32_t)_mm256_extract_epi32(a23, 4);
        for (r = 0; r < 4; r++) memcpy(out[r] + at, &px[r], channels == 3 ? 3 : 4);
    }
}

/* horizontal_rows4 with the channels and the flip known to the compiler */
AVX2 static void horizontal_rows4_3(const uint8_t *const in[4], uint8_t *const out[4], const axis *h) {
    horizontal_rows4(in, out, 3, h, 0);
}
AVX2 static void horizontal_rows4_3f(const uint8_t *const in[4], uint8_t *const out[4], const axis *h) {
    horizontal_rows4(in, out, 3, h, 1);
}
AVX2 static void horizontal_rows4_4(const uint8_t *const in[4], uint8_t *const out[4], const axis *h) {
    horizontal_rows4(in, out, 4, h, 0);
}
AVX2 static void horizontal_rows4_4f(const uint8_t *const in[4], uint8_t *const out[4], const axis *h) {
    horizontal_rows4(in, out, 4, h, 1);
}

/* Vertical pass of one output row, 32 bytes at a time: rows j and j+1 interleaved byte by
 * byte, widened to int16 pairs, so that one madd takes two taps. The last block overlaps the
 * one before it (bytes >= 32): nothing is read past a row. */
AVX2 static void vertical_row_avx2(const uint8_t *const *rows, uint8_t *out, size_t bytes,
                                   const axis *v, int y) {
    const int16_t *k = v->weights + (size_t)y * v->taps;
    const __m256i zero = _mm256_setzero_si256(), bias = _mm256_set1_epi32(1 << (v->precision - 1));
    const __m128i shift = _mm_cvtsi32_si128(v->precision);
    int n = v->count[y], j;
    size_t b = 0;
    for (;;) {
        __m256i acc0 = bias, acc1 = bias, acc2 = bias, acc3 = bias, p, q;
        if (b + 32 > bytes) b = bytes - 32;
        for (j = 0; j < n; j += 2) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(rows[j] + b));
            __m256i c = j + 1 < n ? _mm256_loadu_si256((const __m256i *)(rows[j + 1] + b)) : zero;
            __m256i w = _mm256_set1_epi32(j + 1 < n ? pair(k + j) : (int32_t)(uint16_t)k[j]);
            __m256i l = _mm256_unpacklo_epi8(a, c), hh = _mm256_unpackhi_epi8(a, c);
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi8(l, zero), w));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi8(l, zero), w));
            acc2 = _mm256_add_epi32(acc2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hh, zero), w));
            acc3 = _mm256_add_epi32(acc3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hh, zero), w));
        }
        p = _mm256_packs_epi32(_mm256_sra_epi32(acc0, shift), _mm256_sra_epi32(acc1, shift));
        q = _mm256_packs_epi32(_mm256_sra_epi32(acc2, shift), _mm256_sra_epi32(acc3, shift));
        _mm256_storeu_si256((__m256i *)(out + b), _mm256_packus_epi16(p, q));
        if (b + 32 >= bytes) break;
        b += 32;
    }
}
#endif

/* The horizontal pass of rows [first, last) of src into dst (rows dst_pitch apart). */
static void horizontal(const image *src, int first, int last, uint8_t *dst, size_t dst_pitch,
                       const axis *h, int flip, int simd) {
    int y = first;
#ifdef RESAMPLE_AVX2
    if (simd && (src->channels == 3 || src->channels == 4)) {
        /* The 16-byte loads of a row reach at most this far past its start; a row whose reads
         * would leave the image's last row is done by the plain loop. */
        size_t end = (size_t)(src->height - 1) * src->pitch + (size_t)src->width * src->channels;
        size_t reach = 0;
        int x;
        for (x = 0; x < h->size; x++) {
            size_t r = (size_t)(h->start[x] + (h->count[x] + 3) / 4 * 4 - 4) * src->channels + 16;
            if (h->count[x] > 0 && r > reach) reach = r;
        }
        for (; y + 4 <= last && (size_t)(y + 3) * src->pitch + reach <= end; y += 4) {
            const uint8_t *in[4];
            uint8_t *out[4];
            int r;
            for (r = 0; r < 4; r++) {
                in[r] = src->data + (size_t)(y + r) * src->pitch;
                out[r] = dst + (size_t)(y - first + r) * dst_pitch;
            }
            if (src->channels == 3)
                (flip ? horizontal_rows4_3f : horizontal_rows4_3)(in, out, h);
            else
                (flip ? horizontal_rows4_4f : horizontal_rows4_4)(in, out, h);
        }
    }
#else
    (void)simd;
#endif
    for (; y < last; y++)
        horizontal_row(src->data + (size_t)y * src->pitch, dst + (size_t)(y - first) * dst_pitch,
                       src->channels, h, flip);
}

/* The vertical pass: output row y from rows first + start[y] ... of src (rows pitch apart). */
static int vertical(const uint8_t *src, size_t pitch, int first, uint8_t *dst, size_t bytes,
                    const axis *v, int simd) {
    const uint8_t **rows = PyMem_RawMalloc(sizeof(uint8_t *) * (size_t)(v->taps + 1));
    int y, j;
    if (rows == NULL) return 0;
    for (y = 0; y < v->size; y++) {
        for (j = 0; j < v->count[y]; j++) rows[j] = src + (size_t)(v->start[y] - first + j) * pitch;
#ifdef RESAMPLE_AVX2
        if (simd && bytes >= 32) {
            vertical_row_avx2(rows, dst + (size_t)y * bytes, bytes, v, y);
            continue;
        }
#else
        (void)simd;
#endif
        vertical_row(rows, dst + (size_t)y * bytes, bytes, v, y);
    }
    PyMem_RawFree(rows);
    return 1;
}

/* Mirror the pixels of each row of a contiguous image in place. */
static void mirror(uint8_t *img, int height, int width, int channels) {
    int y, x, c;
    for (y = 0; y < height; y++) {
        uint8_t *row = img + (size_t)y * width * channels;
        for (x = 0; x < width / 2; x++)
            for (c = 0; c < channels; c++) {
                uint8_t t = row[x * channels + c];
                row[x * channels + c] = row[(width - 1 - x) * channels + c];
                row[(width - 1 - x) * channels + c] = t;
            }
    }
}

/* Resize src into the contiguous out (out_h x out_w, same channels), or, with a window
 * (rows, columns), compute that window of the whole image resized; 0 when out of memory, -1
 * when the window's taps leave src. */
static int resize(const image *src, uint8_t *out, int out_h, int out_w, int flip, int simd,
                  const window_axis *window) {
    int need_h = window || out_w != src->width, need_v = window || out_h != src->height, ok = 1, y;
    size_t out_bytes = (size_t)out_w * src->channels;
    axis h = {0}, v = {0};

    if (window) {
        ok = axis_window(&v, &window[0], out_h, src->height);
        if (ok != 1) return ok;
        ok = axis_window(&h, &window[1], out_w, src->width);
        if (ok != 1) {
            axis_free(&v);
            return ok;
        }
    }
    if (!need_h && !need_v) {
        for (y = 0; y < out_h; y++)
            memcpy(out + (size_t)y * out_bytes, src->data + (size_t)y * src->pitch, out_bytes);
        if (flip) mirror(out, out_h, out_w, src->channels);
        return 1;
    }
    if (!window && need_h && !axis_init(&h, src->width, out_w)) return 0;
    if (!window && need_v && !axis_init(&v, src->height, out_h)) {
        if (need_h) axis_free(&h);
        return 0;
    }
    if (need_h && !need_v) {
        horizontal(src, 0, src->height, out, out_bytes, &h, flip, simd);
    } else if (!need_h) {
        ok = vertical(src->data, (size_t)src->pitch, 0, out, out_bytes, &v, simd);
        if (ok && flip) mirror(out, out_h, out_w, src->channels);
    } else {
        /* only the rows the vertical pass reads */
        int first = v.start[0], last = v.start[out_h - 1] + v.count[out_h - 1];
        uint8_t *rows = PyMem_RawMalloc(out_bytes * (size_t)(last - first));
        ok = rows != NULL;
        if (ok) {
            horizontal(src, first, last, rows, out_bytes, &h, flip, simd);
            ok = vertical(rows, out_bytes, first, out, out_bytes, &v, simd);
            PyMem_RawFree(rows);
        }
    }
    if (need_h) axis_free(&h);
    if (need_v) axis_free(&v);
    return ok;
}

/* Whether this CPU runs the AVX2 passes: asked once, when the module is imported. */
static int avx2_here = 0;

static int have_avx2(void) {
#ifdef RESAMPLE_AVX2
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

PyDoc_STRVAR(resize_doc,
             "resize($module, src, out, flip, simd=True, window=None, /)\n--\n\n"
             "Resize the uint8 image src (height x width x channels, 1 to 4 channels, rows at\n"
             "any stride, pixels contiguous: a crop of a larger array is read in place) into\n"
             "out (a C-contiguous out_height x out_width x channels uint8 array) with torch's\n"
             "antialiased bilinear resampling, mirrored left to right when flip is true.\n"
             "simd=False runs the plain loops (tests compare both with torch).\n"
             "window: ((whole, total, start, origin, scale, shift), (the same for columns)):\n"
             "out is outputs start ... of the image of whole pixels resized to total with\n"
             "this scale (centres moved by shift), src its part from pixel origin on\n"
             "(ValueError if the taps leave src).");

static PyObject *resize_py(PyObject *self, PyObject *args) {
    PyObject *src_obj, *out_obj;
    Py_buffer src, out;
    PyObject *window_obj = Py_None;
    int flip, simd = 1, ok;
    window_axis window[2];
    image img;
    (void)self;

    if (!PyArg_ParseTuple(args, "OOp|pO", &src_obj, &out_obj, &flip, &simd, &window_obj))
        return NULL;
    if (window_obj != Py_None &&
        !PyArg_ParseTuple(window_obj,
                          "(iiiidd)(iiiidd);window: two (whole, total, start, origin, scale, shift)",
                          &window[0].whole, &window[0].total, &window[0].start, &window[0].origin,
                          &window[0].scale, &window[0].shift, &window[1].whole, &window[1].total,
                          &window[1].start, &window[1].origin, &window[1].scale, &window[1].shift))
        return NULL;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_RECORDS_RO) < 0) return NULL;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_CONTIG | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (src.ndim != 3 || out.ndim != 3 || src.itemsize != 1 || out.itemsize != 1 ||
        (src.format != NULL && strcmp(src.format, "B") != 0) ||
        (out.format != NULL && strcmp(out.format, "B") != 0) || src.shape[2] < 1 ||
        src.shape[2] > 4 || out.shape[2] != src.shape[2] ||
        (src.shape[2] > 1 && src.strides[2] != 1) ||
        (src.shape[1] > 1 && src.strides[1] != src.shape[2]) ||
        (src.shape[0] > 1 && src.strides[0] < src.shape[1] * src.shape[2]) ||
        src.shape[0] < 1 || src.shape[1] < 1 || out.shape[0] < 1 || out.shape[1] < 1 ||
        src.shape[0] > MAX_SIDE || src.shape[1] > MAX_SIDE || out.shape[0] > MAX_SIDE ||
        out.shape[1] > MAX_SIDE) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError,
                        "resize takes a uint8 (height, width, channels) src with 1 to 4 contiguous "
                        "channels and rows at a positive stride, and a C-contiguous uint8 out with "
                        "the same channels, sides of 1 to 2**24 pixels");
        return NULL;
    }
    img.data = (const uint8_t *)src.buf;
    img.pitch = src.strides[0];
    img.height = (int)src.shape[0];
    img.width = (int)src.shape[1];
    img.channels = (int)src.shape[2];
    simd = simd && avx2_here;
    Py_BEGIN_ALLOW_THREADS
    ok = resize(&img, (uint8_t *)out.buf, (int)out.shape[0], (int)out.shape[1], flip, simd,
                window_obj == Py_None ? NULL : window);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    if (ok < 0) {
        PyErr_SetString(PyExc_ValueError, "resize: the window's taps leave src, or the window "
                                          "does not fit its resized image");
        return NULL;
    }
    if (!ok) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"resize", resize_py, METH_VARARGS, resize_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastdata.decode._resample",
    "Antialiased bilinear resizing of uint8 images with torch's pixels, strided and flipped.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__resample(void) {
    PyObject *m = PyModule_Create(&module);
    avx2_here = have_avx2();
    /* whether resize runs its AVX2 passes here (else its plain loops, slower than torch's) */
    if (m != NULL && PyModule_AddObject(m, "AVX2", PyBool_FromLong(avx2_here)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
