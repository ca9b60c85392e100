/* vfl.secure._fastloops: eight Montgomery products at once on AVX-512 IFMA (issue 34), included by _fastloops.c.
 *
 * The responder's buckets multiply one base into 2 d_b ceil(d_a/s) different buckets per row (one per window, column
 * and group): independent products modulo the same n^2. Eight of them run in the eight 64-bit lanes of a 512-bit
 * register, each lane an ordinary word-serial Montgomery product in radix 2^52 (vpmadd52luq/vpmadd52huq give the low
 * and high 52 bits of a 52 x 52-bit product added to a 64-bit lane): the "almost Montgomery multiplication" of
 * Gueron and Krasnov, "Software implementation of modular exponentiation, using advanced vector instructions
 * architectures", WAIFI 2012 (and Drucker and Gueron, "Fast modular squaring with AVX512IFMA", ITNG 2019), with
 * the lanes holding eight independent products as in Intel's crypto_mb instead of the digits of one.
 *
 * Numbers are nd digits of 52 bits, least significant first, nd chosen so that 4 m < R' = 2^(52 nd). For inputs
 * below 2m the product REDC'(x y) = x y / R' mod m is returned below (4 m^2 + R' m) / R' < 2m without a final
 * subtraction, so a chain of products stays below 2m and no step branches on a value; a bucket is reduced below m
 * once, when it is combined. Lane l of vector j (8 uint64 at 64-byte alignment) holds digit j of operand l.
 * Only compiled for x86-64 GCC/Clang, used only where the CPU reports AVX-512F and IFMA (ifma_available). */
#ifndef VFL_IFMA52_H
#define VFL_IFMA52_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VFL_HAVE_IFMA 1
#include <immintrin.h>

#define IFMA_MASK52 ((uint64_t)0xFFFFFFFFFFFFF)
#define IFMA_LANES 8
#define IFMA_MAX_DIGITS 1000

typedef struct {
    int nd;            /* digits per number */
    uint64_t k0;       /* -1/m mod 2^52 */
    uint64_t *m8;      /* nd vectors: digit j of m in every lane (64-byte aligned) */
    uint64_t *work;    /* 3 nd + 2 nd + 2 vectors: X, Y, R and the accumulator (64-byte aligned) */
} Ifma;

static int ifma_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512ifma");
}

static void *aligned64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return NULL;
    memset(p, 0, bytes ? bytes : 64);
    return p;
}

/* digits needed so that 4 m < 2^(52 nd) for a modulus of `bits` bits */
static int ifma_digits(size_t bits) {
    return (int)((bits + 2 + 51) / 52);
}

/* the nd digits of the n-limb number x (x < 2^(52 nd)) */
static void ifma_from_limbs(uint64_t *d, const mp_limb_t *x, mp_size_t n, int nd) {
    for (int k = 0; k < nd; k++) {
        size_t bit = (size_t)52 * (size_t)k, w = bit / 64, s = bit % 64;
        uint64_t v = 0;
        if ((mp_size_t)w < n) {
            v = x[w] >> s;
            if (s > 12 && (mp_size_t)(w + 1) < n)
                v |= x[w + 1] << (64 - s);
        }
        d[k] = v & IFMA_MASK52;
    }
}

/* x (n limbs) <- the number of nd digits d reduced below m, for d < 2m (one subtraction, selected by a mask) */
static void ifma_to_limbs(mp_limb_t *x, const uint64_t *d, int nd, const mp_limb_t *m, mp_size_t n, mp_limb_t *t) {
    /* t: 2 (n + 1) limbs of scratch; the value may have one bit more than m */
    mp_limb_t *v = t, *u = t + n + 1;
    memset(v, 0, (size_t)(n + 1) * sizeof(mp_limb_t));
    for (int k = 0; k < nd; k++) {
        size_t bit = (size_t)52 * (size_t)k, w = bit / 64, s = bit % 64;
        if ((mp_size_t)w <= n)
            v[w] |= d[k] << s;
        if (s > 12 && (mp_size_t)(w + 1) <= n)
            v[w + 1] |= d[k] >> (64 - s);
    }
    mp_limb_t borrow = mpn_sub_n(u, v, m, n);
    borrow = (mp_limb_t)(v[n] < borrow);          /* v - m < 0 exactly when the n + 1-limb subtraction borrows */
    mp_limb_t keep = (mp_limb_t)0 - borrow;        /* all ones: v < m, keep v; zero: take v - m */
    for (mp_size_t i = 0; i < n; i++)
        x[i] = (v[i] & keep) | (u[i] & ~keep);
}

