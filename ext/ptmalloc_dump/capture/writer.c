/* The dump writer. No stdio and no malloc: the walk's results go out through write(2). */
#define _GNU_SOURCE
#include "capture/writer.h"
#include "capture/scratch.h"
#include "format/crc32.h"
#include "format/format.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PTMD_WBUF (256 * 1024)
/* ".", up to this much of the target's name, ".tmp-" and three numbers of at most 10, 20 and 9 digits
 * with their dashes: 1 + 160 + 5 + 10 + 1 + 20 + 1 + 9 = 207 < NAME_MAX (255) */
#define PTMD_TMP_BASE_MAX 160

static unsigned long tmp_counter;

int ptmd_writer_open(ptmd_writer *wr, const char *path, ptmd_err *err)
{
    struct stat st;
    const char *slash, *base;
    int attempt;

    memset(wr, 0, sizeof(*wr));
    wr->fd = -1;
    if (!path || !*path) return ptmd_fail(err, PTMD_E_ARGUMENT, "the dump path is empty");
    if (ptmd_strlcpy(wr->path, path, sizeof(wr->path)) >= sizeof(wr->path))
        return ptmd_fail_sys(err, ENAMETOOLONG, path, "the dump path is too long");
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return ptmd_fail_sys(err, ELOOP, path, "refusing to write a dump through a symbolic link");
        if (S_ISDIR(st.st_mode)) return ptmd_fail_sys(err, EISDIR, path, "the dump path is a directory");
        if (!S_ISREG(st.st_mode)) /* the rename would replace a FIFO, device or socket with a file */
            return ptmd_fail_sys(err, EEXIST, path, "refusing to replace a FIFO, device or socket with a dump at");
    }
    slash = strrchr(path, '/');
    if (slash) {
        size_t n = (size_t)(slash - path);
        if (n == 0) n = 1; /* "/x" lives in "/" */
        if (n >= sizeof(wr->dir)) return ptmd_fail_sys(err, ENAMETOOLONG, path, "the dump path is too long");
        memcpy(wr->dir, path, n);
        wr->dir[n] = '\0';
        base = slash + 1;
    } else {
        ptmd_strlcpy(wr->dir, ".", sizeof(wr->dir));
        base = path;
    }
    if (!*base) return ptmd_fail_sys(err, EISDIR, path, "the dump path names a directory");
    for (attempt = 0; attempt < 100; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        /* the target's name is cut so that the temporary one fits NAME_MAX beside any valid target name */
        if (snprintf(wr->tmp, sizeof(wr->tmp), "%s/.%.*s.tmp-%d-%lu-%ld", wr->dir, PTMD_TMP_BASE_MAX, base,
                     (int)getpid(), __atomic_add_fetch(&tmp_counter, 1, __ATOMIC_RELAXED),
                     (long)ts.tv_nsec) >= (int)sizeof(wr->tmp))
            return ptmd_fail_sys(err, ENAMETOOLONG, path, "the dump path is too long");
        wr->fd = open(wr->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (wr->fd >= 0 || errno != EEXIST) break;
    }
    if (wr->fd < 0) {
        int e = errno;
        wr->tmp[0] = '\0';
        return ptmd_fail_sys(err, e, wr->dir, "cannot create the dump file in");
    }
    wr->buf = mmap(NULL, PTMD_WBUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (wr->buf == MAP_FAILED) {
        int e = errno;
        wr->buf = NULL;
        ptmd_writer_abort(wr);
        return ptmd_fail_sys(err, e, path, "mmap a write buffer for");
    }
    wr->buf_cap = PTMD_WBUF;
    ptmd_scratch_note(wr->buf, wr->buf_cap);
    return 0;
}

static void write_all(ptmd_writer *wr, const unsigned char *p, size_t n)
{
    while (n && !wr->err_no) {
        ssize_t k = write(wr->fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            wr->err_no = errno;
            return;
        }
        if (k == 0) {
            wr->err_no = ENOSPC;
            return;
        }
        p += k;
        n -= (size_t)k;
    }
}

static void flush(ptmd_writer *wr)
{
    write_all(wr, wr->buf, wr->buf_len);
    wr->buf_len = 0;
}

static void put(ptmd_writer *wr, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (wr->err_no) return;
    wr->crc = ptmd_crc32(wr->crc, p, n);
    wr->written += n;
    if (n >= wr->buf_cap) { /* large payloads go straight out */
        flush(wr);
        write_all(wr, p, n);
        return;
    }
    if (wr->buf_len + n > wr->buf_cap) flush(wr);
    memcpy(wr->buf + wr->buf_len, p, n);
    wr->buf_len += n;
}

static void put_preamble(ptmd_writer *wr)
{
    unsigned char pre[PTMD_PREAMBLE_SIZE];
    uint32_t v = PTMD_FORMAT_VERSION, mark = PTMD_ENDIAN_MARK;
    memset(pre, 0, sizeof(pre));
    memcpy(pre, PTMD_MAGIC, 8);
    memcpy(pre + 8, &v, 4);
    memcpy(pre + 12, &mark, 4);
    put(wr, pre, sizeof(pre));
}

void ptmd_writer_begin(ptmd_writer *wr, uint32_t type, uint64_t count, uint64_t len)
{
    ptmd_section_hdr h;
    if (wr->written == 0) put_preamble(wr);
    memset(&h, 0, sizeof(h));
    h.type = type;
    h.count = count;
    h.length = len;
    put(wr, &h, sizeof(h));
}

void ptmd_writer_put(ptmd_writer *wr, const void *data, size_t n)
{
    if (n) put(wr, data, n);
}

void ptmd_writer_end(ptmd_writer *wr, uint64_t len)
{
    static const unsigned char zeros[8];
    if (len & 7) put(wr, zeros, 8 - (size_t)(len & 7));
    wr->n_sections++;
}

void ptmd_writer_section(ptmd_writer *wr, uint32_t type, uint64_t count, const void *data, uint64_t len)
{
    ptmd_writer_begin(wr, type, count, len);
    ptmd_writer_put(wr, data, (size_t)len);
    ptmd_writer_end(wr, len);
}

int ptmd_writer_finish(ptmd_writer *wr, uint64_t n_chunks, ptmd_err *err)
{
    ptmd_section_hdr h;
    ptmd_footer f;
    int dfd;
    if (wr->written == 0) put_preamble(wr);
    memset(&h, 0, sizeof(h));
    memset(&f, 0, sizeof(f));
    f.n_sections = wr->n_sections;
    f.n_chunks = n_chunks;
    f.body_length = wr->written;
    f.crc32 = wr->crc;
    f.magic = PTMD_FOOTER_MAGIC;
    h.type = PTMD_SEC_END;
    h.count = 1;
    h.length = sizeof(f);
    put(wr, &h, sizeof(h));
    put(wr, &f, sizeof(f));
    flush(wr);
    if (!wr->err_no && fsync(wr->fd) != 0) wr->err_no = errno;
    if (wr->err_no) {
        int e = wr->err_no;
        ptmd_writer_abort(wr);
        return ptmd_fail_sys(err, e, wr->path, "cannot write the dump");
    }
    if (close(wr->fd) != 0) {
        int e = errno;
        wr->fd = -1;
        ptmd_writer_abort(wr);
        return ptmd_fail_sys(err, e, wr->path, "cannot write the dump");
    }
    wr->fd = -1;
    if (rename(wr->tmp, wr->path) != 0) {
        int e = errno;
        ptmd_writer_abort(wr);
        return ptmd_fail_sys(err, e, wr->path, "cannot move the finished dump into place at");
    }
    wr->tmp[0] = '\0';
    /* make the rename itself durable */
    dfd = open(wr->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    if (wr->buf) {
        ptmd_scratch_forget(wr->buf);
        munmap(wr->buf, wr->buf_cap);
    }
    wr->buf = NULL;
    return 0;
}

void ptmd_writer_abort(ptmd_writer *wr)
{
    if (wr->fd >= 0) close(wr->fd);
    wr->fd = -1;
    if (wr->tmp[0]) unlink(wr->tmp);
    wr->tmp[0] = '\0';
    if (wr->buf) {
        ptmd_scratch_forget(wr->buf);
        munmap(wr->buf, wr->buf_cap);
    }
    wr->buf = NULL;
}
