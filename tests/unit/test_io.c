// src/io: what atomic writes do with whatever stands at the output path (regular files replaced,
// symbolic links written through, FIFOs / devices / sockets / directories refused and left as they
// were), stale temporaries of dead processes cleaned while a live process's are kept; directory
// writes. JSON files: read without reserving the size limit, empty / NUL-holding / trailing-garbage
// files refused naming the file; integers range-checked before any conversion; \u0000 escapes found.
#define _GNU_SOURCE // nftw
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/status.h"
#include "base/utf8.h"
#include "io/atomic.h"
#include "io/json.h"
#include "io/mapfile.h"

static char g_dir[512];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static int setup_all(void **state) {
    (void)state;
    const char *tmp = getenv("DSPARK_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/test_io.%ld", tmp && tmp[0] ? tmp : "/tmp", (long)getpid());
    return mkdir(g_dir, 0777);
}

static int teardown_all(void **state) {
    (void)state;
    return nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[4096];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

// Entries of the test folder whose name contains ".tmp.".
static int count_tmp(void) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

// A PID that is certainly not running: a child that has exited and been reaped.
static long dead_pid(void) {
    const pid_t c = fork();
    if (c == 0) _exit(0);
    assert_true(c > 0);
    waitpid(c, NULL, 0);
    return (long)c;
}

static void test_regular_and_new(void **state) {
    (void)state;
    char p[600];
    path_of(p, sizeof p, "plain.txt");
    assert_int_equal(ds_atomic_write_text(p, "one\n"), DS_OK);
    assert_string_equal(slurp(p), "one\n");
    chmod(p, 0640);
    assert_int_equal(ds_atomic_write_text(p, "two\n"), DS_OK);
    assert_string_equal(slurp(p), "two\n");
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0640); // the replaced file's permissions are kept
    assert_int_equal(count_tmp(), 0);
}

