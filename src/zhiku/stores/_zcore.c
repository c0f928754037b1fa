/* zhiku's compiled search core: the CPU part of a hybrid z-score search after the dense product, in one call.
 *
 * Inputs, in rowid space: the BM25 snapshot's scored postings of the query terms (rows, float64 scores, in query
 * order), the exact dense product (float32 by file row: numpy's einsum, computed by the caller exactly as the numpy
 * path computes it), which rows are live, and each rowid's chunk id and the rank of that id (ties).
 *
 * One call gives what the numpy path gives, float for float:
 *   - BM25: each row's score summed term by term in query order from 0.0 (what np.bincount does);
 *   - the top `kb` BM25 rows and the top `kd` dense rows, by score then chunk id (stores/_sqlite_search._ranked);
 *   - with `fuse`: the exact cosines of BM25 candidates outside the dense top (retrieval.fill_dense), z-score
 *     fusion as retrieval/fusion.py's zscore_fusion (means and variances summed in ranking order as Python's sum()
 *     does, `** 2` and `** 0.5` through libm's pow, `0.0 + wb * zb + wd * zd`) and the best `keep` fused by score
 *     then chunk id.
 * Plain C99 (no intrinsics), built with -ffp-contract=off (MSVC /fp:precise): every float operation is the one
 * Python or numpy does, in the same order. The GIL is released while it computes. Each call returns its own
 * phase times (seconds), for the trace's stages.
 *
 * hybrid(scores, live, row_rowid, rowid_row, idrank, names, terms, kb, kd, keep, wb, wd, fill, fuse[, allowed]) ->
 *   (bm25_ids, bm25_scores, bm25_rowids, dense_ids, dense_scores, dense_rowids, fused | None, filled,
 *    bm25_s, dense_s, fusion_s); the rowids None when fused here (only a fusion made in Python looks them up)
 * fused: a list of (chunk_id, score, bm25_rank | None, bm25_score | None, dense_rank | None, dense_score | None).
 * Filters: `live` holds only the rows they allow, `allowed` (by rowid) the rows BM25 may rank.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#include <windows.h>
static double now(void) {
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
}
#else
#include <time.h>
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif

/* scratch kept per thread, grown as needed (the sums all zeros and the slots all -1 between calls), freed when its
 * thread ends (a pthread key's or a fiber-local slot's destructor: MCP tools run in worker threads that exit when
 * idle, and each thread's scratch is ~12 bytes per rowid) */
typedef struct {
    double *sum; /* BM25 score by rowid */
    size_t sum_n;
    int32_t *slot; /* fusion key by rowid, -1 none */
    size_t slot_n;
    int64_t *touched; /* (no invariant: written before read) */
    size_t touched_n;
    double *all;
    size_t all_n;
} Scratch;

static long scratches = 0; /* threads' scratch alive (``scratches()``, for tests) */
#if defined(_MSC_VER)
#define ZCOUNT(d) InterlockedExchangeAdd(&scratches, (d))
#else
#define ZCOUNT(d) __atomic_fetch_add(&scratches, (d), __ATOMIC_SEQ_CST)
#endif

static void scratch_free(void *p) {
    Scratch *s = p;
    if (!s) return;
    free(s->sum);
    free(s->slot);
    free(s->touched);
    free(s->all);
    free(s);
    ZCOUNT(-1);
}

#if defined(_WIN32)
static DWORD scratch_key = FLS_OUT_OF_INDEXES;
static void WINAPI scratch_free_fls(void *p) { scratch_free(p); }
static int scratch_key_make(void) {
    if (scratch_key == FLS_OUT_OF_INDEXES) scratch_key = FlsAlloc(scratch_free_fls);
    return scratch_key == FLS_OUT_OF_INDEXES ? -1 : 0;
}
#define SCRATCH_GET() ((Scratch *)FlsGetValue(scratch_key))
#define SCRATCH_SET(s) (FlsSetValue(scratch_key, (s)) ? 0 : -1)
#else
#include <pthread.h>
static pthread_key_t scratch_key;
static int scratch_key_made = 0;
static int scratch_key_make(void) {
    if (!scratch_key_made && pthread_key_create(&scratch_key, scratch_free) == 0) scratch_key_made = 1;
    return scratch_key_made ? 0 : -1;
}
#define SCRATCH_GET() ((Scratch *)pthread_getspecific(scratch_key))
#define SCRATCH_SET(s) (pthread_setspecific(scratch_key, (s)) ? -1 : 0)
#endif

/* this thread's scratch (made on its first call), NULL when out of memory */
static Scratch *scratch(void) {
    Scratch *s = SCRATCH_GET();
    if (s) return s;
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (SCRATCH_SET(s)) {
        free(s);
        return NULL;
    }
    ZCOUNT(1);
    return s;
}

/* a hint to read ahead (the sums by rowid are out of the cache after numpy's product streamed the matrix) */
#if defined(__GNUC__) || defined(__clang__)
#define ZPREFETCH(p) __builtin_prefetch((p), 1, 3)
#else
#define ZPREFETCH(p) ((void)0)
#endif

static int grow(void **p, size_t *have, size_t want, size_t each, int byte) {
    if (*have >= want) return 0;
    void *q = realloc(*p, want * each);
    if (!q) return -1;
    memset((char *)q + *have * each, byte, (want - *have) * each);
    *p = q;
    *have = want;
    return 0;
}

typedef struct {
    double s;
    int32_t id;    /* the rank of its chunk id: ties */
    int64_t rowid; /* (the fused heap: the key's index) */
} Cand;

