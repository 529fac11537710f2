/* The process's mappings with their resident, private, shared and swapped bytes (/proc/PID/smaps) and
 * its VmRSS (/proc/PID/status, read right after): the raw facts from which the load side accounts for
 * every resident byte. open/read into mmapped scratch only, so it may run inside the dump's window. */
#define _GNU_SOURCE
#include "capture/mappings.h"
#include "capture/procfs.h"

#include <errno.h>
#include <string.h>

static uint64_t dec_field(const char **pp, const char *end)
{
    uint64_t v = 0;
    const char *p = *pp;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    for (; p < end && *p >= '0' && *p <= '9'; p++) v = v * 10 + (uint64_t)(*p - '0');
    *pp = p;
    return v;
}

static uint32_t kind_of(const char *path, size_t len)
{
    if (len == 0 || (len > 6 && memcmp(path, "[anon:", 6) == 0)) return PTMD_MK_ANON;
    if (len == 6 && memcmp(path, "[heap]", 6) == 0) return PTMD_MK_BRK;
    if (len == 7 && memcmp(path, "[stack]", 7) == 0) return PTMD_MK_STACK;
    if (path[0] == '[') return PTMD_MK_SPECIAL;
    return PTMD_MK_FILE;
}

/* "start-end perms offset dev inode   path": a new mapping. */
static int header_line(ptmd_mappings *m, const char *p, const char *eol)
{
    ptmd_mapping_rec *r = ptmd_buf_push(&m->recs, sizeof(*r));
    const char *path;
    size_t len;
    if (!r) return -1;
    r->start = ptmd_parse_hex(&p, eol);
    if (p < eol && *p == '-') p++;
    r->end = ptmd_parse_hex(&p, eol);
    if (p < eol && *p == ' ') p++;
    if (eol - p >= 4) {
        r->prot = (p[0] == 'r' ? PTMD_MP_READ : 0) | (p[1] == 'w' ? PTMD_MP_WRITE : 0) |
                  (p[2] == 'x' ? PTMD_MP_EXEC : 0) | (p[3] == 's' ? PTMD_MP_SHARED : 0);
        p += 4;
    }
    if (p < eol && *p == ' ') p++;
    r->offset = ptmd_parse_hex(&p, eol);
    while (p < eol && *p == ' ') p++;
    while (p < eol && *p != ' ') p++; /* dev */
    r->inode = dec_field(&p, eol);
    while (p < eol && *p == ' ') p++;
    path = p;
    len = (size_t)(eol - p);
    r->kind = kind_of(path, len);
    r->path_off = (uint32_t)m->paths.len;
    r->path_len = (uint32_t)len;
    return len && ptmd_buf_append(&m->paths, path, len) != 0 ? -1 : 0;
}

/* "Key:   value kB" of the current mapping. */
static void field_line(ptmd_mapping_rec *r, const char *p, const char *eol)
{
    const char *colon = memchr(p, ':', (size_t)(eol - p));
    size_t klen;
    uint64_t kb;
    if (!r || !colon) return;
    klen = (size_t)(colon - p);
    p = colon + 1;
    kb = dec_field(&p, eol) * 1024;
#define KEY(name) (klen == sizeof(name) - 1 && memcmp(colon - klen, name, klen) == 0)
    if (KEY("Rss")) r->rss = kb;
    else if (KEY("Shared_Clean") || KEY("Shared_Dirty")) r->shared_bytes += kb;
    else if (KEY("Private_Clean") || KEY("Private_Dirty")) r->private_bytes += kb;
    else if (KEY("Anonymous")) r->anonymous = kb;
    else if (KEY("Swap")) r->swap = kb;
#undef KEY
}

/* The mappings into m->recs; returns how many were dropped for overlapping the one before (a thread
 * that maps or unmaps while the kernel prints smaps a page at a time can leave a mapping listed twice,
 * before and after it changed), or -1 when out of memory. */
static int parse_smaps(ptmd_mappings *m)
{
    const char *p = (const char *)m->text.base, *end = p + m->text.len;
    ptmd_mapping_rec *cur = NULL;
    uint64_t prev_end = 0;
    int dropped = 0;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        /* keys start with a capital letter, mapping lines with a lower-case hex digit */
        if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')) {
            if (header_line(m, p, eol) != 0) return -1;
            cur = PTMD_BUF_AT(&m->recs, ptmd_mapping_rec, PTMD_BUF_COUNT(&m->recs, ptmd_mapping_rec) - 1);
            if (cur->end <= cur->start || cur->start < prev_end) {
                m->recs.len -= sizeof(*cur);
                cur = NULL;
                dropped++;
            } else {
                prev_end = cur->end;
            }
        } else {
            field_line(cur, p, eol);
        }
        p = eol + 1;
    }
    return dropped;
}

static void parse_status(ptmd_mappings_head *h, const ptmd_buf *text)
{
    const char *p = (const char *)text->base, *end = p + text->len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p)), *q;
        if (!eol) eol = end;
        q = memchr(p, ':', (size_t)(eol - p));
        if (q) {
            size_t klen = (size_t)(q - p);
            const char *v = q + 1;
            uint64_t kb = dec_field(&v, eol) * 1024;
            if (klen == 5 && memcmp(p, "VmRSS", 5) == 0) h->vm_rss = kb;
            else if (klen == 7 && memcmp(p, "RssAnon", 7) == 0) h->rss_anon = kb;
            else if (klen == 7 && memcmp(p, "RssFile", 7) == 0) h->rss_file = kb;
            else if (klen == 8 && memcmp(p, "RssShmem", 8) == 0) h->rss_shmem = kb;
        }
        p = eol + 1;
    }
}

