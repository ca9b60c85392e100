/* vfl.secure._fastloops: the two inner loops of a secure product at C speed, on GMP (issue 25).
 *
 * Optional: setup.py builds it when a compiler and gmp.h exist; otherwise vfl.secure.fastmath runs the same
 * loops in Python with the same results (VFL_PURE_PYTHON=1 forces that). The interface is bytes and small ints only
 * (no gmpy2 C-API): big integers travel as big-endian bytes, exponents as native uint64 arrays.
 *
 *   Buckets(n_products, window, n_windows, modulus)   Pippenger buckets kept across chunks (odd modulus)
 *       .add(frame, width, n_groups, exponents, n_cols, first_product)
 *       .result(product) -> bytes                     the running-product combination, then c squarings/window
 *       .mults, .combination_mults                    multiplications counted like the Python loops
 *   FixedBase(base, modulus, window, n_windows)       table[k][d] = base^(d 2^(ck)) mod N
 *       .pow(exponent_le) -> bytes
 *   mulmod_repeat(a, b, modulus, count, montgomery)  count multiplications mod N (the unit cost of one)
 *
 * Products modulo an odd N are Montgomery products (no division); see the Montgomery section below.
 * Every length, count and exponent is checked here before it is used, and every base must lie below the modulus;
 * ciphertexts are validated by the Python caller (vfl.secure.keys) before they reach this module, and nothing here
 * parses a length out of them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <gmp.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define MAX_WINDOW 16
#define MAX_SLOTS ((Py_ssize_t)1 << 31)
#include "_ifma52.h"
#ifdef VFL_HAVE_IFMA
#define IFMA_PRESENT ifma_available()
#else
#define IFMA_PRESENT 0
#endif
#define IFMA_LANES_MIN 8   /* products x windows per row below which eight lanes would mostly idle: GMP instead */

/* Prefetch the n limbs at p into the cache (issue 34): the bucket and table entries are picked by random digits out
 * of tens of MB, so each one is a cache and TLB miss; asking for the next ones before the current product is computed
 * hides that latency behind the multiplication. A hint only: it changes no result. */
static inline void prefetch_limbs(const mp_limb_t *p, mp_size_t n) {
#if defined(__GNUC__) || defined(__clang__)
    const char *c = (const char *)p;
    for (size_t off = 0; off < (size_t)n * sizeof(mp_limb_t); off += 64)
        __builtin_prefetch(c + off, 1, 3);
#else
    (void)p;
    (void)n;
#endif
}

/* Zeroed memory for the big arrays (buckets, tables; issue 34), 2 MiB-aligned and, on Linux, marked for transparent
 * huge pages: the random digits touch tens of MB, and with 4 KiB pages nearly every access is also a TLB miss.
 * Released with big_free. */
#define HUGE_PAGE ((size_t)2 << 20)
static void *big_calloc(size_t bytes) {
    void *p = NULL;
    if (bytes < HUGE_PAGE)   /* small tables and buckets (tests, short streams): plain zeroed memory */
        return calloc(bytes ? bytes : 1, 1);
    size_t size = bytes ? (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE : HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, size) != 0)
        return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(p, size, MADV_HUGEPAGE);   /* a hint: without it (or THP off) the memory is simply 4 KiB pages */
#endif
    memset(p, 0, size);
    return p;
}

static void big_free(void *p) {
    free(p);
}

static int import_be(mpz_t out, const Py_buffer *buf) {
    if (buf->len <= 0) {
        PyErr_SetString(PyExc_ValueError, "an integer needs at least one byte");
        return -1;
    }
    mpz_import(out, (size_t)buf->len, 1, 1, 1, 0, buf->buf);
    return 0;
}

static PyObject *export_be(const mpz_t x) {
    size_t count = (mpz_sizeinbase(x, 2) + 7) / 8;
    if (mpz_sgn(x) == 0)
        return PyBytes_FromStringAndSize("", 0);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count);
    if (out == NULL)
        return NULL;
    size_t written = 0;
    mpz_export(PyBytes_AS_STRING(out), &written, 1, 1, 1, 0, x);
    return out;
}

/* x <- x y mod m through the scratch t: GMP copies an operand that aliases the destination, so never alias */
static inline void mulmod_into(mpz_t x, const mpz_t y, const mpz_t m, mpz_t t) {
    mpz_mul(t, x, y);
    mpz_tdiv_r(x, t, m);
}