static int better(const Cand *a, const Cand *b) {
    if (a->s != b->s) return a->s > b->s;
    return a->id < b->id;
}

/* at most k candidates, the worst at the root */
typedef struct {
    Cand *h;
    int n, k;
} Heap;

static void sift_down(Heap *hp, int i) {
    Cand *h = hp->h;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < hp->n && better(&h[w], &h[l])) w = l;
        if (r < hp->n && better(&h[w], &h[r])) w = r;
        if (w == i) return;
        Cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void offer(Heap *hp, Cand c) {
    if (hp->n < hp->k) {
        int i = hp->n++;
        hp->h[i] = c;
        while (i > 0) {
            int p = (i - 1) / 2;
            if (!better(&hp->h[p], &hp->h[i])) return;
            Cand t = hp->h[i];
            hp->h[i] = hp->h[p];
            hp->h[p] = t;
            i = p;
        }
    } else if (hp->k > 0 && better(&c, &hp->h[0])) {
        hp->h[0] = c;
        sift_down(hp, 0);
    }
}

/* best first, in place (heapsort: the root, the worst, goes to the end) */
static void sort_heap(Heap *hp) {
    int n = hp->n;
    while (hp->n > 1) {
        Cand t = hp->h[0];
        hp->h[0] = hp->h[hp->n - 1];
        hp->h[hp->n - 1] = t;
        hp->n--;
        sift_down(hp, 0);
    }
    hp->n = n;
}

/* the k-th largest of a[0 … n - 1] (1 <= k <= n; a is reordered): quickselect. A top-k heap offered only the
 * candidates at or above it takes k insertions instead of k + k ln(n / k) replacements. One body for doubles
 * (scores) and int32s (int8 screening's products). */
#define DEFINE_KTH_LARGEST(NAME, T)                                                                               \
    static T NAME(T *a, Py_ssize_t n, Py_ssize_t k) {                                                            \
        Py_ssize_t lo = 0, hi = n - 1, want = k - 1;                                                             \
        while (lo < hi) {                                                                                        \
            T x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi]; /* the median of three as the pivot */            \
            T pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));                     \
            Py_ssize_t i = lo, j = hi;                                                                           \
            while (i <= j) {                                                                                     \
                while (a[i] > pivot) i++;                                                                        \
                while (a[j] < pivot) j--;                                                                        \
                if (i <= j) {                                                                                    \
                    T t = a[i];                                                                                  \
                    a[i++] = a[j];                                                                               \
                    a[j--] = t;                                                                                  \
                }                                                                                                \
            }                                                                                                    \
            if (want <= j)                                                                                       \
                hi = j;                                                                                          \
            else if (want >= i)                                                                                  \
                lo = i;                                                                                          \
            else                                                                                                 \
                return a[want];                                                                                  \
        }                                                                                                        \
        return a[want];                                                                                          \
    }

DEFINE_KTH_LARGEST(kth_largest, double)
DEFINE_KTH_LARGEST(kth_largest_i32, int32_t)

/* Python's ``x ** y`` for floats is libm's pow (not x * x for y = 2: 0.08 % of floats differ in the last bit);
 * called through a pointer so that the compiler does not rewrite pow(x, 2.0) */
static double (*volatile py_pow)(double, double) = pow;

/* Python's sum() over floats from the int 0: plain adds before 3.12, Neumaier's compensated sum since */
typedef struct {
    double s, c;
    int n;
} PySum;

static void sum_add(PySum *a, double x) {
    if (a->n++ == 0) {
        a->s = 0.0 + x; /* (0 + x: the int start) */
        a->c = 0.0;
        return;
    }
#if PY_VERSION_HEX >= 0x030C0000
    double t = a->s + x;
    if (fabs(a->s) >= fabs(x))
        a->c += (a->s - t) + x;
    else
        a->c += (x - t) + a->s;
    a->s = t;
#else
    a->s = a->s + x;
#endif
}

static double sum_of(const PySum *a) {
#if PY_VERSION_HEX >= 0x030C0000
    if (a->c != 0.0 && isfinite(a->c)) return a->s + a->c;
#endif
    return a->n ? a->s : 0.0;
}


/* ------------------------------------------------------------------------ dense kernels (AVX2 + FMA, x86-64) */
/* Used only where the CPU has AVX2 and FMA (``simd()``; the Python side uses numpy's einsum elsewhere), for every
 * dense product of a search: one fixed order of operations, so a row's cosine is the same float on every such
 * CPU (Intel or AMD), wherever the row lies (a whole matrix or rows gathered from it).
 * A row's dot product: element e is fused-multiply-added into lane e mod 32 (four 8-lane accumulators, in
 * increasing e; a last partial block of 8 reads zeros past the end), then acc0 + acc1, acc2 + acc3, their sum,
 * and the 8 lanes halved three times (l + l + 4, then + 2, then + 1).
 * int8 codes (``_vector_files.quantise``, in [-127, 127]): exact int32 dot products. */
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define ZSIMD 1
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 s) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)); /* l + (l + 4) */
    __m128 two = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));                             /* l + (l + 2) */
    __m128 one = _mm_add_ss(two, _mm_shuffle_ps(two, two, 1));                      /* 0 + 1 */
    return _mm_cvtss_f32(one);
}