// Writing to a symlink replaces the file it names and keeps the link, also through a chain of two
// links and a relative one; a dangling link creates its target.
static void test_symlinks_written_through(void **state) {
    (void)state;
    char target[600], link1[600], link2[600], dang[600], dang_target[600];
    path_of(target, sizeof target, "target.txt");
    path_of(link1, sizeof link1, "link1");
    path_of(link2, sizeof link2, "link2");
    assert_int_equal(ds_atomic_write_text(target, "old\n"), DS_OK);
    assert_int_equal(symlink("target.txt", link1), 0); // relative to the link's folder
    assert_int_equal(symlink(link1, link2), 0);
    assert_int_equal(ds_atomic_write_text(link2, "new\n"), DS_OK);
    struct stat sb;
    assert_int_equal(lstat(link1, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(lstat(link2, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_string_equal(slurp(target), "new\n");
    path_of(dang, sizeof dang, "dangling");
    path_of(dang_target, sizeof dang_target, "made_by_link.txt");
    assert_int_equal(symlink("made_by_link.txt", dang), 0);
    assert_int_equal(ds_atomic_write_text(dang, "x\n"), DS_OK);
    assert_string_equal(slurp(dang_target), "x\n");
    assert_int_equal(lstat(dang, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(count_tmp(), 0);
}

static void expect_refused(const char *p, const char *what, mode_t kind) {
    ds_atomic_file af;
    assert_int_equal(ds_atomic_check(p), DS_ERR_IO);
    assert_int_equal(ds_atomic_open(&af, p), DS_ERR_IO);
    assert_non_null(strstr(ds_last_error(), p));
    assert_non_null(strstr(ds_last_error(), what));
    assert_null(strchr(ds_last_error(), '\n'));
    assert_int_equal(ds_atomic_write_text(p, "data\n"), DS_ERR_IO);
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0);
    assert_int_equal(sb.st_mode & S_IFMT, kind); // left as it was
    assert_int_equal(count_tmp(), 0);
}

static void test_special_files_refused(void **state) {
    (void)state;
    char fifo[600], dir[600], sock[600], link[600], loop_a[600], loop_b[600];
    path_of(fifo, sizeof fifo, "fifo");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    expect_refused(fifo, "is a FIFO, not a regular file", S_IFIFO);
    path_of(dir, sizeof dir, "adir");
    assert_int_equal(mkdir(dir, 0755), 0);
    expect_refused(dir, "is a directory, not a regular file", S_IFDIR);
    expect_refused("/dev/null", "is a character device, not a regular file", S_IFCHR);
    path_of(sock, sizeof sock, "sock");
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    if (fd >= 0 && strlen(sock) < sizeof a.sun_path && bind(fd, (struct sockaddr *)&a, sizeof a) == 0)
        expect_refused(sock, "is a socket, not a regular file", S_IFSOCK);
    if (fd >= 0) close(fd);
    path_of(link, sizeof link, "link_to_null");
    assert_int_equal(symlink("/dev/null", link), 0);
    expect_refused(link, "is a symbolic link to a character device", S_IFLNK);
    path_of(loop_a, sizeof loop_a, "loop_a");
    path_of(loop_b, sizeof loop_b, "loop_b");
    assert_int_equal(symlink("loop_b", loop_a), 0);
    assert_int_equal(symlink("loop_a", loop_b), 0);
    expect_refused(loop_a, "too many levels of symbolic links", S_IFLNK);
}

// Left-over "<name>.tmp.<pid>" of a dead process go when the next write to <name> starts; a live
// process's (this one's parent stands in) and other names stay.
static void test_stale_temporaries_cleaned(void **state) {
    (void)state;
    char p[600], stale[700], live[700], other[700], stale_dir[700], stale_dir_file[800];
    path_of(p, sizeof p, "out.dat");
    const long dead = dead_pid();
    snprintf(stale, sizeof stale, "%s.tmp.%ld", p, dead);
    snprintf(live, sizeof live, "%s.tmp.%ld", p, (long)getppid());
    snprintf(other, sizeof other, "%s/other.dat.tmp.%ld", g_dir, dead);
    assert_int_equal(ds_atomic_write_text(stale, "half"), DS_OK);
    assert_int_equal(ds_atomic_write_text(live, "busy"), DS_OK);
    assert_int_equal(ds_atomic_write_text(other, "another name"), DS_OK);
    assert_int_equal(ds_atomic_write_text(p, "done\n"), DS_OK);
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(live, F_OK), 0);
    assert_int_equal(access(other, F_OK), 0);
    unlink(live);
    unlink(other);
    // A directory write: OUT.tmp.<dead pid> with files in it is removed.
    char out_dir[600], tmp[4200];
    path_of(out_dir, sizeof out_dir, "model_dir");
    snprintf(stale_dir, sizeof stale_dir, "%s.tmp.%ld", out_dir, dead);
    snprintf(stale_dir_file, sizeof stale_dir_file, "%s/config.json", stale_dir);
    assert_int_equal(mkdir(stale_dir, 0755), 0);
    assert_int_equal(ds_atomic_write_text(stale_dir_file, "{}"), DS_OK);
    assert_int_equal(ds_atomic_dir_open(out_dir, tmp, sizeof tmp), DS_OK);
    assert_int_equal(access(stale_dir, F_OK), -1);
    char f[4300];
    snprintf(f, sizeof f, "%s/a.json", tmp);
    assert_int_equal(ds_atomic_write_text(f, "{}\n"), DS_OK);
    assert_int_equal(ds_atomic_dir_commit(tmp, out_dir), DS_OK);
    snprintf(f, sizeof f, "%s/a.json", out_dir);
    assert_string_equal(slurp(f), "{}\n");
    assert_int_equal(count_tmp(), 0);
}

// Directory writes refuse anything at OUT (a directory, a file, a dangling link), and a directory
// that appears while the temporary one is written is not replaced.
static void test_dir_writes(void **state) {
    (void)state;
    char d[600], tmp[4200], link[600];
    path_of(d, sizeof d, "exists_dir");
    assert_int_equal(mkdir(d, 0755), 0);
    assert_int_equal(ds_atomic_dir_open(d, tmp, sizeof tmp), DS_ERR_IO);
    assert_non_null(strstr(ds_last_error(), "already exists"));
    path_of(link, sizeof link, "dangling_dir");
    assert_int_equal(symlink("nowhere", link), 0);
    assert_int_equal(ds_atomic_dir_open(link, tmp, sizeof tmp), DS_ERR_IO);
    path_of(d, sizeof d, "late_dir/");
    assert_int_equal(ds_atomic_dir_open(d, tmp, sizeof tmp), DS_OK);
    path_of(d, sizeof d, "late_dir");
    assert_int_equal(mkdir(d, 0755), 0); // an empty directory: rename(2) would silently replace it
    assert_int_equal(ds_atomic_dir_commit(tmp, d), DS_ERR_IO);
    assert_int_equal(access(tmp, F_OK), -1);
    assert_int_equal(count_tmp(), 0);
}

// A dspark output (it holds the marker) is replaced as a whole once the new one is complete; the
// old tree is gone, the new one holds the marker; a directory without the marker stays refused.
static void test_dir_replaces_own_output(void **state) {
    (void)state;
    char d[600], tmp[4200], f[4300];
    path_of(d, sizeof d, "own_dir");
    assert_int_equal(ds_atomic_dir_open(d, tmp, sizeof tmp), DS_OK);
    snprintf(f, sizeof f, "%s/old.json", tmp);
    assert_int_equal(ds_atomic_write_text(f, "old\n"), DS_OK);
    assert_int_equal(ds_atomic_dir_commit(tmp, d), DS_OK);
    snprintf(f, sizeof f, "%s/" DS_OUTPUT_MARKER, d);
    assert_int_equal(access(f, F_OK), 0);
    assert_int_equal(ds_atomic_dir_open(d, tmp, sizeof tmp), DS_OK); // ours: may be replaced
    snprintf(f, sizeof f, "%s/new.json", tmp);
    assert_int_equal(ds_atomic_write_text(f, "new\n"), DS_OK);
    snprintf(f, sizeof f, "%s/old.json", d);
    assert_string_equal(slurp(f), "old\n"); // the old one stands until the commit
    assert_int_equal(ds_atomic_dir_commit(tmp, d), DS_OK);
    assert_int_equal(access(f, F_OK), -1);
    snprintf(f, sizeof f, "%s/new.json", d);
    assert_string_equal(slurp(f), "new\n");
    assert_int_equal(count_tmp(), 0);
    // An aborted replacement leaves the previous output as it was.
    assert_int_equal(ds_atomic_dir_open(d, tmp, sizeof tmp), DS_OK);
    ds_atomic_dir_abort(tmp);
    assert_string_equal(slurp(f), "new\n");
    // Without the marker: refused, naming the path.
    snprintf(f, sizeof f, "%s/" DS_OUTPUT_MARKER, d);
    assert_int_equal(unlink(f), 0);
    assert_int_equal(ds_atomic_dir_open(d, tmp, sizeof tmp), DS_ERR_IO);
    assert_non_null(strstr(ds_last_error(), "is not a dspark output"));
    assert_non_null(strstr(ds_last_error(), d));
}

static void write_file(const char *p, const char *text, size_t n) {
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    fclose(f);
}

static void expect_json_error(const char *text, size_t n, size_t max, const char *what) {
    char p[600];
    path_of(p, sizeof p, "bad.json");
    write_file(p, text, n);
    cJSON *j = (cJSON *)1;
    assert_int_not_equal(ds_json_load(p, max, &j), DS_OK);
    assert_null(j);
    assert_non_null(strstr(ds_last_error(), p));
    if (!strstr(ds_last_error(), what)) fail_msg("'%s' lacks '%s'", ds_last_error(), what);
    unlink(p);
}

// A limit of 64 TiB used to be malloc'ed up front (it failed, and 1 GiB cost 0.45 s under ASan).
static void test_json_load(void **state) {
    (void)state;
    char p[600];
    path_of(p, sizeof p, "ok.json");
    // 200 KB: more than the first read buffer.
    const size_t n = 200000;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, ' ', n);
    memcpy(big, "{\"a\": 7,", 8);
    memcpy(big + n - 9, "\"b\": [1]}", 9);
    write_file(p, big, n);
    cJSON *j = NULL;
    assert_int_equal(ds_json_load(p, (size_t)1 << 46, &j), DS_OK);
    assert_int_equal(cJSON_GetObjectItem(j, "a")->valueint, 7);
    cJSON_Delete(j);
    assert_int_equal(ds_json_load(p, n, &j), DS_OK); // exactly the limit
    cJSON_Delete(j);
    assert_int_equal(ds_json_load(p, n - 1, &j), DS_ERR_FORMAT);
    assert_non_null(strstr(ds_last_error(), "larger than"));
    free(big);
    unlink(p);
    expect_json_error("", 0, 100, "empty file");
    expect_json_error("{} x", 4, 100, "not valid JSON (at byte 3)");
    expect_json_error("{}\0{", 4, 100, "NUL byte");
    expect_json_error("[1, 2]", 6, 100, "not a JSON object");
    expect_json_error("{\"a\": ", 6, 100, "not valid JSON");
    path_of(p, sizeof p, "missing.json");
    assert_int_equal(ds_json_load(p, 100, &j), DS_ERR_IO);
    assert_non_null(strstr(ds_last_error(), "No such file"));
}

// ds_json_int on numbers a double holds but an int does not (22147483647 was read as INT_MIN).
static void test_json_int_range(void **state) {
    (void)state;
    const char *bad[] = {"{\"k\": 22147483647}", "{\"k\": 1e300}", "{\"k\": -1e300}", "{\"k\": -1}", "{\"k\": 2.5}",
                         "{\"k\": 101}", "{\"k\": \"7\"}", "{\"k\": 9.3e18}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *j = cJSON_Parse(bad[i]);
        int v = -5;
        assert_int_equal(ds_json_int(j, "f.json", "k", 0, 100, &v), DS_ERR_FORMAT);
        assert_int_equal(v, -5);
        assert_non_null(strstr(ds_last_error(), "f.json: \"k\" must be an integer in 0..100"));
        assert_false(ds_json_is_int(cJSON_GetObjectItem(j, "k"), 0, 100));
        cJSON_Delete(j);
    }
    cJSON *j = cJSON_Parse("{\"k\": 100, \"m\": -3}");
    int v;
    assert_int_equal(ds_json_int(j, "f.json", "k", 0, 100, &v), DS_OK);
    assert_int_equal(v, 100);
    assert_true(ds_json_is_int(cJSON_GetObjectItem(j, "m"), -3, 0));
    assert_false(ds_json_is_int(cJSON_GetObjectItem(j, "m"), -2, 0));
    cJSON_Delete(j);
}

static void test_json_nul_escape(void **state) {
    (void)state;
#define HAS(text) ds_json_has_nul_escape(text, strlen(text))
    assert_true(HAS("{\"p\": \"Once\\u0000 upon\"}"));
    assert_true(HAS("\\u0000"));
    assert_false(HAS("{\"p\": \"Once\\\\u0000 upon\"}")); // an escaped backslash, then text
    assert_true(HAS("\\\\\\u0000"));                     // an escaped backslash, then the escape
    assert_false(HAS("{\"p\": \"\\u0001\\u00e9 \\u000\"}"));
    assert_false(HAS("\\u000"));
#undef HAS
}

// Bytes from files become one printable line of valid UTF-8; text that needs nothing is unchanged.
static void test_text_escape(void **state) {
    (void)state;
    char out[64];
    const char in[] = "ll\nma\t\r\x01\x7f \xc3\xa9 \xff\xc3 \xe2\x82\xac \xed\xa0\x80 \xf0\x9f\x98\x80";
    ds_text_escape(out, sizeof out, in, sizeof in - 1);
    assert_string_equal(out, "ll\\nma\\t\\r\\x01\\x7F \xc3\xa9 \\xFF\\xC3 \xe2\x82\xac \\xED\\xA0\\x80 \xf0\x9f\x98\x80");
    char twice[64];
    ds_text_escape(twice, sizeof twice, out, strlen(out));
    assert_string_equal(twice, out);
    size_t bad;
    assert_true(ds_utf8_valid((const uint8_t *)out, strlen(out), &bad));
    // Cut at a whole character or escape, never inside one.
    ds_text_escape(out, 6, "ab\xc3\xa9\n", 5);
    assert_string_equal(out, "ab\xc3\xa9");
    ds_text_escape(out, 5, "abc\n", 4);
    assert_string_equal(out, "abc");
    ds_text_escape(out, 5, "a\x01", 2);
    assert_string_equal(out, "a");
    // Every message is one line of valid UTF-8, whatever the arguments hold.
    ds_fail(DS_ERR_FORMAT, "%s: architecture '%s' is not supported", "m.gguf", "ll\nma\xff");
    assert_string_equal(ds_last_error(), "m.gguf: architecture 'll\\nma\\xFF' is not supported");
    ds_fail_prefix(DS_ERR_FORMAT, "loading \r%s", "x");
    assert_string_equal(ds_last_error(), "loading \\rx: m.gguf: architecture 'll\\nma\\xFF' is not supported");
}

// ds_mapfile_populate_huge drops and reads again only pages of mapped files: an anonymous buffer
// passed among the ranges keeps its bytes (MADV_DONTNEED would zero it), and the file reads the same.
// The file is left in small cached pages first (written, synced, dropped, read back 4 KiB at a time
// with readahead off), so that where the kernel caches files in huge pages the drop does happen.
static uint8_t byte_at(size_t i) { return (uint8_t)(i * 2654435761u >> 13); }

// `flag` if the VmFlags of the mapping holding `p` (/proc/self/smaps) hold it, else "".
static const char *vm_flag(const void *p, const char *flag) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0;
    const char *found = "";
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char dash;
        if (sscanf(line, "%lx%c%lx", &a, &dash, &b) == 3 && dash == '-')
            in = a <= (unsigned long)(uintptr_t)p && (unsigned long)(uintptr_t)p < b;
        else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            char pat[8];
            snprintf(pat, sizeof pat, " %s", flag);
            if (strstr(line, pat)) found = flag;
        }
    }
    if (f) fclose(f);
    return found;
}

