/* rope_check: check a C rope against posenc's test vectors (`posenc export`), no JSON needed.
 *
 *   posenc export --encoding rope --dtype float32 --with-planted -o corpus
 *   cc -O2 -o rope_check rope_check.c -lm                      # the plain C rope below
 *   cc -O2 -DWITH_GGML -I$GGML/include -o rope_check rope_check.c -L$GGML/lib \
 *      -lggml -lggml-base -lggml-cpu -lm                       # ggml's ggml_rope_ext
 *   ./rope_check corpus [exact|conventional|reduced]           # the profile to meet
 *
 * It reads corpus/rope.manifest (a line per fact, see posenc/conformance/corpus_manifest.py),
 * runs every vector whose parameters it supports (no scaling, or linear scaling; plain and
 * partial rotary; half and interleaved pairing; [seq] or [batch, seq] positions) in float32,
 * and compares with the float64 golden under the float32 tolerance of each precision profile:
 *   allowed = atol*scale + rtol*|expected| + angle*angle_eps*angle_bound*scale.
 * It prints, per vector, PASS/FAIL with the worst error/allowed ratio of each profile and the
 * tightest profile met; on a failure, the planted bug (flag) whose output it matches. Where a
 * profile's allowed error reaches a tenth of the data's magnitude it judges nothing: "N/J"
 * under the chosen profile, never a pass. Exit status: 0 when no supported vector fails, 1
 * otherwise, 2 on bad input. -DPLANT_LAYOUT_SWAP pairs the features the wrong way, to see a failure named.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef WITH_GGML
#include "ggml.h"
#include "ggml-cpu.h"
#define IMPLEMENTATION "ggml_rope_ext"
#else
#define IMPLEMENTATION "plain C float32 rope"
#endif

#define MAX_LINE 65536
#define MAX_DIMS 8
#define MAX_FLAGS 32
#define N_PROFILES 3
static const char *PROFILES[N_PROFILES] = {"exact", "conventional", "reduced"};

typedef struct { char path[512]; int ndim; long dims[MAX_DIMS]; int present; } ArrayRef;
typedef struct { double atol, rtol, angle, angle_eps; } Tol;
typedef struct {
    char name[256], layout[32], scaling[64], unsupported[256];
    double scale, angle_bound, base, theta, factor, partial;
    long rotary_dim;
    ArrayRef x, positions, out;
    int n_flags;
    char flag_name[MAX_FLAGS][128], flag_path[MAX_FLAGS][512];
} Vector;

static char ROOT[1024];
static Tol TOLS[N_PROFILES];

static void die(const char *what, const char *detail) {
    fprintf(stderr, "rope_check: error: %s: %s\n", what, detail);
    exit(2);
}

static long count(const ArrayRef *a) {
    long n = 1;
    for (int i = 0; i < a->ndim; i++) n *= a->dims[i];
    return n;
}

/* a raw little-endian array of the corpus (8-byte elements: float64 or int64) */
static void *load(const ArrayRef *a, long *n) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", ROOT, a->path);
    FILE *f = fopen(path, "rb");
    if (!f) die(path, strerror(errno));
    *n = count(a);
    void *data = malloc((size_t)(*n > 0 ? *n : 1) * 8);
    if ((long)fread(data, 8, (size_t)*n, f) != *n) die(path, "shorter than its shape says");
    fclose(f);
    return data;
}

static void parse_array(const char *rest, ArrayRef *a) {
    char dtype[32];
    int used = 0;
    memset(a, 0, sizeof *a);
    if (sscanf(rest, "%511s %31s %d%n", a->path, dtype, &a->ndim, &used) != 3 ||
        a->ndim > MAX_DIMS)
        die("manifest array line", rest);
    a->present = strcmp(a->path, "-") != 0;
    rest += used;
    for (int i = 0; i < a->ndim; i++) {
        if (sscanf(rest, "%ld%n", &a->dims[i], &used) != 1) die("manifest dims", rest);
        rest += used;
    }
}