/* out[i] = matrix row (rows ? rows[i] : i) . q, for i < n */
__attribute__((target("avx2,fma"))) static void dots_avx2(const float *m, Py_ssize_t dim, const int64_t *rows,
                                                          Py_ssize_t n, const float *q, float *out) {
    Py_ssize_t full = dim / 32 * 32, blocks8 = (dim - full) / 8, rest = dim % 8;
    int32_t lanes[8];
    for (int l = 0; l < 8; l++) lanes[l] = l < rest ? -1 : 0;
    __m256i mask = _mm256_loadu_si256((const __m256i *)lanes);
    for (Py_ssize_t i = 0; i < n; i++) {
        const float *r = m + (rows ? rows[i] : i) * dim;
        if (rows && i + 1 < n) {
            const char *next = (const char *)(m + rows[i + 1] * dim);
            for (Py_ssize_t b = 0; b < dim * 4; b += 64) _mm_prefetch(next + b, _MM_HINT_T0);
        }
        __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        Py_ssize_t e = 0;
        for (; e < full; e += 32) {
            a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(r + e), _mm256_loadu_ps(q + e), a[0]);
            a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(r + e + 8), _mm256_loadu_ps(q + e + 8), a[1]);
            a[2] = _mm256_fmadd_ps(_mm256_loadu_ps(r + e + 16), _mm256_loadu_ps(q + e + 16), a[2]);
            a[3] = _mm256_fmadd_ps(_mm256_loadu_ps(r + e + 24), _mm256_loadu_ps(q + e + 24), a[3]);
        }
        for (Py_ssize_t b = 0; b < blocks8; b++, e += 8)
            a[b] = _mm256_fmadd_ps(_mm256_loadu_ps(r + e), _mm256_loadu_ps(q + e), a[b]);
        if (rest)
            a[blocks8] = _mm256_fmadd_ps(_mm256_maskload_ps(r + e, mask), _mm256_maskload_ps(q + e, mask), a[blocks8]);
        out[i] = hsum8(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
    }
}

/* one row's int8 dot product with the query code: |q| (unsigned) times c with q's sign (pairs of products, at most
 * 2 x 127 x 127, fit an int16), summed in int32 */
__attribute__((target("avx2"))) static inline int32_t i8dot_row(const int8_t *c, const int8_t *qc, const __m256i *qv,
                                                               const __m256i *qa, Py_ssize_t blocks, Py_ssize_t dim) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    for (Py_ssize_t b = 0; b < blocks; b++) {
        __m256i cv = _mm256_loadu_si256((const __m256i *)(c + 32 * b));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(qa[b], _mm256_sign_epi8(cv, qv[b])), ones));
    }
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    int32_t sum = _mm_cvtsi128_si32(s);
    for (Py_ssize_t e = 32 * blocks; e < dim; e++) sum += (int32_t)qc[e] * (int32_t)c[e];
    return sum;
}

/* out[i] = codes row i . qc (int32, exact) for the rows with live[i], INT32_MIN for the others; qv, qa: scratch for
 * the query's blocks and their absolute values (dim / 32 each) */
__attribute__((target("avx2"))) static void i8dots_avx2(const int8_t *codes, Py_ssize_t dim, Py_ssize_t n,
                                                       const int8_t *qc, const uint8_t *live, int32_t *out,
                                                       __m256i *qv, __m256i *qa) {
    Py_ssize_t blocks = dim / 32;
    for (Py_ssize_t b = 0; b < blocks; b++) {
        qv[b] = _mm256_loadu_si256((const __m256i *)(qc + 32 * b));
        qa[b] = _mm256_sign_epi8(qv[b], qv[b]);
    }
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = live[i] ? i8dot_row(codes + i * dim, qc, qv, qa, blocks, dim) : INT32_MIN;
}

static int simd_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return ok;
}
#else
#define ZSIMD 0
static int simd_ok(void) { return 0; }
static void dots_avx2(const float *m, Py_ssize_t dim, const int64_t *rows, Py_ssize_t n, const float *q, float *out) {
    (void)m, (void)dim, (void)rows, (void)n, (void)q, (void)out;
}
typedef struct {
    char b[32];
} __m256i; /* (never used here: the scratch's type) */
static void i8dots_avx2(const int8_t *codes, Py_ssize_t dim, Py_ssize_t n, const int8_t *qc, const uint8_t *live,
                        int32_t *out, __m256i *qv, __m256i *qa) {
    (void)codes, (void)dim, (void)n, (void)qc, (void)live, (void)out, (void)qv, (void)qa;
}
#endif

typedef struct {
    /* in */
    const float *scores;       /* the dense product by file row */
    const uint8_t *live;       /* by file row */
    const int64_t *row_rowid;  /* by file row */
    const int64_t *rowid_row;  /* by rowid (-1: none) */
    const int32_t *idrank;     /* by rowid */
    const uint8_t *allowed;    /* by rowid: the rows BM25 may rank (filters), NULL: every row */
    const float *matrix, *unit; /* the rows and the query (dots_avx2), when `scores` holds only a screening's rows
                                 * (-inf elsewhere): the fill computes the others it needs; NULL: never */
    Py_ssize_t dim;
    Py_ssize_t nrows, top;
    int nterms;
    const int64_t **t_rows;
    const double **t_w;
    Py_ssize_t *t_n;
    int kb, kd, keep, fill, fuse;
    double wb, wd;
    /* out */
    Cand *bm25, *dense, *fused;
    int nb, nd, nf, filled;
    int64_t *keys;      /* fusion keys: BM25's candidates, then the dense ones BM25 did not find */
    double *zb, *zd;    /* by key */
    int32_t *dpos;      /* by key: its dense position, -1 none */
    int8_t *has_fill;   /* by BM25 position */
    double *fill_score; /* by BM25 position */
    double secs[3];
    int bad; /* a row or rowid out of range */
    Scratch *sc; /* this thread's */
} Job;