/* "/proc/<pid>/<file>", or /proc/self/<file> for pid 0, without snprintf. */
static void proc_path(char *out, size_t cap, int pid, const char *file)
{
    char digits[16];
    size_t n = 0;
    ptmd_strlcpy(out, "/proc/", cap);
    if (pid <= 0) {
        ptmd_strlcat(out, "self", cap);
    } else {
        char rev[16];
        size_t k = 0;
        for (; pid && k < sizeof(rev); pid /= 10) rev[k++] = (char)('0' + pid % 10);
        while (k) digits[n++] = rev[--k];
        digits[n] = '\0';
        ptmd_strlcat(out, digits, cap);
    }
    ptmd_strlcat(out, "/", cap);
    ptmd_strlcat(out, file, cap);
}

/* smaps is read mapping by mapping while the process may run on (a snapshot child reads its parent's,
 * which serves requests meanwhile; under load a read can take half a second while the parent faults
 * in file pages): VmRSS is read before and after it, and smaps again while VmRSS moved across the read
 * by more than a tolerance, smaps' Rss sum disagrees with VmRSS after it by more, or a mapping was
 * listed twice (at most PTMD_MAPPINGS_TRIES reads; the last is kept). The kept read's disagreement
 * goes into the head, flagged approximate when it is above the tolerance: PTMD_MAPPINGS_TOLERANCE
 * or 1/PTMD_MAPPINGS_TOLERANCE_SHARE of VmRSS, the larger (room for the kernel's per-CPU or per-thread
 * RSS counters, which VmRSS reads without summing; a quiet process's two figures agree exactly). */
#define PTMD_MAPPINGS_TRIES 3
#define PTMD_MAPPINGS_TOLERANCE (64 * 1024)
#define PTMD_MAPPINGS_TOLERANCE_SHARE 1000

static int read_status(const char *path, ptmd_mappings_head *h, ptmd_err *err)
{
    ptmd_buf status;
    memset(&status, 0, sizeof(status));
    if (ptmd_read_file(path, &status, 256 * 1024, err) != 0) return -1;
    parse_status(h, &status);
    ptmd_buf_release(&status);
    return 0;
}

static uint64_t distance(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

/* How far the read just made is from one moment: VmRSS's move across it, or smaps against VmRSS. */
static uint64_t disagreement(const ptmd_mappings *m, const ptmd_mappings_head *before)
{
    uint64_t sum = 0, moved = distance(m->head.vm_rss, before->vm_rss), apart;
    size_t i, n = PTMD_BUF_COUNT(&m->recs, ptmd_mapping_rec);
    for (i = 0; i < n; i++) sum += PTMD_BUF_AT(&m->recs, ptmd_mapping_rec, i)->rss;
    apart = distance(sum, m->head.vm_rss);
    return moved > apart ? moved : apart;
}

int ptmd_mappings_read(ptmd_mappings *m, int pid, ptmd_err *err)
{
    uint64_t t0 = ptmd_now_ns(), error, tolerance;
    ptmd_mappings_head before;
    char smaps_path[64], status_path[64];
    int tries = 0, dropped;
    proc_path(smaps_path, sizeof(smaps_path), pid, "smaps");
    proc_path(status_path, sizeof(status_path), pid, "status");
    memset(&m->head, 0, sizeof(m->head));
    if (read_status(status_path, &m->head, err) != 0) return -1;
    do {
        before = m->head;
        m->recs.len = m->paths.len = 0;
        if (ptmd_read_file(smaps_path, &m->text, 256 * 1024, err) != 0) return -1;
        if ((dropped = parse_smaps(m)) < 0) return ptmd_fail_sys(err, errno, smaps_path, "mmap scratch for");
        ptmd_buf_release(&m->text);
        if (read_status(status_path, &m->head, err) != 0) return -1;
        error = disagreement(m, &before);
        tolerance = m->head.vm_rss / PTMD_MAPPINGS_TOLERANCE_SHARE;
        if (tolerance < PTMD_MAPPINGS_TOLERANCE) tolerance = PTMD_MAPPINGS_TOLERANCE;
    } while (++tries < PTMD_MAPPINGS_TRIES && (dropped || error > tolerance));
    m->head.error_kib = (uint32_t)((error + 1023) / 1024 > UINT32_MAX ? UINT32_MAX : (error + 1023) / 1024);
    if (error > tolerance) m->head.flags |= PTMD_MAPF_APPROX;
    m->head.paths_len = m->paths.len;
    m->head.read_ns = ptmd_now_ns() - t0;
    m->present = 1;
    return 0;
}

void ptmd_mappings_release(ptmd_mappings *m)
{
    ptmd_buf_release(&m->text);
    ptmd_buf_release(&m->recs);
    ptmd_buf_release(&m->paths);
    m->present = 0;
}