static void test_huge_drops_only_file_pages(void **state) {
    (void)state;
    const size_t size = (size_t)24 << 20, chunk = 4096;
    char path[600];
    path_of(path, sizeof path, "huge.bin");
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    assert_true(fd >= 0);
    uint8_t *buf = malloc(chunk);
    assert_non_null(buf);
    for (size_t off = 0; off < size; off += chunk) {
        for (size_t i = 0; i < chunk; i++) buf[i] = byte_at(off + i);
        assert_int_equal(write(fd, buf, chunk), (ssize_t)chunk);
    }
    assert_int_equal(fsync(fd), 0);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    for (size_t off = 0; off < size; off += chunk) assert_int_equal(pread(fd, buf, 1, (off_t)off), 1);
    close(fd);
    free(buf);

    ds_mapfile m;
    assert_int_equal(ds_mapfile_open(&m, path), DS_OK);
    const size_t an = (size_t)16 << 20;
    uint8_t *anon = mmap(NULL, an, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(anon != MAP_FAILED);
    madvise(anon, an, MADV_NOHUGEPAGE); // (small pages: a huge page is left alone as it is)
    for (size_t i = 0; i < an; i++) anon[i] = byte_at(i + 7);
    const void *p[] = {anon + 1, m.data + 3 * 4096 + 5, anon + an / 2, m.data + (size / 2)};
    const size_t n[] = {an / 2 - 1, size / 2 - 3 * 4096 - 5, an / 2, size / 2};
    ds_huge_report r;
    ds_mapfile_populate_huge(p, n, 4, &r);
    for (size_t i = 0; i < an; i++)
        if (anon[i] != byte_at(i + 7)) fail_msg("anonymous byte %zu changed", i);
    assert_string_equal(vm_flag(anon, "nh"), "nh"); // (not advised MADV_HUGEPAGE)
    for (size_t i = 0; i < size; i++)
        if (m.data[i] != byte_at(i)) fail_msg("file byte %zu reads differently", i);
    // Every byte of the ranges is present after populating (where the kernel can say).
    assert_true(r.resident == 0 || r.resident >= size - 3 * 4096 - 5 + an - 1);
    print_message("populate_huge: %zu of %zu resident bytes huge, re-read %d\n", r.huge, r.resident, r.reread);
    munmap(anon, an);
    ds_mapfile_close(&m);
}

// ds_malloc_huge (the KV cache's lines): from 2 MiB on, 2 MiB-aligned and advised MADV_HUGEPAGE.
static void test_malloc_huge(void **state) {
    (void)state;
    uint8_t *big = ds_malloc_huge(((size_t)4 << 20) + 1), *small = ds_malloc_huge(1000);
    assert_non_null(big);
    assert_non_null(small);
    assert_int_equal((uintptr_t)big & (((uintptr_t)2 << 20) - 1), 0);
    memset(big, 1, ((size_t)4 << 20) + 1);
    assert_string_equal(vm_flag(big, "hg"), "hg");
    free(big);
    free(small);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regular_and_new),
        cmocka_unit_test(test_symlinks_written_through),
        cmocka_unit_test(test_special_files_refused),
        cmocka_unit_test(test_stale_temporaries_cleaned),
        cmocka_unit_test(test_dir_writes),
        cmocka_unit_test(test_dir_replaces_own_output),
        cmocka_unit_test(test_json_load),
        cmocka_unit_test(test_json_int_range),
        cmocka_unit_test(test_json_nul_escape),
        cmocka_unit_test(test_text_escape),
        cmocka_unit_test(test_huge_drops_only_file_pages),
        cmocka_unit_test(test_malloc_huge),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