/* the top kb of the touched rows' sums, offered only those at or above `floor` (all are positive); how many
 * reached it */
static Py_ssize_t bm25_pass(Job *j, const double *sc, const int64_t *touched, Py_ssize_t nt, double floor) {
    Heap h = {j->bm25, 0, j->kb};
    Py_ssize_t above = 0;
    for (Py_ssize_t i = 0; i < nt; i++) {
        if (i + 16 < nt) ZPREFETCH(&sc[touched[i + 16]]);
        int64_t r = touched[i];
        double s = sc[r];
        if (s <= 0.0 || s < floor || (j->allowed && !j->allowed[r])) continue;
        above++;
        if (h.n < h.k || s >= h.h[0].s) offer(&h, (Cand){s, j->idrank[r], r});
    }
    sort_heap(&h);
    j->nb = h.n;
    return above;
}

static int bm25_top(Job *j) {
    Scratch *x = j->sc;
    if (grow((void **)&x->sum, &x->sum_n, (size_t)j->top + 1, sizeof(double), 0)) return -1;
    double *sc = x->sum;
    Py_ssize_t total = 0;
    for (int t = 0; t < j->nterms; t++) total += j->t_n[t];
    if (grow((void **)&x->touched, &x->touched_n, (size_t)total + 1, sizeof(int64_t), 0)) return -1;
    int64_t *touched = x->touched;
    Py_ssize_t nt = 0;
    for (int t = 0; t < j->nterms && !j->bad; t++) {
        const int64_t *rows = j->t_rows[t];
        const double *w = j->t_w[t];
        for (Py_ssize_t i = 0; i < j->t_n[t]; i++) {
            int64_t r = rows[i];
            if (i + 16 < j->t_n[t] && (uint64_t)rows[i + 16] <= (uint64_t)j->top) ZPREFETCH(&sc[rows[i + 16]]);
            if (r < 0 || r > j->top) {
                j->bad = 1;
                break;
            }
            double before = sc[r];
            touched[nt] = r; /* kept when new (no branch: which rows are new is unpredictable) */
            nt += before == 0.0;
            sc[r] = before + w[i];
        }
    }
    /* a floor below the kb-th best sum from a sample of the rows (as dense_top), then every sum back to 0 */
    double floor = 0.0;
    Py_ssize_t step = j->kb > 0 ? nt / (4 * (Py_ssize_t)j->kb) : 0;
    if (step >= 2 && !grow((void **)&x->all, &x->all_n, (size_t)(nt / step + 1), sizeof(double), 0)) {
        Py_ssize_t m = 0;
        for (Py_ssize_t i = 0; i < nt; i += step) x->all[m++] = sc[touched[i]];
        Py_ssize_t rank = 2 * (Py_ssize_t)j->kb * m / nt + 1;
        if (m > rank) floor = kth_largest(x->all, m, rank);
    }
    if (bm25_pass(j, sc, touched, nt, floor) < j->kb && floor > 0.0) bm25_pass(j, sc, touched, nt, 0.0);
    for (Py_ssize_t i = 0; i < nt; i++) sc[touched[i]] = 0.0;
    return 0;
}

/* the top kd live rows, offered only those at or above `floor`; how many live rows were at or above it */
static Py_ssize_t dense_pass(Job *j, double floor) {
    Heap h = {j->dense, 0, j->kd};
    Py_ssize_t above = 0;
    for (Py_ssize_t i = 0; i < j->nrows; i++) {
        double s = (double)j->scores[i];
        if (!j->live[i] || s < floor || s == -INFINITY) continue; /* (-inf: not screened) */
        above++;
        if (h.n < h.k || s >= h.h[0].s) {
            int64_t r = j->row_rowid[i];
            if (r < 0 || r > j->top) {
                j->bad = 1;
                return above;
            }
            offer(&h, (Cand){s, j->idrank[r], r});
        }
    }
    sort_heap(&h);
    j->nd = h.n;
    return above;
}

/* A floor below the kd-th best score, from a sample of every step-th row (about 4 kd of them: it reads each
 * cache line of the scores once, no copy of them all): the sample's 2 kd m / n-th best. Exact whatever the
 * sample: when fewer than kd live rows reach the floor, the pass is made again without one. */
static int dense_top(Job *j) {
    double floor = -INFINITY;
    /* (a screened search's scores are finite at its few screened rows only: one pass, no floor) */
    Py_ssize_t step = j->kd > 0 && !j->matrix ? j->nrows / (4 * (Py_ssize_t)j->kd) : 0;
    if (step >= 2) {
        Scratch *x = j->sc;
        if (grow((void **)&x->all, &x->all_n, (size_t)(j->nrows / step + 1), sizeof(double), 0)) return -1;
        Py_ssize_t m = 0;
        for (Py_ssize_t i = 0; i < j->nrows; i += step)
            if (j->live[i]) x->all[m++] = (double)j->scores[i];
        Py_ssize_t rank = 2 * (Py_ssize_t)j->kd * m / j->nrows + 1;
        if (m > rank) floor = kth_largest(x->all, m, rank);
    }
    if (dense_pass(j, floor) < j->kd && floor > -INFINITY && !j->bad) dense_pass(j, -INFINITY);
    return 0;
}

