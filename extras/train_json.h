/* extras/train_json.h - a companion of train.h: reading your JSON files (config.json) with train.h's one strict JSON reader

   Do this:
      #define TRAIN_IMPLEMENTATION
      #include "train.h"
      #include "extras/train_json.h"
   in the one C or C++ file that implements train.h; every other file
   includes both plainly. This header's implementation comes with train.h's
   (its calls walk train.h's private JSON cursor, the one the safetensors
   header and the tokenizer files are read with), so it needs no macro of
   its own; TRAIN_JSON_IMPLEMENTATION is accepted and must sit in the same
   file as TRAIN_IMPLEMENTATION.

   The kit has one JSON reader: the cursor in train.h's >>json (strings,
   numbers, UTF-8, skipping, each with its checks). train.h needs only the
   cursor (the safetensors header); the typed calls below, for a program
   that reads a config file, live here. Nothing in train.h, train_cuda.h or
   train_nccl.h calls this file. Why a companion: docs/DESIGN-notes.md.

   Contents (grep for the anchors):
      >>json        trn_json: load/parse a document, look values up, typed reads

   License: MIT, as train.h.
*/
#ifndef TRAIN_H_INCLUDED
#error "extras/train_json.h: include train.h first"
#endif
#ifndef TRAIN_JSON_H_INCLUDED
#define TRAIN_JSON_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
   >>json
   One strict JSON reader (RFC 8259) serves the whole kit: the safetensors
   header, vocab.json and tokenizer.json, and your config.json. Strict means
   a document is read whole before you see a value: one value, UTF-8,
   nothing after it but whitespace, no trailing comma, no comments, no NaN;
   anything else is TRN_ERR_FORMAT naming the file and the byte. Then each
   read checks its type (and an integer its range) and says which key.

      trn_json cfg;
      int64_t n_layer;
      double theta = 10000.0;
      char act[32];
      trn_json_value root;
      if (trn_json_load(&cfg, "config.json") != TRN_OK) ...;  // reason set
      root = trn_json_root(&cfg);
      rc = trn_json_int(trn_json_key(root, "num_hidden_layers"), 1, 1024, &n_layer);
      if (trn_json_has(root, "rope_theta"))                   // optional key
          rc = trn_json_number(trn_json_key(root, "rope_theta"), &theta);
      rc = trn_json_string(trn_json_key(root, "hidden_act"), act, sizeof act);
      trn_json_free(&cfg);

   trn_json_key finds a member of that one object, never one nested deeper
   ("rope_scaling": {"factor": 8} has no top-level "factor"; read it with
   trn_json_key(trn_json_key(root, "rope_scaling"), "factor")). A key that
   is missing gives a value of type TRN_JSON_NONE: reading it is
   TRN_ERR_MISMATCH ("no key"); a key given twice is TRN_ERR_FORMAT.
   32.7 or 1e3 read as an integer, or 4294967298 for [0, 2^31), is
   TRN_ERR_FORMAT: integers are exact or refused.
   ------------------------------------------------------------------------ */
typedef enum trn_json_type {
    TRN_JSON_NONE,   /* no such key / index (or not looked up in an object) */
    TRN_JSON_NULL, TRN_JSON_BOOL, TRN_JSON_NUMBER, TRN_JSON_STRING, TRN_JSON_ARRAY, TRN_JSON_OBJECT
} trn_json_type;

typedef struct trn_json {
    char *text;      /* the document, checked whole, NUL-terminated */
    size_t n;        /* its length in bytes */
    char name[256];  /* the file name (or the name given), for messages */
} trn_json;

/* a place in a document: a value, or none (at == NULL) */
typedef struct trn_json_value {
    const trn_json *doc;
    const char *at;   /* the value's first byte; NULL: none */
    const char *key;  /* the key it was found under (for messages), or NULL */
    int twice;        /* the key was given twice in its object */
} trn_json_value;

/* read and check a whole file / a text (copied); free with trn_json_free */
TRNDEF trn_result trn_json_load(trn_json *doc, const char *path);
TRNDEF trn_result trn_json_parse(trn_json *doc, const char *text, size_t n, const char *name);
TRNDEF void trn_json_free(trn_json *doc);
TRNDEF trn_json_value trn_json_root(const trn_json *doc);
TRNDEF trn_json_type trn_json_typeof(trn_json_value v);
/* the member `key` of object obj (this level only); type NONE if absent */
TRNDEF trn_json_value trn_json_key(trn_json_value obj, const char *key);
TRNDEF int trn_json_has(trn_json_value obj, const char *key);
/* elements of an array / members of an object (0 for anything else) */
TRNDEF int trn_json_count(trn_json_value v);
/* element i of an array, type NONE if out of range */
TRNDEF trn_json_value trn_json_at(trn_json_value arr, int i);
/* typed reads: TRN_OK, TRN_ERR_MISMATCH (none), TRN_ERR_FORMAT (wrong type,
   not an integer, out of [lo, hi], twice); *out is untouched on error */