static void parse_param(Vector *v, const char *key, const char *value) {
    if (!strcmp(key, "base")) v->base = atof(value);
    else if (!strcmp(key, "layout")) snprintf(v->layout, sizeof v->layout, "%.31s", value);
    else if (!strcmp(key, "rotary_dim")) v->rotary_dim = strcmp(value, "none") ? atol(value) : 0;
    else if (!strcmp(key, "scaling.rope_type") || !strcmp(key, "scaling.type"))
        snprintf(v->scaling, sizeof v->scaling, "%.63s", value);
    else if (!strcmp(key, "scaling.factor")) v->factor = atof(value);
    else if (!strcmp(key, "scaling.rope_theta")) v->theta = atof(value);
    else if (!strcmp(key, "scaling.partial_rotary_factor")) v->partial = atof(value);
    else if (!strcmp(key, "scaling.max_position_embeddings")) return; /* no effect here */
    else if ((!strcmp(key, "scaling") || !strcmp(key, "seq_len")) && !strcmp(value, "none"))
        return;
    else if (!v->unsupported[0])
        snprintf(v->unsupported, sizeof v->unsupported, "parameter %.100s=%.60s", key, value);
}

/* the next vector of the manifest (0 at the end) */
static int next_vector(FILE *f, Vector *v, char *line) {
    char key[128], value[MAX_LINE];
    memset(v, 0, sizeof *v);
    v->factor = 1.0;
    strcpy(v->scaling, "none");
    while (fgets(line, MAX_LINE, f)) {
        if (sscanf(line, "vector %255s", v->name) == 1) continue;
        if (sscanf(line, "scale %lf angle_bound %lf", &v->scale, &v->angle_bound) == 2) continue;
        if (sscanf(line, "param %127s %65535s", key, value) == 2) parse_param(v, key, value);
        else if (!strncmp(line, "input x ", 8)) parse_array(line + 8, &v->x);
        else if (!strncmp(line, "input positions ", 16)) parse_array(line + 16, &v->positions);
        else if (!strncmp(line, "output ", 7)) parse_array(line + 7, &v->out);
        else if (!strncmp(line, "flag ", 5) && v->n_flags < MAX_FLAGS) {
            char dtypes[128];
            if (sscanf(line, "flag %127s %127s %511s", v->flag_name[v->n_flags], dtypes,
                       v->flag_path[v->n_flags]) == 3) v->n_flags++;
        } else if (!strncmp(line, "end", 3)) return 1;
    }
    return 0;
}

#ifndef WITH_GGML
/* rotate one row of d features at position pos: the first r features in pairs */
static void rotate(const double *x, float *y, long d, long r, double pos, const Vector *v,
                   int interleaved) {
#ifdef PLANT_LAYOUT_SWAP
    interleaved = !interleaved;
#endif
    float base = (float)(v->theta > 0 ? v->theta : v->base);
    for (long k = 0; k < d; k++) y[k] = (float)x[k];
    for (long i = 0; i < r / 2; i++) {
        float inv = powf(base, -2.0f * (float)i / (float)r) / (float)v->factor;
        float angle = (float)pos * inv, c = cosf(angle), s = sinf(angle);
        long a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + r / 2;
        float xa = (float)x[a], xb = (float)x[b];
        y[a] = xa * c - xb * s;
        y[b] = xb * c + xa * s;
    }
}

#else
/* rows [S] of H heads at positions pos[S] through ggml: x and y are [H, S, D] row-major */
static void ggml_rows(const double *x, float *y, long H, long S, long D, long r,
                      const int64_t *pos, const Vector *v, int interleaved) {
    size_t mem = (size_t)(2 * H * S * D + S) * 4 + ggml_graph_overhead() + (1 << 20);
    struct ggml_init_params params = {mem, NULL, false};
    struct ggml_context *ctx = ggml_init(params);
    struct ggml_tensor *a = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, S);
    struct ggml_tensor *p = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, S);
    float *ad = (float *)a->data;
    for (long h = 0; h < H; h++)
        for (long s = 0; s < S; s++)
            for (long k = 0; k < D; k++) ad[(s * H + h) * D + k] = (float)x[(h * S + s) * D + k];
    for (long s = 0; s < S; s++) ((int32_t *)p->data)[s] = (int32_t)pos[s];
    float base = (float)(v->theta > 0 ? v->theta : v->base);
    struct ggml_tensor *out = ggml_rope_ext(ctx, a, p, NULL, (int)r,
                                            interleaved ? 0 : GGML_ROPE_TYPE_NEOX, 0, base,
                                            (float)(1.0 / v->factor), 0.0f, 1.0f, 32.0f, 1.0f);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_graph_compute_with_ctx(ctx, gf, 1);
    const float *od = (const float *)out->data;
    for (long h = 0; h < H; h++)
        for (long s = 0; s < S; s++)
            for (long k = 0; k < D; k++) y[(h * S + s) * D + k] = od[(s * H + h) * D + k];
    ggml_free(ctx);
}
#endif