/* one channel's z-scores by key, as zscore_fusion: the candidates' own, the others its lowest (or their filled
 * exact score, standardised alike) */
static void zscores(Job *j, const Cand *c, int n, double *z, int nk, int filling) {
    if (n == 0) {
        for (int k = 0; k < nk; k++) z[k] = 0.0;
        return;
    }
    PySum a = {0.0, 0.0, 0};
    for (int i = 0; i < n; i++) sum_add(&a, c[i].s);
    double mean = sum_of(&a) / (double)n;
    PySum q = {0.0, 0.0, 0};
    for (int i = 0; i < n; i++) sum_add(&q, py_pow(c[i].s - mean, 2.0));
    double std = py_pow(sum_of(&q) / (double)n, 0.5);
    if (std == 0.0) std = 1.0;
    double lo = INFINITY;
    for (int i = 0; i < n; i++) {
        double o = (c[i].s - mean) / std;
        if (o < lo) lo = o;
    }
    for (int k = 0; k < nk; k++) z[k] = lo;
    if (filling) /* BM25 candidates outside the dense top (keys 0 … nb - 1) */
        for (int i = 0; i < j->nb; i++)
            if (j->has_fill[i]) z[i] = (j->fill_score[i] - mean) / std;
    for (int i = 0; i < n; i++) z[j->sc->slot[c[i].rowid]] = (c[i].s - mean) / std;
}

static int fusion(Job *j) {
    Scratch *x = j->sc;
    if (grow((void **)&x->slot, &x->slot_n, (size_t)j->top + 1, sizeof(int32_t), 0xff)) return -1;
    int32_t *slot = x->slot;
    int nk = 0;
    for (int i = 0; i < j->nb; i++) {
        j->keys[nk] = j->bm25[i].rowid;
        j->dpos[nk] = -1;
        slot[j->bm25[i].rowid] = nk++;
    }
    for (int i = 0; i < j->nd; i++) {
        int64_t r = j->dense[i].rowid;
        if (slot[r] < 0) {
            j->keys[nk] = r;
            slot[r] = nk++;
        }
        j->dpos[slot[r]] = i;
    }
    int filling = j->fill && j->nd > 0;
    for (int i = 0; i < j->nb; i++) {
        j->has_fill[i] = 0;
        if (!filling || j->dpos[i] >= 0) continue;
        int64_t row = j->rowid_row[j->bm25[i].rowid];
        if (row < 0 || row >= j->nrows || !j->live[row]) continue;
        float v = j->scores[row];
        if (v == -INFINITY && j->matrix) dots_avx2(j->matrix, j->dim, &row, 1, j->unit, &v); /* not screened */
        j->has_fill[i] = 1;
        j->fill_score[i] = (double)v;
        j->filled++;
    }
    zscores(j, j->bm25, j->nb, j->zb, nk, 0);
    zscores(j, j->dense, j->nd, j->zd, nk, filling);
    Heap h = {j->fused, 0, j->keep};
    for (int k = 0; k < nk; k++) {
        double f = 0.0 + j->wb * j->zb[k];
        f = f + j->wd * j->zd[k];
        offer(&h, (Cand){f, j->idrank[j->keys[k]], k});
    }
    sort_heap(&h);
    j->nf = h.n;
    for (int k = 0; k < nk; k++) slot[j->keys[k]] = -1;
    return 0;
}

static int run(Job *j) {
    double t0 = now();
    if (!(j->sc = scratch())) return -1;
    if (bm25_top(j)) return -1;
    double t1 = now();
    if (!j->bad && dense_top(j)) return -1;
    double t2 = now();
    if (j->fuse && !j->bad && fusion(j)) return -1;
    double t3 = now();
    j->secs[0] = t1 - t0;
    j->secs[1] = t2 - t1;
    j->secs[2] = t3 - t2;
    return 0;
}

/* ------------------------------------------------------------------------------------------- Python side */

typedef struct {
    Py_buffer *b; /* 6 + 2 per term */
    int got;
} Buffers;

static const void *take(Buffers *bs, PyObject *o, Py_ssize_t itemsize, Py_ssize_t *count) {
    Py_buffer *b = &bs->b[bs->got];
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    bs->got++;
    if (b->len % itemsize) {
        PyErr_SetString(PyExc_ValueError, "zcore: a buffer of the wrong item size");
        return NULL;
    }
    *count = b->len / itemsize;
    return b->buf;
}

static void release(Buffers *bs) {
    for (int i = 0; i < bs->got; i++) PyBuffer_Release(&bs->b[i]);
}

/* a channel's columns: its chunk ids, scores and (with_rows, else None) rowids */
static PyObject *column_ids(const Cand *c, int n, PyObject *names, PyObject **scores, PyObject **rows, int with_rows) {
    PyObject *ids = PyTuple_New(n);
    *scores = PyTuple_New(n);
    *rows = with_rows ? PyTuple_New(n) : Py_NewRef(Py_None);
    if (!ids || !*scores || !*rows) {
        Py_XDECREF(ids);
        Py_XDECREF(*scores);
        Py_XDECREF(*rows);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyObject *name = PyList_GET_ITEM(names, c[i].rowid);
        Py_INCREF(name);
        PyTuple_SET_ITEM(ids, i, name);
        PyObject *score = PyFloat_FromDouble(c[i].s), *rowid = with_rows ? PyLong_FromLongLong(c[i].rowid) : NULL;
        PyTuple_SET_ITEM(*scores, i, score); /* (a tuple's NULL items are skipped when it is freed) */
        if (with_rows) PyTuple_SET_ITEM(*rows, i, rowid);
        if (!score || (with_rows && !rowid)) { /* out of memory */
            Py_DECREF(ids);
            Py_CLEAR(*scores);
            Py_CLEAR(*rows);
            return NULL;
        }
    }
    return ids;
}