TRNDEF trn_result trn_json_int(trn_json_value v, int64_t lo, int64_t hi, int64_t *out);
TRNDEF trn_result trn_json_number(trn_json_value v, double *out);
TRNDEF trn_result trn_json_bool(trn_json_value v, int *out);
/* the decoded string (UTF-8, NUL-terminated) into buf[cap]: longer, or
   holding \u0000, is TRN_ERR_FORMAT */
TRNDEF trn_result trn_json_string(trn_json_value v, char *buf, size_t cap);

/* <<json declarations end */

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_JSON_H_INCLUDED */

#if defined(TRAIN_JSON_IMPLEMENTATION) && !defined(TRAIN_IMPLEMENTATION)
#error "extras/train_json.h: TRAIN_JSON_IMPLEMENTATION needs TRAIN_IMPLEMENTATION in the same file (define it before train.h)"
#endif
#ifdef TRAIN_IMPLEMENTATION
#ifndef TRAIN_IMPLEMENTATION_DONE
#error "extras/train_json.h: train.h's implementation is not in this file (define TRAIN_IMPLEMENTATION before the first #include \"train.h\")"
#endif
#ifndef TRAIN_JSON_IMPLEMENTATION_DONE
#define TRAIN_JSON_IMPLEMENTATION_DONE

/* >>json implementation */
/* ========================================================================
   >>json: the typed calls, over train.h's cursor (trn__jp)
   ======================================================================== */
/* --- the public reader: trn_json_* ----------------------------------- */
TRNDEF trn_result trn_json_parse(trn_json *doc, const char *text, size_t n, const char *name) {
    trn__jp j;
    trn_result r;
    if (!doc) return trn_fail(TRN_ERR_INVALID, "trn_json_parse: NULL document");
    memset(doc, 0, sizeof *doc);
    snprintf(doc->name, sizeof doc->name, "%s", name ? name : "(json)");
    if (!text && n) return trn_fail(TRN_ERR_INVALID, "trn_json_parse: NULL text");
    if (!(doc->text = (char *)trn_alloc(n + 1, TRN_KIND_TEMP))) return TRN_ERR_NOMEM;
    if (n) memcpy(doc->text, text, n);
    doc->text[n] = 0;
    doc->n = n;
    trn__jp_init(&j, doc->text, n, doc->name, "bad JSON", 0);
    if (n >= 3 && memcmp(j.p, "\xEF\xBB\xBF", 3) == 0) j.p += 3; /* a UTF-8 byte order mark */
    if ((r = trn__jskip(&j, 0)) == TRN_OK) {
        trn__jws(&j);
        if (j.p != j.end) r = trn__jerr(&j, "text after the value");
    }
    if (r != TRN_OK) trn_json_free(doc);
    return r;
}

TRNDEF trn_result trn_json_load(trn_json *doc, const char *path) {
    FILE *f;
    struct stat st;
    char *buf;
    size_t got;
    trn_result r;
    if (!doc || !path) return trn_fail(TRN_ERR_INVALID, "trn_json_load: NULL argument");
    memset(doc, 0, sizeof *doc);
    if (trn_check_regular(path) != TRN_OK) return trn_fail(TRN_ERR_IO, "open %s", trn_error_reason()); /* a FIFO: fopen blocks */
    if (!(f = fopen(path, "rb"))) return trn_fail(TRN_ERR_IO, "open %s: %s", path, strerror(errno));
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return trn_fail(TRN_ERR_IO, "%s: not a regular file", path);
    }
    if (!(buf = (char *)trn_alloc((size_t)st.st_size + 1, TRN_KIND_TEMP))) { fclose(f); return TRN_ERR_NOMEM; }
    got = fread(buf, 1, (size_t)st.st_size, f);
    if (got != (size_t)st.st_size || ferror(f)) {
        r = trn_fail(TRN_ERR_IO, "read %s: %s", path, ferror(f) ? strerror(errno) : "shorter than its size");
        fclose(f);
        trn_free(buf);
        return r;
    }
    fclose(f);
    r = trn_json_parse(doc, buf, got, path);
    trn_free(buf);
    return r;
}