/* the implementation's float32 output of vector v, as [lead, S, D] (NULL: why in v) */
static float *run(Vector *v, const double *x, const int64_t *positions) {
    long D = v->x.dims[v->x.ndim - 1], S = v->x.dims[v->x.ndim - 2], lead = count(&v->x) / (S * D);
    long r = v->rotary_dim ? v->rotary_dim : D, B = 1;
    if (v->partial > 0) r = (long)(D * v->partial);
    if (v->positions.present && v->positions.ndim == 2) B = v->positions.dims[0];
    if (lead % B) { snprintf(v->unsupported, sizeof v->unsupported, "positions batch"); return NULL; }
    int interleaved = !strcmp(v->layout, "interleaved");
    int64_t *pos = malloc((size_t)(B * S) * sizeof *pos);
    for (long b = 0; b < B; b++)
        for (long s = 0; s < S; s++) pos[b * S + s] = positions ? positions[b * S + s] : s;
    float *y = malloc((size_t)(lead * S * D) * sizeof *y);
    long H = lead / B;
    for (long b = 0; b < B; b++) {
#ifdef WITH_GGML
        ggml_rows(x + b * H * S * D, y + b * H * S * D, H, S, D, r, pos + b * S, v, interleaved);
#else
        for (long h = 0; h < H; h++)
            for (long s = 0; s < S; s++) {
                long row = ((b * H + h) * S + s) * D;
                rotate(x + row, y + row, D, r, (double)pos[b * S + s], v, interleaved);
            }
#endif
    }
    free(pos);
    return y;
}

/* the worst |y - e| / allowed under tolerance t; -1 where the profile judges nothing (its
 * allowed error reaches a tenth of the largest |expected|: posenc's "not judgeable") */
static double worst_ratio(const float *y, const double *e, long n, const Tol *t, const Vector *v) {
    double worst = 0.0, magnitude = 0.0;
    for (long i = 0; i < n; i++) if (fabs(e[i]) > magnitude) magnitude = fabs(e[i]);
    for (long i = 0; i < n; i++) {
        double err = fabs((double)y[i] - e[i]);
        double allowed = t->atol * v->scale + t->rtol * fabs(e[i]) +
                         t->angle * t->angle_eps * v->angle_bound * v->scale;
        if (allowed >= 0.1 * magnitude && t != &TOLS[0]) return -1.0;
        double ratio = err == 0.0 ? 0.0 : (allowed > 0 ? err / allowed : INFINITY);
        if (!(ratio <= worst)) worst = ratio;
    }
    return worst;
}

static int supported(Vector *v) {
    if (v->unsupported[0]) return 0;
    if (strcmp(v->scaling, "none") && strcmp(v->scaling, "default") && strcmp(v->scaling, "linear"))
        snprintf(v->unsupported, sizeof v->unsupported, "scaling %s", v->scaling);
    else if (v->positions.present && v->positions.ndim > 2)
        snprintf(v->unsupported, sizeof v->unsupported, "positions of %d axes", v->positions.ndim);
    return !v->unsupported[0];
}

static double max_abs(const float *y, const double *e, long n) {
    double worst = 0.0;
    for (long i = 0; i < n; i++) {
        double err = fabs((double)y[i] - e[i]);
        if (!(err <= worst)) worst = err;
    }
    return worst;
}

/* name the planted bug (flag) the output matches: within profile p's tolerance of it, or (as
 * posenc's diagnoser does) at least 100 times closer to it than to the golden e */
static void name_the_bug(const Vector *v, const float *y, const double *e, long n, int p) {
    int named = 0;
    double to_golden = max_abs(y, e, n);
    for (int f = 0; f < v->n_flags; f++) {
        if (!strcmp(v->flag_path[f], "-")) continue;
        ArrayRef ref = v->out;
        snprintf(ref.path, sizeof ref.path, "%s", v->flag_path[f]);
        long m;
        double *planted = load(&ref, &m);
        double r = m == n ? worst_ratio(y, planted, n, &TOLS[p], v) : INFINITY;
        if ((r >= 0.0 && r <= 1.0) || (m == n && max_abs(y, planted, n) * 100.0 <= to_golden)) {
            printf("      matches planted bug: %s\n", v->flag_name[f]);
            named = 1;
        }
        free(planted);
    }
    if (!named) {
        printf("      no planted bug matches; bugs this vector tells apart:");
        for (int f = 0; f < v->n_flags; f++) printf(" %s", v->flag_name[f]);
        printf("\n");
    }
}