static PyObject *fused_items(const Job *j, PyObject *names) {
    PyObject *fused = PyList_New(j->nf);
    if (!fused) return NULL;
    for (int i = 0; i < j->nf; i++) {
        int k = (int)j->fused[i].rowid;
        PyObject *item = PyTuple_New(6); /* (not Py_BuildValue: it parses its format at every call) */
        if (!item) {
            Py_DECREF(fused);
            return NULL;
        }
        PyObject *name = PyList_GET_ITEM(names, j->keys[k]);
        Py_INCREF(name);
        PyTuple_SET_ITEM(item, 0, name);
        PyTuple_SET_ITEM(item, 1, PyFloat_FromDouble(j->fused[i].s));
        int d = j->dpos[k];
        if (k < j->nb) {
            PyTuple_SET_ITEM(item, 2, PyLong_FromLong(k + 1));
            PyTuple_SET_ITEM(item, 3, PyFloat_FromDouble(j->bm25[k].s));
        } else {
            Py_INCREF(Py_None);
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(item, 2, Py_None);
            PyTuple_SET_ITEM(item, 3, Py_None);
        }
        if (d >= 0) {
            PyTuple_SET_ITEM(item, 4, PyLong_FromLong(d + 1));
            PyTuple_SET_ITEM(item, 5, PyFloat_FromDouble(j->dense[d].s));
        } else {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(item, 4, Py_None);
            if (k < j->nb && j->has_fill[k]) {
                PyTuple_SET_ITEM(item, 5, PyFloat_FromDouble(j->fill_score[k]));
            } else {
                Py_INCREF(Py_None);
                PyTuple_SET_ITEM(item, 5, Py_None);
            }
        }
        PyList_SET_ITEM(fused, i, item); /* (freed with the list if an item is missing) */
        for (int m = 1; m < 6; m++)
            if (!PyTuple_GET_ITEM(item, m)) { /* out of memory */
                Py_DECREF(fused);
                return NULL;
            }
    }
    return fused;
}

static PyObject *result_of(Job *j, PyObject *names) {
    PyObject *bs, *br, *ds, *dr, *fused = Py_None;
    PyObject *bi = column_ids(j->bm25, j->nb, names, &bs, &br, !j->fuse);
    if (!bi) return NULL;
    PyObject *di = column_ids(j->dense, j->nd, names, &ds, &dr, !j->fuse);
    if (!di) {
        Py_DECREF(bi);
        Py_DECREF(bs);
        Py_DECREF(br);
        return NULL;
    }
    if (j->fuse) {
        fused = fused_items(j, names);
    } else {
        Py_INCREF(Py_None);
    }
    if (!fused) {
        Py_DECREF(bi);
        Py_DECREF(bs);
        Py_DECREF(br);
        Py_DECREF(di);
        Py_DECREF(ds);
        Py_DECREF(dr);
        return NULL;
    }
    return Py_BuildValue("(NNNNNNNiddd)", bi, bs, br, di, ds, dr, fused, j->filled, j->secs[0], j->secs[1],
                         j->secs[2]);
}

static int prepare(Job *j, Buffers *bs, PyObject *const *o, PyObject *names, PyObject *terms, PyObject *allowed) {
    Py_ssize_t nrows, n2, n3, ntop, n5;
    j->scores = take(bs, o[0], 4, &nrows);
    if (!j->scores) return -1;
    j->live = take(bs, o[1], 1, &n2);
    if (!j->live) return -1;
    j->row_rowid = take(bs, o[2], 8, &n3);
    if (!j->row_rowid) return -1;
    j->rowid_row = take(bs, o[3], 8, &ntop);
    if (!j->rowid_row) return -1;
    j->idrank = take(bs, o[4], 4, &n5);
    if (!j->idrank) return -1;
    if (n2 != nrows || n3 != nrows || n5 != ntop || PyList_GET_SIZE(names) != ntop || ntop < 1) {
        PyErr_SetString(PyExc_ValueError, "zcore: arrays of different lengths");
        return -1;
    }
    j->nrows = nrows;
    j->top = ntop - 1;
    if (allowed != Py_None) {
        Py_ssize_t na;
        if (!(j->allowed = take(bs, allowed, 1, &na))) return -1;
        if (na != ntop) {
            PyErr_SetString(PyExc_ValueError, "zcore: the allowed rows are not one per rowid");
            return -1;
        }
    }
    for (int t = 0; t < j->nterms; t++) {
        PyObject *pair = PyList_GET_ITEM(terms, t);
        Py_ssize_t nr, nw;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "zcore: a term is a (rows, scores) tuple");
            return -1;
        }
        if (!(j->t_rows[t] = take(bs, PyTuple_GET_ITEM(pair, 0), 8, &nr))) return -1;
        if (!(j->t_w[t] = take(bs, PyTuple_GET_ITEM(pair, 1), 8, &nw))) return -1;
        if (nr != nw) {
            PyErr_SetString(PyExc_ValueError, "zcore: a term's rows and scores differ in length");
            return -1;
        }
        j->t_n[t] = nr;
    }
    return 0;
}