static int positive_modulus(mpz_t m, const Py_buffer *buf) {
    if (import_be(m, buf) < 0)
        return -1;
    if (mpz_cmp_ui(m, 1) <= 0) {
        PyErr_SetString(PyExc_ValueError, "the modulus must be greater than 1");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------- Montgomery (1985) */
/* For an odd modulus m of n limbs and R = B^n (B = 2^64): x~ = x R mod m, and REDC(t) = t / R mod m for t < R^2,
 * word by word (Montgomery, "Modular multiplication without trial division", Math. Comp. 44, 1985): per limb add the
 * multiple q m (q = t_j (-1/m) mod B) that clears it, then drop the n low limbs; one subtraction keeps the result
 * below R. mont(x~, y~) = REDC(x~ y~) = (x y)~, so a chain of products never divides. Only public mpn calls. */
typedef struct {
    mp_size_t n;
    mp_limb_t *m;      /* n limbs */
    mp_limb_t minv;    /* -1/m mod B */
    mp_limb_t *ip;     /* 1/m mod B^n for GMP's own mpn_redc_n, or NULL */
} Montgomery;

/* GMP's subquadratic REDC (mullo + wrap-around product; what mpz_powm uses above ~40 limbs) is not part of the
 * documented interface, but every shared libgmp 6.x exports it. Weak references: where it is missing they are NULL
 * and the word-by-word REDC below runs instead; fastloops_init checks it against that one before trusting it. */
extern void __gmpn_redc_n(mp_ptr, mp_ptr, mp_srcptr, mp_size_t, mp_srcptr) __attribute__((weak));
extern void __gmpn_binvert(mp_ptr, mp_srcptr, mp_size_t, mp_ptr) __attribute__((weak));
extern mp_size_t __gmpn_binvert_itch(mp_size_t) __attribute__((weak));
#define REDC_N_MIN_LIMBS 48   /* measured: faster than word-by-word at 64 limbs (4096 bits), slower at 32 */
static int redc_n_trusted = 0;

static void montgomery_clear(Montgomery *mo);

/* on failure everything it allocated is freed again and both pointers are NULL (montgomery_clear is safe) */
static int montgomery_init(Montgomery *mo, const mpz_t m) {
    mo->n = (mp_size_t)mpz_size(m);
    mo->ip = NULL;
    mo->m = PyMem_RawCalloc((size_t)mo->n, sizeof(mp_limb_t));
    if (mo->m == NULL)
        return -1;
    memcpy(mo->m, mpz_limbs_read(m), (size_t)mo->n * sizeof(mp_limb_t));
    mp_limb_t x = mo->m[0];   /* Newton: correct to 3 bits for odd m0, then 6, 12, 24, 48, 96 */
    for (int i = 0; i < 5; i++)
        x *= 2 - mo->m[0] * x;
    mo->minv = -x;
    if (redc_n_trusted && mo->n >= REDC_N_MIN_LIMBS) {
        mp_size_t itch = __gmpn_binvert_itch(mo->n);
        mp_limb_t *scratch = PyMem_RawMalloc((size_t)(itch > 0 ? itch : 1) * sizeof(mp_limb_t));
        mo->ip = PyMem_RawMalloc((size_t)mo->n * sizeof(mp_limb_t));
        if (scratch == NULL || mo->ip == NULL) {
            PyMem_RawFree(scratch);
            montgomery_clear(mo);
            return -1;
        }
        __gmpn_binvert(mo->ip, mo->m, mo->n, scratch);
        PyMem_RawFree(scratch);
    }
    return 0;
}

static void montgomery_clear(Montgomery *mo) {
    PyMem_RawFree(mo->m);
    PyMem_RawFree(mo->ip);
    mo->m = mo->ip = NULL;
}

/* r <- t / R mod m, r < R (t: 2n limbs, overwritten; r must not overlap t) */
static void redc_words(mp_limb_t *r, mp_limb_t *t, const Montgomery *mo) {
    const mp_size_t n = mo->n;
    for (mp_size_t j = 0; j < n; j++)
        t[j] = mpn_addmul_1(t + j, mo->m, n, t[j] * mo->minv);
    if (mpn_add_n(r, t + n, t, n))
        mpn_sub_n(r, r, mo->m, n);
}

static void redc(mp_limb_t *r, mp_limb_t *t, const Montgomery *mo) {
    if (mo->ip != NULL)
        __gmpn_redc_n(r, t, mo->m, mo->n, mo->ip);
    else
        redc_words(r, t, mo);
}

/* r <- REDC(x y); r may equal x or y (t: 2n limbs of scratch) */
static void montmul(mp_limb_t *r, const mp_limb_t *x, const mp_limb_t *y, mp_limb_t *t, const Montgomery *mo) {
    mpn_mul_n(t, x, y, mo->n);
    redc(r, t, mo);
}

/* r <- REDC(x^2) */
static void montsqr(mp_limb_t *r, const mp_limb_t *x, mp_limb_t *t, const Montgomery *mo) {
    mpn_sqr(t, x, mo->n);
    redc(r, t, mo);
}

/* n limbs of x~ = x R mod m, from x >= 0 */
static void to_montgomery(mp_limb_t *out, const mpz_t x, const mpz_t m, const Montgomery *mo) {
    mpz_t t;
    mpz_init(t);
    mpz_mul_2exp(t, x, (mp_bitcnt_t)mo->n * GMP_NUMB_BITS);
    mpz_tdiv_r(t, t, m);
    memset(out, 0, (size_t)mo->n * sizeof(mp_limb_t));
    memcpy(out, mpz_limbs_read(t), mpz_size(t) * sizeof(mp_limb_t));
    mpz_clear(t);
}

/* out <- x / R mod m in [0, m) (x: n limbs < R; t: 2n limbs of scratch) */
static void from_montgomery(mpz_t out, const mp_limb_t *x, mp_limb_t *t, const Montgomery *mo) {
    const mp_size_t n = mo->n;
    memcpy(t, x, (size_t)n * sizeof(mp_limb_t));
    memset(t + n, 0, (size_t)n * sizeof(mp_limb_t));
    mp_limb_t *r = mpz_limbs_write(out, n);
    redc(r, t, mo);   /* (x + q m) / R < 1 + m: at most one subtraction */
    if (mpn_cmp(r, mo->m, n) >= 0)
        mpn_sub_n(r, r, mo->m, n);
    mpz_limbs_finish(out, n);
}

/* fastloops_init: trust mpn_redc_n only if it agrees with the word-by-word REDC on a 64-limb odd modulus */
static void check_redc_n(void) {
    if (__gmpn_redc_n == NULL || __gmpn_binvert == NULL || __gmpn_binvert_itch == NULL)
        return;
    const mp_size_t n = 64;
    mpz_t m, a, r1, r2;
    mpz_inits(m, a, r1, r2, NULL);
    gmp_randstate_t st;
    gmp_randinit_default(st);
    mpz_urandomb(m, st, (mp_bitcnt_t)n * GMP_NUMB_BITS);
    mpz_setbit(m, (mp_bitcnt_t)n * GMP_NUMB_BITS - 1);
    mpz_setbit(m, 0);
    Montgomery words = {0}, fast = {0};
    redc_n_trusted = 0;
    int ok = montgomery_init(&words, m) == 0;
    redc_n_trusted = 1;
    ok = ok && montgomery_init(&fast, m) == 0 && fast.ip != NULL;
    mp_limb_t *x = PyMem_Calloc((size_t)(4 * n), sizeof(mp_limb_t)), *t = x + n;
    for (int trial = 0; ok && x != NULL && trial < 8; trial++) {
        mpz_t view;
        mpz_urandomm(a, st, m);
        memset(x, 0, (size_t)n * sizeof(mp_limb_t));
        memcpy(x, mpz_limbs_read(a), mpz_size(a) * sizeof(mp_limb_t));
        montmul(t + 2 * n, x, x, t, &words);   /* (x x / R) mod m, < R */
        mpz_mod(r1, mpz_roinit_n(view, t + 2 * n, n), m);
        mpn_mul_n(t, x, x, n);
        __gmpn_redc_n(t + 2 * n, t, mpz_limbs_read(m), n, fast.ip);
        mpz_mod(r2, mpz_roinit_n(view, t + 2 * n, n), m);
        ok = mpz_cmp(r1, r2) == 0 && mpz_cmp_ui(r1, 0) != 0;
    }
    redc_n_trusted = ok && x != NULL;
    PyMem_Free(x);
    montgomery_clear(&words);
    montgomery_clear(&fast);
    gmp_randclear(st);
    mpz_clears(m, a, r1, r2, NULL);
}

/* ------------------------------------------------------------------------------------------------ Buckets */
/* All arithmetic in the Montgomery domain of the odd modulus m. A base b < m enters as it is, i.e. as the Montgomery
 * form of b' = b / R; the buckets and their combination then give prod b'^e = (prod b^e) R^(-E), E = sum of all the
 * exponents of the product, and result() multiplies by R^E mod m once (one short powmod per product, not counted in
 * mults: the multiplications counted are exactly fastmath.BucketAccumulator's). */
typedef struct {
    PyObject_HEAD
    mpz_t modulus;
    Montgomery mo;
    int window;
    int n_windows;
    Py_ssize_t n_products;
    Py_ssize_t per_product;   /* n_windows << window buckets */
    mp_limb_t *slots;         /* n_products * per_product buckets of mo.n limbs */
    unsigned char *used;
    unsigned char *released;  /* per product, after result() */
    uint64_t *exp_sum;        /* per product: E as two 64-bit halves (lo, hi) */
    unsigned long long mults;
    unsigned long long combination_mults;   /* running products of result(): fastmath.multiexp counts them too */
    int busy;                 /* add/result run without the GIL: one call at a time per object */
    int ready;
    int simd;                 /* 1: buckets of ifma.nd 52-bit digits, eight products per IFMA call (_ifma52.h) */
    Py_ssize_t stride;        /* uint64 words per bucket: mo.n, or ifma.nd with simd */
#ifdef VFL_HAVE_IFMA
    Ifma ifma;
#endif
} BucketsObject;

static void Buckets_dealloc(BucketsObject *self) {
    big_free(self->slots);
    PyMem_Free(self->used);
    PyMem_Free(self->released);
    PyMem_Free(self->exp_sum);
    montgomery_clear(&self->mo);
#ifdef VFL_HAVE_IFMA
    ifma_clear(&self->ifma);
#endif
    if (self->ready)
        mpz_clear(self->modulus);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Buckets_init(BucketsObject *self, PyObject *args, PyObject *kwds) {
    Py_ssize_t n_products;
    int window, n_windows;
    Py_buffer mod;
    int simd = -1;
    (void)kwds;
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Buckets is initialised once");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "niiy*|i", &n_products, &window, &n_windows, &mod, &simd))
        return -1;
    if (n_products < 1 || window < 1 || window > MAX_WINDOW || n_windows < 1 || (long)window * (n_windows - 1) >= 64) {
        PyBuffer_Release(&mod);
        PyErr_SetString(PyExc_ValueError, "Buckets needs n_products >= 1, 1 <= window <= 16 and exponents < 2^64");
        return -1;
    }
    mpz_init(self->modulus);
    self->ready = 1;
    int bad = positive_modulus(self->modulus, &mod);
    PyBuffer_Release(&mod);
    if (bad)
        return -1;
    if (!mpz_odd_p(self->modulus)) {
        PyErr_SetString(PyExc_ValueError, "Buckets needs an odd modulus (Montgomery arithmetic)");
        return -1;
    }
    Py_ssize_t per_product = (Py_ssize_t)n_windows << window;
    Py_ssize_t n = (Py_ssize_t)mpz_size(self->modulus);
    if (n_products > MAX_SLOTS / per_product || n_products * per_product > PY_SSIZE_T_MAX / 8 / n) {
        PyErr_SetString(PyExc_ValueError, "too many buckets");
        return -1;
    }
    if (montgomery_init(&self->mo, self->modulus) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    /* simd: -1 where it pays (IFMA present and at least 8 products per row to fill the lanes), 0 never, 1 required */
    int can_simd = 0;
#ifdef VFL_HAVE_IFMA
    can_simd = ifma_available() && ifma_digits(mpz_sizeinbase(self->modulus, 2)) <= IFMA_MAX_DIGITS;
#endif
    if (simd == 1 && !can_simd) {
        PyErr_SetString(PyExc_ValueError, "Buckets: simd=1 needs a CPU with AVX-512 IFMA");
        return -1;
    }
    self->simd = simd == 1 || (simd == -1 && can_simd && (long long)n_products * n_windows >= IFMA_LANES_MIN);
    self->stride = n;
#ifdef VFL_HAVE_IFMA
    if (self->simd) {
        if (ifma_init(&self->ifma, mpz_limbs_read(self->modulus), n, mpz_sizeinbase(self->modulus, 2)) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        self->stride = self->ifma.nd;
        if (n_products * per_product > PY_SSIZE_T_MAX / 8 / self->stride) {
            PyErr_SetString(PyExc_ValueError, "too many buckets");
            return -1;
        }
    }
#endif
    self->window = window;
    self->n_windows = n_windows;
    self->n_products = n_products;
    self->per_product = per_product;
    Py_ssize_t total = n_products * per_product;
    self->slots = big_calloc((size_t)(total * self->stride) * sizeof(mp_limb_t));   /* read only where used[] is set */
    self->used = PyMem_Calloc((size_t)total, 1);
    self->released = PyMem_Calloc((size_t)n_products, 1);
    self->exp_sum = PyMem_Calloc((size_t)(2 * n_products), sizeof(uint64_t));
    if (self->slots == NULL || self->used == NULL || self->released == NULL || self->exp_sum == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* every base of the frame as mo.n limbs; -1 if one is not below the modulus */
static int import_bases(mp_limb_t *out, const unsigned char *bytes, Py_ssize_t count, Py_ssize_t width,
                        const mpz_t modulus, mp_size_t n) {
    mpz_t b;
    mpz_init2(b, (mp_bitcnt_t)width * 8);
    int bad = 0;
    for (Py_ssize_t i = 0; i < count && !bad; i++) {
        mpz_import(b, (size_t)width, 1, 1, 1, 0, bytes + i * width);
        if (mpz_cmp(b, modulus) >= 0) {
            bad = 1;
            break;
        }
        memset(out + i * n, 0, (size_t)n * sizeof(mp_limb_t));
        memcpy(out + i * n, mpz_limbs_read(b), mpz_size(b) * sizeof(mp_limb_t));
    }
    mpz_clear(b);
    return bad ? -1 : 0;
}

/* e: the caller's private, aligned copy of the exponents (exps_len bytes), never the caller's buffer, which another
 * thread could change once the GIL is released */
static int check_add_args(BucketsObject *self, Py_ssize_t frame_len, Py_ssize_t width, Py_ssize_t n_groups,
                          const uint64_t *e, Py_ssize_t exps_len, Py_ssize_t n_cols, Py_ssize_t first) {
    if (self->slots == NULL || self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Buckets is not initialised or is in use by another thread");
        return -1;
    }
    if (width < 1 || width > (1 << 20) || n_groups < 1 || n_cols < 1 || first < 0
        || n_cols > self->n_products / n_groups || first > self->n_products - n_cols * n_groups) {
        PyErr_SetString(PyExc_ValueError, "Buckets.add: bad width, groups, columns or first product");
        return -1;
    }
    Py_ssize_t rows = frame_len / (width * n_groups), n_exps = exps_len / (Py_ssize_t)sizeof(uint64_t);
    /* divisions, not products: no size computation here can overflow */
    if (frame_len % (width * n_groups) != 0 || exps_len % (Py_ssize_t)sizeof(uint64_t) != 0
        || n_exps % n_cols != 0 || n_exps / n_cols != rows
        || rows > PY_SSIZE_T_MAX / n_groups / ((Py_ssize_t)self->mo.n + 1) / (Py_ssize_t)sizeof(mp_limb_t)) {
        PyErr_SetString(PyExc_ValueError, "Buckets.add: need whole rows and one uint64 exponent per row and column");
        return -1;
    }
    const int top_bits = self->window * self->n_windows;
    for (Py_ssize_t i = 0; top_bits < 64 && i < rows * n_cols; i++)
        if (e[i] >> top_bits) {
            PyErr_SetString(PyExc_ValueError, "Buckets.add: an exponent has more bits than the buckets");
            return -1;
        }
    for (Py_ssize_t t = 0; t < n_cols * n_groups; t++)
        if (self->released[first + t]) {
            PyErr_SetString(PyExc_ValueError, "Buckets.add: that product's buckets were already combined");
            return -1;
        }
    return 0;
}

#ifdef VFL_HAVE_IFMA
/* lanes [0, batch) of the work vectors from the operands, eight products, results back (idle lanes: a zero dummy) */
static void flush_lanes(BucketsObject *self, uint64_t **slot, const uint64_t **base) {
    const int nd = self->ifma.nd;
    uint64_t *X = self->ifma.work, *Y = X + (size_t)nd * IFMA_LANES, *R = Y + (size_t)nd * IFMA_LANES;
    for (int l = 0; l < IFMA_LANES; l++)
        for (int j = 0; j < nd; j++) {
            X[j * IFMA_LANES + l] = slot[l][j];
            Y[j * IFMA_LANES + l] = base[l][j];
        }
    ifma_amm8(R, X, Y, &self->ifma, R + (size_t)nd * IFMA_LANES);
    for (int l = 0; l < IFMA_LANES; l++)
        for (int j = 0; j < nd; j++)
            slot[l][j] = R[j * IFMA_LANES + l];
}

/* add()'s bucket loop with eight products per IFMA call: rows in order, in a row its P (group, column, window)
 * positions in order; each multiplication takes the next lane, and a batch is computed when its eight lanes are full
 * or before a lane would take a position P or more after the batch's first one. So a batch's positions are distinct
 * (product, window) pairs, never one bucket twice, and every bucket still receives its bases in row order. A position
 * with a zero digit or an empty bucket (copied, not multiplied) takes no lane: these are the GMP loop's two branches,
 * and when a batch is computed is a function of their outcomes only (no new branch on the data). Idle lanes
 * multiply a dummy zero. -1: out of memory. */
static int add_simd(BucketsObject *self, const mp_limb_t *bases, Py_ssize_t rows, Py_ssize_t n_groups,
                    const uint64_t *e, Py_ssize_t n_cols, Py_ssize_t first, unsigned long long *mults) {
    const mp_size_t n = self->mo.n;
    const int nd = self->ifma.nd, c = self->window;
    const uint64_t mask = ((uint64_t)1 << c) - 1;
    const Py_ssize_t per_row = n_groups * n_cols * self->n_windows;
    if (rows > (PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(uint64_t) - 2 * nd) / nd / n_groups)   /* the digit copy's size */
        return -1;
    uint64_t *b52 = PyMem_RawMalloc((size_t)(rows * n_groups * nd + 2 * nd) * sizeof(uint64_t));
    if (b52 == NULL)
        return -1;
    uint64_t *dummy_slot = b52 + rows * n_groups * nd, *dummy_base = dummy_slot + nd;
    memset(dummy_slot, 0, (size_t)(2 * nd) * sizeof(uint64_t));
    for (Py_ssize_t r = 0; r < rows * n_groups; r++)
        ifma_from_limbs(b52 + r * nd, bases + r * n, n, nd);
    uint64_t *slot[IFMA_LANES];
    const uint64_t *base[IFMA_LANES];
    for (int l = 0; l < IFMA_LANES; l++) {
        slot[l] = dummy_slot;
        base[l] = dummy_base;
    }
    int lane = 0;
    Py_ssize_t position = 0, first_position = 0;
    for (Py_ssize_t i = 0; i < rows; i++) {
        for (Py_ssize_t k = 0; i + 1 < rows && k < n_cols; k++) {   /* the next row's buckets, fetched early */
            uint64_t y = e[(i + 1) * n_cols + k];
            for (Py_ssize_t g = 0; g < n_groups; g++) {
                Py_ssize_t off = (first + k * n_groups + g) * self->per_product;
                uint64_t yy = y;
                for (int w = 0; yy && w < self->n_windows; w++, yy >>= c)
                    if (yy & mask)
                        prefetch_limbs(self->slots + (off + ((Py_ssize_t)w << c) + (Py_ssize_t)(yy & mask)) * nd, nd);
            }
        }
        for (Py_ssize_t g = 0; g < n_groups; g++) {
            const uint64_t *b = b52 + (i * n_groups + g) * nd;
            for (Py_ssize_t k = 0; k < n_cols; k++) {
                Py_ssize_t product = first + k * n_groups + g;
                uint64_t *sum = self->exp_sum + 2 * product;
                Py_ssize_t off = product * self->per_product;
                uint64_t x = e[i * n_cols + k];
                sum[0] += x;
                sum[1] += sum[0] < x;
                for (int w = 0; w < self->n_windows; w++, x >>= c, position++) {
                    uint64_t d = x & mask;
                    Py_ssize_t s = off + ((Py_ssize_t)w << c) + (Py_ssize_t)d;
                    if (d && self->used[s]) {
                        if (lane == IFMA_LANES || (lane > 0 && position - first_position >= per_row)) {
                            flush_lanes(self, slot, base);
                            for (int l = 0; l < IFMA_LANES; l++) {
                                slot[l] = dummy_slot;
                                base[l] = dummy_base;
                            }
                            lane = 0;
                        }
                        if (lane == 0)
                            first_position = position;
                        slot[lane] = self->slots + s * nd;
                        base[lane] = b;
                        lane++;
                        ++*mults;
                    } else if (d) {
                        memcpy(self->slots + s * nd, b, (size_t)nd * sizeof(uint64_t));
                        self->used[s] = 1;
                    }
                }
            }
        }
    }
    if (lane > 0)
        flush_lanes(self, slot, base);
    PyMem_RawFree(b52);
    return 0;
}
#endif

/* product index first + k * n_groups + g for column k of the exponents and group g of a row */
static PyObject *Buckets_add(BucketsObject *self, PyObject *args) {
    Py_buffer frame, exps;
    Py_ssize_t width, n_groups, n_cols, first;
    if (!PyArg_ParseTuple(args, "y*nny*nn", &frame, &width, &n_groups, &exps, &n_cols, &first))
        return NULL;
    PyObject *ret = NULL;
    mp_limb_t *bases = NULL, *t = NULL;
    /* checked and used from one private copy (memcpy: any alignment), taken while the GIL is held */
    uint64_t *e = PyMem_Malloc(exps.len > 0 ? (size_t)exps.len : 1);
    if (e == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(e, exps.buf, (size_t)exps.len);
    if (check_add_args(self, frame.len, width, n_groups, e, exps.len, n_cols, first) < 0)
        goto done;
    const mp_size_t n = self->mo.n;
    const Py_ssize_t rows = frame.len / (width * n_groups);
    bases = PyMem_Malloc((size_t)(rows * n_groups * n + 1) * sizeof(mp_limb_t));
    t = PyMem_Malloc((size_t)(2 * n) * sizeof(mp_limb_t));
    if (bases == NULL || t == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    self->busy = 1;
    int bad;
    unsigned long long mults = 0;
    const int c = self->window;
    const uint64_t mask = ((uint64_t)1 << c) - 1;
    Py_BEGIN_ALLOW_THREADS
    bad = import_bases(bases, (const unsigned char *)frame.buf, rows * n_groups, width, self->modulus, n);
#ifdef VFL_HAVE_IFMA
    if (self->simd && !bad) {
        bad = add_simd(self, bases, rows, n_groups, e, n_cols, first, &mults) < 0 ? 2 : 0;
        goto added;
    }
#endif
    /* product by product (column k, group g), rows in order: one product's buckets (2^c n_windows of them, 8.4 MB at
     * c = 13 and 2048-bit keys) and the frame's bases stay in the last-level cache while its rows are added; every
     * bucket still receives its bases in row order, so the values are those of a row-major pass */
    for (Py_ssize_t g = 0; g < n_groups && !bad; g++) {
        for (Py_ssize_t k = 0; k < n_cols; k++) {
            Py_ssize_t product = first + k * n_groups + g;
            uint64_t *sum = self->exp_sum + 2 * product;
            Py_ssize_t off = product * self->per_product;
            for (Py_ssize_t i = 0; i < rows; i++) {
                if (i + 1 < rows) {   /* the next row's buckets, fetched while this row's products are computed */
                    uint64_t y = e[(i + 1) * n_cols + k];
                    for (int w = 0; y && w < self->n_windows; w++, y >>= c)
                        if (y & mask)
                            prefetch_limbs(self->slots + (off + ((Py_ssize_t)w << c) + (Py_ssize_t)(y & mask)) * n, n);
                }
                const mp_limb_t *b = bases + (i * n_groups + g) * n;
                uint64_t x = e[i * n_cols + k];
                sum[0] += x;
                sum[1] += sum[0] < x;
                for (int w = 0; x && w < self->n_windows; w++, x >>= c) {   /* w bound: a second guard */
                    uint64_t d = x & mask;
                    if (!d)
                        continue;
                    Py_ssize_t s = off + ((Py_ssize_t)w << c) + (Py_ssize_t)d;
                    mp_limb_t *slot = self->slots + s * n;
                    if (!self->used[s]) {
                        memcpy(slot, b, (size_t)n * sizeof(mp_limb_t));
                        self->used[s] = 1;
                    } else {
                        montmul(slot, slot, b, t, &self->mo);
                        mults++;
                    }
                }
            }
        }
    }
#ifdef VFL_HAVE_IFMA
added:
#endif
    Py_END_ALLOW_THREADS
    self->busy = 0;
    self->mults += mults;
    if (bad == 2)
        PyErr_NoMemory();
    else if (bad)
        PyErr_SetString(PyExc_ValueError, "Buckets.add: a base is not below the modulus (validate ciphertexts first)");
    else
        ret = Py_NewRef(Py_None);
done:
    PyMem_Free(e);
    PyMem_Free(bases);
    PyMem_Free(t);
    PyBuffer_Release(&frame);
    PyBuffer_Release(&exps);
    return ret;
}

/* the Montgomery form of prod_d bucket_d^d over the windows, high to low, by fastmath.BucketAccumulator.result's
 * running product and c squarings per window; 0 if every bucket is empty */
static int combine(BucketsObject *self, Py_ssize_t product, mp_limb_t *result, mp_limb_t *work,
                   unsigned long long *squarings, unsigned long long *others) {
    const mp_size_t n = self->mo.n;
    const int c = self->window;
    mp_limb_t *running = work, *acc = work + n, *t = work + 2 * n;
    const Py_ssize_t off = product * self->per_product;
    int have_result = 0;
    for (int w = self->n_windows - 1; w >= 0; w--) {
        if (have_result) {
            for (int s = 0; s < c; s++)
                montsqr(result, result, t, &self->mo);
            *squarings += (unsigned long long)c;
        }
        int have_running = 0, have_acc = 0;
        for (Py_ssize_t d = ((Py_ssize_t)1 << c) - 1; d >= 1; d--) {
            Py_ssize_t s = off + ((Py_ssize_t)w << c) + d;
            if (self->used[s]) {
                if (!have_running) {
                    memcpy(running, self->slots + s * self->stride, (size_t)n * sizeof(mp_limb_t));
                } else {
                    montmul(running, running, self->slots + s * self->stride, t, &self->mo);
                    ++*others;
                }
                have_running = 1;
            }
            if (have_running) {
                if (!have_acc) {
                    memcpy(acc, running, (size_t)n * sizeof(mp_limb_t));
                } else {
                    montmul(acc, acc, running, t, &self->mo);
                    ++*others;
                }
                have_acc = 1;
            }
        }
        if (have_acc) {
            if (!have_result) {
                memcpy(result, acc, (size_t)n * sizeof(mp_limb_t));
            } else {
                montmul(result, result, acc, t, &self->mo);
                ++*others;
            }
            have_result = 1;
        }
    }
    return have_result;
}

static PyObject *Buckets_result(BucketsObject *self, PyObject *arg) {
    Py_ssize_t product = PyLong_AsSsize_t(arg);
    if (product == -1 && PyErr_Occurred())
        return NULL;
    if (self->slots == NULL || self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Buckets is not initialised or is in use by another thread");
        return NULL;
    }
    if (product < 0 || product >= self->n_products) {
        PyErr_SetString(PyExc_IndexError, "Buckets.result: no such product");
        return NULL;
    }
    if (self->released[product]) {
        PyErr_SetString(PyExc_ValueError, "Buckets.result: that product's buckets were already combined");
        return NULL;
    }
    const mp_size_t n = self->mo.n;
    mp_limb_t *work = PyMem_Malloc((size_t)(8 * n + 2) * sizeof(mp_limb_t));
    if (work == NULL)
        return PyErr_NoMemory();
    self->busy = 1;
    unsigned long long squarings = 0, others = 0;
    mpz_t value, r_mod, e_total, d_total;
    Py_BEGIN_ALLOW_THREADS
    mpz_inits(value, r_mod, e_total, d_total, NULL);
#ifdef VFL_HAVE_IFMA
    /* simd buckets hold b = P R'^(1 - count) < 2m (P: the product of the bases put into it, R' = 2^(52 nd)), as 52-bit
     * digits: each becomes n limbs of b mod m in place, which combine() takes as the Montgomery form of b / R as in
     * the GMP loop. The combination is then prod c^e R'^(D - E) R^(-D), D = sum of d 2^(c w) over the used buckets
     * (d, w), so the correction below is R^D R'^(E - D) = 2^(64 n D + 52 nd (E - D)) instead of R^E. */
    if (self->simd) {
        const int c = self->window;
        for (int w = 0; w < self->n_windows; w++)
            for (Py_ssize_t d = 1; d < ((Py_ssize_t)1 << c); d++) {
                Py_ssize_t s = product * self->per_product + ((Py_ssize_t)w << c) + d;
                if (!self->used[s])
                    continue;
                ifma_to_limbs(self->slots + s * self->stride, self->slots + s * self->stride, self->ifma.nd,
                              self->mo.m, n, work + 6 * n);
                mpz_set_ui(r_mod, (unsigned long)d);
                mpz_mul_2exp(r_mod, r_mod, (mp_bitcnt_t)(c * w));
                mpz_add(d_total, d_total, r_mod);
            }
    }
#endif
    if (combine(self, product, work + 5 * n, work, &squarings, &others)) {
        from_montgomery(value, work + 5 * n, work + n, &self->mo);   /* (prod b^e) R^(-E) mod m */
        /* E = exp_sum[hi] 2^64 + exp_sum[lo], least significant word first, native byte order: portable where
         * unsigned long has 32 bits (mpz_set_ui would cut E there) */
        mpz_import(e_total, 2, -1, sizeof(uint64_t), 0, 0, self->exp_sum + 2 * product);
        mpz_set_ui(r_mod, 1);
        mpz_mul_2exp(r_mod, r_mod, (mp_bitcnt_t)n * GMP_NUMB_BITS);
        if (self->simd) {   /* 2^(64 n D + 52 nd (E - D)) = 2^X: r_mod <- 2, e_total <- X */
            mpz_sub(e_total, e_total, d_total);
            mpz_mul_ui(e_total, e_total, (unsigned long)(52 * self->stride));
            mpz_addmul_ui(e_total, d_total, (unsigned long)(n * GMP_NUMB_BITS));
            mpz_set_ui(r_mod, 2);
        }
        /* the responder's column sum E is its own data: mpz_powm_sec's time does not depend on E's bits (the bucket
         * loop above does skip zero digits, as the Python loops do: docs/threat_model.md, "Out of scope") */
        if (mpz_sgn(e_total) > 0)
            mpz_powm_sec(r_mod, r_mod, e_total, self->modulus);
        else
            mpz_set_ui(r_mod, 1);
        mpz_mul(value, value, r_mod);
        mpz_tdiv_r(value, value, self->modulus);
    } else {
        mpz_set_ui(value, 1);
    }
    memset(self->used + product * self->per_product, 0, (size_t)self->per_product);
    Py_END_ALLOW_THREADS
    self->released[product] = 1;
    self->mults += squarings;
    self->combination_mults += others;
    self->busy = 0;
    PyMem_Free(work);
    PyObject *out = export_be(value);
    mpz_clears(value, r_mod, e_total, d_total, NULL);
    return out;
}

static PyObject *Buckets_get_mults(BucketsObject *self, void *closure) {
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->mults);
}

static PyMethodDef Buckets_methods[] = {
    {"add", (PyCFunction)Buckets_add, METH_VARARGS,
     "add(frame, width, n_groups, exponents, n_cols, first_product): bucket every base of the frame"},
    {"result", (PyCFunction)Buckets_result, METH_O, "result(product) -> big-endian bytes; releases its buckets"},
    {NULL, NULL, 0, NULL},
};

static PyObject *Buckets_get_combination_mults(BucketsObject *self, void *closure) {
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->combination_mults);
}

static PyObject *Buckets_get_simd(BucketsObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->simd);
}

static PyGetSetDef Buckets_getset[] = {
    {"simd", (getter)Buckets_get_simd, NULL, "True: eight bucket products per AVX-512 IFMA call (_ifma52.h)", NULL},
    {"mults", (getter)Buckets_get_mults, NULL, "bucket multiplications and squarings (BucketAccumulator's count)", NULL},
    {"combination_mults", (getter)Buckets_get_combination_mults, NULL,
     "the running-product multiplications of result() (fastmath.multiexp counts these too)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BucketsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vfl.secure._fastloops.Buckets",
    .tp_basicsize = sizeof(BucketsObject),
    .tp_dealloc = (destructor)Buckets_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pippenger buckets of several multi-exponentiations kept across chunks (Montgomery arithmetic)",
    .tp_methods = Buckets_methods,
    .tp_getset = Buckets_getset,
    .tp_init = (initproc)Buckets_init,
    .tp_new = PyType_GenericNew,
};

/* ---------------------------------------------------------------------------------------------- FixedBase */
typedef struct {
    PyObject_HEAD
    mpz_t modulus;
    int window;
    int n_windows;
    Py_ssize_t size;       /* n_windows << window entries */
    Montgomery mo;         /* odd modulus: the table holds n-limb Montgomery forms */
    mp_limb_t *limbs;
    mpz_t *table;          /* even modulus: plain residues */
    int ready;
    int simd;              /* crt_encrypt computes eight powers at once on AVX-512 IFMA (issue 34) */
    mpz_t simd_fix;        /* R'^(n_windows - 1) R^(-n_windows) mod m: turns the lanes' product into the power */
#ifdef VFL_HAVE_IFMA
    Ifma ifma;
#endif
} FixedBaseObject;

static void FixedBase_dealloc(FixedBaseObject *self) {
    if (self->table != NULL) {
        for (Py_ssize_t i = 0; i < self->size; i++)
            mpz_clear(self->table[i]);
        PyMem_Free(self->table);
    }
    big_free(self->limbs);
    montgomery_clear(&self->mo);
#ifdef VFL_HAVE_IFMA
    ifma_clear(&self->ifma);
#endif
    if (self->simd)
        mpz_clear(self->simd_fix);
    if (self->ready)
        mpz_clear(self->modulus);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the IFMA lanes for crt_encrypt (issue 34), where the CPU has them and VFL_NO_IFMA is unset: an error only when out of
 * memory; otherwise simd stays 0 and the GMP loop runs */
static int init_simd_table(FixedBaseObject *self) {
#ifdef VFL_HAVE_IFMA
    const char *off = getenv("VFL_NO_IFMA");
    if (!ifma_available() || (off != NULL && off[0] != '\0' && strcmp(off, "0") != 0)
        || ifma_digits(mpz_sizeinbase(self->modulus, 2)) > IFMA_MAX_DIGITS)
        return 0;
    if (ifma_init(&self->ifma, self->mo.m, self->mo.n, mpz_sizeinbase(self->modulus, 2)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    mpz_t r;
    mpz_inits(self->simd_fix, r, NULL);
    self->simd = 1;
    mpz_setbit(self->simd_fix, (mp_bitcnt_t)52 * (mp_bitcnt_t)self->ifma.nd * (mp_bitcnt_t)(self->n_windows - 1));
    mpz_setbit(r, (mp_bitcnt_t)GMP_NUMB_BITS * (mp_bitcnt_t)self->mo.n * (mp_bitcnt_t)self->n_windows);
    int ok = mpz_invert(r, r, self->modulus);
    mpz_mul(self->simd_fix, self->simd_fix, r);
    mpz_mod(self->simd_fix, self->simd_fix, self->modulus);
    mpz_clear(r);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "FixedBase: 2 is not invertible modulo an odd modulus (cannot happen)");
        return -1;
    }
#else
    (void)self;
#endif
    return 0;
}

/* row k = [1, g, g^2, ..., g^(2^c - 1)] mod N with g = base^(2^(ck)): fastmath.FixedBaseTable's table */
static int build_montgomery(FixedBaseObject *self, const mpz_t base) {
    const mp_size_t n = self->mo.n;
    const Py_ssize_t row_len = (Py_ssize_t)1 << self->window;
    self->limbs = big_calloc((size_t)self->size * (size_t)n * sizeof(mp_limb_t));
    mp_limb_t *g = PyMem_Calloc((size_t)(3 * n), sizeof(mp_limb_t));
    if (self->limbs == NULL || g == NULL) {
        PyMem_Free(g);
        PyErr_NoMemory();
        return -1;
    }
    mp_limb_t *t = g + n;
    mpz_t one;
    mpz_init_set_ui(one, 1);
    to_montgomery(g, base, self->modulus, &self->mo);
    for (int k = 0; k < self->n_windows; k++) {
        mp_limb_t *row = self->limbs + (Py_ssize_t)k * row_len * n;
        to_montgomery(row, one, self->modulus, &self->mo);
        memcpy(row + n, g, (size_t)n * sizeof(mp_limb_t));
        for (Py_ssize_t d = 2; d < row_len; d++)
            montmul(row + d * n, row + (d - 1) * n, g, t, &self->mo);
        montmul(g, row + (row_len - 1) * n, g, t, &self->mo);
    }
    mpz_clear(one);
    PyMem_Free(g);
    return 0;
}

static int build_plain(FixedBaseObject *self, mpz_t g) {
    const Py_ssize_t row_len = (Py_ssize_t)1 << self->window;
    self->table = PyMem_Malloc((size_t)self->size * sizeof(mpz_t));
    if (self->table == NULL) {
        self->size = 0;
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < self->size; i++)
        mpz_init(self->table[i]);
    for (int k = 0; k < self->n_windows; k++) {
        mpz_t *row = self->table + k * row_len;
        mpz_set_ui(row[0], 1);
        mpz_set(row[1], g);
        for (Py_ssize_t d = 2; d < row_len; d++) {
            mpz_mul(row[d], row[d - 1], g);
            mpz_tdiv_r(row[d], row[d], self->modulus);
        }
        mpz_mul(g, row[row_len - 1], g);
        mpz_tdiv_r(g, g, self->modulus);
    }
    return 0;
}

static int FixedBase_init(FixedBaseObject *self, PyObject *args, PyObject *kwds) {
    Py_buffer base, mod;
    int window, n_windows;
    (void)kwds;
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "FixedBase is initialised once");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "y*y*ii", &base, &mod, &window, &n_windows))
        return -1;
    int bad = 0;
    if (window < 1 || window > MAX_WINDOW || n_windows < 1 || n_windows > 4096
        || ((Py_ssize_t)n_windows << window) > ((Py_ssize_t)1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "FixedBase needs 1 <= window <= 16 and at most 2^24 table entries");
        bad = 1;
    }
    mpz_t g;
    mpz_init(g);
    mpz_init(self->modulus);
    self->ready = 1;
    if (!bad)
        bad = positive_modulus(self->modulus, &mod) < 0 || import_be(g, &base) < 0;
    PyBuffer_Release(&base);
    PyBuffer_Release(&mod);
    if (!bad) {
        self->window = window;
        self->n_windows = n_windows;
        self->size = (Py_ssize_t)n_windows << window;
        if (mpz_odd_p(self->modulus)) {
            bad = montgomery_init(&self->mo, self->modulus) < 0 ? (PyErr_NoMemory(), 1) : build_montgomery(self, g) < 0;
            bad = bad || init_simd_table(self) < 0;
        } else
            bad = build_plain(self, g) < 0;
    }
    mpz_clear(g);
    return bad ? -1 : 0;
}

static unsigned long digit_of(const unsigned char *bytes, Py_ssize_t len, long first_bit, int c) {
    unsigned long d = 0;
    for (int b = 0; b < c; b++) {
        long bit = first_bit + b;
        if (bit / 8 < len && (bytes[bit / 8] >> (bit % 8)) & 1)
            d |= 1UL << b;
    }
    return d;
}

static int pow_montgomery(FixedBaseObject *self, mpz_t out, const unsigned char *bytes, Py_ssize_t len) {
    const mp_size_t n = self->mo.n;
    const Py_ssize_t row_len = (Py_ssize_t)1 << self->window;
    /* raw allocator: crt_encrypt calls this without the GIL (PyMem_Malloc needs it) */
    mp_limb_t *acc = PyMem_RawMalloc((size_t)(3 * n) * sizeof(mp_limb_t));
    if (acc == NULL)
        return -1;
    mp_limb_t *t = acc + n;
    int have = 0;
    for (int k = 0; k < self->n_windows; k++) {   /* every entry this power reads, before the first product */
        unsigned long d = digit_of(bytes, len, (long)k * self->window, self->window);
        if (d)
            prefetch_limbs(self->limbs + ((Py_ssize_t)k * row_len + (Py_ssize_t)d) * n, n);
    }
    for (int k = 0; k < self->n_windows; k++) {
        unsigned long d = digit_of(bytes, len, (long)k * self->window, self->window);
        if (!d)
            continue;
        const mp_limb_t *entry = self->limbs + ((Py_ssize_t)k * row_len + (Py_ssize_t)d) * n;
        if (!have)
            memcpy(acc, entry, (size_t)n * sizeof(mp_limb_t));
        else
            montmul(acc, acc, entry, t, &self->mo);
        have = 1;
    }
    if (have)
        from_montgomery(out, acc, t, &self->mo);
    else
        mpz_set_ui(out, 1);
    PyMem_RawFree(acc);
    return 0;
}

static void pow_plain(FixedBaseObject *self, mpz_t out, const unsigned char *bytes, Py_ssize_t len) {
    const Py_ssize_t row_len = (Py_ssize_t)1 << self->window;
    mpz_t t;
    mpz_init(t);
    mpz_set_ui(out, 1);
    for (int k = 0; k < self->n_windows; k++) {
        unsigned long d = digit_of(bytes, len, (long)k * self->window, self->window);
        if (d)
            mulmod_into(out, self->table[k * row_len + (Py_ssize_t)d], self->modulus, t);
    }
    mpz_clear(t);
}

/* exponent as little-endian bytes; every bit must lie below c * n_windows */
static PyObject *FixedBase_pow(FixedBaseObject *self, PyObject *arg) {
    Py_buffer e;
    if (self->limbs == NULL && self->table == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "FixedBase is not initialised");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &e, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *bytes = (const unsigned char *)e.buf;
    long bit_length = 0;
    for (Py_ssize_t i = e.len - 1; i >= 0 && bit_length == 0; i--)
        for (int b = 7; b >= 0; b--)
            if ((bytes[i] >> b) & 1) {
                bit_length = 8L * (long)i + b + 1;
                break;
            }
    if (bit_length > (long)self->window * self->n_windows) {
        PyBuffer_Release(&e);
        PyErr_SetString(PyExc_ValueError, "FixedBase.pow: the exponent has more bits than the table");
        return NULL;
    }
    mpz_t acc;
    mpz_init(acc);
    int failed = 0;
    if (self->limbs != NULL)
        failed = pow_montgomery(self, acc, bytes, e.len);
    else
        pow_plain(self, acc, bytes, e.len);
    PyBuffer_Release(&e);
    PyObject *out = failed ? PyErr_NoMemory() : export_be(acc);
    mpz_clear(acc);
    return out;
}

static PyMethodDef FixedBase_methods[] = {
    {"pow", (PyCFunction)FixedBase_pow, METH_O, "pow(exponent_le_bytes) -> big-endian bytes of base^e mod N"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FixedBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vfl.secure._fastloops.FixedBase",
    .tp_basicsize = sizeof(FixedBaseObject),
    .tp_dealloc = (destructor)FixedBase_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "fixed-base windowed table: base^e mod N in ceil(bits / c) multiplications (Montgomery for odd N)",
    .tp_methods = FixedBase_methods,
    .tp_init = (initproc)FixedBase_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------------------ mulmod_repeat */
/* the unit cost of one multiplication for benchmarks/secure_products.py: count multiplications x <- x y mod m, by
 * GMP's mpz_mul + mpz_tdiv_r, or (montgomery=1, odd m, a and b below m) by the Montgomery product the buckets use,
 * which returns a b^count R^(-count) mod m */
static int montgomery_chain(mpz_t x, const mpz_t y, const mpz_t m, Py_ssize_t count) {
    Montgomery mo;
    if (montgomery_init(&mo, m) < 0)
        return -1;
    const mp_size_t n = mo.n;
    mp_limb_t *xs = PyMem_RawCalloc((size_t)(4 * n), sizeof(mp_limb_t)), *ys = xs + n, *t = xs + 2 * n;
    if (xs != NULL) {
        memcpy(xs, mpz_limbs_read(x), mpz_size(x) * sizeof(mp_limb_t));
        memcpy(ys, mpz_limbs_read(y), mpz_size(y) * sizeof(mp_limb_t));
        for (Py_ssize_t i = 0; i < count; i++)
            montmul(xs, xs, ys, t, &mo);
        mpz_t view;
        mpz_mod(x, mpz_roinit_n(view, xs, n), m);
    }
    PyMem_RawFree(xs);
    montgomery_clear(&mo);
    return xs == NULL ? -1 : 0;
}

static PyObject *mulmod_repeat(PyObject *module, PyObject *args) {
    Py_buffer a, b, mod;
    Py_ssize_t count;
    int montgomery = 0;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*y*y*n|p", &a, &b, &mod, &count, &montgomery))
        return NULL;
    PyObject *out = NULL;
    mpz_t x, y, m;
    mpz_inits(x, y, m, NULL);
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0");
    } else if (import_be(x, &a) == 0 && import_be(y, &b) == 0 && positive_modulus(m, &mod) == 0) {
        if (montgomery && (!mpz_odd_p(m) || mpz_cmp(x, m) >= 0 || mpz_cmp(y, m) >= 0)) {
            PyErr_SetString(PyExc_ValueError, "Montgomery needs an odd modulus and operands below it");
        } else {
            int failed = 0;
            Py_BEGIN_ALLOW_THREADS
            if (montgomery) {
                failed = montgomery_chain(x, y, m, count);
            } else {
                mpz_t t;
                mpz_init(t);
                for (Py_ssize_t i = 0; i < count; i++)
                    mulmod_into(x, y, m, t);
                mpz_clear(t);
            }
            Py_END_ALLOW_THREADS
            out = failed ? PyErr_NoMemory() : export_be(x);
        }
    }
    mpz_clears(x, y, m, NULL);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&mod);
    return out;
}

/* ------------------------------------------------------------------------------------------ crt_encrypt */
/* The key holder's short-exponent encryptions of one task, in one call (issue 34): for every i,
 *     rho_i = CRT(h^alpha_i mod p^2, h^alpha_i mod q^2) = r_p + p^2 ((r_q - r_p) (p^2)^(-1) mod q^2)
 *     c_i   = (1 + m_i n) rho_i mod n^2 = rho_i + n ((m_i rho_i) mod n)   (n m rho mod n^2 = n (m rho mod n)),
 * the same integers as fastmath.Encrypter.residue_from + encrypt_rows_task's (1 + m n) rho mod n^2, without a Python
 * object per step. tp, tq: FixedBase tables of h_s modulo p^2 and q^2 (odd moduli, Montgomery); alphas: count
 * exponents of alpha_len little-endian bytes; plains: count plaintexts of plain_len big-endian bytes, each < n;
 * out: count ciphertexts of width big-endian bytes. */
static int exponent_fits(const FixedBaseObject *self, const unsigned char *bytes, Py_ssize_t len) {
    for (Py_ssize_t i = len - 1; i >= 0; i--)
        for (int b = 7; b >= 0; b--)
            if ((bytes[i] >> b) & 1)
                return 8L * (long)i + b + 1 <= (long)self->window * self->n_windows;
    return 1;
}

#ifdef VFL_HAVE_IFMA
/* out[l] <- base^(alpha_l) mod m for eight exponents at once (issue 34): per window the table entries of the eight
 * digits (the entry of digit 0 is the Montgomery form of 1, so every lane multiplies every window: no branch on a
 * digit), converted to 52-bit digits and multiplied in the lanes; the lanes' product V R^W / R'^(W-1) (W windows,
 * below 2m) times simd_fix is the power. work: (5 nd + 2) vectors, 64-byte aligned; t: 2 n + 2 limbs. */
static void pow8_ifma(FixedBaseObject *self, mpz_t *out, const unsigned char *const *alphas, Py_ssize_t len,
                      uint64_t *work, uint64_t *digits, mp_limb_t *t) {
    const mp_size_t n = self->mo.n;
    const int nd = self->ifma.nd;
    const Py_ssize_t row_len = (Py_ssize_t)1 << self->window;
    uint64_t *X = work, *Y = X + (size_t)nd * IFMA_LANES, *A = Y + 2 * (size_t)nd * IFMA_LANES;
    for (int k = 0; k < self->n_windows; k++)
        for (int l = 0; l < IFMA_LANES; l++)
            prefetch_limbs(self->limbs + ((Py_ssize_t)k * row_len
                                          + (Py_ssize_t)digit_of(alphas[l], len, (long)k * self->window, self->window))
                                         * n, n);
    for (int k = 0; k < self->n_windows; k++) {
        uint64_t *dst = k == 0 ? X : Y;
        for (int l = 0; l < IFMA_LANES; l++) {
            unsigned long d = digit_of(alphas[l], len, (long)k * self->window, self->window);
            ifma_from_limbs(digits, self->limbs + ((Py_ssize_t)k * row_len + (Py_ssize_t)d) * n, n, nd);
            for (int j = 0; j < nd; j++)
                dst[j * IFMA_LANES + l] = digits[j];
        }
        if (k > 0)
            ifma_amm8(X, X, Y, &self->ifma, A);
    }
    for (int l = 0; l < IFMA_LANES; l++) {
        for (int j = 0; j < nd; j++)
            digits[j] = X[j * IFMA_LANES + l];
        mp_limb_t *v = mpz_limbs_write(out[l], n);
        ifma_to_limbs(v, digits, nd, self->mo.m, n, t);
        mpz_limbs_finish(out[l], n);
        mpz_mul(out[l], out[l], self->simd_fix);
        mpz_mod(out[l], out[l], self->modulus);
    }
}
#endif

/* rho + n (m rho mod n) mod n^2 for rho = CRT(rp, rq), written big-endian at dst (width bytes, zeroed) */
static void crt_finish(unsigned char *dst, Py_ssize_t width, const mpz_t rp, const mpz_t rq, const mpz_t m,
                       const mpz_t n, const mpz_t n2, const mpz_t inv, const FixedBaseObject *tp,
                       const FixedBaseObject *tq, mpz_t rho, mpz_t t) {
    mpz_sub(t, rq, rp);
    mpz_mul(t, t, inv);
    mpz_fdiv_r(t, t, tq->modulus);
    mpz_mul(t, t, tp->modulus);
    mpz_add(rho, rp, t);                 /* rho < n^2 */
    mpz_fdiv_r(t, rho, n);
    mpz_mul(t, t, m);
    mpz_fdiv_r(t, t, n);
    mpz_mul(t, t, n);
    mpz_add(rho, rho, t);                /* < 2 n^2 */
    if (mpz_cmp(rho, n2) >= 0)
        mpz_sub(rho, rho, n2);
    size_t len = mpz_sizeinbase(rho, 256);
    if (mpz_sgn(rho) != 0)
        mpz_export(dst + (width - (Py_ssize_t)len), NULL, 1, 1, 1, 0, rho);
}

#ifdef VFL_HAVE_IFMA
/* crt_encrypt's encryptions eight at a time (whole batches of eight; returns how many were done, the caller does the
 * rest one at a time): the same checks in the same order, the same integers. Without the GIL. */
static Py_ssize_t crt_encrypt_simd(FixedBaseObject *tp, FixedBaseObject *tq, const Py_buffer *alphas,
                                   Py_ssize_t alpha_len, const Py_buffer *plains, Py_ssize_t plain_len, const mpz_t n,
                                   const mpz_t n2, const mpz_t inv, unsigned char *dst, Py_ssize_t width,
                                   Py_ssize_t count, int *bad) {
    const int nd = tp->ifma.nd > tq->ifma.nd ? tp->ifma.nd : tq->ifma.nd;
    const mp_size_t nl = tp->mo.n > tq->mo.n ? tp->mo.n : tq->mo.n;
    uint64_t *work = aligned64((size_t)(5 * nd + 2) * IFMA_LANES * sizeof(uint64_t));
    uint64_t *digits = PyMem_RawMalloc((size_t)nd * sizeof(uint64_t));
    mp_limb_t *t = PyMem_RawMalloc((size_t)(2 * nl + 2) * sizeof(mp_limb_t));
    Py_ssize_t done = 0;
    mpz_t rp[IFMA_LANES], rq[IFMA_LANES], m[IFMA_LANES], rho, tmp;
    for (int l = 0; l < IFMA_LANES; l++)
        mpz_inits(rp[l], rq[l], m[l], NULL);
    mpz_inits(rho, tmp, NULL);
    if (work == NULL || digits == NULL || t == NULL) {
        *bad = 3;
        goto out;
    }
    for (; done + IFMA_LANES <= count; done += IFMA_LANES) {
        const unsigned char *a[IFMA_LANES];
        for (int l = 0; l < IFMA_LANES; l++) {
            Py_ssize_t i = done + l;
            a[l] = (const unsigned char *)alphas->buf + i * alpha_len;
            if (!exponent_fits(tp, a[l], alpha_len) || !exponent_fits(tq, a[l], alpha_len)) {
                *bad = 1;
                goto out;
            }
            mpz_import(m[l], (size_t)plain_len, 1, 1, 1, 0, (const unsigned char *)plains->buf + i * plain_len);
            if (mpz_cmp(m[l], n) >= 0) {
                *bad = 2;
                goto out;
            }
        }
        pow8_ifma(tp, rp, a, alpha_len, work, digits, t);
        pow8_ifma(tq, rq, a, alpha_len, work, digits, t);
        for (int l = 0; l < IFMA_LANES; l++)
            crt_finish(dst + (done + l) * width, width, rp[l], rq[l], m[l], n, n2, inv, tp, tq, rho, tmp);
    }
out:
    for (int l = 0; l < IFMA_LANES; l++)
        mpz_clears(rp[l], rq[l], m[l], NULL);
    mpz_clears(rho, tmp, NULL);
    free(work);
    PyMem_RawFree(digits);
    PyMem_RawFree(t);
    return done;
}
#endif

static PyObject *crt_encrypt(PyObject *module, PyObject *args) {
    FixedBaseObject *tp, *tq;
    Py_buffer alphas, plains, nbuf, invbuf;
    Py_ssize_t alpha_len, plain_len, width;
    (void)module;
    if (!PyArg_ParseTuple(args, "O!O!y*ny*ny*y*n", &FixedBaseType, &tp, &FixedBaseType, &tq, &alphas, &alpha_len,
                          &plains, &plain_len, &nbuf, &invbuf, &width))
        return NULL;
    PyObject *out = NULL;
    mpz_t n, n2, inv, m, rp, rq, rho, t;
    mpz_inits(n, n2, inv, m, rp, rq, rho, t, NULL);
    Py_ssize_t count = alpha_len > 0 ? alphas.len / alpha_len : -1;
    if (tp->limbs == NULL || tq->limbs == NULL || alpha_len <= 0 || plain_len <= 0 || width <= 0
        || alphas.len != count * alpha_len || plains.len != count * plain_len) {
        PyErr_SetString(PyExc_ValueError, "crt_encrypt: needs two odd-modulus tables and count exponents/plaintexts");
        goto done;
    }
    if (positive_modulus(n, &nbuf) < 0 || import_be(inv, &invbuf) < 0)
        goto done;
    mpz_mul(n2, n, n);
    if (mpz_sizeinbase(n2, 256) > (size_t)width) {
        PyErr_SetString(PyExc_ValueError, "crt_encrypt: width is below the bytes of n^2");
        goto done;
    }
    if (count > 0 && width > PY_SSIZE_T_MAX / count) {
        PyErr_SetString(PyExc_ValueError, "crt_encrypt: count x width overflows");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, count * width);
    if (out == NULL)
        goto done;
    unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(out);
    memset(dst, 0, (size_t)(count * width));
    /* the whole task without the GIL (only GMP, the tables and these buffers, which the arguments keep alive and
     * which are immutable bytes): with --workers 1 it runs inline on the party's worker thread, and the party's
     * heartbeat thread must keep running meanwhile */
    int bad = 0;   /* 1: exponent too long, 2: plaintext not below n, 3: out of memory */
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t start = 0;
#ifdef VFL_HAVE_IFMA
    if (tp->simd && tq->simd && count >= IFMA_LANES)
        start = crt_encrypt_simd(tp, tq, &alphas, alpha_len, &plains, plain_len, n, n2, inv, dst, width, count, &bad);
#endif
    for (Py_ssize_t i = start; i < count && !bad; i++) {
        const unsigned char *a = (const unsigned char *)alphas.buf + i * alpha_len;
        if (!exponent_fits(tp, a, alpha_len) || !exponent_fits(tq, a, alpha_len)) {
            bad = 1;
            break;
        }
        mpz_import(m, (size_t)plain_len, 1, 1, 1, 0, (const unsigned char *)plains.buf + i * plain_len);
        if (mpz_cmp(m, n) >= 0) {
            bad = 2;
            break;
        }
        if (pow_montgomery(tp, rp, a, alpha_len) < 0 || pow_montgomery(tq, rq, a, alpha_len) < 0) {
            bad = 3;
            break;
        }
        crt_finish(dst + i * width, width, rp, rq, m, n, n2, inv, tp, tq, rho, t);
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        if (bad == 1)
            PyErr_SetString(PyExc_ValueError, "crt_encrypt: an exponent has more bits than the tables");
        else if (bad == 2)
            PyErr_SetString(PyExc_ValueError, "crt_encrypt: a plaintext is not below n");
        else
            PyErr_NoMemory();
        Py_CLEAR(out);
    }
done:
    mpz_clears(n, n2, inv, m, rp, rq, rho, t, NULL);
    PyBuffer_Release(&alphas);
    PyBuffer_Release(&plains);
    PyBuffer_Release(&nbuf);
    PyBuffer_Release(&invbuf);
    return out;
}

static PyMethodDef module_methods[] = {
    {"crt_encrypt", crt_encrypt, METH_VARARGS,
     "crt_encrypt(table_p2, table_q2, alphas_le, alpha_len, plaintexts_be, plain_len, n, inv_p2_mod_q2, width) -> "
     "count fixed-width big-endian (1 + m n) CRT(h^alpha) mod n^2"},
    {"mulmod_repeat", mulmod_repeat, METH_VARARGS,
     "mulmod_repeat(a, b, modulus, count, montgomery=False) -> a b^count mod N (a b^count R^-count for Montgomery)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastloops_module = {
    PyModuleDef_HEAD_INIT, "_fastloops",
    "Pippenger buckets and fixed-base tables on GMP (optional; vfl.secure.fastmath has the Python fallback)",
    -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastloops(void) {
    check_redc_n();
    if (PyType_Ready(&BucketsType) < 0 || PyType_Ready(&FixedBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&fastloops_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Buckets", (PyObject *)&BucketsType) < 0
        || PyModule_AddObjectRef(m, "FixedBase", (PyObject *)&FixedBaseType) < 0
        || PyModule_AddStringConstant(m, "GMP_VERSION", gmp_version) < 0
        || PyModule_AddIntConstant(m, "GMP_REDC_N", redc_n_trusted) < 0
        || PyModule_AddIntConstant(m, "IFMA", IFMA_PRESENT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