static void ifma_clear(Ifma *f) {
    free(f->m8);
    free(f->work);
    f->m8 = f->work = NULL;
}

/* 0, or -1 when out of memory (everything freed again) */
static int ifma_init(Ifma *f, const mp_limb_t *m, mp_size_t n, size_t bits) {
    f->nd = ifma_digits(bits);
    f->m8 = aligned64((size_t)f->nd * IFMA_LANES * sizeof(uint64_t));
    f->work = aligned64((size_t)(5 * f->nd + 2) * IFMA_LANES * sizeof(uint64_t));
    uint64_t *digits = PyMem_RawMalloc((size_t)f->nd * sizeof(uint64_t));
    if (f->m8 == NULL || f->work == NULL || digits == NULL) {
        PyMem_RawFree(digits);
        ifma_clear(f);
        return -1;
    }
    ifma_from_limbs(digits, m, n, f->nd);
    for (int j = 0; j < f->nd; j++)
        for (int l = 0; l < IFMA_LANES; l++)
            f->m8[j * IFMA_LANES + l] = digits[j];
    uint64_t inv = m[0];   /* Newton: 1/m mod 2^64 */
    for (int i = 0; i < 5; i++)
        inv *= 2 - m[0] * inv;
    f->k0 = (0 - inv) & IFMA_MASK52;
    PyMem_RawFree(digits);
    return 0;
}

/* R <- REDC'(X Y) lane by lane (R may be X or Y); A: 2 nd + 2 vectors of scratch */
__attribute__((target("avx512f,avx512ifma")))
static void ifma_amm8(uint64_t *R, const uint64_t *X, const uint64_t *Y, const Ifma *f, uint64_t *A) {
    const int nd = f->nd;
    const __m512i z = _mm512_setzero_si512(), k0 = _mm512_set1_epi64((long long)f->k0);
    const __m512i *x = (const __m512i *)X, *y = (const __m512i *)Y, *m = (const __m512i *)f->m8;
    __m512i *a = (__m512i *)A;
    for (int j = 0; j < 2 * nd + 2; j++)
        _mm512_store_si512(a + j, z);
    for (int i = 0; i < nd; i++) {
        const __m512i xi = _mm512_load_si512(x + i);
        __m512i yj = _mm512_load_si512(y), mj = _mm512_load_si512(m);
        /* q makes the lowest digit vanish mod 2^52: q = (a_i + lo(x_i y_0)) k0 mod 2^52 */
        __m512i t0 = _mm512_madd52lo_epu64(_mm512_load_si512(a + i), xi, yj);
        const __m512i q = _mm512_madd52lo_epu64(z, t0, k0);
        t0 = _mm512_madd52lo_epu64(t0, q, mj);
        __m512i hi = _mm512_madd52hi_epu64(_mm512_madd52hi_epu64(_mm512_load_si512(a + i + 1), xi, yj), q, mj);
        hi = _mm512_add_epi64(hi, _mm512_srli_epi64(t0, 52));
        for (int j = 1; j < nd; j++) {
            yj = _mm512_load_si512(y + j);
            mj = _mm512_load_si512(m + j);
            __m512i lo = _mm512_madd52lo_epu64(_mm512_madd52lo_epu64(hi, xi, yj), q, mj);
            _mm512_store_si512(a + i + j, lo);
            hi = _mm512_madd52hi_epu64(_mm512_madd52hi_epu64(_mm512_load_si512(a + i + j + 1), xi, yj), q, mj);
        }
        _mm512_store_si512(a + i + nd, hi);
    }
    /* every digit sum stayed below (nd + 1) 2^54 + 2^52 < 2^64 (nd <= IFMA_MAX_DIGITS); now carry into 52-bit digits */
    const __m512i mask = _mm512_set1_epi64((long long)IFMA_MASK52);
    __m512i carry = z;
    for (int j = 0; j < nd; j++) {
        __m512i v = _mm512_add_epi64(_mm512_load_si512(a + nd + j), carry);
        carry = _mm512_srli_epi64(v, 52);
        _mm512_store_si512((__m512i *)R + j, _mm512_and_si512(v, mask));
    }
}

#endif /* x86-64 */
#endif /* VFL_IFMA52_H */