/* the rows and the query of a screened search (both or neither): the fill's dot products */
static int screened(Job *j, Buffers *bs, PyObject *matrix, PyObject *unit) {
    if (matrix == Py_None && unit == Py_None) return 0;
    Py_ssize_t nm, nu;
    if (matrix == Py_None || unit == Py_None) {
        PyErr_SetString(PyExc_ValueError, "zcore: the matrix and the query vector go together");
        return -1;
    }
    if (!(j->matrix = take(bs, matrix, 4, &nm)) || !(j->unit = take(bs, unit, 4, &nu))) return -1;
    if (nu < 1 || nm < j->nrows * nu) {
        PyErr_SetString(PyExc_ValueError, "zcore: the matrix holds fewer rows than the scores");
        return -1;
    }
    j->dim = nu;
    return 0;
}

static PyObject *hybrid(PyObject *self, PyObject *args) {
    PyObject *o[5], *names, *terms;
    int kb, kd, keep, fill, fuse;
    double wb, wd;
    (void)self;
    PyObject *o_allowed = Py_None, *o_matrix = Py_None, *o_unit = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOO!O!iiiddpp|OOO", &o[0], &o[1], &o[2], &o[3], &o[4], &PyList_Type, &names,
                          &PyList_Type, &terms, &kb, &kd, &keep, &wb, &wd, &fill, &fuse, &o_allowed, &o_matrix,
                          &o_unit))
        return NULL;
    if ((o_matrix != Py_None || o_unit != Py_None) && !simd_ok()) {
        PyErr_SetString(PyExc_ValueError, "zcore: no AVX2 and FMA here: a screened search needs them");
        return NULL;
    }
    if (kb < 0 || kd < 0 || keep < 0) {
        PyErr_SetString(PyExc_ValueError, "zcore: negative k");
        return NULL;
    }
    Py_ssize_t nterms = PyList_GET_SIZE(terms);
    if (nterms > INT_MAX / 4) {
        PyErr_SetString(PyExc_ValueError, "zcore: too many query terms");
        return NULL;
    }
    int nk = kb + kd + 1;
    Job j;
    memset(&j, 0, sizeof j);
    j.nterms = (int)nterms;
    Buffers bs = {PyMem_Calloc((size_t)(8 + 2 * nterms), sizeof(Py_buffer)), 0};
    j.t_rows = PyMem_Malloc(sizeof(int64_t *) * (size_t)(nterms + 1));
    j.t_w = PyMem_Malloc(sizeof(double *) * (size_t)(nterms + 1));
    j.t_n = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(nterms + 1));
    j.kb = kb, j.kd = kd, j.keep = keep, j.fill = fill, j.fuse = fuse, j.wb = wb, j.wd = wd;
    j.bm25 = PyMem_Malloc(sizeof(Cand) * (size_t)(kb + 1));
    j.dense = PyMem_Malloc(sizeof(Cand) * (size_t)(kd + 1));
    j.fused = PyMem_Malloc(sizeof(Cand) * (size_t)(keep + 1));
    j.keys = PyMem_Malloc(sizeof(int64_t) * (size_t)nk);
    j.zb = PyMem_Malloc(sizeof(double) * (size_t)nk);
    j.zd = PyMem_Malloc(sizeof(double) * (size_t)nk);
    j.dpos = PyMem_Malloc(sizeof(int32_t) * (size_t)nk);
    j.has_fill = PyMem_Malloc((size_t)(kb + 1));
    j.fill_score = PyMem_Malloc(sizeof(double) * (size_t)(kb + 1));
    PyObject *result = NULL;
    if (!bs.b || !j.t_rows || !j.t_w || !j.t_n || !j.bm25 || !j.dense || !j.fused || !j.keys || !j.zb || !j.zd || !j.dpos || !j.has_fill ||
        !j.fill_score) {
        PyErr_NoMemory();
        goto done;
    }
    if (prepare(&j, &bs, o, names, terms, o_allowed) == 0 && screened(&j, &bs, o_matrix, o_unit) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = run(&j);
        Py_END_ALLOW_THREADS
        if (rc)
            PyErr_NoMemory();
        else if (j.bad)
            PyErr_SetString(PyExc_ValueError, "zcore: a row or rowid out of range");
        else
            result = result_of(&j, names);
    }
    release(&bs);
done:
    PyMem_Free(bs.b);
    PyMem_Free((void *)j.t_rows);
    PyMem_Free((void *)j.t_w);
    PyMem_Free(j.t_n);
    PyMem_Free(j.bm25);
    PyMem_Free(j.dense);
    PyMem_Free(j.fused);
    PyMem_Free(j.keys);
    PyMem_Free(j.zb);
    PyMem_Free(j.zd);
    PyMem_Free(j.dpos);
    PyMem_Free(j.has_fill);
    PyMem_Free(j.fill_score);
    return result;
}

static PyObject *simd(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyBool_FromLong(simd_ok());
}