/* check one vector: 1 pass, 0 fail, -1 skipped, -2 not judgeable under the chosen profile */
static int check(Vector *v, int profile) {
    if (!supported(v)) {
        printf("SKIP %-36s (%s: not in this example)\n", v->name, v->unsupported);
        return -1;
    }
    long n, m, k;
    double *x = load(&v->x, &n), *e = load(&v->out, &m);
    int64_t *pos = v->positions.present ? load(&v->positions, &k) : NULL;
    float *y = run(v, x, pos);
    int verdict = -1;
    if (y) {
        double ratio[N_PROFILES];
        int tightest = -1;
        for (int p = N_PROFILES - 1; p >= 0; p--) {
            ratio[p] = worst_ratio(y, e, m, &TOLS[p], v);
            if (ratio[p] >= 0.0 && ratio[p] <= 1.0) tightest = p;
        }
        verdict = ratio[profile] >= 0.0 && ratio[profile] <= 1.0;
        const char *word = ratio[profile] < 0 ? "N/J " : ratio[profile] <= 1.0 ? "PASS" : "FAIL";
        printf("%s %-36s error/allowed:", word, v->name);
        for (int p = 0; p < N_PROFILES; p++) {
            if (ratio[p] < 0) printf(" %s not judgeable%s", PROFILES[p], p < 2 ? "," : ";");
            else printf(" %s %.3g%s", PROFILES[p], ratio[p], p < 2 ? "," : ";");
        }
        printf(" meets %s\n", tightest >= 0 ? PROFILES[tightest] : "no profile");
        if (!verdict && ratio[profile] < 0) verdict = -2;
        else if (!verdict) name_the_bug(v, y, e, m, profile);
    } else {
        printf("SKIP %-36s (%s: not in this example)\n", v->name, v->unsupported);
    }
    free(x); free(e); free(pos); free(y);
    return verdict;
}

int main(int argc, char **argv) {
    if (argc < 2) die("usage", "rope_check CORPUS_DIR [exact|conventional|reduced]");
    int profile = 1;
    for (int p = 0; argc > 2 && p < N_PROFILES; p++) if (!strcmp(argv[2], PROFILES[p])) profile = p;
    if (argc > 2 && strcmp(argv[2], PROFILES[profile])) die("profile", argv[2]);
    snprintf(ROOT, sizeof ROOT, "%s", argv[1]);
    char path[2048], version[32], encoding[64], dtype[32], name[32];
    snprintf(path, sizeof path, "%s/rope.manifest", ROOT);
    FILE *f = fopen(path, "r");
    if (!f) die(path, strerror(errno));
    char *line = malloc(MAX_LINE);
    int n_vectors;
    if (!fgets(line, MAX_LINE, f) ||
        sscanf(line, "posenc-manifest %31s %63s %d", version, encoding, &n_vectors) != 3)
        die(path, "the first line is not 'posenc-manifest VERSION ENCODING COUNT'");
    if (strncmp(version, "1.", 2)) die(path, "corpus_version: not 1.x, which this reads");
    int have_tol = 0;
    long where = ftell(f);
    Tol t;
    while (fgets(line, MAX_LINE, f) &&
           sscanf(line, "tol %31s %31s %lf %lf %lf %lf", dtype, name, &t.atol, &t.rtol, &t.angle,
                  &t.angle_eps) == 6) {
        where = ftell(f);
        for (int p = 0; p < N_PROFILES; p++)
            if (!strcmp(dtype, "float32") && !strcmp(name, PROFILES[p])) { TOLS[p] = t; have_tol |= 1 << p; }
    }
    fseek(f, where, SEEK_SET);
    if (have_tol != 7) die(path, "no float32 tolerances (export with --dtype float32)");
    printf("%s against %s (%d vectors, float32, profile %s)\n", IMPLEMENTATION, path, n_vectors,
           PROFILES[profile]);
    Vector *v = malloc(sizeof *v);
    int passed = 0, failed = 0, skipped = 0, unjudged = 0;
    while (next_vector(f, v, line)) {
        int verdict = check(v, profile);
        passed += verdict == 1; failed += verdict == 0; skipped += verdict == -1;
        unjudged += verdict == -2;
    }
    printf("%d passed, %d failed, %d not judgeable, %d skipped\n", passed, failed, unjudged,
           skipped);
    free(v); free(line); fclose(f);
    return failed ? 1 : 0;
}