TRNDEF void trn_json_free(trn_json *doc) {
    if (!doc) return;
    trn_free(doc->text);
    doc->text = NULL;
    doc->n = 0;
}

TRNDEF trn_json_value trn_json_root(const trn_json *doc) {
    trn_json_value v = {NULL, NULL, NULL, 0};
    trn__jp j;
    if (!doc || !doc->text) return v;
    trn__jp_init(&j, doc->text, doc->n, doc->name, "bad JSON", 0);
    if (doc->n >= 3 && memcmp(j.p, "\xEF\xBB\xBF", 3) == 0) j.p += 3;
    trn__jws(&j);
    v.doc = doc;
    v.at = j.p;
    return v;
}

TRNDEF trn_json_type trn_json_typeof(trn_json_value v) {
    if (!v.at) return TRN_JSON_NONE;
    switch (*v.at) {
    case 'n': return TRN_JSON_NULL;
    case 't': case 'f': return TRN_JSON_BOOL;
    case '"': return TRN_JSON_STRING;
    case '[': return TRN_JSON_ARRAY;
    case '{': return TRN_JSON_OBJECT;
    default: return TRN_JSON_NUMBER;
    }
}

/* a cursor on a value of a checked document (its errors cannot happen) */
static trn__jp trn__json_cursor(trn_json_value v) {
    trn__jp j;
    trn__jp_init(&j, v.doc->text, v.doc->n, v.doc->name, "bad JSON", 0);
    j.p = v.at;
    return j;
}

/* is the string at the cursor (on its quote) exactly key? leaves the
   cursor after the string */
static int trn__jkey_is(trn__jp *j, const char *key) {
    size_t k = 0, n = strlen(key);
    int same = 1;
    uint32_t cp = 0;
    char u[4];
    j->p++;
    while (trn__jchar(j, &cp) == TRN_OK && cp != TRN__JSTR_END) {
        size_t w = trn__utf8_encode(cp, u);
        if (same && k + w <= n && memcmp(key + k, u, w) == 0) k += w;
        else same = 0;
    }
    return same && k == n;
}

TRNDEF trn_json_value trn_json_key(trn_json_value obj, const char *key) {
    trn_json_value v = {NULL, NULL, NULL, 0};
    trn__jp j;
    v.doc = obj.doc;
    v.key = key;
    if (trn_json_typeof(obj) != TRN_JSON_OBJECT || !key) return v;
    j = trn__json_cursor(obj);
    j.p++;
    if (trn__jeat(&j, '}')) return v;
    for (;;) {
        int hit;
        trn__jws(&j);
        hit = trn__jkey_is(&j, key);
        trn__jeat(&j, ':');
        trn__jws(&j);
        if (hit) {
            if (v.at) { v.twice = 1; return v; }
            v.at = j.p;
        }
        if (trn__jskip(&j, 1) != TRN_OK || !trn__jeat(&j, ',')) return v;
    }
}

TRNDEF int trn_json_has(trn_json_value obj, const char *key) {
    return trn_json_key(obj, key).at != NULL;
}

TRNDEF int trn_json_count(trn_json_value v) {
    trn_json_type t = trn_json_typeof(v);
    trn__jp j;
    int n = 0;
    if (t != TRN_JSON_ARRAY && t != TRN_JSON_OBJECT) return 0;
    j = trn__json_cursor(v);
    j.p++;
    if (trn__jeat(&j, t == TRN_JSON_ARRAY ? ']' : '}')) return 0;
    for (;;) {
        n++;
        if (t == TRN_JSON_OBJECT) { trn__jskip(&j, 1); trn__jeat(&j, ':'); }
        if (trn__jskip(&j, 1) != TRN_OK || !trn__jeat(&j, ',')) return n;
    }
}

TRNDEF trn_json_value trn_json_at(trn_json_value arr, int i) {
    trn_json_value v = {NULL, NULL, NULL, 0};
    trn__jp j;
    int k;
    v.doc = arr.doc;
    v.key = arr.key;
    if (trn_json_typeof(arr) != TRN_JSON_ARRAY || i < 0) return v;
    j = trn__json_cursor(arr);
    j.p++;
    if (trn__jeat(&j, ']')) return v;
    for (k = 0;; k++) {
        trn__jws(&j);
        if (k == i) { v.at = j.p; return v; }
        if (trn__jskip(&j, 1) != TRN_OK || !trn__jeat(&j, ',')) return v;
    }
}