/* dots(matrix, unit, out[, rows]): out[i] = the row's (rows[i]'s, else i's) dot product with unit (dots_avx2) */
static PyObject *dots(PyObject *self, PyObject *args) {
    PyObject *o_m, *o_q, *o_out, *o_rows = Py_None;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO|O", &o_m, &o_q, &o_out, &o_rows)) return NULL;
    if (!simd_ok()) {
        PyErr_SetString(PyExc_RuntimeError, "zcore: no AVX2 and FMA here (simd() is False)");
        return NULL;
    }
    Py_buffer b[4];
    int got = 0;
    PyObject *result = NULL;
    Py_ssize_t nm, nq, nout, nrows = 0;
    if (PyObject_GetBuffer(o_m, &b[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
    got++;
    if (PyObject_GetBuffer(o_q, &b[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
    got++;
    if (PyObject_GetBuffer(o_out, &b[got], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    got++;
    if (o_rows != Py_None) {
        if (PyObject_GetBuffer(o_rows, &b[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        got++;
    }
    if (b[0].len % 4 || b[1].len % 4 || b[2].len % 4 || (o_rows != Py_None && b[3].len % 8)) {
        PyErr_SetString(PyExc_ValueError, "zcore: a buffer of the wrong item size");
        goto done;
    }
    nq = b[1].len / 4, nm = nq ? b[0].len / 4 / nq : 0, nout = b[2].len / 4;
    if (nq < 1 || b[0].len / 4 % nq) {
        PyErr_SetString(PyExc_ValueError, "zcore: the matrix is not rows of the query's dimension");
        goto done;
    }
    const int64_t *rows = o_rows != Py_None ? b[3].buf : NULL;
    nrows = rows ? b[3].len / 8 : nm;
    if (nout != nrows) {
        PyErr_SetString(PyExc_ValueError, "zcore: out is not one float per row");
        goto done;
    }
    for (Py_ssize_t i = 0; rows && i < nrows; i++)
        if (rows[i] < 0 || rows[i] >= nm) {
            PyErr_SetString(PyExc_IndexError, "zcore: a row out of range");
            goto done;
        }
    Py_BEGIN_ALLOW_THREADS
    dots_avx2(b[0].buf, nq, rows, nrows, b[1].buf, b[2].buf);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return result;
}

/* screen(codes, qcode, live, out) -> n: the len(out) live rows whose int8 codes score best against qcode (ties:
 * the lower rows), written into out (int64) in file order; n: how many (fewer when fewer rows are live) */
static PyObject *screen(PyObject *self, PyObject *args) {
    PyObject *o_c, *o_q, *o_live, *o_out;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOO", &o_c, &o_q, &o_live, &o_out)) return NULL;
    if (!simd_ok()) {
        PyErr_SetString(PyExc_RuntimeError, "zcore: no AVX2 and FMA here (simd() is False)");
        return NULL;
    }
    Py_buffer b[4];
    int got = 0;
    PyObject *result = NULL;
    int32_t *sc = NULL;
    void *blocks = NULL;
    if (PyObject_GetBuffer(o_c, &b[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
    got++;
    if (PyObject_GetBuffer(o_q, &b[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
    got++;
    if (PyObject_GetBuffer(o_live, &b[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
    got++;
    if (PyObject_GetBuffer(o_out, &b[got], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    got++;
    Py_ssize_t dim = b[1].len, n = b[2].len, want = b[3].len / 8;
    if (dim < 1 || b[0].len < n * dim || b[3].len % 8 || want > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "zcore: codes, query code, live rows or out of the wrong size");
        goto done;
    }
    sc = PyMem_Malloc(sizeof(int32_t) * (size_t)(2 * n + 1));
    blocks = PyMem_Malloc(sizeof(__m256i) * (size_t)(2 * (dim / 32) + 2) + 32);
    if (!sc || !blocks) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *out = b[3].buf;
    Py_ssize_t taken = 0;
    Py_BEGIN_ALLOW_THREADS
    __m256i *qv = (__m256i *)(((uintptr_t)blocks + 31) & ~(uintptr_t)31); /* (aligned for the vectors) */
    i8dots_avx2(b[0].buf, dim, n, b[1].buf, b[2].buf, sc, qv, qv + dim / 32 + 1);
    /* the want-th best score (quickselect on a copy of the live ones), then the rows above it and as many tied
     * with it as fit, lowest first: in file order, without a heap */
    int32_t *copy = sc + n;
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (sc[i] != INT32_MIN) copy[m++] = sc[i];
    if (want > 0 && m > 0) {
        int32_t cut = m > want ? kth_largest_i32(copy, m, want) : INT32_MIN + 1;
        Py_ssize_t above = 0;
        for (Py_ssize_t i = 0; i < n; i++) above += sc[i] > cut;
        Py_ssize_t ties = want - above;
        for (Py_ssize_t i = 0; i < n; i++)
            if (sc[i] > cut || (sc[i] == cut && ties-- > 0)) out[taken++] = i;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(taken);
done:
    PyMem_Free(sc);
    PyMem_Free(blocks);
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return result;
}

static PyObject *scratches_alive(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromLong(ZCOUNT(0));
}

static PyMethodDef methods[] = {
    {"hybrid", hybrid, METH_VARARGS, "BM25, the channels' tops, the fill and z-score fusion (see the source)"},
    {"scratches", scratches_alive, METH_NOARGS, "How many threads' scratch is alive (freed when a thread ends)"},
    {"simd", simd, METH_NOARGS, "Whether this CPU has AVX2 and FMA: dots() and screen() work"},
    {"dots", dots, METH_VARARGS, "dots(matrix, unit, out[, rows]): each row's dot product with unit, into out"},
    {"screen", screen, METH_VARARGS, "screen(codes, qcode, live, out) -> n: the rows whose int8 codes score best"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_zcore", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__zcore(void) {
    if (scratch_key_make()) {
        PyErr_SetString(PyExc_RuntimeError, "zcore: no thread-local key");
        return NULL;
    }
    return PyModule_Create(&module);
}