/* the text of a number value, for messages and strtod: 0 if too long */
static size_t trn__json_span(trn_json_value v, char *buf, size_t cap) {
    trn__jp j = trn__json_cursor(v);
    size_t n;
    trn__jskip(&j, 0);
    n = (size_t)(j.p - v.at);
    if (n >= cap) { snprintf(buf, cap, "%.*s...", (int)(cap - 4), v.at); return 0; }
    memcpy(buf, v.at, n);
    buf[n] = 0;
    return n;
}

/* the checks every typed read starts with: present, once, of type t */
static trn_result trn__json_want(trn_json_value v, trn_json_type t, const char *type_name) {
    const char *name = v.doc ? v.doc->name : "(json)", *key = v.key ? v.key : "(value)";
    if (v.twice) return trn_fail(TRN_ERR_FORMAT, "%s: key '%s' is given twice", name, key);
    if (!v.at) return trn_fail(TRN_ERR_MISMATCH, "%s: no key '%s'", name, key);
    if (trn_json_typeof(v) != t) return trn_fail(TRN_ERR_FORMAT, "%s: '%s' is not %s", name, key, type_name);
    return TRN_OK;
}

TRNDEF trn_result trn_json_int(trn_json_value v, int64_t lo, int64_t hi, int64_t *out) {
    trn_result r = trn__json_want(v, TRN_JSON_NUMBER, "a number");
    trn__jp j;
    int64_t x = 0;
    if (r != TRN_OK) return r;
    j = trn__json_cursor(v);
    if (trn__jint(&j, lo, hi, &x) != TRN_OK) {
        char num[48];
        trn__json_span(v, num, sizeof num);
        return trn_fail(TRN_ERR_FORMAT, "%s: '%s' = %s is not an integer in [%lld, %lld]", v.doc->name,
                        v.key ? v.key : "(value)", num, (long long)lo, (long long)hi);
    }
    if (out) *out = x;
    return TRN_OK;
}

TRNDEF trn_result trn_json_number(trn_json_value v, double *out) {
    trn_result r = trn__json_want(v, TRN_JSON_NUMBER, "a number");
    char buf[128], *end;
    double x;
    if (r != TRN_OK) return r;
    if (!trn__json_span(v, buf, sizeof buf))
        return trn_fail(TRN_ERR_FORMAT, "%s: '%s' = %s has more than %d characters", v.doc->name,
                        v.key ? v.key : "(value)", buf, (int)sizeof buf - 1);
    errno = 0;
    x = strtod(buf, &end);
    if (*end || (errno == ERANGE && fabs(x) > 1.0) || x != x)
        return trn_fail(TRN_ERR_FORMAT, "%s: '%s' = %s is out of a double's range", v.doc->name,
                        v.key ? v.key : "(value)", buf);
    if (out) *out = x;
    return TRN_OK;
}

TRNDEF trn_result trn_json_bool(trn_json_value v, int *out) {
    trn_result r = trn__json_want(v, TRN_JSON_BOOL, "true or false");
    if (r != TRN_OK) return r;
    if (out) *out = *v.at == 't';
    return TRN_OK;
}

TRNDEF trn_result trn_json_string(trn_json_value v, char *buf, size_t cap) {
    trn_result r = trn__json_want(v, TRN_JSON_STRING, "a string");
    trn__jp j;
    size_t k = 0;
    uint32_t cp = 0;
    char u[4];
    if (r != TRN_OK) return r;
    if (!buf || !cap) return trn_fail(TRN_ERR_INVALID, "trn_json_string: no buffer");
    j = trn__json_cursor(v);
    j.p++;
    while (trn__jchar(&j, &cp) == TRN_OK && cp != TRN__JSTR_END) {
        size_t w = trn__utf8_encode(cp, u);
        if (cp == 0) return trn_fail(TRN_ERR_FORMAT, "%s: '%s' holds \\u0000", v.doc->name, v.key ? v.key : "(value)");
        if (k + w >= cap)
            return trn_fail(TRN_ERR_FORMAT, "%s: '%s' is longer than %zu bytes", v.doc->name, v.key ? v.key : "(value)",
                            cap - 1);
        memcpy(buf + k, u, w);
        k += w;
    }
    buf[k] = 0;
    return TRN_OK;
}

/* <<json implementation end */

#endif /* TRAIN_JSON_IMPLEMENTATION_DONE */
#endif /* TRAIN_IMPLEMENTATION */
